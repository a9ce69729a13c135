#!/usr/bin/env python3
"""The demo's last step: a pod on a real node reads a kernel file from its node's copy of the cache.

Runs a DaemonSet (labelled gkm.io/pvc-mutation, so the webhook in the cluster gives each pod its node's PVC of
the `vector-add` cache) on the real AMD node, as an arbitrary non-root uid, and prints what the pod printed:
the file it read and its first lines. Idempotent: an existing reader is replaced.
"""

import json
import os
import sys
import time

from kubernetes import client, config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMESPACE, CACHE, NAME = "gkm-demo", "vector-add", "kernel-reader"
SCRIPT = ('f=$(ls /kernels/io.triton.cache/*/*.llir | head -n 1); echo "pod $POD_NAME on node $NODE_NAME reads $f:"; '
          'head -n 6 "$f"; sleep 3600')


def reader(image):
    env = [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
           for name, path in (("POD_NAME", "metadata.name"), ("NODE_NAME", "spec.nodeName"))]
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {"selector": {"matchLabels": {"app": NAME}}, "template": {
            "metadata": {"labels": {"app": NAME, "gkm.io/pvc-mutation": "true"}},
            "spec": {
                "nodeSelector": {"gkm.io/real-node": "true", "gkm.io/gpu-backend": "hip"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "securityContext": {"runAsNonRoot": True, "runAsUser": 4321, "runAsGroup": 4321,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "reader", "image": image, "command": ["sh", "-c", SCRIPT], "env": env,
                                "securityContext": {"allowPrivilegeEscalation": False,
                                                    "capabilities": {"drop": ["ALL"]}},
                                "volumeMounts": [{"name": "kernels", "mountPath": "/kernels", "subPath": "cache",
                                                  "readOnly": True}]}],
                "volumes": [{"name": "kernels", "persistentVolumeClaim": {"claimName": CACHE, "readOnly": True}}],
            }}},
    }


def main():
    with open(os.path.join(os.environ.get("GKM_SIM_DIR", os.path.join(ROOT, ".sim")), "state.json")) as handle:
        state = json.load(handle)
    if not state.get("real_nodes"):
        sys.exit("the simulated cluster has no real nodes: run `make sim-down demo` (the demo starts two)")
    api = config.new_client_from_config(config_file=state["kubeconfig"])
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    try:
        apps.delete_namespaced_daemon_set(NAME, NAMESPACE)
    except client.ApiException as error:
        if error.status != 404:
            raise
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            apps.create_namespaced_daemon_set(NAMESPACE, reader(state["tools_image"]))
            break
        except client.ApiException as error:
            if error.status != 409:  # the old one is still being deleted
                raise
            time.sleep(1)
    while time.monotonic() < deadline:
        pods = [pod for pod in core.list_namespaced_pod(NAMESPACE, label_selector="app=%s" % NAME).items
                if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp]
        log = core.read_namespaced_pod_log(pods[0].metadata.name, NAMESPACE) if pods else ""
        if log.count("\n") >= 2:
            print(log.rstrip())
            return
        time.sleep(1)
    sys.exit("the kernel reader did not print within 180 s: kubectl -n %s describe ds %s" % (NAMESPACE, NAME))


if __name__ == "__main__":
    main()
