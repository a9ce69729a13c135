"""Builders for the steering tests: a SteeringView over a mixed cluster, admission requests, and the subset of
JSONPatch (RFC 6902 add and replace) the webhook writes, to read a patched object back."""

import copy

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    Slot,
    readiness_label_key,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KIND,
    CLUSTER_CACHE_KIND,
    SERVING_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.watched import (
    WatchedCluster,
    kept_cache,
    kept_node,
    kept_pvc,
)

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
SHORT_A, SHORT_B = "a" * 12, "b" * 12
AMD = [{"backend": "hip", "arch": "gfx90a", "warpSize": 64}]
NVIDIA = [{"backend": "cuda", "arch": "sm_90", "warpSize": 32}]
READY_KEY = readiness_label_key("vector-add", "apps")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def node(name, gpu=None, **labels):
    """A Node; gpu is (backend, arch, warp size)."""
    if gpu:
        labels.update({"gkm.io/gpu-backend": gpu[0], "gkm.io/gpu-arch": gpu[1], "gkm.io/gpu-warp-size": str(gpu[2])})
    return {"metadata": {"name": name, "labels": labels}}


def mixed_nodes():
    """amd-1 holds vector-add at digest A, amd-2 still at B, amd-3 nothing; an NVIDIA node and a CPU node."""
    return [
        node("amd-1", ("hip", "gfx90a", 64), **{READY_KEY: SHORT_A}),
        node("amd-2", ("hip", "gfx90a", 64), **{READY_KEY: SHORT_B}),
        node("amd-3", ("hip", "gfx90a", 64)),
        node("nv-1", ("cuda", "90", 32)),
        node("cpu-1"),
    ]


def cache(name, namespace="apps", targets=None, digest=DIGEST_A, overlay=None, **spec):
    """overlay: the variable its status names for the kernel overlay (a Triton image), None for none."""
    spec.setdefault("image", "registry.local:5000/caches/%s:v1" % name)
    metadata = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    status = {"resolvedDigest": digest or "", "targets": AMD if targets is None else targets}
    if overlay:
        status["kernelOverlay"] = {"variable": overlay}
    return {"metadata": metadata, "spec": spec, "status": status}


def serving_pvc(name, namespace="apps", digest=DIGEST_A, cache_namespace="apps"):
    labels = Slot(name, cache_namespace, namespace, "", digest).labels()
    labels[SERVING_LABEL] = "true"
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}


def view(caches=(), cluster_caches=(), pvcs=(), nodes=None, default_mount_mode="PVC", tools_image=None):
    """The SteeringView of a WatchedCluster fed these objects as the server's watches feed it: cut down to what the
    views read (server/sync.py); tools_image: the server's --tools-image."""
    cluster = WatchedCluster(default_mount_mode, tools_image)
    cluster.replace_caches(CACHE_KIND, [kept_cache(obj) for obj in caches])
    cluster.replace_caches(CLUSTER_CACHE_KIND, [kept_cache(obj) for obj in cluster_caches])
    cluster.replace_pvcs([kept_pvc(obj) for obj in pvcs])
    cluster.replace_nodes([kept_node(obj) for obj in (mixed_nodes() if nodes is None else nodes)])
    return cluster.steering


def pod_spec(claim=None, affinity=None, containers=("main",), read_only=True, **fields):
    """read_only: the claim's volume written read-only, as the webhook leaves it (else it adds readOnly: true)."""
    spec = {"containers": [{"name": name, "image": "app:1"} for name in containers]}
    if claim:
        spec["volumes"] = [{"name": "kernels", "persistentVolumeClaim": dict(
            {"claimName": claim}, **({"readOnly": True} if read_only else {}))}]
    if affinity is not None:
        spec["affinity"] = affinity
    spec.update(fields)
    return spec


def pod_request(spec, annotations=None, labels=None, namespace="apps", operation="CREATE", controller=None):
    """controller: the kind of the controller owning the pod (a DaemonSet's pod), None for a bare pod."""
    metadata = {"name": "p", "namespace": namespace, "annotations": annotations or {}, "labels": labels or {}}
    if controller:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": controller, "name": "w", "uid": "o",
                                        "controller": True}]
    return {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": operation,
            "namespace": namespace, "object": {"metadata": metadata, "spec": spec}}


def workload_request(kind, spec, annotations=None, namespace="apps", operation="CREATE", workload_annotations=None):
    """annotations: the pod template's; workload_annotations: the workload's own."""
    template = {"metadata": {"annotations": annotations or {}}, "spec": spec}
    metadata = {"name": "w", "namespace": namespace, "annotations": workload_annotations or {}}
    return {"uid": "u", "kind": {"group": "apps", "version": "v1", "kind": kind}, "operation": operation,
            "namespace": namespace, "object": {"metadata": metadata, "spec": {"template": template}}}


def terms(*term_lists):
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(term_lists)}}}


def apply_patch(document, operations):
    """RFC 6902 add (appending with '-') and replace, the operations the webhook emits."""
    document = copy.deepcopy(document)
    for operation in operations:
        *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in operation["path"].split("/")[1:]]
        target = document
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        value = copy.deepcopy(operation["value"])
        if isinstance(target, list):
            if last == "-":
                target.append(value)
            elif operation["op"] == "add":
                target.insert(int(last), value)
            else:
                target[int(last)] = value
        else:
            assert operation["op"] == "add" or last in target
            target[last] = value
    return document


def required_terms(spec):
    return spec["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
