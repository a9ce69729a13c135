"""Webhook benchmark -> bench/results/webhook.json.

1. Loopback: AdmissionReview load over HTTPS keep-alive against one server process, at 500, 1000 and
   2000 requests/s and at maximum, side by side with the floor: a minimal HTTPS endpoint on the same
   stack (aiohttp, same TLS setup) that returns a fixed response. The load generator is a small Go
   program (bench/loadgen): open-loop at fixed rates with latency counted from each request's due
   time, so queueing in the server is charged to it. Each point is run REPEATS times; medians are kept.
   The server's view holds a cache distributed to 500 nodes, and every request is answered with a patch.
2. The API server's view: 500 simulated nodes get a PVC each, a DaemonSet labelled for mutation is
   admitted on all of them through the webhook, and apiserver_admission_webhook_admission_duration_seconds
   is read from the API server's /metrics before and after; then the same DaemonSet once more through
   the floor (registered as its own webhook, allowing every pod), to show what the API server's
   figure is on this machine for a webhook that does nothing.

Needs the simulated cluster (make sim-up). The 500 benchmark nodes carry their own taint, so no other
workload lands on them, and they are removed at the end.
"""

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".cache", "collections"))
sys.path.insert(0, ROOT)

RESULTS = os.path.join(ROOT, "bench", "results", "webhook.json")
LOADGEN_SOURCE = os.path.join(ROOT, "bench", "loadgen")
LOADGEN = os.path.join(ROOT, ".cache", "bench", "loadgen")
RATES = (500, 1000, 2000)
CACHE = "bench-cache"
BENCH_LABEL = "gkm.io/bench"
BENCH_TAINT = {"key": BENCH_LABEL, "value": "webhook", "effect": "NoSchedule"}
WEBHOOK_METRIC = "apiserver_admission_webhook_admission_duration_seconds"


def log(message):
    print("bench-webhook: %s" % message, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- the floor


def serve_floor(port, cert_file, key_file):
    """The floor: the same stack answering every POST to /mutate with one fixed AdmissionReview.

    The API server checks that a response carries its request's uid, so for the API server's view
    the floor answers /allow instead: it decodes the review, and allows it under the request's uid.
    """
    import ssl

    from aiohttp import web

    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "response": {"uid": "fixed", "allowed": True}}).encode()

    async def fixed(request):
        await request.read()
        return web.Response(body=body, content_type="application/json")

    async def ready(_request):
        return web.Response(text="ok\n")

    async def allow(request):
        uid = json.loads(await request.read())["request"]["uid"]
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                  "response": {"uid": uid, "allowed": True}})

    app = web.Application()
    app.router.add_post("/mutate", fixed)
    app.router.add_post("/allow", allow)
    # webhook_install waits for /readyz before it registers a url endpoint.
    app.router.add_get("/readyz", ready)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=context, access_log=None, print=None)


# ----------------------------------------------------------------------------- helpers


def build_loadgen():
    subprocess.run(["go", "build", "-o", LOADGEN, "."], cwd=LOADGEN_SOURCE, check=True,
                   env=dict(os.environ, CGO_ENABLED="0"))


def run_load(url, ca_file, body_file, rate, seconds, connections):
    output = subprocess.run(
        [LOADGEN, "-url", url, "-cacert", ca_file, "-body", body_file, "-rate", str(rate),
         "-duration", "%ds" % seconds, "-warmup", "2s", "-connections", str(connections)],
        capture_output=True, text=True, check=True).stdout
    return json.loads(output)


def post_review(url, ca, body_file):
    """One review through the real server, to make sure the benchmark measures patches."""
    import ssl
    import urllib.request

    with open(body_file, "rb") as handle:
        request = urllib.request.Request(url, data=handle.read(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=ssl.create_default_context(cadata=ca), timeout=10) as response:
        return json.loads(response.read())


def port_open(port):
    import socket

    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def cpu_seconds(pid):
    """User plus system CPU time a process has used so far."""
    with open("/proc/%d/stat" % pid) as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def histogram_quantile(quantile, buckets):
    """Prometheus-style quantile from cumulative (upper bound, count) pairs, linear within a bucket."""
    buckets = sorted(buckets)
    total = buckets[-1][1]
    if total == 0:
        return None
    rank = quantile * total
    previous_bound, previous_count = 0.0, 0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return previous_bound
            share = (rank - previous_count) / (count - previous_count) if count > previous_count else 0
            return previous_bound + (bound - previous_bound) * share
        previous_bound, previous_count = bound, count
    return previous_bound


def metric_buckets(text, metric, label_filter):
    """Cumulative buckets of a histogram summed over the label sets that contain label_filter."""
    sums = {}
    pattern = re.compile(r'^%s_bucket\{([^}]*)\} (\S+)$' % re.escape(metric), re.MULTILINE)
    for match in pattern.finditer(text):
        labels = match.group(1)
        if label_filter not in labels:
            continue
        bound = re.search(r'le="([^"]+)"', labels).group(1)
        bound = float("inf") if bound == "+Inf" else float(bound)
        sums[bound] = sums.get(bound, 0.0) + float(match.group(2))
    return sums


def bucket_delta(after, before):
    return [(bound, after[bound] - before.get(bound, 0.0)) for bound in after]


def median_of(runs, key):
    return statistics.median(run[key] for run in runs)


# ----------------------------------------------------------------------------- the benchmark


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    floor = sub.add_parser("floor")
    floor.add_argument("port", type=int)
    floor.add_argument("cert_file")
    floor.add_argument("key_file")
    parser.add_argument("--seconds", type=int, default=8, help="measured seconds per point")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=500)
    args = parser.parse_args()
    if args.command == "floor":
        serve_floor(args.port, args.cert_file, args.key_file)
        return
    run_benchmark(args)


