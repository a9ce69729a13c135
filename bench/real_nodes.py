"""Real-node benchmark: the data path on the simulated cluster's real nodes (kubelet + containerd + runc here).

Two figures, each over --repeat runs, contenders alternating:
- end to end: from a GKMCache applied (gkm.cluster.cache_distribute through the `ansible` CLI, as a playbook runs
  it) to the files readable in a workload pod: a DaemonSet labelled gkm.io/pvc-mutation, whose pod the in-cluster
  webhook points at its node's PVC, printing the checksum of a kernel file;
- the extraction Job's own run time (its container's start to finish, from the kubelet's status) against the
  same extraction run directly on this machine (the same entry point, image and options, in a fresh process).
Writes bench/results/real_nodes.json with the load average before and after.
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
from datetime import datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".cache", "collections"))
sys.path.insert(0, ROOT)

from kubernetes import client, config  # noqa: E402

from tests.helpers import kcache_images  # noqa: E402
from tests.helpers.modules import NODE_DISK, run_module  # noqa: E402
from tests.helpers.real_nodes import (  # noqa: E402
    BASELINE,
    delete_namespace,
    labelled_namespace,
    real_pod_template,
    run_daemonset,
    running_pods,
)
from tests.helpers.webhook import install, wait_until  # noqa: E402

RESULTS = os.path.join(ROOT, "bench", "results", "real_nodes.json")
EXTRACT_MODULE = "ansible_collections.gkm.cluster.plugins.module_utils.extract.job_main"
SIM = [sys.executable, os.path.join(ROOT, "tools", "sim-cluster", "sim.py")]
NVIDIA_NODE = "gkm-real-nvidia-1"


def log(message):
    print("bench-real-nodes: %s" % message, file=sys.stderr, flush=True)


def load():
    return [round(value, 2) for value in os.getloadavg()]


def summary(values):
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


def distribute(state, **args):
    args.update(registry_plain_http=True, extract_image=state["tools_image"], host_path_root=NODE_DISK,
                wait=True, wait_timeout=300, node_details=True)
    args.setdefault("pod_template", real_pod_template())
    result = run_module("cache_distribute", state["kubeconfig"], **args)
    if result.get("failed"):
        raise SystemExit("cache_distribute failed: %s" % result.get("msg"))
    return result


def remove(state, name, namespace):
    run_module("cache_distribute", state["kubeconfig"], name=name, namespace=namespace, state="absent", force=True,
               extract_image=state["tools_image"], host_path_root=NODE_DISK)


def end_to_end(state, core, apps, namespace, image, kernel):
    """Seconds from the cache applied to a workload pod on the real AMD node printing a kernel's checksum."""
    name = "e2e-%s" % uuid.uuid4().hex[:6]
    started = time.monotonic()
    distribute(state, name=name, namespace=namespace, image=image.ref)
    run_daemonset(apps, namespace, name, state["tools_image"], "sha256sum /kernels/%s && sleep 3600" % kernel,
                  labels={"gkm.io/pvc-mutation": "true"},
                  volumes=[{"name": "kernels", "persistentVolumeClaim": {"claimName": name}}],
                  mounts=[{"name": "kernels", "mountPath": "/kernels", "subPath": "cache", "readOnly": True}])
    apps.patch_namespaced_daemon_set(name, namespace, {"spec": {"template": {"spec": {
        "nodeSelector": {"gkm.io/gpu-backend": "hip"}}}}})

    def printed():
        pods = running_pods(core, namespace, "app=%s" % name)
        return pods and kernel in core.read_namespaced_pod_log(pods[0].metadata.name, namespace)

    wait_until("the workload pod to read the kernel", printed, timeout=300, interval=0.2)
    elapsed = time.monotonic() - started
    apps.delete_namespaced_daemon_set(name, namespace)
    remove(state, name, namespace)
    return elapsed


