"""The node's store -> bench/results/store.json: extraction Jobs and objects written per node and namespace for one
ClusterGKMCache over 3 namespaces, before and after the store (issue 31).

On the local simulated cluster, a pool of kwok GPU nodes (default 500) and 3 workload namespaces; the Jobs in the system
namespace (system_namespace_jobs), as the tenant isolation needs them. Two contenders, alternating round by round, each
module run a fresh `ansible` process:
- `store`: this checkout: one Job per node and digest fills the node's store, every namespace's slot PV points at it;
- `per namespace`: another checkout (--before, a collections path holding gkm.cluster as it was before the store):
  one Job, one access PVC and PV per node and namespace, one directory each.
A round converges the cache as a user's runs would: the cold run (creates), the run after the Jobs completed (the
marks), the run after that (the Jobs and the access pairs go), then the removal. Per round: the Jobs created, every API
write of the three runs by verb and kind, those per node and per (node, namespace), the distinct directories the slot
PVs of one node point at, and the seconds. kwok runs no containers: its Jobs complete without extracting, so the
seconds are the control plane's and the collection's, not a disk's.

Needs the simulated cluster (make sim-up).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, ".cache", "collections"), ROOT]

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

from ansible_collections.gkm.cluster.plugins.module_utils.common import kube  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_auth  # noqa: E402
from bench.distribute import BENCH_LABEL, ensure_nodes, state, wait_gone, wait_jobs_done  # noqa: E402
from bench.webhook import save_results  # noqa: E402
from tests.helpers import kcache_images  # noqa: E402
from tests.helpers.modules import COLLECTIONS, run_module  # noqa: E402

RESULTS = os.path.join(ROOT, "bench", "results", "store.json")
POOL = "gkm-bench-store"
NAMESPACES = ("bench-store-a", "bench-store-b", "bench-store-c")


def log(message):
    print("bench-store: %s" % message, file=sys.stderr, flush=True)


def converge(kubeconfig, collections, args):
    """The three runs to a settled cache: [(result, seconds)]."""
    runs = []
    for _ in range(3):
        started = time.monotonic()
        result = run_module("cache_distribute", kubeconfig, collections=collections, **args)
        assert not result.get("failed"), result.get("msg")
        runs.append((result, time.monotonic() - started))
        if len(runs) == 1:
            wait_jobs_done(kube_of(kubeconfig), args["name"], result["plan"]["summary"]["create"]["Job"])
    return runs


def kube_of(kubeconfig):
    return kube.Kube(api_client_from_auth({"kubeconfig": kubeconfig}), workers=16)


def directories_per_node(raw, cache):
    """Distinct host paths of the cache's slot PVs (bound in the workload namespaces) per node."""
    paths = {}
    for pv in raw.list("PersistentVolume", label_selector="gkm.io/cache=%s" % cache):
        claim = (pv["spec"].get("claimRef") or {}).get("namespace")
        node = (pv["metadata"].get("labels") or {}).get("gkm.io/node")
        if claim in NAMESPACES and node and "gkm.io/serving" not in pv["metadata"]["labels"]:
            paths.setdefault(node, set()).add(pv["spec"]["hostPath"]["path"])
    return statistics.mean(len(found) for found in paths.values()) if paths else 0


def one_round(kubeconfig, raw, collections, image_ref, nodes):
    cache = "store-%s" % uuid.uuid4().hex[:4]
    args = dict(name=cache, scope="cluster", workload_namespaces=list(NAMESPACES), image=image_ref,
                registry_plain_http=True, extract_image="gkm-cluster-tools:bench", node_selector={BENCH_LABEL: POOL},
                pod_template={"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}},
                system_namespace_jobs=True, serving_pvc=False, concurrency=16)
    runs = converge(kubeconfig, collections, args)
    directories = directories_per_node(raw, cache)
    writes = {}
    for result, _seconds in runs:
        for verb, kinds in result["plan"]["summary"].items():
            for kind, count in kinds.items():
                writes.setdefault(verb, {}).setdefault(kind, 0)
                writes[verb][kind] += count
    total = sum(result["api_writes"] for result, _seconds in runs)
    jobs = runs[0][0]["plan"]["summary"]["create"]["Job"]
    started = time.monotonic()
    removed = run_module("cache_distribute", kubeconfig, collections=collections, name=cache, scope="cluster",
                         state="absent", force=True)
    assert not removed.get("failed"), removed.get("msg")
    removal_seconds = time.monotonic() - started
    wait_gone(raw, cache)
    slots = nodes * len(NAMESPACES)
    return {
        "jobs_created": jobs,
        "jobs_per_node": round(jobs / nodes, 3),
        "jobs_per_node_and_namespace": round(jobs / slots, 3),
        "plan_writes": writes,
        "api_writes": total,
        "api_writes_per_node": round(total / nodes, 2),
        "api_writes_per_node_and_namespace": round(total / slots, 2),
        "directories_per_node": directories,
        "runs_seconds": [round(seconds, 1) for _result, seconds in runs],
        "removal_api_writes": removed["api_writes"],
        "removal_seconds": round(removal_seconds, 1),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--before", required=True,
                        help="an ANSIBLE_COLLECTIONS_PATH whose gkm.cluster is the checkout before the store")
    parser.add_argument("--before-label", default="before the store")
    parser.add_argument("--output", default=RESULTS)
    options = parser.parse_args()
    st = state()
    kubeconfig = st["kubeconfig"]
    raw = kube_of(kubeconfig)
    image = kcache_images.build_image(st["registry"], "bench/vector-add", "v1",
                                      kcache_images.CacheSpec(backend="hip", compiled=True))
    log("creating %d kwok GPU nodes" % options.nodes)
    ensure_nodes(raw, POOL, options.nodes)
    for namespace in NAMESPACES:
        raw.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    contenders = (("per namespace", options.before), ("store", COLLECTIONS))
    rounds = {name: [] for name, _path in contenders}
    load = []
    for round_number in range(options.rounds):
        for name, collections in contenders:
            load.append(os.getloadavg()[0])
            log("round %d: %s" % (round_number + 1, name))
            rounds[name].append(one_round(kubeconfig, raw, collections, image.ref, options.nodes))
            log("%s: %s" % (name, rounds[name][-1]))
    medians = {name: {key: statistics.median(r[key] for r in runs) for key in (
        "jobs_per_node", "jobs_per_node_and_namespace", "api_writes_per_node", "api_writes_per_node_and_namespace",
        "directories_per_node", "removal_seconds")} for name, runs in rounds.items()}
    save_results(options.output, {
        "nodes": options.nodes,
        "namespaces": len(NAMESPACES),
        "before": options.before_label,
        "load_average_at_each_round": load,
        "medians": medians,
        "ratios_store_to_per_namespace": {key: round(medians["store"][key] / medians["per namespace"][key], 3)
                                          for key in medians["store"] if medians["per namespace"][key]},
        "rounds": rounds,
    }, 6)


if __name__ == "__main__":
    main()