def run_benchmark(args):
    import importlib.util

    from kubernetes import client, config

    from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
    from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes
    from tests.helpers.webhook import (
        CertificateFiles,
        LocalWebhookServer,
        free_port,
        install,
        node_pvc,
        wait_until,
    )

    spec = importlib.util.spec_from_file_location("gkm_sim", os.path.join(ROOT, "tools", "sim-cluster", "sim.py"))
    sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim)
    kubeconfig = sim.load_state().get("kubeconfig") or sim.KUBECONFIG
    api = config.new_client_from_config(config_file=kubeconfig)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    raw = Kube(api)  # plain JSON: the typed client would insist on node status fields kwok fills in

    build_loadgen()
    work = tempfile.mkdtemp(prefix="gkm-bench-webhook-")
    certs = CertificateFiles(work)
    ca_file = os.path.join(work, "ca.pem")
    with open(ca_file, "w") as handle:
        handle.write(certs.ca)
    suffix = uuid.uuid4().hex[:5]
    namespace, name, webhook_namespace = "bench-wh-" + suffix, "bench-wh-" + suffix, "gkm-bench-" + suffix
    group = {"name": "gkm-bench-wh", "count": args.nodes, "vendor": "none", "labels": {BENCH_LABEL: "webhook"},
             "taints": [BENCH_TAINT]}
    nodes = gpu_nodes.render_nodes([group])
    node_names = [node["metadata"]["name"] for node in nodes]
    server = LocalWebhookServer(kubeconfig, certs.cert_file, certs.key_file)
    floor_port = free_port()
    floor_process = None
    results = {"load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    try:
        log("creating %d nodes and one PVC per node" % len(nodes))
        for error in raw.map(lambda node: raw.request("POST", "/api/v1/nodes", body=node), nodes):
            if isinstance(error, Exception):
                raise error
        core.create_namespace({"metadata": {"name": namespace}})
        for node in node_names:
            core.create_namespaced_persistent_volume_claim(namespace, node_pvc(namespace, CACHE, node))
        server.start().wait_ready(certs.ca)
        wait_until("the view to hold the PVCs", lambda: server.metric(
            certs.ca, 'gkm_webhook_view_objects{kind="pvcs"}') >= len(node_names), timeout=120)
        floor_process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "floor", str(floor_port),
                                          certs.cert_file, certs.key_file])
        body_file = os.path.join(work, "review.json")
        with open(body_file, "w") as handle:
            json.dump(daemonset_pod_review(namespace, node_names[len(node_names) // 2]), handle)
        check = post_review(server.url, certs.ca, body_file)
        assert check["response"].get("patchType") == "JSONPatch", check
        wait_until("the floor server to listen", lambda: port_open(floor_port), timeout=30)
        results["loopback"] = loopback(args, (server.url, server.process.pid),
                                       ("https://127.0.0.1:%d/mutate" % floor_port, floor_process.pid),
                                       ca_file, body_file)
        admission = ApiserverAdmission(api, core, apps, certs, kubeconfig, namespace, node_names)
        log("admitting a DaemonSet of %d pods through the API server and our webhook" % len(node_names))
        results["apiserver"] = admission.run(name, webhook_namespace, server.url, install, wait_until, lambda: (
            metric_buckets(server.get("/metrics", certs.ca)[1], "gkm_webhook_request_duration_seconds", "")))
        results["apiserver"].update(admission.patched_claims(node_pvc, CACHE))
        log("the same through the API server and the floor (allows, no patch)")
        results["apiserver_floor"] = admission.run(
            name + "-floor", webhook_namespace, "https://127.0.0.1:%d/allow" % floor_port, install, wait_until)
    finally:
        # Every step runs even if an earlier one fails: nothing of the benchmark may outlive it.
        for webhook_name in (name, name + "-floor"):
            with contextlib.suppress(Exception):
                install(kubeconfig, name=webhook_name, namespace=webhook_namespace, state="absent")
        server.stop()
        if floor_process:
            floor_process.terminate()
            floor_process.wait()
        with contextlib.suppress(client.exceptions.ApiException):
            core.delete_namespace(namespace)
        raw.map(lambda node: raw.delete("Node", node), node_names)
    write_results(results, args)


def daemonset_pod_review(namespace, node):
    """An AdmissionReview like the one the API server sends for a DaemonSet pod (about 3 KB)."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "cache-user-", "namespace": namespace,
                     "labels": {"app": "cache-user", "gkm.io/pvc-mutation": "true",
                                "controller-revision-hash": "6b9f7d5c8", "pod-template-generation": "1"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "cache-user",
                                          "uid": str(uuid.uuid4()), "controller": True, "blockOwnerDeletion": True}]},
        "spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
            "containers": [{"name": "app", "image": "quay.io/example/vector-add:latest",
                            "command": ["python", "/app/run.py"], "env": [{"name": "TRITON_CACHE_DIR", "value": "/c"}],
                            "volumeMounts": [{"name": "kernel-cache", "mountPath": "/c", "readOnly": True}],
                            "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "Always"}],
            "volumes": [
                {"name": "kernel-cache", "persistentVolumeClaim": {"claimName": CACHE}},
                {"name": "kube-api-access", "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}},
            ],
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}],
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
            "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30,
        },
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace, "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:daemon-set-controller",
                     "groups": ["system:serviceaccounts", "system:authenticated"]},
        "object": pod, "oldObject": None, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}


def loopback(args, ours, floor, ca_file, body_file, points=None):
    """Per (rate, connections) point, ours and the floor: throughput, latency and the server process's CPU time per
    request; by default RATES on 8 connections and the maximum (rate 0) on 16.

    CPU time per request does not depend on how busy the shared machine is; latencies do.
    """
    table = []
    points = points or [(rate, 8) for rate in RATES] + [(0, 16)]
    for rate, connections in points:
        row = {"target_rps": rate or "max", "connections": connections}
        for label, (url, pid) in (("ours", ours), ("floor", floor)):
            runs = []
            for _repeat in range(args.repeats):
                cpu_before = cpu_seconds(pid)
                run = run_load(url, ca_file, body_file, rate, args.seconds, connections)
                # The load generator's 2 s warm-up is included in the CPU time but not in "sent".
                run["cpu_us_per_request"] = (cpu_seconds(pid) - cpu_before) * 1e6 / max(
                    1, run["sent"] * (args.seconds + 2) / args.seconds)
                runs.append(run)
            failed = sum(run["failed"] for run in runs)
            row[label] = {
                "achieved_rps": round(median_of(runs, "achieved_rps"), 1),
                "p50_ms": median_of(runs, "p50_ms"),
                "p99_ms": median_of(runs, "p99_ms"),
                "max_ms": median_of(runs, "max_ms"),
                "cpu_us_per_request": round(median_of(runs, "cpu_us_per_request"), 1),
                "failed": failed,
            }
            log("%s at %s rps: %s" % (label, row["target_rps"], row[label]))
        table.append(row)
    return table


class ApiserverAdmission:
    """A DaemonSet of one pod per benchmark node admitted through a registered webhook, timed by the API server."""

    DAEMONSET = "cache-user"

    def __init__(self, api, core, apps, certs, kubeconfig, namespace, node_names):
        self.api, self.core, self.apps = api, core, apps
        self.certs, self.kubeconfig = certs, kubeconfig
        self.namespace, self.node_names = namespace, node_names
        self.pods = []
        self.server_window = None

    def _apiserver_metrics(self):
        method, url, headers, body, _timeout = self.api.param_serialize(
            method="GET", resource_path="/metrics", auth_settings=["BearerToken"])
        return self.api.call_api(method, url, header_params=headers, body=body).read().decode()

    def _pods(self):
        return self.core.list_namespaced_pod(self.namespace, label_selector="app=%s" % self.DAEMONSET).items

    def run(self, name, webhook_namespace, url, install, wait_until, server_buckets=None):
        """API-server-observed admission latency; with server_buckets, the server's own view too."""
        install(self.kubeconfig, name=name, namespace=webhook_namespace, url=url, ca_bundle=self.certs.ca)
        # Only this install's webhook: other installs on the shared cluster have other names.
        webhook_filter = 'name="%s.%s.pvc-mutation.gkm.io"' % (name, webhook_namespace)
        before = metric_buckets(self._apiserver_metrics(), WEBHOOK_METRIC, webhook_filter)
        server_before = server_buckets() if server_buckets else None
        labels = {"app": self.DAEMONSET}
        started = time.monotonic()
        self.apps.create_namespaced_daemon_set(self.namespace, {
            "metadata": {"name": self.DAEMONSET},
            "spec": {"selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": dict(labels, **{"gkm.io/pvc-mutation": "true"})},
                "spec": {"nodeSelector": {BENCH_LABEL: "webhook"},
                         "tolerations": [dict(BENCH_TAINT, operator="Equal")],
                         "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
                         "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": CACHE}}]}}}})
        def all_created():
            pods = self._pods()
            return pods if len(pods) >= len(self.node_names) else None

        self.pods = wait_until("%d DaemonSet pods" % len(self.node_names), all_created, timeout=600, interval=1)
        elapsed = time.monotonic() - started
        delta = bucket_delta(metric_buckets(self._apiserver_metrics(), WEBHOOK_METRIC, webhook_filter), before)
        measured = {}
        if server_buckets:
            server_delta = bucket_delta(server_buckets(), server_before)
            measured = {"server_side_p50_ms": round(histogram_quantile(0.50, server_delta) * 1000, 2),
                        "server_side_p99_ms": round(histogram_quantile(0.99, server_delta) * 1000, 2)}
        # The next run starts on a quiet cluster: this DaemonSet, its pods and its webhook are gone first.
        self.apps.delete_namespaced_daemon_set(self.DAEMONSET, self.namespace)
        install(self.kubeconfig, name=name, namespace=webhook_namespace, state="absent")
        wait_until("the DaemonSet's pods to go", lambda: not self._pods(), timeout=600, interval=1)
        return {
            "pods": len(self.pods),
            "seconds_to_create_all_pods": round(elapsed, 1),
            "admissions_counted": int(max(count for _bound, count in delta)),
            "apiserver_p50_ms": round(histogram_quantile(0.50, delta) * 1000, 2),
            "apiserver_p99_ms": round(histogram_quantile(0.99, delta) * 1000, 2),
            "apiserver_buckets": {("+Inf" if bound == float("inf") else str(bound)): int(count)
                                  for bound, count in sorted(delta)},
            **measured,
        }

    def patched_claims(self, node_pvc, cache):
        """How many pods of the last run did not get their node's PVC."""
        pvc_of = {node: node_pvc(self.namespace, cache, node)["metadata"]["name"] for node in self.node_names}
        wrong = 0
        for pod in self.pods:
            terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
            node = terms.node_selector_terms[0].match_fields[0].values[0]
            wrong += pod.spec.volumes[0].persistent_volume_claim.claim_name != pvc_of[node]
        return {"pods_with_wrong_claim": wrong}