def job_run_time(state, core, batch, namespace, image):
    """The extraction container's start-to-finish on the real NVIDIA node, from the kubelet's status."""
    name = "job-%s" % uuid.uuid4().hex[:6]
    result = distribute(state, name=name, namespace=namespace, image=image.ref)
    entry = next(e for e in result["status"]["entries"] if e["node"] == NVIDIA_NODE)
    if entry["phase"] != "Extracted":
        raise SystemExit("the Job on %s did not extract: %s" % (NVIDIA_NODE, entry))
    pods = core.list_namespaced_pod(namespace, label_selector="job-name=%s" % entry["job"]).items
    terminated = next(s.state.terminated for s in pods[-1].status.container_statuses if s.name == "extract")
    seconds = (terminated.finished_at - terminated.started_at).total_seconds()
    remove(state, name, namespace)
    return seconds


def host_run_time(image, gpu):
    """The same extraction run on this machine, as the Job's container runs it, in a fresh process."""
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, ".sim")) as work:
        command = [sys.executable, "-m", EXTRACT_MODULE, "--image", image.ref, "--dest", os.path.join(work, "cache"),
                   "--plain-http", "--gpu", gpu, "--compatibility", "fail"]
        environment = dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".cache", "collections"))
        started = time.monotonic()
        subprocess.run(command, check=True, env=environment, stdout=subprocess.DEVNULL)
        return time.monotonic() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=50, help="uncompressed size of the Job-vs-host image")
    args = parser.parse_args()
    before = load()
    subprocess.run([*SIM, "up"], check=True)
    subprocess.run([*SIM, "tools-image"], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(ROOT, ".sim", "state.json")) as handle:
        state = json.load(handle)
    if not state.get("real_nodes"):
        raise SystemExit("the simulated cluster has no real nodes: `make sim-down` and run with GKM_SIM_REAL_NODES=2")
    api = config.new_client_from_config(config_file=state["kubeconfig"])
    core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
    namespace = labelled_namespace(core, "bench-real-%s" % uuid.uuid4().hex[:5], BASELINE)
    webhook = dict(name="bench-wh", namespace="bench-wh-%s" % uuid.uuid4().hex[:5], endpoint="service",
                   tls_mode="self_signed", image=state["tools_image"], replicas=1,
                   node_selector={"gkm.io/real-node": "true"},
                   tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}], failure_policy="Fail")
    small_spec = kcache_images.CacheSpec(backend="hip", kernels=4, seed=41, compiled=True)
    small = kcache_images.build_image(state["registry"], "bench/e2e", "v1", small_spec)
    kernel = next(e.name for e in kcache_images.cache_entries(small_spec)[0] if e.name.endswith(".llir"))
    with tempfile.TemporaryDirectory() as work:
        large, _path, large_bytes, large_files = kcache_images.build_large_image(
            state["registry"], "bench/job-vs-host", "v1", work, total_bytes=args.size_mb * 1_000_000,
            files=max(100, args.size_mb * 10))
    e2e, in_job, on_host = [], [], []
    try:
        install(state["kubeconfig"], **webhook)
        for run in range(args.repeat):
            log("run %d/%d" % (run + 1, args.repeat))
            on_host.append(host_run_time(large, "cuda/90/32"))
            in_job.append(job_run_time(state, core, batch, namespace, large))
            e2e.append(end_to_end(state, core, apps, namespace, small, kernel))
    finally:
        install(state["kubeconfig"], name=webhook["name"], namespace=webhook["namespace"], endpoint="service",
                state="absent")
        delete_namespace(core, namespace)
    result = {
        "benchmark": "real_nodes", "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "load_before": before, "load_after": load()},
        "cache_applied_to_readable_in_pod_seconds": summary(e2e),
        "extraction": {"image_bytes": large_bytes, "files": large_files,
                       "job_container_seconds": summary(in_job), "host_process_seconds": summary(on_host),
                       "job_vs_host_ratio": round(statistics.median(in_job) / statistics.median(on_host), 3)},
    }
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as handle:
        json.dump(result, handle, indent=2)
        handle.write("\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
