"""Test-side helpers for the simulated cluster's real nodes: pods that run, their logs, the nodes' disk."""

import hashlib
import io
import json
import os
import tarfile
import urllib.request
import uuid
import zlib

from kubernetes import client

REAL_NODE_LABEL = "gkm.io/real-node"
# The real node with an AMD GPU (hip caches fit it; the other real node is NVIDIA).
AMD_NODE = "gkm-real-amd-1"
GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
# Pods that must run on the real nodes (kwok nodes "run" anything and read nothing).
ON_REAL_NODES = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": REAL_NODE_LABEL, "operator": "In", "values": ["true"]}]}]}}}
# Pod Security for the namespaces of the extraction Jobs: baseline, for their extractor running as root.
BASELINE = {"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "latest"}


def unique(prefix):
    """A name no earlier run used: the cluster is shared by the whole session."""
    return "%s-%s" % (prefix, uuid.uuid4().hex[:6])


def real_pod_template(**spec):
    """A cache's podTemplate that keeps its Jobs on the real nodes."""
    return {"spec": dict({"tolerations": [GPU_TOLERATION], "affinity": ON_REAL_NODES}, **spec)}


def layer_files(registry, repository, digest, paths=None):
    """sha256 of each regular file (or only `paths`) in the image's single layer, read straight from the registry
    (not by our code)."""
    def get(path):
        request = urllib.request.Request("http://%s/v2/%s/%s" % (registry, repository, path), headers={
            "Accept": "application/vnd.oci.image.manifest.v1+json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read()

    manifest = json.loads(get("manifests/" + digest))
    blob = get("blobs/" + manifest["layers"][0]["digest"])
    found = {}
    with tarfile.open(fileobj=io.BytesIO(zlib.decompress(blob, 16 + zlib.MAX_WBITS))) as tar:
        for member in tar.getmembers():
            if member.isfile() and (paths is None or member.name in paths):
                found[member.name] = hashlib.sha256(tar.extractfile(member).read()).hexdigest()
    return found


def pod_logs(core, namespace, name):
    """A pod's log, read through the API server from the kubelet as `kubectl logs` does."""
    return core.read_namespaced_pod_log(name, namespace)


def run_daemonset(apps, namespace, name, image, script, labels=None, volumes=(), mounts=()):
    """A DaemonSet on the real nodes running `sh -c script` as an arbitrary non-root uid."""
    pod_labels = dict({"app": name}, **(labels or {}))
    body = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": pod_labels}, "spec": {
                "tolerations": [GPU_TOLERATION], "affinity": ON_REAL_NODES,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 4321, "runAsGroup": 4321,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "app", "image": image, "command": ["sh", "-c", script],
                                "securityContext": {"allowPrivilegeEscalation": False,
                                                    "capabilities": {"drop": ["ALL"]}},
                                "volumeMounts": list(mounts)}],
                "volumes": list(volumes)}},
        },
    }
    return apps.create_namespaced_daemon_set(namespace, body)


def running_pods(core, namespace, selector):
    return [pod for pod in core.list_namespaced_pod(namespace, label_selector=selector).items
            if pod.status.phase == "Running"]


def node_disk_files(root):
    """Every file and directory under a node disk root (the real nodes share this machine's disk)."""
    found = []
    for directory, dirs, files in os.walk(root):
        found.extend(os.path.join(directory, name) for name in dirs + files)
    return sorted(found)


def labelled_namespace(core, name, labels):
    core.create_namespace({"metadata": {"name": name, "labels": dict({"gkm.io/test": "true"}, **labels)}})
    return name


def delete_namespace(core, name):
    try:
        core.delete_namespace(name)
    except client.ApiException as error:
        if error.status != 404:
            raise