def write_results(results, args):
    table = results["loopback"]
    by_rate = {row["target_rps"]: row for row in table}
    at_1000 = by_rate[1000]["ours"]
    maximum = by_rate["max"]
    output = {
        "p50_ms_at_1000rps": at_1000["p50_ms"],
        "p99_ms_at_1000rps": at_1000["p99_ms"],
        "max_rps": maximum["ours"]["achieved_rps"],
        "floor_max_rps": maximum["floor"]["achieved_rps"],
        "ratio_max_rps_vs_floor": round(maximum["ours"]["achieved_rps"] / maximum["floor"]["achieved_rps"], 3),
        "apiserver_p99_ms": results["apiserver"]["apiserver_p99_ms"],
        "apiserver_floor_p99_ms": results["apiserver_floor"]["apiserver_p99_ms"],
        "ratio_apiserver_p99_vs_floor": round(results["apiserver"]["apiserver_p99_ms"]
                                              / results["apiserver_floor"]["apiserver_p99_ms"], 3),
        "cpu_us_per_request": maximum["ours"]["cpu_us_per_request"],
        "floor_cpu_us_per_request": maximum["floor"]["cpu_us_per_request"],
        "per_rate": table,
        "apiserver": results["apiserver"],
        "apiserver_floor": results["apiserver_floor"],
        "goals": {"p99_ms_at_1000rps": 5, "sustained_rps": 2000, "apiserver_p99_ms": 10},
        "method": load_method(args, results),
    }
    save_results(RESULTS, output, 6)


def load_method(args, results, **details):
    """The method block of a webhook benchmark's results: the load points, the machine and its load averages."""
    return dict({
        "seconds_per_point": args.seconds, "repeats": args.repeats, "statistic": "median of repeats",
        "nodes": args.nodes, "load_generator": "bench/loadgen (Go, open-loop, HTTPS keep-alive)",
        "cpus": os.cpu_count(), "load_average_at_start": results["load_average_at_start"],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "note": "load generator, server, floor and control plane share the same CPUs",
    }, **details)


def save_results(path, output, headline_keys):
    """Write the results as JSON and print their first `headline_keys` entries."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        json.dump(output, handle, indent=2)
        handle.write("\n")
    print(json.dumps({key: output[key] for key in list(output)[:headline_keys]}, indent=2))


if __name__ == "__main__":
    main()
