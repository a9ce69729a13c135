"""Controller benchmark (issue 33): the kopf controller beside the playbook path, for one ClusterGKMCache over three
workload namespaces at growing numbers of kwok GPU nodes -> bench/results/controller.json.

For each size, in rounds that alternate the two paths (the controller first in even rounds, each in its own
processes):
- controller (`python -m controller.gkm_controller.main`, out of cluster, as its integration test runs it, its
  resync every --resync-seconds): start -> ready; cold: the ClusterGKMCache created -> its status Extracted on every
  node; idle beside the converged cache while every pool node gets a heartbeat-only status update every
  --heartbeat-seconds (the kubelet's nodeStatusUpdateFrequency, 10 s): its CPU share and RSS over the window, the
  resyncs that ran in it (each counts its own requests on the controller's client) and the requests the API
  server's audit log shows from it (LISTs and writes, the Lease's renewals apart): the larger of the two counts is
  what a resync with nothing changed costs; one more node joining the pool -> its three slots extracted (PVCs Bound,
  Jobs Complete); removal: `kubectl delete` -> the resource and every PVC, PV and Job of it gone;
- playbook: bench/scale.py's measurement of the same cache at the same size (cache_reconcile through the `ansible`
  CLI: cold, no-op, removal), which also times `kubectl apply --server-side` of the PVCs, PVs and Jobs the planner
  renders for it (a download PVC, PV and Job per node and namespace, a serving PVC and PV per namespace: the object set
  upstream GKM creates for such a cache): `kubectl_gkm_objects_s`.
The simulator runs without the Job controller (make bench-controller starts it so), as for bench/scale.py: the
benchmark writes each Job's Complete condition, as the Job controller would once the pod succeeded, for both paths,
so the figures measure the collection and not thousands of simulated pod lifecycles. Figures are medians of the
rounds; the 1-minute load average is recorded before each size and at the end, and results are refused when it is
above --max-load at the start (unless --allow-busy, which marks them busy).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, ".cache", "collections"), ROOT]

import argparse  # noqa: E402
import concurrent.futures  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

from ansible_collections.gkm.cluster.plugins.module_utils.common import kube  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_auth  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import SCRUB_LABEL  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (  # noqa: E402
    job_condition,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import resource as cache_cr  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes  # noqa: E402
from bench import scale  # noqa: E402
from bench.operator_mode import ProcessTree, Window, poll  # noqa: E402
from tests.helpers import kcache_images  # noqa: E402
from tests.helpers.controller_process import Controller  # noqa: E402
from tests.helpers.modules import AUDIT_LOG, CONTROL_PLANE_AGENTS, WRITE_VERBS, audit_events  # noqa: E402

RESULTS = os.path.join(ROOT, "bench", "results", "controller.json")
LEASE_NAMESPACE = "bench-controller"
# The benchmark's own requests (heartbeats, Job completions, polls) carry this agent, so the audit log tells them
# from the controller's.
BENCH_AGENT = "gkm-bench-controller"
# The API server's own loops (its endpoints, its services) are audited too.
NOT_THE_CONTROLLER = (*CONTROL_PLANE_AGENTS, "kube-apiserver/", BENCH_AGENT)
DEFAULT_MAX_LOAD = 1.5
# The controller's log line for each reconcile it starts, of either kind (controller/gkm_controller/reconciles.py).
RECONCILE_LINE = r"gkm_controller\.reconciles: reconcile "
# And its line when one ends: how long it took.
RECONCILED_LINE = r"gkm_controller\.reconciles: reconciled \S+ \S+ in ([\d.]+) s"
JOBS_PATH = "/apis/batch/v1/jobs"
# The Job completer's watches end this often, so that it stops within as long once asked to.
COMPLETE_WATCH_SECONDS = 2
COMPLETE_WRITERS = 8


def started_all_ended(controller):
    """True when every reconcile the controller logged as started has logged its end."""
    return len(controller.lines(RECONCILE_LINE)) == len(controller.lines(RECONCILED_LINE))


def log(message):
    print("bench-controller: %s" % message, file=sys.stderr, flush=True)


class Repeating:
    """step() every `interval` seconds in a thread of its own, from entering the context until leaving it."""

    interval = 1.0

    def __init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def step(self):
        raise NotImplementedError

    def _run(self):
        while True:
            started = time.monotonic()
            self.step()
            if self._stop.wait(max(0.0, self.interval - (time.monotonic() - started))):
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_exc):
        self._stop.set()
        self._thread.join()


class JobCompleter:
    """Completes the cache's extraction Jobs and every scrub Job as they appear: the Job controller's part once a pod
    succeeded (the simulator runs without it). Like the Job controller, it reads them from a watch: a LIST of the
    cache's Jobs every half second, as it did before, cost the API server more with every Job completed (6,000 at
    2,000 nodes, listed through the cold run and the removal of the controller being measured)."""

    def __init__(self, raw, cache):
        self.raw = raw
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._complete, args=(selector,), daemon=True)
                         for selector in ("gkm.io/cache=%s" % cache, "%s=true" % SCRUB_LABEL)]
        self._writers = concurrent.futures.ThreadPoolExecutor(COMPLETE_WRITERS)

    def _complete_soon(self, job):
        if scale.unfinished(job):
            self._writers.submit(scale.complete_job, self.raw, job["metadata"]["namespace"], job["metadata"]["name"])

    def _listed(self, selector):
        """Complete the selected Jobs listed now; the listing's resourceVersion, to watch from."""
        version = None
        for page in self.raw.pages(JOBS_PATH, [("labelSelector", selector)]):
            version = page["metadata"]["resourceVersion"]
            for job in page.get("items") or []:
                self._complete_soon(job)
        return version

    def _complete(self, selector):
        version = None
        while not self._stop.is_set():
            try:
                version = version or self._listed(selector)
                for event_type, job in self.raw.watch(JOBS_PATH, version, selector,
                                                      timeout_seconds=COMPLETE_WATCH_SECONDS):
                    version = job["metadata"]["resourceVersion"]
                    if event_type in ("ADDED", "MODIFIED"):
                        self._complete_soon(job)
            except kube.KubeError as error:  # 410 Gone, a dropped watch: list again
                log("job completer (%s): %s; listing again" % (selector, error))
                version = None

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc):
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._writers.shutdown()


