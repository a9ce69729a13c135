"""The kernel overlay run for real: a GKMCache of real Triton kernels (CacheSpec(compiled=True), hip) extracted onto the
real AMD node; a bare pod annotated gkm.io/cache is given the overlay by the webhook server (a local process told the
tools image), its init container runs the overlay from the tools image on the node, and its main container (the tools
image: python3, no Triton) checks that every group file under TRITON_CACHE_DIR names files that exist where the pod
sees them. The pod's exit code and logs say so; the times from the pod's scheduling to its main container's start,
and of the init container, are printed (docs/kernels.md, "Measured")."""

import json
import time
import uuid

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.real_nodes import (
    BASELINE,
    GPU_TOLERATION,
    ON_REAL_NODES,
    delete_namespace,
    labelled_namespace,
    real_pod_template,
)
from tests.helpers.webhook import CertificateFiles, LocalWebhookServer, install, wait_until
from tests.integration.webhook.test_steering_apiserver import GROUP, VERSION, reconcile

pytestmark = [pytest.mark.cluster, pytest.mark.real_nodes]

AMD_NODE = "gkm-real-amd-1"
CACHE = "overlaid"
INIT = "gkm-kernels-" + CACHE
KERNELS = 6
# Run by the main container: each group file of the overlay (TRITON_CACHE_DIR) and of the mounted cache, with how
# many of the files they name are missing where this pod sees them. Exit 0 only when the overlay has groups and none
# of them dangles.
CHECK = r"""
import json, os, sys

def groups(root):
    found = children = dangling = 0
    for key in sorted(os.listdir(root)):
        directory = os.path.join(root, key)
        if key.startswith(".") or not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            if name.startswith("__grp__") and name.endswith(".json"):
                found += 1
                with open(os.path.join(directory, name)) as handle:
                    paths = json.load(handle)["child_paths"].values()
                children += len(paths)
                dangling += sum(not os.path.isfile(path) for path in paths)
    return {"groups": found, "children": children, "dangling": dangling}

overlay = groups(os.environ["TRITON_CACHE_DIR"])
print(json.dumps({"overlay": overlay, "mounted": groups("/kernels/io.triton.cache")}, sort_keys=True))
sys.exit(0 if overlay["groups"] and not overlay["dangling"] else 1)
"""


@pytest.fixture(scope="module")
def webhook(sim, tools_image, tmp_path_factory):
    """The webhook server as a local process told the tools image, registered for the module's tests."""
    suffix = uuid.uuid4().hex[:6]
    certs = CertificateFiles(str(tmp_path_factory.mktemp("real-overlay")))
    server = LocalWebhookServer(sim.kubeconfig, certs.cert_file, certs.key_file,
                                extra_args=["--tools-image", tools_image])
    hook = {"name": "ro-" + suffix, "namespace": "gkm-ro-" + suffix}
    try:
        server.start().wait_ready(certs.ca)
        install(sim.kubeconfig, name=hook["name"], namespace=hook["namespace"], url=server.url, ca_bundle=certs.ca)
        yield
    finally:
        install(sim.kubeconfig, name=hook["name"], namespace=hook["namespace"], state="absent")
        server.stop()


def _finished(core, namespace, name):
    pod = core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase in ("Succeeded", "Failed") else None


def test_the_init_container_overlays_the_extracted_cache_and_no_group_dangles_in_the_pod(
        sim, kube, crds, registry, real_nodes, tools_image, webhook):
    core = client.CoreV1Api(kube)
    namespace = labelled_namespace(core, "t-real-overlay-%s" % uuid.uuid4().hex[:6], BASELINE)
    try:
        pushed = kcache_images.build_image(registry.host, "real-overlay/" + CACHE, "v1",
                                           kcache_images.CacheSpec(backend="hip", kernels=KERNELS, compiled=True))
        crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
            "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
            "metadata": {"name": CACHE, "namespace": namespace},
            "spec": {"image": pushed.ref, "podTemplate": real_pod_template()}})
        reconciled = reconcile(sim, CACHE, namespace, extract_image=tools_image, wait=True, wait_timeout=240)
        assert not reconciled.get("failed"), reconciled.get("msg")
        assert reconciled["resource"]["status"]["kernelOverlay"] == {"variable": "TRITON_CACHE_DIR"}

        body = {"metadata": {"name": "checker", "annotations": {"gkm.io/cache": CACHE,
                                                                "gkm.io/cache-mount-path": "/kernels"}},
                "spec": {"restartPolicy": "Never", "tolerations": [GPU_TOLERATION], "affinity": ON_REAL_NODES,
                         "securityContext": {"runAsNonRoot": True, "runAsUser": 4321, "runAsGroup": 4321,
                                             "seccompProfile": {"type": "RuntimeDefault"}},
                         "containers": [{"name": "app", "image": tools_image, "command": ["python3", "-c", CHECK],
                                         "securityContext": {"allowPrivilegeEscalation": False,
                                                             "capabilities": {"drop": ["ALL"]}}}]}}
        started = time.monotonic()
        admitted = core.create_namespaced_pod(namespace, body)
        assert [c.name for c in admitted.spec.init_containers or []] == [INIT]
        pod = wait_until("the checker pod finished", lambda: _finished(core, namespace, "checker"), timeout=240,
                         interval=0.5)
        elapsed = time.monotonic() - started
        logs = core.read_namespaced_pod_log("checker", namespace, container="app")
        overlay_log = core.read_namespaced_pod_log("checker", namespace, container=INIT)
        assert pod.spec.node_name == AMD_NODE
        assert pod.status.phase == "Succeeded", (pod.status, logs, overlay_log)
        verdict = json.loads(logs.strip().splitlines()[-1])
        assert verdict["overlay"]["groups"] == KERNELS and verdict["overlay"]["dangling"] == 0, verdict
        written = json.loads(overlay_log.strip().splitlines()[-1])
        assert (written["kernels"], written["groups"], written["skipped"]) == (KERNELS, KERNELS, []), written

        scheduled = next(c.last_transition_time for c in pod.status.conditions if c.type == "PodScheduled")
        [init] = pod.status.init_container_statuses
        [main] = pod.status.container_statuses
        print("kernel overlay on %s: %s; overlay %s; in the pod %s; scheduled -> main started %.0f s, init container "
              "ran %.0f s (API timestamps, 1 s resolution), pod created -> finished %.1f s" % (
                  AMD_NODE, written["seconds"], json.dumps(written, sort_keys=True), json.dumps(verdict),
                  (main.state.terminated.started_at - scheduled).total_seconds(),
                  (init.state.terminated.finished_at - init.state.terminated.started_at).total_seconds(), elapsed))
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        # The scrub Jobs remove the node's copy: they run the tools image on the real nodes.
        removed = run_module("cache_distribute", sim.kubeconfig, name=CACHE, namespace=namespace, state="absent",
                             force=True, extract_image=tools_image, registry_plain_http=True,
                             host_path_root=NODE_DISK, pod_template=real_pod_template(), wait=True)
        assert not removed.get("failed"), removed.get("msg")
        delete_namespace(core, namespace)
