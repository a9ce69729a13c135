"""playbooks/deploy.yml as users run it (ansible-playbook -i inventories/sim): cold deploy, no-change re-run, undeploy.

The simulated cluster (3 GPU nodes) runs in a state directory of its own ($GKM_SIM_DIR, default
/tmp/gkm-sim-deploy) so the shared test cluster is untouched; it is started before the first round and stopped
at the end. Each round deploys the inventory's two sample caches (a GKMCache and a ClusterGKMCache over two
namespaces) and the webhook, runs deploy.yml again (must report changed=0), then undeploys with gkm_force.
Writes bench/results/deploy.json with the medians of the rounds and, beside them, the cost of the cheapest
ansible run on this machine (`ansible localhost -m ping`), since every task of a playbook pays part of it.
"""

import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.helpers.modules import ansible_cli_floor  # noqa: E402
from tests.helpers.roles import run_sim_playbook  # noqa: E402

SIM_DIR = os.environ.get("GKM_SIM_DIR", "/tmp/gkm-sim-deploy")
ROUNDS = int(os.environ.get("GKM_BENCH_REPEATS", "3"))
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")


def log(message):
    print("[bench-deploy] %s" % message, file=sys.stderr, flush=True)


def playbook(name, *options):
    """(seconds, tasks changed) of one run of playbooks/<name> with inventories/sim; fails loudly on failure."""
    started = time.monotonic()
    run = run_sim_playbook(name, SIM_DIR, *options)
    seconds = time.monotonic() - started
    if not run.ok:
        raise SystemExit("%s failed: %s\n%s" % (name, run.failures(), run.stderr[-2000:]))
    return seconds, run.changed


def tool(*command):
    """Seconds of one tools/ script run against SIM_DIR; fails loudly on failure."""
    started = time.monotonic()
    completed = subprocess.run([PYTHON, *command], env=dict(os.environ, GKM_SIM_DIR=SIM_DIR), capture_output=True,
                               text=True, check=False)
    if completed.returncode != 0:
        raise SystemExit("%s failed: %s" % (" ".join(command), completed.stderr[-2000:]))
    return time.monotonic() - started


def sim(*args):
    return tool(os.path.join(ROOT, "tools", "sim-cluster", "sim.py"), *args)


def main():
    results_path = os.path.join(ROOT, "bench", "results", "deploy.json")
    sim_up = sim("up")
    try:
        samples = tool(os.path.join(ROOT, "tools", "sample_caches.py"))
        rounds = []
        for number in range(ROUNDS):
            deploy_s, deploy_changed = playbook("deploy.yml")
            rerun_s, rerun_changed = playbook("deploy.yml")
            floor_s = ansible_cli_floor()
            undeploy_s, _ = playbook("undeploy.yml", "-e", "gkm_force=true")
            rounds.append({"deploy_s": round(deploy_s, 2), "deploy_changed_tasks": deploy_changed,
                           "rerun_s": round(rerun_s, 2), "rerun_changed_tasks": rerun_changed,
                           "undeploy_s": round(undeploy_s, 2), "ansible_ping_s": round(floor_s, 2)})
            log("round %d: %s" % (number + 1, rounds[-1]))
    finally:
        sim("down")

    def median(key):
        return round(statistics.median(entry[key] for entry in rounds), 2)

    results = {
        "gpu_nodes": 3,
        "caches": 2,
        "deploy_median_s": median("deploy_s"),
        "rerun_median_s": median("rerun_s"),
        "rerun_changed_tasks": max(entry["rerun_changed_tasks"] for entry in rounds),
        "undeploy_median_s": median("undeploy_s"),
        "ansible_ping_median_s": median("ansible_ping_s"),
        "goals": {"deploy_s": 60, "rerun_s": 20},
        "sim_up_s": round(sim_up, 2),
        "sample_caches_s": round(samples, 2),
        "rounds": rounds,
        "notes": "wall time of ansible-playbook -i inventories/sim with the simulated cluster already up; "
                 "deploy = no object of ours exists (after an undeploy with gkm_force=true)",
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    with open(results_path, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, sort_keys=True)
        handle.write("\n")
    print(json.dumps(results, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