class Heartbeats(Repeating):
    """A heartbeat-only status update (the Ready condition's heartbeat time) of every pool node once per period,
    spread over it second by second; counts what it sent."""

    def __init__(self, raw, nodes, period):
        super().__init__()
        self.raw, self.nodes, self.period = raw, nodes, period
        self.sent = self.second = 0

    def _beat(self, node):
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        # Conditions merge by type: the Ready condition keeps its status, reason and message, as a kubelet's do.
        self.raw.request("PATCH", "/api/v1/nodes/%s/status" % node, body={"status": {"conditions": [
            {"type": "Ready", "lastHeartbeatTime": now}]}}, content_type="application/strategic-merge-patch+json")

    def step(self):
        due = self.nodes[self.second % self.period::self.period]
        self.raw.map(self._beat, due)
        self.sent += len(due)
        self.second += 1


def controller_requests(offset):
    """{"verb resource": count} of the requests in the audit log past offset that neither the control plane, kwok nor
    this benchmark sent: the controller's, when it is the only other client."""
    counts = {}
    for event in audit_events(offset):
        if event.get("stage") not in (None, "ResponseComplete") or event.get("userAgent", "").startswith(
                NOT_THE_CONTROLLER):
            continue
        key = "%s %s" % (event.get("verb"), (event.get("objectRef") or {}).get("resource"))
        counts[key] = counts.get(key, 0) + 1
    return counts


def count(requests, verbs, leases):
    """How many of the requests have one of the verbs, on Leases (leases=True) or on anything else."""
    return sum(number for key, number in requests.items()
               if key.split()[0] in verbs and (key.split()[1] == "leases") == leases)


