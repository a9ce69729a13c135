"""gpu_sim with 500 kwok GPU nodes on a cluster of its own: time until every node is Ready, and day-2 changes.

Runs the gpu_sim role (ansible-playbook) against a separate state directory ($GKM_SIM_DIR, default
/tmp/gkm-sim-500), so the shared test cluster is untouched, and stops that cluster at the end.
Writes bench/results/gpu_sim.json; quotes medians of the repeated 0 -> 500 node creations.
"""

import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, ".cache", "collections"))

from tests.helpers.roles import run_role  # noqa: E402

SIM_DIR = os.environ.get("GKM_SIM_DIR", "/tmp/gkm-sim-500")
REPEATS = int(os.environ.get("GKM_BENCH_REPEATS", "3"))
CONTROL_PLANE = {"name": "gkm-control-plane", "count": 1, "vendor": "none", "role": "control-plane"}


def nodes(amd, nvidia):
    return [CONTROL_PLANE, {"name": "gpu-amd", "count": amd, "vendor": "amd", "arch": "gfx90a", "gpus": 8},
            {"name": "gpu-nvidia", "count": nvidia, "vendor": "nvidia", "arch": "90", "gpus": 4}]


def role(tmp, node_list, state="present"):
    started = time.monotonic()
    run = run_role("gpu_sim", tmp, {"gpu_sim_state": state, "gpu_sim_nodes": node_list,
                                    "gpu_sim_kwok_dir": SIM_DIR, "gpu_sim_wait_timeout": 900})
    if not run.ok:
        raise SystemExit("gpu_sim failed: %s" % run.failures())
    result = run.facts.get("gpu_sim_result", {})
    return {"wall_seconds": round(time.monotonic() - started, 2), "ready_seconds": result.get("ready_seconds"),
            "created": len(result.get("created", [])), "deleted": len(result.get("deleted", [])),
            "updated": len(result.get("updated", [])), "changed_tasks": run.changed}


def main():
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs["start_cluster_and_500_gpu_nodes"] = role(tmp, nodes(300, 200))
        runs["rerun_unchanged"] = role(tmp, nodes(300, 200))
        runs["day2_minus_50_amd_plus_50_nvidia"] = role(tmp, nodes(250, 250))
        creations = [runs["start_cluster_and_500_gpu_nodes"]["ready_seconds"]]
        for index in range(REPEATS - 1):
            runs["remove_all_%d" % index] = role(tmp, [CONTROL_PLANE])
            runs["create_500_%d" % index] = role(tmp, nodes(300, 200))
            creations.append(runs["create_500_%d" % index]["ready_seconds"])
        runs["stop_cluster"] = role(tmp, [], state="absent")
    summary = {
        "nodes": 500,
        "median_seconds_0_to_500_ready": statistics.median(creations),
        "samples_0_to_500_ready": creations,
        "rerun_unchanged_wall_seconds": runs["rerun_unchanged"]["wall_seconds"],
        "day2_ready_seconds": runs["day2_minus_50_amd_plus_50_nvidia"]["ready_seconds"],
        "machine": {"cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
        "runs": runs,
    }
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "gpu_sim.json"), "w") as handle:
        json.dump(summary, handle, indent=2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
