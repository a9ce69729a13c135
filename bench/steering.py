"""Steering benchmark -> bench/results/steering.json.

1. Loopback: the AdmissionReview of a ReplicaSet's pod that names a cache's serving PVC (no mutation label, so
   steering alone answers it: the merged node affinity as a JSONPatch) at 500 and 1,000 requests/s, side by side
   with the floor (same stack, fixed answer), by bench/webhook.py's load generator and method. The server's view
   holds the benchmark nodes (90% labelled ready at the cache's digest), the GKMCache and its serving PVC.
2. The API server's view: a Deployment with one replica per benchmark node, naming the serving PVC, admitted
   through the registered steering entry; apiserver_admission_webhook_admission_duration_seconds of that entry
   from the API server's /metrics before and after, and where the scheduler put the pods (never on a node not
   ready). Then the unchanged Deployment is applied again: the webhook checks it and changes nothing, so its
   generation must not move.

Needs the simulated cluster (make sim-up). The benchmark nodes carry their own taint and are removed at the end.
"""

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".cache", "collections"))
sys.path.insert(0, ROOT)

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (  # noqa: E402
    readiness_label_key,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (  # noqa: E402
    SERVING_LABEL,
)
from bench import webhook as webhook_bench  # noqa: E402  (the load generator, floor and loopback method)

RESULTS = os.path.join(ROOT, "bench", "results", "steering.json")
CACHE = "bench-steer"
DIGEST = "sha256:" + "5" * 64
READY_SHARE = 0.9
GROUP, VERSION = "gkm.io", "v1alpha1"
DEPLOYMENT = "cache-users"


def pod_review(namespace):
    """The review the API server sends for a ReplicaSet's pod naming the serving PVC (about 2.5 KB)."""
    review = webhook_bench.daemonset_pod_review(namespace, "unused")
    pod = review["request"]["object"]
    del pod["metadata"]["labels"]["gkm.io/pvc-mutation"]
    pod["metadata"]["ownerReferences"][0]["kind"] = "ReplicaSet"
    pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] = CACHE
    # Its own placement (the benchmark nodes), which steering merges with the cache's requirement.
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": webhook_bench.BENCH_LABEL, "operator": "In", "values": ["steering"]}]}]}}}
    review["request"]["userInfo"]["username"] = "system:serviceaccount:kube-system:replicaset-controller"
    return review


def benchmark_nodes(count, ready_key, short_digest):
    from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes

    group = {"name": "gkm-bench-steer", "count": count, "vendor": "amd", "arch": "gfx90a", "gpus": 1,
             "labels": {webhook_bench.BENCH_LABEL: "steering"},
             "taints": [dict(webhook_bench.BENCH_TAINT, value="steering")]}
    nodes = gpu_nodes.render_nodes([group])
    for node in nodes[:int(count * READY_SHARE)]:
        node["metadata"]["labels"][ready_key] = short_digest
    return nodes


def serving_volume(namespace):
    """The serving PVC and a PV bound to it (the scheduler places no pod whose claim is unbound); kwok nodes mount
    nothing, so the PV's hostPath is never used."""
    from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import Slot

    labels = dict(Slot(CACHE, namespace, namespace, "", DIGEST).labels(), **{SERVING_LABEL: "true"})
    pv_name = "gkm-%s" % namespace
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": CACHE, "namespace": namespace, "labels": labels},
           "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": pv_name,
                    "resources": {"requests": {"storage": "1Mi"}}}}
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
          "spec": {"accessModes": ["ReadOnlyMany"], "capacity": {"storage": "1Mi"}, "storageClassName": "",
                   "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/var/empty/" + pv_name},
                   "claimRef": {"namespace": namespace, "name": CACHE}}}
    return pvc, pv


def deployment(replicas):
    labels = {"app": DEPLOYMENT}
    return {"metadata": {"name": DEPLOYMENT}, "spec": {
        "replicas": replicas, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"nodeSelector": {webhook_bench.BENCH_LABEL: "steering"},
                     "tolerations": [dict(webhook_bench.BENCH_TAINT, value="steering", operator="Equal"),
                                     {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     # One pod per node, so every benchmark node is a candidate and the ready ones fill up.
                     "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                    "whenUnsatisfiable": "ScheduleAnyway",
                                                    "labelSelector": {"matchLabels": labels}}],
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
                     "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": CACHE,
                                                                             "readOnly": True}}]}}}}