class ControllerPath:
    def __init__(self, raw, kubeconfig, tools_image, image_ref, workdir, timeout, resync_seconds):
        self.raw, self.kubeconfig, self.tools_image = raw, kubeconfig, tools_image
        self.image_ref, self.workdir, self.timeout, self.resync_seconds = image_ref, workdir, timeout, resync_seconds

    def start(self):
        options = {"registry_plain_http": True, "concurrency": scale.OPTIONS["concurrency"],
                   "system_namespace_jobs": scale.OPTIONS["system_namespace_jobs"], "wait_timeout": self.timeout}
        controller = Controller(self.kubeconfig, os.path.join(self.workdir, "controller-%s.log" % uuid.uuid4().hex[:6]),
                                LEASE_NAMESPACE, self.tools_image, options, verbose=False,
                                resync_seconds=self.resync_seconds)
        return controller, controller.become_ready(self.timeout)

    def extracted(self, name, nodes):
        status, body = self.raw.request("GET", cache_cr.resource_path("ClusterGKMCache", name))
        state = (body.get("status") or {}) if status == 200 else {}
        return state.get("phase") == "Extracted" and state.get("nodeCnt") == nodes

    def node_extracted(self, name, node):
        selector = "gkm.io/cache=%s,gkm.io/node=%s" % (name, node)
        pvcs = self.raw.list("PersistentVolumeClaim", label_selector=selector)
        jobs = self.raw.list("Job", label_selector=selector)
        return (len(pvcs) == len(jobs) == len(scale.NAMESPACES)
                and all((pvc.get("status") or {}).get("phase") == "Bound" for pvc in pvcs)
                and all(job_condition(job, "Complete") for job in jobs))

    def idle(self, controller, nodes, seconds, heartbeat_period):
        offset = os.path.getsize(AUDIT_LOG)
        reconciles, resynced = len(controller.lines(RECONCILE_LINE)), len(controller.resyncs())
        with Heartbeats(self.raw, nodes, heartbeat_period) as heartbeats, \
                Window(ProcessTree(controller.process.pid)) as window:
            time.sleep(seconds)
            # A resync still running when the time is up is part of the idle cost: the window ends with it (with
            # the period as long as the window, one started just before its end was otherwise cut off).
            poll("the reconciles under way at the end of the idle window", lambda: started_all_ended(controller),
                 self.timeout)
        figures, requests = window.figures(), controller_requests(offset)
        resyncs = controller.resyncs()[resynced:]
        audited_lists, audited_writes = count(requests, ("list",), leases=False), count(
            requests, WRITE_VERBS, leases=False)
        return {"idle_cpu_cores": figures["cpu_cores"], "idle_rss_bytes": figures["engine_rss_bytes"],
                "idle_rss_peak_bytes": figures["tree_rss_peak_bytes"], "idle_window_s": figures["window_s"],
                "heartbeats_sent": heartbeats.sent,
                "heartbeats_per_s": round(heartbeats.sent / figures["window_s"], 1),
                # Both counts, the larger taken: the resyncs' own (the controller's client) and the audit log's.
                "resync_list_requests": max([audited_lists] + [resync["list_requests"] for resync in resyncs]),
                # The Lease's renewals are the one write an idle active replica must make (section 7).
                "resync_writes": max([audited_writes] + [resync["writes"] for resync in resyncs]),
                "idle_resyncs": resyncs,
                "idle_audited_list_requests": audited_lists, "idle_audited_writes": audited_writes,
                "idle_lease_writes": count(requests, WRITE_VERBS, leases=True),
                "idle_requests": requests,
                # Every resync runs each cache's reconcile (a log line each); nothing else should.
                "idle_reconciles": len(controller.lines(RECONCILE_LINE)) - reconciles - sum(
                    resync["caches"] for resync in resyncs)}

    def measure(self, nodes, pool, idle_seconds, settle_seconds, heartbeat_period):
        name = "bench-ctl-%s" % uuid.uuid4().hex[:5]
        controller, ready_s = self.start()
        try:
            time.sleep(settle_seconds)
            figures = {"start_to_ready_s": round(ready_s, 2)}
            with JobCompleter(self.raw, name), Window(ProcessTree(controller.process.pid)) as window:
                started, ended = time.monotonic(), len(controller.lines(RECONCILED_LINE))
                self.raw.request("POST", cache_cr.resource_path("ClusterGKMCache"),
                                 body=scale.cache_manifest(name, self.image_ref))
                poll("%s Extracted on %d nodes" % (name, nodes), lambda: self.extracted(name, nodes), self.timeout)
                figures["cold_s"] = round(time.monotonic() - started, 2)
                # Where the cold time went: each reconcile that ended meanwhile, with its phases' seconds. The run
                # that wrote Extracted logs its end after that status, which the poll may have seen first.
                poll("the end of %s's cold reconcile" % name,
                     lambda: len(controller.lines(RECONCILED_LINE)) > ended, self.timeout)
                figures["cold_reconciles"] = [line.split("reconciles: ", 1)[1]
                                              for line in controller.lines(RECONCILED_LINE)[ended:]]
            figures["cold_cpu_s"] = window.figures()["cpu_s"]
            log("%d nodes, controller cold: %.1f s; its reconciles: %s" % (nodes, figures["cold_s"],
                                                                            "; ".join(figures["cold_reconciles"])))
            # The cold run's follow-ups (a reconcile that ended before the cache settled runs again) hold the cache's
            # lock, which a resync waits for: the idle window starts once every reconcile started has ended.
            cold_ended = len(controller.lines(RECONCILED_LINE))
            time.sleep(settle_seconds)
            poll("the reconciles after %s's cold run ended" % name, lambda: started_all_ended(controller),
                 self.timeout)
            figures["follow_reconciles"] = [line.split("reconciles: ", 1)[1]
                                            for line in controller.lines(RECONCILED_LINE)[cold_ended:]]
            figures.update(self.idle(controller, pool, idle_seconds, heartbeat_period))
            if not figures["idle_resyncs"]:
                raise AssertionError("no resync ran in the idle window (--resync-seconds %s); the controller's log:\n%s"
                                     % (self.resync_seconds, controller.log()[-6000:]))
            log("%d nodes, controller idle: %s" % (nodes, figures))
            with JobCompleter(self.raw, name):
                joined = gpu_nodes.render_nodes([{"name": "%s-join-%s" % (scale.NODE_GROUP, uuid.uuid4().hex[:4]),
                                                  "count": 1, "vendor": "amd",
                                                  "labels": {scale.BENCH_LABEL: scale.NODE_GROUP}}])[0]
                started, ended = time.monotonic(), len(controller.lines(RECONCILED_LINE))
                self.raw.request("POST", "/api/v1/nodes", body=joined)
                node = joined["metadata"]["name"]
                poll("%s extracted on %s" % (name, node), lambda: self.node_extracted(name, node), self.timeout)
                figures["node_join_to_extracted_s"] = round(time.monotonic() - started, 2)
                # Where the join's time went: the reconciles that ended meanwhile, each one's seconds.
                figures["join_reconciles_s"] = [float(re.search(RECONCILED_LINE, line).group(1))
                                                for line in controller.lines(RECONCILED_LINE)[ended:]]
                log("%d nodes, controller join: %.1f s" % (nodes, figures["node_join_to_extracted_s"]))
                started = time.monotonic()
                subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, "delete", "clustergkmcache", name,
                                "--wait=false"], check=True, stdout=subprocess.DEVNULL)
                poll("%s gone" % name, lambda: self.raw.request(
                    "GET", cache_cr.resource_path("ClusterGKMCache", name))[0] == 404, self.timeout)
                scale.wait_gone(self.raw, name, self.timeout)
                figures["removal_s"] = round(time.monotonic() - started, 2)
            self.raw.delete("Node", node)
        except BaseException:
            controller.stop()
            self.clean_up(name)
            raise
        controller.stop()
        log("%d nodes, controller: %s" % (nodes, figures))
        return figures

    def clean_up(self, name):
        """After a failed measurement, with the controller stopped: the cache's objects removed by the playbook path's
        reconcile, its finalizer dropped and the resource deleted. Left behind, a run's objects are listed by the
        next run's controller at its start and measured as if they were that run's."""
        path = cache_cr.resource_path("ClusterGKMCache", name)
        if self.raw.request("GET", path)[0] == 404:
            return
        log("cleaning up %s after the failed measurement" % name)
        scale.remove(self.kubeconfig, self.raw, name, self.timeout)
        self.raw.request("PATCH", path, body={"metadata": {"finalizers": None}}, content_type=kube.MERGE_PATCH)
        self.raw.request("DELETE", path)


