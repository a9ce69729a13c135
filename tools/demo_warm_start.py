#!/usr/bin/env python3
"""The demo's end: a workload's cold compile on one real node, then its warm start on the other from the cache the
collection distributed, with Triton's hit counts (docs/kernels.md, "The warm-start benchmark").

The workload image's warm-up compiles the warm-start kernel set (56 real Triton kernels) for hip:gfx90a:
- cold, on gkm-real-nvidia-1, with no cache (an emptyDir as TRITON_CACHE_DIR): every kernel compiled;
- warm, on gkm-real-amd-1, given the GKMCache `warm-start` by annotation: the collection's cache_reconcile extracted
  the sample image gkm-samples/warm-start-rocm:v1 (pushed here, not by tools/sample_caches.py, whose samples the
  tests push too) onto the node, the webhook gives the pod the serving PVC and the
  kernel overlay.
Capture is not built: the warm cache is the collection's distribution of that built image, not one captured from the
cold pod. Triton compiles ahead of time and uses no GPU, so both pods compile for the cache's target and the NVIDIA
node stands for a second node of the same kind. Idempotent: earlier pods are replaced.
"""

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, ".cache", "collections"), ROOT]

from kubernetes import client, config  # noqa: E402

from tests.helpers.kcache_images import CacheSpec  # noqa: E402
from tests.helpers.warmup_pods import (  # noqa: E402
    cache_pod,
    cold_pod,
    distribute_cache,
    finished_run,
    overlay_written,
    start_with_overlay,
)
from tests.helpers.webhook import wait_until  # noqa: E402
from tools.sample_caches import push  # noqa: E402

NAMESPACE, CACHE, MOUNT = "gkm-demo", "warm-start", "/kernels"
SAMPLE = "gkm-samples/warm-start-rocm"
TARGET, KERNEL_SET = "hip:gfx90a", "warm-start"
COLD_NODE, WARM_NODE = "gkm-real-nvidia-1", "gkm-real-amd-1"


def replace_pod(core, name):
    try:
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    except client.ApiException as error:
        if error.status != 404:
            raise
    wait_until("pod %s gone" % name, lambda: not core.list_namespaced_pod(
        NAMESPACE, field_selector="metadata.name=" + name).items, timeout=60)


def show(label, node, run, started):
    summary = run.summary
    print("%s on %s: %d hits, %d misses, %d errors of %d kernels; compile %.2f s (Triton's, summed), pod start -> "
          "all kernels ready %.1f s" % (label, node, summary["hits"], summary["misses"], summary["errors"],
                                        len(run.kernels), summary["seconds"], summary["ready_at"] - started))


def main():
    with open(os.path.join(os.environ.get("GKM_SIM_DIR", os.path.join(ROOT, ".sim")), "state.json")) as handle:
        state = json.load(handle)
    if not state.get("real_nodes"):
        sys.exit("the simulated cluster has no real nodes: run `make sim-down demo` (the demo starts two)")
    if not state.get("workload_image"):
        sys.exit("no workload image: tools/sim-cluster/sim.py workload-image pushes it")
    api = config.new_client_from_config(config_file=state["kubeconfig"])
    core, crds = client.CoreV1Api(api), client.CustomObjectsApi(api)
    image = state["workload_image"]
    push(state["registry"], SAMPLE, CacheSpec(backend="hip", kernels=56, compiled=True, kernel_set=KERNEL_SET))
    print("warm start: the collection distributes %s:v1 (56 kernels, %s) as GKMCache %s/%s; capture is not built, so "
          "the warm cache is this built image, not one captured from the cold pod" % (SAMPLE, TARGET, NAMESPACE,
                                                                                      CACHE))
    status, seconds = distribute_cache(state["kubeconfig"], crds, NAMESPACE, CACHE,
                                       "%s/%s:v1" % (state["registry"], SAMPLE), state["tools_image"])
    print("  reconciled in %.1f s: %s" % (seconds, status.get("phase")))
    for name in ("warm-start-cold", "warm-start-warm"):
        replace_pod(core, name)

    print("cold: no cache on %s (Triton compiles ahead of time, no GPU: the same kernels for the same target)"
          % COLD_NODE)
    started = time.time()
    core.create_namespaced_pod(NAMESPACE, cold_pod("warm-start-cold", image, COLD_NODE, TARGET, KERNEL_SET))
    cold = finished_run(core, NAMESPACE, "warm-start-cold", timeout=600)
    show("  cold", COLD_NODE, cold, started)
    # The first run on a node pulls the workload image within that time; the kubelet says so.
    this_pod = "involvedObject.uid=" + cold.pod.metadata.uid
    for event in core.list_namespaced_event(NAMESPACE, field_selector=this_pod).items:
        if event.reason == "Pulled":
            print("  (kubelet: %s)" % event.message)

    print("warm: the cache %s by annotation on %s (serving PVC and the webhook's kernel overlay)" % (CACHE, WARM_NODE))
    _pod, started = start_with_overlay(core, NAMESPACE, cache_pod("warm-start-warm", image, WARM_NODE, TARGET, CACHE,
                                                                  MOUNT, KERNEL_SET), CACHE)
    warm = finished_run(core, NAMESPACE, "warm-start-warm", timeout=300)
    written = overlay_written(core, NAMESPACE, "warm-start-warm", CACHE)
    print("  the overlay's init container wrote %s group files (%s bytes)" % (written.get("groups"),
                                                                              written.get("bytes")))
    show("  warm", WARM_NODE, warm, started)
    if cold.pod.status.phase != "Succeeded" or warm.pod.status.phase != "Succeeded":
        sys.exit("a warm-up failed: kubectl -n %s logs warm-start-cold / warm-start-warm" % NAMESPACE)
    print("warm compile: %.1f %% of cold's" % (100 * warm.summary["seconds"] / cold.summary["seconds"]))


if __name__ == "__main__":
    main()
