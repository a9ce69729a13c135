"""Scale benchmark: one ClusterGKMCache, ReadWriteOnce, over 3 namespaces, at growing numbers of kwok GPU nodes.

For each size, on the local simulated cluster, measured side by side in one run:
- cold: gkm.cluster.cache_reconcile (the `ansible` CLI, start-up included) with no object of the cache present,
  wait=false: time, API requests and writes, the per-node objects it writes;
- no-op: the same run once the extraction Jobs finished and their results were recorded: time, requests, writes
  (must be 0), where its time goes (the module's `timings`: start-up before its work, then each phase), and the
  `ansible -m ping` floor measured right after it;
- peak RSS of the `ansible` process tree of a run (the module included), the largest object the collection writes
  (the cache resource, a per-node object, a PVC, PV or Job), and `kubectl apply --server-side` of the same PVCs, PVs
  and Jobs (the per-node objects' status cannot be applied by kubectl; their creates are in ours).
Nodes tolerate every taint, so the not-ready taints of nodes kwok has not made Ready yet do not matter and the
run does not wait for thousands of heartbeats. The simulator runs without the Job controller
(GKM_SIM_JOB_CONTROLLER=0): the benchmark writes each Job's Complete condition itself, as the Job controller would
once the pod succeeded (and each scrub Job's when the cache is removed), so the figures measure the collection and not
15,000 simulated pod lifecycles. Writes bench/results/scale.json (a list `points`, one per size) and
bench/results/scale.png (when matplotlib is installed), with the least-squares cost per node-namespace.
"""

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".cache", "collections"))
sys.path.insert(0, ROOT)

import yaml  # noqa: E402