def median(rounds, key):
    values = [sample[key] for sample in rounds if sample.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def point(nodes, controller_rounds, playbook_rounds, load_before, load_after):
    """One size's figures: the fields issue 33 asks for first, then the playbook path's and the rounds."""
    cold, kubectl = median(controller_rounds, "cold_s"), median(playbook_rounds, "kubectl_ssa_s")
    if not controller_rounds:
        return dict(nodes=nodes, playbook_rounds=playbook_rounds, load_average_before=load_before,
                    load_average_after=load_after)
    return {
        "nodes": nodes,
        "namespaces": len(scale.NAMESPACES),
        "node_join_to_extracted_s": median(controller_rounds, "node_join_to_extracted_s"),
        "idle_cpu_cores": median(controller_rounds, "idle_cpu_cores"),
        "idle_rss_bytes": median(controller_rounds, "idle_rss_bytes"),
        "resync_list_requests": max(sample["resync_list_requests"] for sample in controller_rounds),
        "resync_writes": max(sample["resync_writes"] for sample in controller_rounds),
        "cold_s": cold,
        "kubectl_gkm_objects_s": kubectl,
        "ratio_cold_vs_kubectl": round(cold / kubectl, 3) if cold and kubectl else None,
        "removal_s": median(controller_rounds, "removal_s"),
        "start_to_ready_s": median(controller_rounds, "start_to_ready_s"),
        "heartbeats_per_s": median(controller_rounds, "heartbeats_per_s"),
        "playbook_cold_s": median(playbook_rounds, "cold_s"),
        "playbook_noop_s": median(playbook_rounds, "noop_s"),
        "playbook_removal_s": median(playbook_rounds, "removal_s"),
        "resync_s": max(resync["seconds"] for sample in controller_rounds for resync in sample["idle_resyncs"]),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "controller_rounds": controller_rounds,
        "playbook_rounds": playbook_rounds,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,2000,5000", help="numbers of kwok GPU nodes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per size, each path once per round")
    parser.add_argument("--idle-seconds", type=int, default=60)
    parser.add_argument("--settle-seconds", type=int, default=10,
                        help="wait after the controller is ready, and after the cache is Extracted")
    parser.add_argument("--resync-seconds", type=int, default=None,
                        help="the controller's resync period (default: the idle window's length, so one resync or "
                             "two fall in it; the controller's own default is 300 s)")
    parser.add_argument("--heartbeat-seconds", type=int, default=10,
                        help="each pool node's heartbeat period while the controller idles")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds any one wait may take")
    parser.add_argument("--max-load", type=float, default=DEFAULT_MAX_LOAD)
    parser.add_argument("--allow-busy", action="store_true", help="write results on a busy machine, marked busy")
    parser.add_argument("--keep-nodes", action="store_true", help="leave the bench nodes for the next run")
    parser.add_argument("--paths", default="controller,playbook",
                        help="the contenders, comma-separated (one alone: a quick look, not a comparison)")
    parser.add_argument("--output", default=RESULTS)
    parser.add_argument("--add", action="store_true",
                        help="keep the points of other sizes already in --output (each point has its own loads)")
    args = parser.parse_args()
    args.paths = args.paths.split(",")
    load_start = os.getloadavg()
    if load_start[0] > args.max_load and not args.allow_busy:
        sys.exit("load average %.2f is above %.2f: the figures would measure the other load. Wait for a quiet "
                 "machine or pass --allow-busy (results are then marked busy)" % (load_start[0], args.max_load))
    state = scale.state()
    if state.get("job_controller", True) or not state.get("audit_reads"):
        sys.exit("bench-controller: start the simulator without the Job controller and with reads audited "
                 "(make sim-down; GKM_SIM_JOB_CONTROLLER=0 GKM_SIM_AUDIT_READS=1 make sim-up), or run "
                 "make bench-controller")
    kubeconfig = state["kubeconfig"]
    client = api_client_from_auth({"kubeconfig": kubeconfig})
    client.user_agent = BENCH_AGENT
    raw = kube.Kube(client, workers=16)
    scale.install_crds(raw)
    for namespace in [*scale.NAMESPACES, LEASE_NAMESPACE]:
        raw.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    image = kcache_images.build_image(state["registry"], "bench/controller", "v1",
                                      kcache_images.CacheSpec(backend="hip"))
    sizes = sorted(int(size) for size in args.sizes.split(","))
    kept = points_kept(args.output, sizes) if args.add else []
    points = []
    with tempfile.TemporaryDirectory(prefix="gkm-bench-controller-") as workdir:
        # kwok runs no containers: any tools image reference does, as long as both paths give the same one.
        controller_path = ControllerPath(raw, kubeconfig, scale.OPTIONS["extract_image"], image.ref, workdir,
                                         args.timeout, args.resync_seconds or args.idle_seconds)
        try:
            for nodes in sizes:
                scale.resize_nodes(raw, nodes)
                pool = [node["metadata"]["name"] for node in raw.list(
                    "Node", label_selector="%s=%s" % (scale.BENCH_LABEL, scale.NODE_GROUP), metadata_only=True)]
                load_before = [round(x, 2) for x in os.getloadavg()]
                controller_rounds, playbook_rounds = [], []
                for round_number in range(args.rounds):
                    for path in args.paths[::1 if round_number % 2 == 0 else -1]:
                        if path == "controller":
                            controller_rounds.append(controller_path.measure(
                                nodes, pool, args.idle_seconds, args.settle_seconds, args.heartbeat_seconds))
                        else:
                            playbook_rounds.append(scale.measure(kubeconfig, raw, image.ref, nodes, 1))
                points.append(point(nodes, controller_rounds, playbook_rounds, load_before,
                                    [round(x, 2) for x in os.getloadavg()]))
                # Each size as it is measured.
                write_results(sorted(kept + points, key=lambda found: found["nodes"]), args, load_start)
        finally:
            if not args.keep_nodes:
                scale.resize_nodes(raw, 0)
    with open(args.output) as handle:
        print(handle.read())


def points_kept(path, sizes):
    """The points of an earlier run's results at `path` for sizes this run does not measure."""
    try:
        with open(path) as handle:
            return [found for found in json.load(handle)["points"] if found["nodes"] not in sizes]
    except FileNotFoundError:
        return []


def write_results(points, args, load_start):
    load_end = os.getloadavg()
    # The load at the end is the benchmark's own (the API server, the controller, the heartbeats): recorded, not judged.
    busy = load_start[0] > args.max_load
    results = {
        "points": points,
        "method": {
            "statistic": "median of rounds; resync_list_requests and resync_writes the largest of the rounds",
            "rounds": args.rounds, "order": "controller then playbook in even rounds, playbook then controller in "
                                            "odd ones; each path in processes of its own",
            "follow": "follow_reconciles: the reconciles that ended after the cold figure and before the idle "
                      "window, which starts once every reconcile started has ended",
            "idle": "the controller beside the converged cache, %d s from %d s after it is Extracted and its "
                    "follow-up reconciles ended, every pool node "
                    "patched with a heartbeat-only status every %d s; CPU and RSS of its process from /proc every "
                    "second, the resyncs in the window included (one every %d s, the controller's default 300); "
                    "requests from the audit log, by user agent" % (
                        args.idle_seconds, args.settle_seconds, args.heartbeat_seconds,
                        args.resync_seconds or args.idle_seconds),
            "resync": "resync_list_requests and resync_writes: the larger of the resyncs' own counts in the idle "
                      "window (logged by the controller, counted on its client) and the audit log's LISTs and "
                      "writes by the controller in that window, the Lease's renewals apart",
            "cold": "ClusterGKMCache created -> status phase Extracted with nodeCnt = the pool (polled every 0.25 s)",
            "join": "one kwok GPU node created in the pool -> its PVCs in the 3 namespaces Bound and Jobs Complete",
            "removal": "kubectl delete of the resource -> it and every PVC, PV and Job of it gone",
            "playbook": "bench/scale.py measure(): cache_reconcile through the ansible CLI; kubectl_gkm_objects_s is "
                        "its kubectl apply --server-side of the planner's PVCs, PVs and Jobs for the cache",
            "jobs": "the simulator ran without the Job controller; the benchmark completed the Jobs for both paths",
        },
        "cpus": os.cpu_count(),
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in load_end],
        "max_load": args.max_load,
        "busy": busy,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as handle:
        json.dump(results, handle, indent=2)
        handle.write("\n")


if __name__ == "__main__":
    main()