def apiserver_admission(api, core, apps, namespace, install_webhook, wait_until, replicas, ready_nodes):
    """A Deployment of `replicas` pods through the steering entry, timed by the API server; then its re-apply."""
    metric_filter = 'name="%s.steering.gkm.io"' % install_webhook()

    def metrics():
        method, url, headers, body, _timeout = api.param_serialize(
            method="GET", resource_path="/metrics", auth_settings=["BearerToken"])
        return webhook_bench.metric_buckets(api.call_api(method, url, header_params=headers, body=body).read()
                                            .decode(), webhook_bench.WEBHOOK_METRIC, metric_filter)

    def pods():
        return core.list_namespaced_pod(namespace, label_selector="app=%s" % DEPLOYMENT).items

    before = metrics()
    started = time.monotonic()
    apps.create_namespaced_deployment(namespace, deployment(replicas))
    created = wait_until("%d pods" % replicas, lambda: pods() if len(pods()) >= replicas else None, timeout=600,
                         interval=1)
    elapsed = time.monotonic() - started
    delta = webhook_bench.bucket_delta(metrics(), before)
    placed = wait_until("the pods scheduled", lambda: [p for p in pods() if p.spec.node_name] if all(
        p.spec.node_name for p in pods()) else None, timeout=600, interval=1)
    # The generation moves only when the spec changes (status updates by the controller do not move it).
    generation = apps.read_namespaced_deployment(DEPLOYMENT, namespace).metadata.generation
    apps.patch_namespaced_deployment(DEPLOYMENT, namespace, deployment(replicas))
    after_reapply = apps.read_namespaced_deployment(DEPLOYMENT, namespace).metadata.generation
    return {
        "pods": len(created),
        "seconds_to_create_all_pods": round(elapsed, 1),
        "admissions_counted": int(max(count for _bound, count in delta)),
        "apiserver_p50_ms": round(webhook_bench.histogram_quantile(0.50, delta) * 1000, 2),
        "apiserver_p99_ms": round(webhook_bench.histogram_quantile(0.99, delta) * 1000, 2),
        "pods_on_nodes_not_ready": sum(p.spec.node_name not in ready_nodes for p in placed),
        "reapply_unchanged_generation": generation == after_reapply,
    }


