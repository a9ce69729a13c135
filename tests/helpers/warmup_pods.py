"""Pods running the workload image's warm-up (`python3 -m tools.triton_kernels warmup`, docs/kernels.md) on a real
node, and what they print: the real-node overlay test, the warm-start benchmark and the demo use them.

Each pod prints a JSON line per kernel (Triton's own hit or miss), the warm-up's summary (its compile and import
seconds, and `started_at`/`ready_at`, the container's clock at its start and when every kernel was ready), then
`inspect` of its TRITON_CACHE_DIR (each kernel's group state). The real nodes run on this machine, so `ready_at` and
the caller's clock are one clock. `distribute_cache` gives the warm pods their cache the collection's way.
"""

import json
import time
from dataclasses import dataclass

from kubernetes.client.rest import ApiException

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import GROUP, VERSION
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.kernel_overlay import OVERLAY_PREFIX
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.real_nodes import GPU_TOLERATION, ON_REAL_NODES, real_pod_template
from tests.helpers.webhook import wait_until
from tools.triton_kernels.targets import DEFAULT_SET

# The warm-up, then what its TRITON_CACHE_DIR holds; the warm-up's exit code is the pod's.
SCRIPT = ('python3 -m tools.triton_kernels warmup; status=$?; '
          'python3 -m tools.triton_kernels inspect "$TRITON_CACHE_DIR"; exit $status')
COLD_DIR = "/var/run/cold"


def warmup_pod(name, image, node, target, kernel_set=DEFAULT_SET, annotations=None, env=(), volumes=(), mounts=()):
    """A bare pod running the warm-up on `node` as an unprivileged user (uid 4321, Pod Security restricted)."""
    return {"metadata": {"name": name, "annotations": dict(annotations or {})},
            "spec": {"restartPolicy": "Never", "tolerations": [GPU_TOLERATION], "affinity": ON_REAL_NODES,
                     "nodeSelector": {"kubernetes.io/hostname": node},
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 4321, "runAsGroup": 4321,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "volumes": list(volumes),
                     "containers": [{"name": "app", "image": image, "command": ["sh", "-c", SCRIPT],
                                     "env": [{"name": "GKM_WARMUP_TARGET", "value": target},
                                             {"name": "GKM_WARMUP_SET", "value": kernel_set}, *env],
                                     "volumeMounts": list(mounts),
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}


def cold_pod(name, image, node, target, kernel_set=DEFAULT_SET):
    """No cache: an emptyDir as TRITON_CACHE_DIR, so the warm-up compiles every kernel."""
    return warmup_pod(name, image, node, target, kernel_set, env=[{"name": "TRITON_CACHE_DIR", "value": COLD_DIR}],
                      volumes=[{"name": "cold", "emptyDir": {}}], mounts=[{"name": "cold", "mountPath": COLD_DIR}])


def cache_pod(name, image, node, target, cache, mount, kernel_set=DEFAULT_SET, annotations=None, **extra):
    """Given the cache by annotation: the webhook adds its volume and, where it can, the overlay."""
    given = {"gkm.io/cache": cache, "gkm.io/cache-mount-path": mount}
    return warmup_pod(name, image, node, target, kernel_set, annotations=dict(given, **(annotations or {})), **extra)


@dataclass
class WarmupRun:
    """A finished warm-up pod: the pod, its per-kernel lines, its summary and inspect's report of its cache."""

    pod: object
    kernels: list
    summary: dict
    report: dict
    logs: str

    def created_to_finished(self):
        """The API's pod creation to its container's end (1 s resolution)."""
        [main] = self.pod.status.container_statuses
        return (main.state.terminated.finished_at - self.pod.metadata.creation_timestamp).total_seconds()


def finished_run(core, namespace, name, timeout=120):
    """Waits for the pod to end and reads what it printed."""
    def done():
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    pod = wait_until("pod %s finished" % name, done, timeout=timeout, interval=0.5)
    logs = core.read_namespaced_pod_log(name, namespace, container="app")
    lines = logs.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("{") and '"summary": true' in line)
    kernels = [json.loads(line) for line in lines[:end] if line.startswith("{")]
    rest = lines[end + 1:]  # Triton's warnings go to stderr, which the log interleaves
    report = json.loads("\n".join(rest[rest.index("{"):]))
    return WarmupRun(pod, kernels, json.loads(lines[end]), report, logs)


def overlay_container(cache):
    """The name of the init container the webhook adds to write a cache's kernel overlay."""
    return OVERLAY_PREFIX + cache


def start_with_overlay(core, namespace, body, cache, timeout=60):
    """Creates the pod and returns (admitted pod, this machine's clock at the accepted request). The webhook's view
    follows the cache's status by watch, so right after a reconcile it may admit the pod without the overlay yet:
    such a pod is deleted unstarted and asked again, so that every pod measured was given the overlay."""
    name = body["metadata"]["name"]

    def admitted():
        started = time.time()
        pod = core.create_namespaced_pod(namespace, body)
        if overlay_container(cache) in [c.name for c in pod.spec.init_containers or []]:
            return pod, started
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        wait_until("pod %s gone" % name, lambda: not core.list_namespaced_pod(
            namespace, field_selector="metadata.name=" + name).items, timeout=30)
        return None

    return wait_until("pod %s admitted with the overlay of %s" % (name, cache), admitted, timeout=timeout, interval=1)


def overlay_written(core, namespace, name, cache):
    """What the overlay's init container reported: its last line (kernels, groups, bytes, skipped, ...)."""
    return json.loads(core.read_namespaced_pod_log(name, namespace, container=overlay_container(cache))
                      .strip().splitlines()[-1])


def distribute_cache(kubeconfig, crds, namespace, name, image, tools_image, mode="PVC", **options):
    """A GKMCache of `image` (its spec replaced when it exists), reconciled by the collection's cache_reconcile (given
    `options` besides) until the real nodes it fits hold it; (the cache's status, the reconcile's seconds). Raises
    RuntimeError when the reconcile fails or its status records no kernel overlay (the webhook would add none)."""
    body = {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"image": image, "mountMode": mode, "podTemplate": real_pod_template()}}
    try:
        crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", body)
    except ApiException as error:
        if error.status != 409:
            raise
        crds.patch_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", name, {"spec": body["spec"]})
    started = time.monotonic()
    result = run_module("cache_reconcile", kubeconfig, kind="GKMCache", name=name, namespace=namespace,
                        registry_plain_http=True, host_path_root=NODE_DISK, extract_image=tools_image, wait=True,
                        wait_timeout=300, **options)
    seconds = time.monotonic() - started
    if result.get("failed"):
        raise RuntimeError("cache_reconcile of %s failed: %s" % (name, result.get("msg")))
    status = result["resource"]["status"]
    if status.get("kernelOverlay") != {"variable": "TRITON_CACHE_DIR"}:
        raise RuntimeError("the status of %s records no kernel overlay: %s" % (name, status))
    return status, seconds
