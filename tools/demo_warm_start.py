#!/usr/bin/env python3
"""The demo's end: a workload's cold compile on one real node, its kernels captured into the cache, then its warm
start on the other node from the cache the collection distributed, with Triton's hit counts (docs/kernels.md,
"Capture" and "The warm-start benchmark").

The workload image's warm-up compiles the warm-start kernel set (56 real Triton kernels) for hip:gfx90a:
- the GKMCache `warm-start` starts with the sample image gkm-samples/warm-start-rocm:half (pushed here), half of the
  set, signed with a key made for the run; cache_reconcile distributes it, the Jobs verifying the signature;
- cold, on gkm-real-nvidia-1, with no cache (an emptyDir as TRITON_CACHE_DIR), opted in with gkm.io/capture: the
  half the cache lacks compiled, the pod kept running;
- capture: gkm.cluster.cache_capture reads its kernels, pushes the union signed with the key and records it as the
  cache's image; cache_reconcile extracts it onto gkm-real-amd-1;
- warm, on gkm-real-amd-1, given the cache by annotation (the webhook's serving PVC and kernel overlay): every kernel
  a hit.
Triton compiles ahead of time and uses no GPU, so both pods compile for the cache's target and the NVIDIA node stands
for a second node of the same kind. Idempotent: earlier pods are replaced, the cache reset to the half image.
"""

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, ".cache", "collections"), ROOT]

from kubernetes import client, config  # noqa: E402

from tests.helpers.capture_flow import (  # noqa: E402
    capturable_pod,
    capture_and_distribute,
    lacking_labels,
    signing_key,
    warmed_up,
)
from tests.helpers.kcache_images import CacheSpec, build_image, sign_cosign_v2  # noqa: E402
from tests.helpers.warmup_pods import (  # noqa: E402
    cache_pod,
    distribute_cache,
    finished_run,
    overlay_written,
    start_with_overlay,
)
from tests.helpers.webhook import wait_until  # noqa: E402

NAMESPACE, CACHE, MOUNT = "gkm-demo", "warm-start", "/kernels"
SAMPLE = "gkm-samples/warm-start-rocm"
TARGET, KERNEL_SET, KERNELS = "hip:gfx90a", "warm-start", 56
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
    held = KERNELS // 2
    private, private_pem, public_pem = signing_key()
    half = build_image(state["registry"], SAMPLE, "half", CacheSpec(backend="hip", kernels=held, compiled=True,
                                                                    kernel_set=KERNEL_SET))
    sign_cosign_v2(half, private)
    # An earlier run's pods go first: its warm pod holds the captured image's serving PVC, which the reset releases.
    for name in ("warm-start-cold", "warm-start-warm"):
        replace_pod(core, name)
    print("warm start after capture: GKMCache %s/%s starts with %s (%d of the %d kernels, %s), signed with a key made "
          "for this run" % (NAMESPACE, CACHE, half.ref, held, KERNELS, TARGET))
    status, seconds = distribute_cache(state["kubeconfig"], crds, NAMESPACE, CACHE, half.ref, state["tools_image"],
                                       signature_public_key=public_pem, signature_required=True)
    print("  reconciled in %.1f s: %s" % (seconds, status.get("phase")))

    print("cold: no cache on %s, opted in with gkm.io/capture: the %d kernels the cache lacks (Triton compiles ahead "
          "of time, no GPU: the same kernels for the same target)" % (COLD_NODE, KERNELS - held))
    started = time.time()
    core.create_namespaced_pod(NAMESPACE, capturable_pod("warm-start-cold", image, COLD_NODE, TARGET, CACHE,
                                                         lacking_labels(TARGET, held, KERNEL_SET), KERNEL_SET))
    lines = warmed_up(core, NAMESPACE, "warm-start-cold")
    summary = next(line for line in lines if line.get("summary"))
    print("  cold on %s: %d hits, %d misses, %d errors; compile %.2f s (Triton's, summed), pod start -> all kernels "
          "ready %.1f s" % (COLD_NODE, summary["hits"], summary["misses"], summary["errors"], summary["seconds"],
                            summary["ready_at"] - started))

    print("capture: cache_capture reads what the pod compiled, pushes the union signed with the key, records it; "
          "cache_reconcile distributes it to %s" % WARM_NODE)
    captured, _reconciled, capture_s, distributed_s = capture_and_distribute(
        state["kubeconfig"], NAMESPACE, "warm-start-cold", CACHE, "%s/%s" % (state["registry"], SAMPLE),
        private_pem, public_pem, state["tools_image"])
    print("  %s; capture %.1f s, capture -> distributed %.1f s" % (captured["msg"], capture_s, distributed_s))
    replace_pod(core, "warm-start-cold")  # read: it need not keep running

    print("warm: the cache %s by annotation on %s (serving PVC and the webhook's kernel overlay)" % (CACHE, WARM_NODE))
    _pod, started = start_with_overlay(core, NAMESPACE, cache_pod("warm-start-warm", image, WARM_NODE, TARGET, CACHE,
                                                                  MOUNT, KERNEL_SET), CACHE)
    warm = finished_run(core, NAMESPACE, "warm-start-warm", timeout=300)
    written = overlay_written(core, NAMESPACE, "warm-start-warm", CACHE)
    print("  the overlay's init container wrote %s group files (%s bytes)" % (written.get("groups"),
                                                                              written.get("bytes")))
    show("  warm after capture and distribution", WARM_NODE, warm, started)
    if warm.pod.status.phase != "Succeeded" or summary["errors"]:
        sys.exit("a warm-up failed: kubectl -n %s logs warm-start-cold / warm-start-warm" % NAMESPACE)
    print("warm compile per kernel: %.1f %% of cold's" % (100 * (warm.summary["seconds"] / KERNELS)
                                                          / (summary["seconds"] / (KERNELS - held))))


if __name__ == "__main__":
    main()
