"""Warm start (issue 32): a workload pod compiling the warm-start kernel set (56 real Triton kernels, hip:gfx90a) on the
simulated cluster's real AMD node, cold against warm.

- cold: no cache, an emptyDir as TRITON_CACHE_DIR; the warm-up compiles every kernel;
- warm: the cache the collection distributed: a GKMCache (mountMode PVC) of the set's compiled image, reconciled by
  gkm.cluster.cache_reconcile and extracted onto the node by its Job; the pod names it by annotation
  (gkm.io/cache) and the collection's in-cluster webhook gives it the serving PVC and the kernel overlay.

Each run is a fresh pod, contenders alternating (cold, warm, cold, ...), --repeat of each (default 3). A first pod
pulls the workload image onto the node, so no measured run pays for the pull. Per run: pod start (the create
request, this machine's clock) to every kernel ready (the warm-up's ready_at: the real nodes run on this machine,
one clock), the warm-up's compile seconds (Triton's, summed over its kernels), hits, misses, errors.

Then capture (gkm.cluster.cache_capture): a second GKMCache starts with an image of half the set (signed with a key
made for the run); a pod on the NVIDIA node (a second node of the same kind: Triton compiles ahead of time), given
no cache and opted in with gkm.io/capture, compiles the other half and stays running; the capture reads it, pushes
the union and records it; cache_reconcile extracts it onto the AMD node (the Jobs verify its signature); a warm pod
there is given the captured cache. capture_to_distributed_s is the capture's start to the reconcile's end.
`--capture-only` runs only this part and updates only the capture's fields of the results.

Also recorded: the distribution alone (GKMCache applied to extracted, the reconcile's wall time). Writes
bench/results/warm_start.json with the load average before and after.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".cache", "collections"))
sys.path.insert(0, ROOT)

from kubernetes import client, config  # noqa: E402

from tests.helpers import kcache_images  # noqa: E402
from tests.helpers.capture_flow import (  # noqa: E402
    capturable_pod,
    capture_and_distribute,
    lacking_labels,
    signing_key,
    warmed_up,
)
from tests.helpers.crds import apply_crds  # noqa: E402
from tests.helpers.modules import NODE_DISK, run_module  # noqa: E402
from tests.helpers.real_nodes import AMD_NODE, BASELINE, delete_namespace, labelled_namespace  # noqa: E402
from tests.helpers.warmup_pods import (  # noqa: E402
    cache_pod,
    cold_pod,
    distribute_cache,
    finished_run,
    overlay_written,
    start_with_overlay,
)
from tests.helpers.webhook import install  # noqa: E402
from tools.triton_kernels.image import LABEL_TRITON_KEY  # noqa: E402

RESULTS = os.path.join(ROOT, "bench", "results", "warm_start.json")
SIM = [sys.executable, os.path.join(ROOT, "tools", "sim-cluster", "sim.py")]
TARGET, KERNEL_SET, KERNELS = "hip:gfx90a", "warm-start", 56
CACHE, CAPTURED, MOUNT = "warm-start", "warm-start-captured", "/kernels"
COLD_NODE = "gkm-real-nvidia-1"  # where the captured pod compiles
GOAL = 0.05  # warm's compile seconds at most 5 % of cold's


def log(message):
    print("bench-warm-start: %s" % message, file=sys.stderr, flush=True)


def load():
    return [round(value, 2) for value in os.getloadavg()]


def median(runs, key):
    return round(statistics.median(run[key] for run in runs), 3)


def pull(core, namespace, image):
    """The workload image pulled onto the node by a pod of the small set (not measured): the kubelet's message."""
    core.create_namespaced_pod(namespace, cold_pod("pull", image, AMD_NODE, TARGET))
    finished_run(core, namespace, "pull", timeout=600)
    return [event.message for event in core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=pull").items if event.reason == "Pulled"]


def run_pod(core, namespace, contender, index, image, cache=CACHE):
    """One fresh pod, cold or warm (given `cache`), to its end: what it reported and the seconds from its start to
    all kernels ready."""
    name = "%s-%d-%s" % (contender, index, uuid.uuid4().hex[:4])
    if contender == "cold":
        started = time.time()
        core.create_namespaced_pod(namespace, cold_pod(name, image, AMD_NODE, TARGET, KERNEL_SET))
    else:
        _pod, started = start_with_overlay(core, namespace, cache_pod(name, image, AMD_NODE, TARGET, cache, MOUNT,
                                                                      KERNEL_SET), cache)
    run = finished_run(core, namespace, name, timeout=600)
    summary = run.summary
    if run.pod.status.phase != "Succeeded" or run.pod.spec.node_name != AMD_NODE:
        raise SystemExit("%s ended %s on %s:\n%s" % (name, run.pod.status.phase, run.pod.spec.node_name, run.logs))
    measured = {"contender": contender, "pod": name, "start_to_ready_s": round(summary["ready_at"] - started, 3),
                "compile_s": summary["seconds"], "import_s": summary["import_seconds"], "hits": summary["hits"],
                "misses": summary["misses"], "errors": summary["errors"],
                "first_kernel_s": run.kernels[0]["seconds"],
                "created_to_finished_api_s": run.created_to_finished()}
    if contender == "warm":
        written = overlay_written(core, namespace, name, cache)
        measured["overlay"] = {key: written.get(key) for key in ("kernels", "groups", "bytes", "seconds")}
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    log("%s: %s" % (name, json.dumps(measured, sort_keys=True)))
    return measured


def capture_run(state, core, crds, namespace):
    """The capture's figures: half the set in the cache's first image, the other half compiled on COLD_NODE and
    captured, the union distributed to AMD_NODE and started from there."""
    held = KERNELS // 2
    private, private_pem, public_pem = signing_key()
    repository = "bench/warm-start-captured-%s" % namespace
    first = kcache_images.build_image(state["registry"], repository, "v1", kcache_images.CacheSpec(
        backend="hip", kernels=held, compiled=True, kernel_set=KERNEL_SET))
    kcache_images.sign_cosign_v2(first, private)
    core.create_namespaced_pod(namespace, capturable_pod("capture-cold", state["workload_image"], COLD_NODE, TARGET,
                                                         CAPTURED, lacking_labels(TARGET, held, KERNEL_SET),
                                                         KERNEL_SET))
    distribute_cache(state["kubeconfig"], crds, namespace, CAPTURED, first.ref, state["tools_image"],
                     signature_public_key=public_pem, signature_required=True)
    cold = next(line for line in warmed_up(core, namespace, "capture-cold") if line.get("summary"))
    log("captured pod on %s: %s" % (COLD_NODE, json.dumps(cold, sort_keys=True)))
    captured, _reconciled, capture_s, distributed_s = capture_and_distribute(
        state["kubeconfig"], namespace, "capture-cold", CAPTURED, "%s/%s" % (state["registry"], repository),
        private_pem, public_pem, state["tools_image"])
    log("capture %.1f s, capture -> distributed %.1f s: %s" % (capture_s, distributed_s, captured["msg"]))
    warm = run_pod(core, namespace, "warm", 0, state["workload_image"], cache=CAPTURED)
    return {"capture_to_distributed_s": distributed_s,
            "capture": {"capture_s": capture_s, "module_seconds": captured["seconds"], "held_before": held,
                        "captured_from": COLD_NODE, "captured_pod": {k: cold[k] for k in ("hits", "misses", "seconds")},
                        "added": len(captured["added"]), "kernels": captured["kernels"], "image": captured["image"],
                        "warm_after_capture": {k: warm[k] for k in ("hits", "misses", "errors", "compile_s",
                                                                    "start_to_ready_s")}}}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--note", default="", help="a remark on the machine's state, kept in the JSON")
    parser.add_argument("--capture-only", action="store_true", help="run only the capture and update its fields")
    args = parser.parse_args()
    before = load()
    subprocess.run([*SIM, "up"], check=True)
    for image_name in ("tools-image", "workload-image"):
        subprocess.run([*SIM, image_name], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(ROOT, ".sim", "state.json")) as handle:
        state = json.load(handle)
    if not state.get("real_nodes"):
        raise SystemExit("the simulated cluster has no real nodes: `make sim-down` and run with GKM_SIM_REAL_NODES=2")
    api = config.new_client_from_config(config_file=state["kubeconfig"])
    # The CRDs as the gkm role applies them: a fresh cluster has none.
    core, crds = client.CoreV1Api(api), apply_crds(api)
    namespace = labelled_namespace(core, "bench-warm-%s" % uuid.uuid4().hex[:5], BASELINE)
    webhook = dict(name="bench-warm-wh", namespace="bench-warm-wh-%s" % uuid.uuid4().hex[:5], endpoint="service",
                   tls_mode="self_signed", image=state["tools_image"], replicas=1,
                   node_selector={"gkm.io/real-node": "true"},
                   tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}], failure_policy="Fail")
    spec = kcache_images.CacheSpec(backend="hip", kernels=KERNELS, compiled=True, kernel_set=KERNEL_SET)
    image = kcache_images.build_image(state["registry"], "bench/warm-start-hip", "v1", spec)
    labels = kcache_images.cache_entries(spec)[1]
    runs = []
    try:
        install(state["kubeconfig"], **webhook)
        if args.capture_only:
            captured = capture_run(state, core, crds, namespace)
        else:
            distributed = distribute_cache(state["kubeconfig"], crds, namespace, CACHE, image.ref,
                                           state["tools_image"])[1]
            log("cache applied -> extracted on %s: %.1f s" % (AMD_NODE, distributed))
            pulled = pull(core, namespace, state["workload_image"])
            log("image pull: %s" % pulled)
            for index in range(1, args.repeat + 1):
                for contender in ("cold", "warm"):
                    runs.append(dict(run_pod(core, namespace, contender, index, state["workload_image"]), round=index))
            captured = capture_run(state, core, crds, namespace)
    finally:
        install(state["kubeconfig"], name=webhook["name"], namespace=webhook["namespace"], endpoint="service",
                state="absent")
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        # The scrub Job removes the node's copy (it runs the tools image on the real node).
        for name in (CACHE, CAPTURED):
            run_module("cache_distribute", state["kubeconfig"], name=name, namespace=namespace, state="absent",
                       force=True, extract_image=state["tools_image"], registry_plain_http=True,
                       host_path_root=NODE_DISK, wait=True)
        delete_namespace(core, namespace)
    captured.update(capture_date=datetime.now().astimezone().isoformat(timespec="seconds"),
                    capture_load_average={"before": before, "after": load()}, capture_note=args.note)
    if args.capture_only:
        with open(RESULTS) as handle:
            result = json.load(handle)
        result.update(captured)
        write(result)
        return
    cold = [run for run in runs if run["contender"] == "cold"]
    warm = [run for run in runs if run["contender"] == "warm"]
    cold_compile, warm_compile = median(cold, "compile_s"), median(warm, "compile_s")
    after = load()
    result = {
        "benchmark": "warm_start", "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "note": args.note},
        "load_average": {"before": before, "after": after},
        "node": AMD_NODE, "target": TARGET, "kernel_set": KERNEL_SET, "kernels": KERNELS,
        "warm_mode": "PVC: the serving PVC of a GKMCache reconciled by cache_reconcile, through the webhook's kernel "
                     "overlay",
        "cold_compile_s": cold_compile, "warm_compile_s": warm_compile,
        "warm_over_cold_compile": round(warm_compile / cold_compile, 4),
        "cold_start_to_ready_s": median(cold, "start_to_ready_s"),
        "warm_start_to_ready_s": median(warm, "start_to_ready_s"),
        "warm_hits": min(run["hits"] for run in warm), "warm_misses": max(run["misses"] for run in warm),
        "cold_misses": min(run["misses"] for run in cold),
        "goal": {"warm_compile_at_most_5_percent_of_cold": warm_compile <= GOAL * cold_compile,
                 "every_kernel_a_hit": all(run["hits"] == KERNELS for run in warm)},
        "cache": {"image": image.ref, "bytes": int(labels["cache.triton.image/cache-size-bytes"]),
                  "triton_key": labels[LABEL_TRITON_KEY], "applied_to_extracted_s": round(distributed, 3)},
        "image_pull": pulled,
        "runs": runs,
    }
    result.update(captured)
    write(result)


def write(result):
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as handle:
        json.dump(result, handle, indent=2)
        handle.write("\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