from ansible_collections.gkm.cluster.plugins.module_utils.common import kube  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_auth  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (  # noqa: E402
    API_VERSION,
    SCRUB_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (  # noqa: E402
    gather_facts,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.node_objects import (  # noqa: E402
    list_node_objects,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import resource as cache_cr  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.args import DISTRIBUTION_ARG_SPEC  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.image import (  # noqa: E402
    build_spec,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.ownership import resource_owner  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes  # noqa: E402
from bench.distribute import wait_gone  # noqa: E402
from tests.helpers import kcache_images  # noqa: E402
from tests.helpers.modules import ansible_cli_floor, run_module, run_module_measured  # noqa: E402

BENCH_LABEL = "gkm.io/bench"
NODE_GROUP = "gkm-bench-scale"
RESULTS = os.path.join(ROOT, "bench", "results", "scale.json")
NAMESPACES = ["bench-scale-a", "bench-scale-b", "bench-scale-c"]
# The Jobs in the workload namespaces, one per node and namespace: the layout bench/results/scale.json and
# controller.json were measured in (bench/store.py compares the store, system_namespace_jobs' default since).
OPTIONS = dict(registry_plain_http=True, extract_image="gkm-cluster-tools:bench", concurrency=16,
               system_namespace_jobs=False)


STARTED = time.monotonic()


def log(message):
    print("bench-scale [%6.0f s]: %s" % (time.monotonic() - STARTED, message), file=sys.stderr, flush=True)


def state():
    with open(os.path.join(ROOT, ".sim", "state.json")) as handle:
        return json.load(handle)


def unfinished(job):
    """True for a Job with no condition yet: one the Job controller has still to complete."""
    return not (job.get("status") or {}).get("conditions")


def complete_job(raw, namespace, name):
    """Write the Complete condition on one Job, as the Job controller does when its pod succeeded."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    done = {"type": "Complete", "status": "True", "lastProbeTime": now, "lastTransitionTime": now}
    status = {"status": {"startTime": now, "completionTime": now, "succeeded": 1, "ready": 0, "terminating": 0,
                         "conditions": [dict(done, type="SuccessCriteriaMet"), done]}}
    raw.request("PATCH", "%s/status" % kube.resource_path("Job", namespace, name), body=status,
                content_type="application/merge-patch+json")


def complete_jobs(raw, selector):
    """Complete the selected Jobs that have no condition yet. Returns how many it wrote."""
    jobs = [(job["metadata"]["namespace"], job["metadata"]["name"])
            for job in raw.items("Job", label_selector=selector) if unfinished(job)]
    raw.map(lambda ref: complete_job(raw, *ref), jobs)
    return len(jobs)


def install_crds(raw):
    for name in sorted(os.listdir(os.path.join(ROOT, "roles", "gkm", "files", "crds"))):
        with open(os.path.join(ROOT, "roles", "gkm", "files", "crds", name)) as handle:
            raw.apply(yaml.safe_load(handle))
    time.sleep(2)  # Established within a second on the local API server


def resize_nodes(raw, count):
    """Exactly `count` bench GPU nodes: create the missing ones, delete those past the count."""
    wanted = gpu_nodes.render_nodes([{"name": NODE_GROUP, "count": count, "vendor": "amd",
                                      "labels": {BENCH_LABEL: NODE_GROUP}}]) if count else []
    names = {node["metadata"]["name"] for node in wanted}
    existing = {n["metadata"]["name"] for n in raw.list("Node", label_selector="%s=%s" % (BENCH_LABEL, NODE_GROUP),
                                                       metadata_only=True)}
    missing = [node for node in wanted if node["metadata"]["name"] not in existing]
    raw.map(lambda node: raw.request("POST", "/api/v1/nodes", body=node), missing)
    raw.map(lambda name: raw.delete("Node", name), sorted(existing - names))


def cache_manifest(name, image):
    template = {"spec": {"tolerations": [{"operator": "Exists"}], "nodeSelector": {BENCH_LABEL: NODE_GROUP}}}
    return {"apiVersion": API_VERSION, "kind": "ClusterGKMCache",
            "metadata": {"name": name},
            "spec": {"image": image, "podTemplate": template, "workloadNamespaces": NAMESPACES}}


def reconcile(kubeconfig, name, **args):
    started = time.monotonic()
    result, peak_rss = run_module_measured("cache_reconcile", kubeconfig, kind="ClusterGKMCache", name=name,
                                           wait=False, **dict(OPTIONS, **args))
    elapsed = time.monotonic() - started
    assert not result.get("failed"), result.get("msg")
    return result, elapsed, peak_rss


def remove(kubeconfig, raw, name, timeout):
    """Remove the cache's objects (their scrub Jobs, one per node, completed as they appear); returns the seconds."""
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        removal = pool.submit(run_module, "cache_reconcile", kubeconfig, kind="ClusterGKMCache", name=name,
                              state="absent", force=True)
        while not removal.done():
            complete_jobs(raw, "%s=true" % SCRUB_LABEL)
            time.sleep(1)
        result = removal.result()
    assert not result.get("failed"), result.get("msg")
    wait_gone(raw, name, timeout)
    return time.monotonic() - started


def delete_applied(raw, name, timeout):
    """Delete what kubectl applied, a collection per kind and namespace (nothing ran on the nodes to clean)."""
    selector = [("labelSelector", "gkm.io/cache=%s" % name), ("propagationPolicy", "Background")]
    paths = [kube.resource_path(kind, namespace)
             for kind in ("Job", "PersistentVolumeClaim") for namespace in NAMESPACES]
    for path in [*paths, kube.resource_path("PersistentVolume")]:
        raw.request("DELETE", path, query=selector)
    wait_gone(raw, name, timeout)


def rendered_objects(raw, name):
    """The PVCs, PVs and Jobs the planner renders for the live cache on this cluster (what kubectl applies): owned by
    it, as the planner reads ownership by the owner reference's uid."""
    resource = raw.request("GET", cache_cr.resource_path("ClusterGKMCache", name))[1]
    defaults = {key: option.get("default") for key, option in DISTRIBUTION_ARG_SPEC.items()}
    params = cache_cr.distribute_params(resource, dict(defaults, **OPTIONS))
    params["owner"] = resource_owner(resource)
    spec = build_spec(params)
    return planner.plan(spec, gather_facts(raw, spec)).desired


def largest_object(raw, name, desired):
    status, resource = raw.request("GET", cache_cr.resource_path("ClusterGKMCache", name))
    sizes = [len(json.dumps(resource, separators=(",", ":")))] if status == 200 else []
    sizes += [len(json.dumps(obj, separators=(",", ":"))) for obj in list_node_objects(raw, "ClusterGKMCache", None)]
    sizes += [len(json.dumps(obj, separators=(",", ":"))) for obj in desired]
    return max(sizes)


def measure(kubeconfig, raw, image, nodes, repeat):
    resize_nodes(raw, nodes)
    slots = nodes * len(NAMESPACES)
    timeout = 120 + slots // 5
    cold, cold_requests, cold_writes, noop, noop_requests, noop_writes, floor, ssa = ([] for _ in range(8))
    rss = {"cold": [], "recording": [], "noop": []}
    module_noop, cold_timings, noop_timings, node_writes, removal, max_bytes = [], [], [], [], [], 0
    for round_number in range(repeat):
        name = "bench-scale-%s" % uuid.uuid4().hex[:5]
        raw.request("POST", cache_cr.resource_path("ClusterGKMCache"), body=cache_manifest(name, image))
        result, elapsed, peak = reconcile(kubeconfig, name)
        cold.append(elapsed)
        cold_requests.append(result["api_requests"])
        cold_writes.append(result["api_writes"])
        cold_timings.append(result["timings"])
        node_writes.append(result["node_objects"])
        rss["cold"].append(peak)
        log("%d nodes: cold run %.1f s" % (nodes, elapsed))
        log("%d nodes: %d Jobs marked complete" % (nodes, complete_jobs(raw, "gkm.io/cache=%s" % name)))
        _recorded, _elapsed, peak = reconcile(kubeconfig, name)  # records the finished extractions on the PVCs
        rss["recording"].append(peak)
        for _ in range(3):
            again, elapsed, peak = reconcile(kubeconfig, name)
            noop.append(elapsed)
            module_noop.append(again["duration_seconds"])
            noop_timings.append(again["timings"])
            noop_requests.append(again["api_requests"])
            noop_writes.append(again["api_writes"] + int(again.get("status_changed", False)))
            rss["noop"].append(peak)
            floor.append(ansible_cli_floor())
        desired = rendered_objects(raw, name)
        max_bytes = max(max_bytes, largest_object(raw, name, desired))
        log("%d nodes: no-op runs done" % nodes)
        removal.append(remove(kubeconfig, raw, name, timeout))
        raw.request("DELETE", cache_cr.resource_path("ClusterGKMCache", name))
        log("%d nodes: removed in %.1f s" % (nodes, removal[-1]))

        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as manifest:
            json.dump({"apiVersion": "v1", "kind": "List", "items": desired}, manifest)
        started = time.monotonic()
        # The server validates; kubectl's own schema check is older than the API server and refuses fields it
        # defaults (a podFailurePolicy condition's status).
        subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "apply", "--server-side", "--validate=false",
                        "--field-manager", "bench-kubectl", "-f", manifest.name], check=True, stdout=subprocess.DEVNULL)
        ssa.append(time.monotonic() - started)
        os.unlink(manifest.name)
        log("%d nodes: kubectl apply %.1f s" % (nodes, ssa[-1]))
        delete_applied(raw, name, timeout)
        log("%d nodes, round %d: cold %.1fs (%d requests), no-op %.2fs (%d requests, %d writes), kubectl %.1fs" % (
            nodes, round_number + 1, cold[-1], cold_requests[-1], noop[-1], noop_requests[-1], noop_writes[-1],
            ssa[-1]))
    return {
        "nodes": nodes,
        "namespaces": len(NAMESPACES),
        "node_namespaces": slots,
        "repeat": repeat,
        "cold_s": round(statistics.median(cold), 3),
        "cold_requests": int(statistics.median(cold_requests)),
        "cold_writes": int(statistics.median(cold_writes)),
        "cold_timings": median_timings(cold_timings),
        "cold_node_object_writes": node_writes[-1],
        "kubectl_ssa_s": round(statistics.median(ssa), 3),
        "ratio_cold_vs_kubectl_ssa": round(statistics.median(cold) / statistics.median(ssa), 3),
        "noop_s": round(statistics.median(noop), 3),
        "removal_s": round(statistics.median(removal), 3),
        "noop_module_s": round(statistics.median(module_noop), 3),
        "noop_timings": median_timings(noop_timings),
        "noop_requests": int(statistics.median(noop_requests)),
        "noop_writes": max(noop_writes),
        "ansible_floor_s": round(statistics.median(floor), 3),
        "ratio_noop_vs_floor": round(statistics.median(noop) / statistics.median(floor), 3),
        "max_object_bytes": max_bytes,
        "peak_rss_bytes": max(max(peaks) for peaks in rss.values()),
        "peak_rss_bytes_by_run": {run: max(peaks) for run, peaks in rss.items()},
    }


def median_timings(runs):
    """The module's `timings` of several runs as one: the median of each phase (a phase a run lacks counts 0)."""
    phases = sorted({phase for run in runs for phase in run})
    return {phase: round(statistics.median([run.get(phase) or 0.0 for run in runs]), 3) for phase in phases}


def linear_fit(points):
    """(seconds per node-namespace, intercept, r squared) of cold_s over node_namespaces."""
    xs = [p["node_namespaces"] for p in points]
    ys = [p["cold_s"] for p in points]
    if len(points) < 2:
        return (ys[0] / xs[0] if xs and xs[0] else None), 0.0, None
    mean_x, mean_y = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
    intercept = mean_y - slope * mean_x
    total = sum((y - mean_y) ** 2 for y in ys)
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys))
    return slope, intercept, (1 - residual / total) if total else None


