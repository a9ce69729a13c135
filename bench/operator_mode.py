"""Operator benchmark: the operator beside the playbook path, for the same caches -> bench/results/operator.json.

On the local simulated cluster, for each size (default 3 and 500 kwok GPU nodes of a pool of their own), in rounds
that alternate the two paths (operator first in even rounds, playbook first in odd ones):
- operator: the collection's operator runs (sim.py operator-up: the kopf controller); `kubectl apply` of a GKMCache,
  and the time until its status says Extracted on every node of the pool (polled every 0.25 s), with the CPU time of
  the operator's process tree in that window and its peak RSS (bench/results/operator.json's figures before issue 33
  are the earlier engine's: a process tree per event);
- playbook: the operator is stopped; ansible-playbook runs the caches role with the same cache declared and the same
  options as the operator's runs; the time from its start until the same status, and its CPU time.
At the largest size, in every round and for both paths, once the cache is Extracted one more kwok node joins the pool:
the time from its create until its PVC is Bound and its extraction Job complete (the playbook path runs the caches role
right after the create: the best a scheduled playbook can do). Before the rounds at each size, the operator idles
beside the pool with no cache of ours: its CPU and RSS over --idle-seconds, --settle-seconds after its start (Node
heartbeats are runs too).
Figures are medians of the rounds. The 1-minute load average is read before and after; results are refused when it is
above --max-load at the start (unless --allow-busy, which marks them busy). The run's own load (the operator's Node
runs, the control plane with 500 nodes) raises the average after, so that one is recorded, not judged.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, ".cache", "collections"), ROOT]

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

import yaml  # noqa: E402

from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_auth  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (  # noqa: E402
    GROUP,
    VERSION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (  # noqa: E402
    job_condition,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import resource as cache_cr  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes  # noqa: E402
from bench.distribute import ensure_nodes  # noqa: E402
from bench.webhook import save_results  # noqa: E402
from tests.helpers import kcache_images  # noqa: E402
from tests.helpers.modules import run_module  # noqa: E402
from tests.helpers.roles import COLLECTIONS  # noqa: E402
from tests.helpers.sim import SIM_SCRIPT, sim_control  # noqa: E402

RESULTS = os.path.join(ROOT, "bench", "results", "operator.json")
POOL_LABEL = "gkm.io/bench"
POOL = "gkm-bench-operator"
NAMESPACE = "bench-operator"
DEFAULT_MAX_LOAD = 1.5
POLL_SECONDS = 0.25
# Both paths distribute with these (the operator gets them through sim.py operator-up --options, the playbook as
# caches_* variables): a 500-node wait must not time out, or the two paths would stop at different points.
# system_namespace_jobs: the layout bench/results/operator.json was measured in (scale.OPTIONS says why).
OPTIONS = {"wait": True, "wait_timeout": 900, "system_namespace_jobs": False}


def log(message):
    print("bench-operator: %s" % message, file=sys.stderr, flush=True)


def sim(*args):
    """sim.py's JSON answer (its last line)."""
    output = subprocess.run([sys.executable, SIM_SCRIPT, *args], check=True, cwd=ROOT, stdout=subprocess.PIPE,
                            text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- the operator's process tree


def _stat(pid):
    """(parent pid, CPU seconds of the process and of its waited-for children, RSS bytes), or None once gone."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    ticks = sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return int(fields[1]), ticks / os.sysconf("SC_CLK_TCK"), int(fields[21]) * os.sysconf("SC_PAGE_SIZE")


class ProcessTree:
    """CPU and RSS of a process and its descendants.

    An exited descendant's CPU time moves into its parent's children's time once waited for, so the sum over the live
    tree of own plus children's time only grows, and the difference between two samples is the tree's CPU use.
    """

    def __init__(self, pid):
        self.pid = pid

    def sample(self):
        """(CPU seconds so far, RSS of the root process, RSS of the whole tree)."""
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                stat = _stat(int(name))
                if stat:
                    stats[int(name)] = stat
        tree, frontier = set(), [self.pid] if self.pid in stats else []
        children = {}
        for pid, (parent, _cpu, _rss) in stats.items():
            children.setdefault(parent, []).append(pid)
        while frontier:
            pid = frontier.pop()
            tree.add(pid)
            frontier.extend(children.get(pid, []))
        return (sum(stats[pid][1] for pid in tree), stats[self.pid][2] if tree else 0,
                sum(stats[pid][2] for pid in tree))


class Window:
    """The tree's CPU seconds, CPU share of one core and RSS (root's and tree's, median and peak) over a window,
    sampled every second in a thread."""

    def __init__(self, tree):
        self.tree = tree
        self.samples = []
        self.started = self.seconds = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(1):
            self.samples.append(self.tree.sample())

    def __enter__(self):
        self.started = time.monotonic()
        self.samples.append(self.tree.sample())
        self._thread.start()
        return self

    def __exit__(self, *_exc):
        self._stop.set()
        self._thread.join()
        self.samples.append(self.tree.sample())
        self.seconds = time.monotonic() - self.started

    def figures(self):
        cpu = self.samples[-1][0] - self.samples[0][0]
        return {"window_s": round(self.seconds, 2), "cpu_s": round(cpu, 2),
                "cpu_cores": round(cpu / self.seconds, 3) if self.seconds else None,
                "engine_rss_bytes": int(statistics.median(sample[1] for sample in self.samples)),
                "tree_rss_median_bytes": int(statistics.median(sample[2] for sample in self.samples)),
                "tree_rss_peak_bytes": max(sample[2] for sample in self.samples)}


# ----------------------------------------------------------------------------- the cluster side


class Cluster:
    def __init__(self, kubeconfig, tools_image, image_ref):
        self.kubeconfig = kubeconfig
        self.raw = Kube(api_client_from_auth({"kubeconfig": kubeconfig}), workers=16)
        self.tools_image = tools_image
        self.image_ref = image_ref

    def manifest(self, name):
        template = {"spec": {"nodeSelector": {POOL_LABEL: POOL}, "tolerations": [{"operator": "Exists"}]}}
        return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"image": self.image_ref, "podTemplate": template}}

    def cache(self, name):
        status, body = self.raw.request("GET", cache_cr.resource_path("GKMCache", name, NAMESPACE))
        return None if status == 404 else body

    def extracted_on(self, name, nodes):
        status = (self.cache(name) or {}).get("status") or {}
        return status.get("phase") == "Extracted" and status.get("nodeCnt") == nodes

    def node_ready(self, name, node):
        """The node's PVC of the cache Bound and its extraction Job complete."""
        selector = "gkm.io/cache=%s,gkm.io/cache-namespace=%s,gkm.io/node=%s" % (name, NAMESPACE, node)
        pvcs = self.raw.list("PersistentVolumeClaim", label_selector=selector)
        jobs = self.raw.list("Job", label_selector=selector)
        return (bool(pvcs) and all((pvc.get("status") or {}).get("phase") == "Bound" for pvc in pvcs)
                and bool(jobs) and all(job_condition(job, "Complete") for job in jobs))

    def objects_left(self, name):
        selector = "gkm.io/cache=%s,gkm.io/cache-namespace=%s" % (name, NAMESPACE)
        return sum(len(self.raw.list(kind, label_selector=selector))
                   for kind in ("PersistentVolumeClaim", "PersistentVolume", "Job"))

    def join_node(self, group):
        """One more kwok GPU node in the pool; its name."""
        node = gpu_nodes.render_nodes([{"name": group, "count": 1, "vendor": "amd", "labels": {POOL_LABEL: POOL}}])[0]
        self.raw.request("POST", "/api/v1/nodes", body=node)
        return node["metadata"]["name"]

    def other_caches(self):
        return sum(len(self.raw.list_pages("/apis/%s/%s/%s" % (GROUP, VERSION, plural)))
                   for plural in ("gkmcaches", "clustergkmcaches"))


def poll(what, check, timeout, started=None):
    """Seconds from started (default: now) until check() is true, polled every POLL_SECONDS; fails naming what."""
    started = time.monotonic() if started is None else started
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(POLL_SECONDS)
    raise TimeoutError("%s not reached in %ss" % (what, timeout))


# ----------------------------------------------------------------------------- the two paths


class OperatorPath:
    name = "operator"

    def __init__(self, cluster, timeout):
        self.cluster = cluster
        self.timeout = timeout

    def start(self):
        sim("operator-up", "--tools-image", self.cluster.tools_image, "--options", json.dumps(OPTIONS))
        return ProcessTree(sim_control.load_state()["processes"]["operator"]["pid"])

    def apply(self, name, nodes):
        tree = self.start()
        with Window(tree) as window:
            started = time.monotonic()
            subprocess.run(["kubectl", "--kubeconfig", self.cluster.kubeconfig, "apply", "-f", "-"], check=True,
                           input=json.dumps(self.cluster.manifest(name)), text=True, stdout=subprocess.DEVNULL)
            poll("%s Extracted on %d nodes" % (name, nodes), lambda: self.cluster.extracted_on(name, nodes),
                 self.timeout)
            seconds = time.monotonic() - started
        return dict({"apply_to_extracted_s": round(seconds, 2)}, operator=window.figures())

    def join(self, name, group):
        started = time.monotonic()
        node = self.cluster.join_node(group)
        poll("%s ready on %s" % (name, node), lambda: self.cluster.node_ready(name, node), self.timeout)
        return node, round(time.monotonic() - started, 2)

    def remove(self, name):
        """kubectl delete: the operator's finalizer removes the objects, then the resource goes."""
        subprocess.run(["kubectl", "--kubeconfig", self.cluster.kubeconfig, "delete", "gkmcache", name, "-n", NAMESPACE,
                        "--wait=false"], check=True, stdout=subprocess.DEVNULL)
        poll("%s gone" % name, lambda: self.cluster.cache(name) is None, self.timeout)
        poll("the objects of %s gone" % name, lambda: not self.cluster.objects_left(name), self.timeout)


class PlaybookPath:
    name = "playbook"

    def __init__(self, cluster, timeout, workdir):
        self.cluster = cluster
        self.timeout = timeout
        self.workdir = workdir

    def _playbook(self, name):
        """The caches role as the playbooks run it, with this cache declared and the operator's options."""
        path = os.path.join(self.workdir, "%s.yml" % name)
        options = {"caches_" + key: value for key, value in sim_control.operator_plan.options(OPTIONS).items()}
        role_vars = dict(options, caches_kubeconfig=self.cluster.kubeconfig,
                         caches_extract_image=self.cluster.tools_image, caches_declared=[self.cluster.manifest(name)],
                         caches_remove_undeclared=False)
        with open(path, "w") as handle:
            yaml.safe_dump([{"hosts": "localhost", "gather_facts": False,
                             "roles": [{"role": "gkm.cluster.caches", "vars": role_vars}]}], handle)
        return path

    def _run(self, name, until):
        """Run the playbook; (seconds from its start until until() held, CPU seconds of the run)."""
        environment = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_LOCALHOST_WARNING="0",
                           ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
        command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), self._playbook(name)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        with tempfile.TemporaryFile() as output:
            process = subprocess.Popen(command, env=environment, stdout=output, stderr=subprocess.STDOUT)
            reached = None
            while reached is None and process.poll() is None and time.monotonic() - started < self.timeout:
                if until():
                    reached = time.monotonic() - started
                time.sleep(POLL_SECONDS)
            process.wait(timeout=self.timeout)
            if process.returncode:
                output.seek(0)
                raise RuntimeError("the playbook failed: %s" % output.read()[-3000:].decode(errors="replace"))
        if reached is None:  # in the last moments of the run, between two polls
            reached = poll(name, until, self.timeout, started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        return round(reached, 2), round(cpu, 2)

    def apply(self, name, nodes):
        sim("operator-down")
        seconds, cpu = self._run(name, lambda: self.cluster.extracted_on(name, nodes))
        return {"apply_to_extracted_s": seconds, "playbook_cpu_s": cpu}

    def join(self, name, group):
        started = time.monotonic()
        node = self.cluster.join_node(group)
        self._run(name, lambda: self.cluster.node_ready(name, node))
        return node, round(time.monotonic() - started, 2)

    def remove(self, name):
        result = run_module("cache_reconcile", self.cluster.kubeconfig, kind="GKMCache", name=name,
                            namespace=NAMESPACE, state="absent", force=True)
        if result.get("failed"):
            raise RuntimeError(result.get("msg"))
        self.cluster.raw.request("DELETE", cache_cr.resource_path("GKMCache", name, NAMESPACE))
        poll("%s gone" % name, lambda: self.cluster.cache(name) is None, self.timeout)
        poll("the objects of %s gone" % name, lambda: not self.cluster.objects_left(name), self.timeout)


# ----------------------------------------------------------------------------- the benchmark


def idle(cluster, settle_seconds, seconds):
    """The operator beside the pool, no cache of ours: its figures over `seconds`, from `settle_seconds` after it is
    up (its first run per GPU node, the Node watch's initial list, comes at start)."""
    tree = OperatorPath(cluster, seconds).start()
    time.sleep(settle_seconds)
    with Window(tree) as window:
        time.sleep(seconds)
    return window.figures()


def measure_size(cluster, nodes, args, join):
    log("%d nodes in the pool" % nodes)
    ensure_nodes(cluster.raw, POOL, nodes)
    paths = [OperatorPath(cluster, args.timeout), PlaybookPath(cluster, args.timeout, args.workdir)]
    figures = {"nodes": nodes, "operator_idle": idle(cluster, args.settle_seconds, args.idle_seconds), "rounds": []}
    log("idle operator beside %d nodes: %s" % (nodes, figures["operator_idle"]))
    for round_number in range(args.runs):
        order = paths if round_number % 2 == 0 else paths[::-1]
        for path in order:
            name = "bench-op-%s" % uuid.uuid4().hex[:6]
            sample = dict(path.apply(name, nodes), path=path.name, round=round_number)
            if join:
                sample["joined_node"], sample["node_join_to_ready_s"] = path.join(
                    name, "gkm-bench-op-join-%s" % uuid.uuid4().hex[:4])
            started = time.monotonic()
            path.remove(name)
            sample["remove_s"] = round(time.monotonic() - started, 2)
            if join:
                cluster.raw.delete("Node", sample["joined_node"])
            log("%d nodes, round %d, %s: %s" % (nodes, round_number, path.name, sample))
            figures["rounds"].append(sample)
    return figures


def median_of(rounds, path, key):
    values = [sample[key] for sample in rounds if sample["path"] == path and key in sample]
    return round(statistics.median(values), 2) if values else None


def summary(points):
    largest = points[-1]
    output = {
        "apply_to_extracted_s": {str(p["nodes"]): median_of(p["rounds"], "operator", "apply_to_extracted_s")
                                 for p in points},
        "playbook_apply_to_extracted_s": {str(p["nodes"]): median_of(p["rounds"], "playbook", "apply_to_extracted_s")
                                          for p in points},
        "node_join_to_ready_s": median_of(largest["rounds"], "operator", "node_join_to_ready_s"),
        "playbook_node_join_to_ready_s": median_of(largest["rounds"], "playbook", "node_join_to_ready_s"),
        "nodes_present_at_join": largest["nodes"],
        "operator_idle": {str(p["nodes"]): p["operator_idle"] for p in points},
        "operator_during_apply": {},
        "playbook_cpu_s": {str(p["nodes"]): median_of(p["rounds"], "playbook", "playbook_cpu_s") for p in points},
    }
    for point in points:
        windows = [sample["operator"] for sample in point["rounds"] if sample["path"] == "operator"]
        output["operator_during_apply"][str(point["nodes"])] = {
            key: statistics.median(window[key] for window in windows) for key in windows[0]}
    return output


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="3,500", help="pool sizes, comma-separated (the join is timed at the last)")
    parser.add_argument("--runs", type=int, default=3, help="rounds per size, each path once per round")
    parser.add_argument("--idle-seconds", type=int, default=60)
    parser.add_argument("--settle-seconds", type=int, default=60, help="wait after the operator starts before idling")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds any one wait may take")
    parser.add_argument("--max-load", type=float, default=DEFAULT_MAX_LOAD,
                        help="refuse to write results when the 1-minute load average at the start is above this")
    parser.add_argument("--allow-busy", action="store_true", help="write results on a busy machine, marked busy")
    parser.add_argument("--keep-nodes", action="store_true", help="leave the pool's nodes for the next run")
    parser.add_argument("--output", default=RESULTS)
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.nodes.split(","))

    load_before = os.getloadavg()
    if load_before[0] > args.max_load and not args.allow_busy:
        sys.exit("load average %.2f is above %.2f: the figures would measure the other load. Wait for a quiet "
                 "machine or pass --allow-busy (results are then marked busy)" % (load_before[0], args.max_load))
    state = sim_control.load_state()
    kubeconfig = state["kubeconfig"]
    image = kcache_images.build_image(state["registry"], "bench/operator", "v1", kcache_images.CacheSpec(backend="hip"))
    # kwok runs no containers: any tools image reference does, as long as both paths give the same one.
    cluster = Cluster(kubeconfig, "%s/gkm-cluster/tools:sim" % state["registry"], image.ref)
    cluster.raw.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    others = cluster.other_caches()
    points = []
    with tempfile.TemporaryDirectory(prefix="gkm-bench-operator-") as workdir:
        args.workdir = workdir
        try:
            for size in sizes:
                points.append(measure_size(cluster, size, args, join=size == sizes[-1]))
        finally:
            sim("operator-down")
            if not args.keep_nodes:
                cluster.raw.map(lambda node: cluster.raw.delete("Node", node["metadata"]["name"]),
                                cluster.raw.list("Node", label_selector="%s=%s" % (POOL_LABEL, POOL),
                                                 metadata_only=True))
    load_after = os.getloadavg()
    busy = load_before[0] > args.max_load
    output = dict(summary(points), points=points, method={
        "statistic": "median of rounds", "runs": args.runs, "sizes": sizes,
        "order": "operator then playbook in even rounds, playbook then operator in odd ones",
        "poll_s": POLL_SECONDS, "idle_seconds": args.idle_seconds, "settle_seconds": args.settle_seconds,
        "apply": "kubectl apply of a GKMCache (operator) or ansible-playbook of the caches role declaring it "
                 "(playbook), until status phase Extracted with nodeCnt = the pool",
        "join": "a kwok GPU node created in the pool, until its PVC is Bound and its Job Complete; the playbook path "
                "runs the caches role right after the create",
        "operator_figures": "the operator's process tree (the kopf controller), /proc every second: CPU seconds "
                            "over the window and RSS (the process alone, tree)",
        "options": OPTIONS, "other_caches_in_cluster": others,
        "cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after], "max_load": args.max_load, "busy": busy,
        "note": "operator, playbooks, control plane and kwok share the same CPUs; the load after includes the run's "
                "own",
    })
    save_results(args.output, output, 4)


if __name__ == "__main__":
    main()
