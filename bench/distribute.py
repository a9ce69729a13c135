"""Distribution benchmark: cache_distribute vs `kubectl apply --server-side` vs one kubernetes.core.k8s task per object.

On the local simulated cluster: 500 kwok GPU nodes, a cluster-scoped ReadWriteOnce cache over 2 namespaces
(500 x 2 x {PVC, PV, Job} = 3,000 objects). Measured side by side in one run:
- ours: cold converge and no-change re-run of the gkm.cluster.cache_distribute module (the `ansible` CLI, so
  module start-up is included), with its API request and write counts;
- kubectl: `kubectl apply --server-side -f` of the very objects the planner renders (the floor-like reference);
- naive: one kubernetes.core.k8s task per object (a loop) on a 20-node subset, extrapolated per object.
Writes bench/results/distribute.json; times are medians over --repeat runs.
"""

import argparse
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

from ansible_collections.gkm.cluster.plugins.module_utils.common import kube  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_auth  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (  # noqa: E402
    gather_facts,
    job_condition,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.image import (  # noqa: E402
    build_spec,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes  # noqa: E402
from tests.helpers import kcache_images  # noqa: E402
from tests.helpers.modules import COLLECTIONS, ansible_cli_floor, run_module, venv_site_packages  # noqa: E402

BENCH_LABEL = "gkm.io/bench"
RESULTS = os.path.join(ROOT, "bench", "results", "distribute.json")


def log(message):
    print("bench-distribute: %s" % message, file=sys.stderr, flush=True)


def state():
    with open(os.path.join(ROOT, ".sim", "state.json")) as handle:
        return json.load(handle)


def ensure_nodes(raw, group, count):
    nodes = gpu_nodes.render_nodes([{"name": group, "count": count, "vendor": "amd", "labels": {BENCH_LABEL: group}}])
    existing = {n["metadata"]["name"] for n in raw.list("Node", label_selector="%s=%s" % (BENCH_LABEL, group))}
    missing = [n for n in nodes if n["metadata"]["name"] not in existing]
    raw.map(lambda node: raw.request("POST", "/api/v1/nodes", body=node), missing)
    # kwok brings a few nodes a second to Ready on two cores; 500 take minutes the first time.
    deadline = time.monotonic() + 1200
    while time.monotonic() < deadline:
        listed = raw.list("Node", label_selector="%s=%s" % (BENCH_LABEL, group))
        usable = [n for n in listed if any(c["type"] == "Ready" and c["status"] == "True"
                                           for c in n["status"].get("conditions") or [])
                  and not any(t["key"].startswith("node.kubernetes.io/") for t in n["spec"].get("taints") or [])]
        if len(usable) >= count:
            return [n["metadata"]["name"] for n in nodes]
        time.sleep(1)
    raise TimeoutError("bench nodes not ready")


def wait_gone(raw, cache, timeout=600):
    """Wait until no PVC, PV, Job or Pod of the cache is left; each poll reads one name per kind, not the lists."""
    selector = "gkm.io/cache=%s" % cache
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(next(raw.items(kind, label_selector=selector, metadata_only=True, page_size=1), None)
                   for kind in ("PersistentVolumeClaim", "PersistentVolume", "Job", "Pod")):
            return
        time.sleep(1)
    raise TimeoutError("objects of %s still present" % cache)


def wait_jobs_done(raw, cache, expected, timeout=900):
    """Let the Job controller, scheduler and kwok finish, so the next measurement starts on a quiet cluster."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = raw.list("Job", label_selector="gkm.io/cache=%s" % cache)
        done = [j for j in jobs if job_condition(j, "Complete")]
        if len(done) >= expected:
            return
        time.sleep(max(2, expected / 1000))  # a poll lists every Job: at 15,000 it is itself a load
    log("warning: only %d of %d Jobs completed" % (len(done), expected))


def remove_all(kubeconfig, args, raw):
    result = run_module("cache_distribute", kubeconfig, name=args["name"], scope="cluster", state="absent",
                        force=True)
    assert not result.get("failed"), result
    wait_gone(raw, args["name"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--naive-nodes", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep-nodes", action="store_true", help="leave the 500 kwok nodes for the next run")
    options = parser.parse_args()
    st = state()
    kubeconfig = st["kubeconfig"]
    raw = kube.Kube(api_client_from_auth({"kubeconfig": kubeconfig}), workers=16)
    image = kcache_images.build_image(st["registry"], "bench/vector-add", "v1",
                                      kcache_images.CacheSpec(backend="hip", compiled=True))
    group = "gkm-bench-dist"
    log("creating %d kwok GPU nodes" % options.nodes)
    node_names = ensure_nodes(raw, group, options.nodes)
    namespaces = ["bench-dist-a", "bench-dist-b"]
    for namespace in namespaces:
        raw.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    cache = "bench-%s" % uuid.uuid4().hex[:4]
    args = dict(name=cache, scope="cluster", workload_namespaces=namespaces, image=image.ref, registry_plain_http=True,
                extract_image="gkm-cluster-tools:bench", node_selector={BENCH_LABEL: group},
                pod_template={"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}},
                concurrency=16)

    # The objects kubectl applies: exactly what the planner renders for this cache on this cluster.
    spec = build_spec(dict(args, state="present", access_modes=["ReadWriteOnce"], compatibility="skip",
                           create_pvs="auto", host_path_root="/var/lib/gkm-cluster/caches", prune=True))
    desired = planner.plan(spec, gather_facts(raw, spec)).desired
    objects = len(desired)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as manifest:
        json.dump({"apiVersion": "v1", "kind": "List", "items": desired}, manifest)
    log("%d objects per converge" % objects)

    cold, noop, kubectl, cold_requests, noop_requests, cold_writes, noop_writes = [], [], [], [], [], [], []
    record_runs, record_writes, noop_module, cli_floor = [], [], [], []
    for round_number in range(options.repeat):
        started = time.monotonic()
        result = run_module("cache_distribute", kubeconfig, **args)
        cold.append(time.monotonic() - started)
        assert result.get("changed") and not result.get("failed"), result.get("msg")
        cold_requests.append(result["api_requests"])
        cold_writes.append(result["api_writes"])
        wait_jobs_done(raw, cache, objects // 3)
        # The first run after the Jobs finished records the extractions on the PVCs (one write each);
        # only the runs after it have nothing to do.
        started = time.monotonic()
        recorded = run_module("cache_distribute", kubeconfig, **args)
        record_runs.append(time.monotonic() - started)
        record_writes.append(recorded["api_writes"])
        for _ in range(3):
            started = time.monotonic()
            again = run_module("cache_distribute", kubeconfig, **args)
            noop.append(time.monotonic() - started)
            noop_module.append(again["duration_seconds"])
            noop_requests.append(again["api_requests"])
            noop_writes.append(again["api_writes"])
            cli_floor.append(ansible_cli_floor())
        remove_all(kubeconfig, args, raw)

        started = time.monotonic()
        subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "apply", "--server-side", "--field-manager",
                        "bench-kubectl", "-f", manifest.name], check=True, stdout=subprocess.DEVNULL)
        kubectl.append(time.monotonic() - started)
        wait_jobs_done(raw, cache, objects // 3)
        remove_all(kubeconfig, args, raw)
        log("round %d: ours %.1fs, no-op %.2fs, kubectl %.1fs" % (round_number + 1, cold[-1], noop[-1], kubectl[-1]))

    os.unlink(manifest.name)
    naive_per_object = naive_loop(kubeconfig, spec, raw, node_names[:options.naive_nodes], args)
    ours_cold = statistics.median(cold)
    kubectl_apply = statistics.median(kubectl)
    results = {
        "nodes": options.nodes,
        "namespaces": len(namespaces),
        "objects": objects,
        "repeat": options.repeat,
        "ours_cold_s": round(ours_cold, 3),
        "ours_cold_runs_s": [round(v, 3) for v in cold],
        "kubectl_apply_s": round(kubectl_apply, 3),
        "kubectl_apply_runs_s": [round(v, 3) for v in kubectl],
        "ratio_vs_kubectl_apply": round(ours_cold / kubectl_apply, 3),
        "record_run_s": round(statistics.median(record_runs), 3),
        "record_run_writes": int(statistics.median(record_writes)),
        "noop_rerun_seconds": round(statistics.median(noop), 3),
        "noop_rerun_runs_s": [round(v, 3) for v in noop],
        "noop_module_seconds": round(statistics.median(noop_module), 3),
        "ansible_cli_floor_s": round(statistics.median(cli_floor), 3),
        "naive_per_object_s": round(naive_per_object, 4),
        "ours_per_object_s": round(ours_cold / objects, 5),
        "speedup_vs_naive_loop": round(naive_per_object / (ours_cold / objects), 1),
        "api_requests_cold": int(statistics.median(cold_requests)),
        "api_writes_cold": int(statistics.median(cold_writes)),
        "api_requests_noop": int(statistics.median(noop_requests)),
        "api_writes_noop": max(noop_writes),
        "notes": "times include ansible start-up of the module; cold = no objects of the cache exist, wait=false; "
                 "noop_module_seconds is the module's own duration_seconds; ansible_cli_floor_s is "
                 "`ansible localhost -m ansible.builtin.ping` measured right after each no-op run",
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    if not options.keep_nodes:  # the cluster is shared: other tests should not see 500 extra GPU nodes
        raw.map(lambda name: raw.delete("Node", name), node_names)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as handle:
        json.dump(results, handle, indent=2, sort_keys=True)
        handle.write("\n")
    print(json.dumps(results, indent=2, sort_keys=True))


def naive_loop(kubeconfig, spec, raw, subset, args):
    """One kubernetes.core.k8s task invocation per object (a task loop), on a subset of the nodes."""
    facts = gather_facts(raw, spec)
    facts.nodes = [n for n in facts.nodes if n["metadata"]["name"] in set(subset)]
    objects = planner.plan(spec, facts).desired
    with tempfile.TemporaryDirectory() as workdir:
        with open(os.path.join(workdir, "objects.json"), "w") as handle:
            json.dump(objects, handle)
        playbook = os.path.join(workdir, "naive.yml")
        with open(playbook, "w") as handle:
            handle.write(
                "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                "    - name: One object per task\n"
                "      kubernetes.core.k8s:\n"
                "        kubeconfig: %s\n        definition: \"{{ item }}\"\n"
                "        apply: true\n        server_side_apply: {field_manager: bench-naive}\n"
                "      loop: \"{{ lookup('file', '%s/objects.json') | from_json }}\"\n" % (kubeconfig, workdir))
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS + ":" + venv_site_packages(),
                   ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
        started = time.monotonic()
        subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), playbook], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        elapsed = time.monotonic() - started
    wait_jobs_done(raw, args["name"], len(objects) // 3)
    remove_all(kubeconfig, args, raw)
    log("naive loop: %d objects in %.1fs" % (len(objects), elapsed))
    return elapsed / len(objects)


if __name__ == "__main__":
    main()