def plot(points, fit, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        log("matplotlib is not installed: no plot")
        return False
    xs = [p["node_namespaces"] for p in points]
    figure, axes = pyplot.subplots(figsize=(7, 4.5))
    for key, label in (("cold_s", "cold converge (ours)"), ("kubectl_ssa_s", "kubectl apply --server-side"),
                       ("noop_s", "no-op rerun"), ("ansible_floor_s", "ansible -m ping floor")):
        axes.plot(xs, [p[key] for p in points], marker="o", label=label)
    if fit[0] is not None:
        axes.plot(xs, [fit[1] + fit[0] * x for x in xs], linestyle="--", color="grey",
                  label="fit: %.2f ms per node-namespace" % (fit[0] * 1000))
    axes.set_xlabel("node-namespaces (GPU nodes x 3 workload namespaces)")
    axes.set_ylabel("seconds")
    axes.set_title("ClusterGKMCache, ReadWriteOnce, 3 namespaces")
    axes.legend()
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    return True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="500,2000,5000", help="numbers of kwok GPU nodes, comma-separated")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--keep-nodes", action="store_true", help="leave the bench nodes for the next run")
    parser.add_argument("--results", default=RESULTS,
                        help="JSON file to write (the plot goes beside it, .png); a partial curve need not replace "
                             "the committed one")
    options = parser.parse_args()
    st = state()
    if st.get("job_controller", True):
        sys.exit("bench-scale: start the simulator without the Job controller (make sim-down; "
                 "GKM_SIM_JOB_CONTROLLER=0 make sim-up)")
    kubeconfig = st["kubeconfig"]
    raw = kube.Kube(api_client_from_auth({"kubeconfig": kubeconfig}), workers=16)
    install_crds(raw)
    for namespace in NAMESPACES:
        raw.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    image = kcache_images.build_image(st["registry"], "bench/scale", "v1", kcache_images.CacheSpec(backend="hip"))
    points = []
    try:
        for nodes in sorted(int(size) for size in options.sizes.split(",")):
            log("measuring at %d kwok GPU nodes" % nodes)
            load_before = [round(x, 2) for x in os.getloadavg()]
            points.append(dict(measure(kubeconfig, raw, image.ref, nodes, options.repeat),
                               load_average_before=load_before))
            write_results(points, options.results)  # each point as it is measured: the largest take most of an hour
    finally:
        if not options.keep_nodes:  # the cluster is shared: other tests should not see the bench nodes
            resize_nodes(raw, 0)
    with open(options.results) as handle:
        print(handle.read())


