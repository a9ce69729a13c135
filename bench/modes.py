"""Mode matrix -> bench/results/modes.json: what each way of using a ReadWriteOnce cache costs in objects and writes.

On the local simulated cluster, one GKMCache per mode over a pool of kwok GPU nodes of its own (default 20), one
workload namespace, reconciled by gkm.cluster.cache_reconcile as the caches role runs it (wait true):
- `per-node PVC`: serving_pvc off; gkm.io/pvc-mutation DaemonSet pods get their node's PVC from the webhook;
- `serving PVC`: the default; any pod names `claimName: <cache>`;
- `imageVolume`: spec.mountMode imageVolume; pods annotated gkm.io/cache get an image volume, nothing is extracted.
For each: the objects the first reconcile leaves, by kind, per node and per namespace; the API writes and seconds of
the first reconcile, of a rerun that changes nothing, of the move to a new digest (no pod mounts the old one, so make
before break ends with only the new digest's objects) and of the removal. kwok runs no containers: the Jobs complete
without extracting, so the seconds are the control plane's and the collection's, not a disk's. A pod keeping the old
digest, the alias and the restarts are exercised by the tests (docs/modes/serving-pvc.md, docs/upgrades.md).

Needs the simulated cluster (make sim-up).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, ".cache", "collections"), ROOT]

import argparse  # noqa: E402
import time  # noqa: E402

from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_auth  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (  # noqa: E402
    GROUP,
    VERSION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import resource as cache_cr  # noqa: E402
from bench.distribute import BENCH_LABEL, ensure_nodes  # noqa: E402
from bench.webhook import save_results  # noqa: E402
from tests.helpers import kcache_images  # noqa: E402
from tests.helpers.crds import apply_crds  # noqa: E402
from tests.helpers.modules import run_module  # noqa: E402
from tests.helpers.sim import sim_control  # noqa: E402

RESULTS = os.path.join(ROOT, "bench", "results", "modes.json")
POOL = "gkm-bench-modes"
NAMESPACE = "bench-modes"
MODES = (
    ("per-node PVC", {"serving_pvc": False}, {}),
    ("serving PVC", {"serving_pvc": True}, {}),
    ("imageVolume", {"serving_pvc": True}, {"mountMode": "imageVolume"}),
)


def manifest(name, image_ref, spec_fields):
    template = {"spec": {"nodeSelector": {BENCH_LABEL: POOL}, "tolerations": [{"operator": "Exists"}]}}
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": dict(spec_fields, image=image_ref, podTemplate=template)}


def objects(raw, name, pool):
    """{kind: count} of the cache's objects not being deleted: node slot PVCs, serving PVCs, PVs, Jobs, and the
    entries of the pool's nodes in the per-node status objects (the cluster's other GPU nodes get one too, saying why
    they do not get the cache)."""
    selector = "gkm.io/cache=%s,gkm.io/cache-namespace=%s" % (name, NAMESPACE)

    def live(kind):
        return [obj for obj in raw.list(kind, label_selector=selector) if not obj["metadata"].get("deletionTimestamp")]

    pvcs = live("PersistentVolumeClaim")
    node_objects = raw.list_pages("/apis/%s/%s/namespaces/%s/gkmcachenodes" % (
        GROUP, VERSION, NAMESPACE))
    return {
        "slot_pvcs": sum(1 for pvc in pvcs if "gkm.io/node" in pvc["metadata"].get("labels", {})),
        "serving_pvcs": sum(1 for pvc in pvcs if "gkm.io/node" not in pvc["metadata"].get("labels", {})),
        "pvs": len(live("PersistentVolume")),
        "jobs": len(live("Job")),
        "node_status_entries": sum(1 for obj in node_objects if obj["metadata"]["name"] in pool
                                   and name in ((obj.get("status") or {}).get("caches") or {})),
    }


def reconcile(kubeconfig, name, module_options, **extra):
    started = time.monotonic()
    # kwok runs no containers: any tools image reference does.
    tools_image = "%s/gkm-cluster/tools:sim" % sim_control.load_state()["registry"]
    result = run_module("cache_reconcile", kubeconfig, kind="GKMCache", name=name, namespace=NAMESPACE,
                        registry_plain_http=True, extract_image=tools_image, wait=True, wait_timeout=600,
                        **dict(module_options, **extra))
    if result.get("failed"):
        raise RuntimeError("%s: %s" % (name, result.get("msg")))
    return {"api_writes": result.get("api_writes", 0), "seconds": round(time.monotonic() - started, 1),
            "node_labels_written": len(result.get("node_labels") or []), "phase": result["status"]["phase"]}


def measure_mode(raw, kubeconfig, images, pool, mode):
    label, module_options, spec_fields = mode
    name = "modes-%s" % label.split()[0].lower().replace("-", "")
    path = cache_cr.resource_path("GKMCache", name, NAMESPACE)
    raw.request("POST", cache_cr.resource_path("GKMCache", None, NAMESPACE), body=manifest(name, images[0].ref,
                                                                                          spec_fields))
    try:
        nodes = len(pool)
        figures = {"mode": label, "nodes": nodes, "first": reconcile(kubeconfig, name, module_options)}
        made = objects(raw, name, pool)
        figures["objects"] = made
        figures["per_node"] = {kind: round(count / nodes, 2) for kind, count in made.items()
                               if kind != "serving_pvcs"}
        figures["per_namespace"] = {"serving_pvcs": made["serving_pvcs"]}
        figures["rerun"] = reconcile(kubeconfig, name, module_options)
        raw.request("PATCH", path, body={"spec": {"image": images[1].ref}},
                    content_type="application/merge-patch+json")
        moved = reconcile(kubeconfig, name, module_options)
        figures["new_digest"] = dict(moved, objects_after=objects(raw, name, pool))
    finally:
        removed = reconcile(kubeconfig, name, module_options, state="absent", force=True)
        raw.request("DELETE", path)
    figures["remove"] = dict(removed, objects_after=objects(raw, name, pool))
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--output", default=RESULTS)
    args = parser.parse_args()
    load_before = os.getloadavg()
    state = sim_control.load_state()
    raw = Kube(api_client_from_auth({"kubeconfig": state["kubeconfig"]}), workers=16)
    apply_crds(raw.api)  # a fresh simulated cluster has none
    raw.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    images = [kcache_images.build_image(state["registry"], "bench/modes", tag,
                                        kcache_images.CacheSpec(backend="hip", seed=seed, compiled=True))
              for tag, seed in (("v1", 41), ("v2", 42))]
    names = ensure_nodes(raw, POOL, args.nodes)
    try:
        results = [measure_mode(raw, state["kubeconfig"], images, set(names), mode) for mode in MODES]
    finally:
        raw.map(lambda node: raw.delete("Node", node), names)
    output = {
        "objects_per_node": {r["mode"]: r["per_node"] for r in results},
        "serving_pvcs_per_namespace": {r["mode"]: r["per_namespace"]["serving_pvcs"] for r in results},
        "rerun_writes": {r["mode"]: r["rerun"]["api_writes"] for r in results},
        "modes": results,
        "method": {"nodes": args.nodes, "namespaces": 1, "reconcile": "gkm.cluster.cache_reconcile, wait true",
                   "cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
                   "load_average_after": [round(x, 2) for x in os.getloadavg()],
                   "note": "kwok Jobs complete without extracting; seconds are not a figure of merit here"},
    }
    save_results(args.output, output, 3)


if __name__ == "__main__":
    main()