def run_benchmark(args):
    from kubernetes import client, config

    from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
    from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
    from tests.helpers.crds import apply_crds
    from tests.helpers.sim import sim_control
    from tests.helpers.webhook import CertificateFiles, LocalWebhookServer, free_port, install, wait_until

    kubeconfig = sim_control.load_state().get("kubeconfig") or sim_control.KUBECONFIG
    api = config.new_client_from_config(config_file=kubeconfig)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    raw = Kube(api)
    custom = apply_crds(api)
    webhook_bench.build_loadgen()
    work = tempfile.mkdtemp(prefix="gkm-bench-steering-")
    certs = CertificateFiles(work)
    ca_file = os.path.join(work, "ca.pem")
    with open(ca_file, "w") as handle:
        handle.write(certs.ca)
    suffix = uuid.uuid4().hex[:5]
    namespace, webhook_name, webhook_namespace = "bench-st-" + suffix, "bench-st-" + suffix, "gkm-bench-" + suffix
    ready_key = readiness_label_key(CACHE, namespace)
    nodes = benchmark_nodes(args.nodes, ready_key, short_digest(DIGEST))
    node_names = [node["metadata"]["name"] for node in nodes]
    ready_nodes = {node["metadata"]["name"] for node in nodes if ready_key in node["metadata"]["labels"]}
    server = LocalWebhookServer(kubeconfig, certs.cert_file, certs.key_file)
    floor_port = free_port()
    floor_process = None
    results = {"load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    try:
        webhook_bench.log("creating %d nodes, the GKMCache and its serving PVC" % len(nodes))
        for error in raw.map(lambda node: raw.request("POST", "/api/v1/nodes", body=node), nodes):
            if isinstance(error, Exception):
                raise error
        core.create_namespace({"metadata": {"name": namespace}})
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
            "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache", "metadata": {"name": CACHE},
            "spec": {"image": "registry.local/caches/%s@%s" % (CACHE, DIGEST), "accessModes": ["ReadWriteOnce"]}})
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "gkmcaches", CACHE, {"status": {
            "resolvedDigest": DIGEST, "targets": [{"backend": "hip", "arch": "gfx90a", "warpSize": 64}]}})
        pvc, pv = serving_volume(namespace)
        core.create_persistent_volume(pv)
        core.create_namespaced_persistent_volume_claim(namespace, pvc)
        server.start().wait_ready(certs.ca)
        wait_until("the view to hold the nodes", lambda: server.metric(
            certs.ca, 'gkm_webhook_view_objects{kind="nodes"}') >= len(node_names), timeout=120)
        floor_process = subprocess_floor(floor_port, certs)
        body_file = os.path.join(work, "review.json")
        with open(body_file, "w") as handle:
            json.dump(pod_review(namespace), handle)
        # The view fills from its watches: the review is steered once it holds the cache and the serving PVC.
        wait_until("the server to steer the review", lambda: webhook_bench.post_review(
            server.url, certs.ca, body_file)["response"].get("patchType") == "JSONPatch", timeout=60)
        wait_until("the floor server to listen", lambda: webhook_bench.port_open(floor_port), timeout=30)
        results["loopback"] = webhook_bench.loopback(
            args, (server.url, server.process.pid), ("https://127.0.0.1:%d/mutate" % floor_port, floor_process.pid),
            ca_file, body_file, points=[(rate, 8) for rate in args.rates])

        def install_webhook():
            install(kubeconfig, name=webhook_name, namespace=webhook_namespace, url=server.url, ca_bundle=certs.ca)
            return "%s.%s" % (webhook_name, webhook_namespace)

        webhook_bench.log("a Deployment of %d replicas through the API server and the steering entry" % len(nodes))
        results["apiserver"] = apiserver_admission(api, core, apps, namespace, install_webhook, wait_until,
                                                   len(nodes), ready_nodes)
    finally:
        # Every step runs even if an earlier one fails: nothing of the benchmark may outlive it.
        with contextlib.suppress(Exception):
            install(kubeconfig, name=webhook_name, namespace=webhook_namespace, state="absent")
        server.stop()
        if floor_process:
            floor_process.terminate()
            floor_process.wait()
        with contextlib.suppress(client.exceptions.ApiException):
            core.delete_namespace(namespace)
        with contextlib.suppress(client.exceptions.ApiException):
            core.delete_persistent_volume("gkm-%s" % namespace)
        raw.map(lambda node: raw.delete("Node", node), node_names)
    write_results(results, args, len(ready_nodes))


def subprocess_floor(port, certs):
    import subprocess

    return subprocess.Popen([sys.executable, os.path.join(ROOT, "bench", "webhook.py"), "floor", str(port),
                             certs.cert_file, certs.key_file])


def write_results(results, args, ready_count):
    by_rate = {row["target_rps"]: row for row in results["loopback"]}
    output = {
        "p50_ms_at_500rps": by_rate[500]["ours"]["p50_ms"],
        "p99_ms_at_500rps": by_rate[500]["ours"]["p99_ms"],
        "p50_ms_at_1000rps": by_rate[1000]["ours"]["p50_ms"],
        "p99_ms_at_1000rps": by_rate[1000]["ours"]["p99_ms"],
        "apiserver_p99_ms": results["apiserver"]["apiserver_p99_ms"],
        "pods_on_nodes_not_ready": results["apiserver"]["pods_on_nodes_not_ready"],
        "reapply_unchanged_generation": results["apiserver"]["reapply_unchanged_generation"],
        "per_rate": results["loopback"],
        "apiserver": results["apiserver"],
        "method": webhook_bench.load_method(
            args, results, nodes_ready=ready_count,
            request="a ReplicaSet's pod naming the serving PVC, with its own required node affinity (merged)"),
    }
    webhook_bench.save_results(RESULTS, output, 7)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8, help="measured seconds per point")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--rates", type=int, nargs="+", default=[500, 1000])
    run_benchmark(parser.parse_args())


if __name__ == "__main__":
    main()