def write_results(points, path):
    fit = linear_fit(points)
    plot_path = os.path.splitext(path)[0] + ".png"
    results = {
        "points": points,
        "cold_s_per_node_namespace": round(fit[0], 6) if fit[0] is not None else None,
        "cold_fit_intercept_s": round(fit[1], 3),
        "cold_fit_r_squared": round(fit[2], 4) if fit[2] is not None else None,
        "plot": os.path.relpath(plot_path, ROOT) if plot(points, fit, plot_path) else None,
        "notes": "times are medians over --repeat rounds and include ansible start-up; cold = no object of the "
                 "cache exists, wait=false; noop_timings are the module's own (startup: process start to work, "
                 "then the work's phases), the rest of noop_s is the ansible controller's; noop_writes counts the "
                 "status write too; peak_rss_bytes is the largest RSS of an `ansible` process tree running the "
                 "module (wait4); kubectl_ssa_s applies the same PVCs, "
                 "PVs and Jobs (not the per-node objects, whose status kubectl cannot apply) with --validate=false "
                 "(the server validates); removal_s is cache_reconcile state=absent force=true with its scrub Jobs "
                 "completed by the benchmark; the simulator ran without the Job controller (Jobs completed by the "
                 "benchmark)",
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as handle:
        json.dump(results, handle, indent=2, sort_keys=True)
        handle.write("\n")


if __name__ == "__main__":
    main()
