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
SIM_DIR = os.environ.get("GKM_SIM_DIR", "/tmp/gkm-sim-deploy")
ROUNDS = int(os.environ.get("GKM_BENCH_REPEATS", "3"))
BIN = os.path.join(ROOT, ".venv", "bin")
ENV = dict(os.environ, GKM_SIM_DIR=SIM_DIR, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
           ANSIBLE_LOCALHOST_WARNING="0",
           ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([os.path.join(ROOT, ".cache", "collections"),
                                                     os.path.join(ROOT, ".venv", "lib", "python3.11",
                                                                  "site-packages")]))


def log(message):
    print("[bench-deploy] %s" % message, file=sys.stderr, flush=True)


def timed(command):
    started = time.monotonic()
    completed = subprocess.run(command, env=ENV, capture_output=True, text=True, check=False)
    return time.monotonic() - started, completed


def playbook(name, *extra):
    """(seconds, tasks changed) of one ansible-playbook run with inventories/sim; fails loudly on failure."""
    seconds, completed = timed([os.path.join(BIN, "ansible-playbook"), "-i", os.path.join(ROOT, "inventories", "sim"),
                                os.path.join(ROOT, "playbooks", name), *extra])
    if completed.returncode != 0:
        raise SystemExit("%s failed:\n%s\n%s" % (name, completed.stdout[-4000:], completed.stderr[-2000:]))
    stats = json.loads(completed.stdout)["stats"]
    return seconds, sum(host["changed"] for host in stats.values())


def sim(*args):
    seconds, completed = timed([os.path.join(BIN, "python"), os.path.join(ROOT, "tools", "sim-cluster", "sim.py"),
                                *args])
    if completed.returncode != 0:
        raise SystemExit("sim.py %s failed: %s" % (" ".join(args), completed.stderr[-2000:]))
    return seconds


def main():
    results_path = os.path.join(ROOT, "bench", "results", "deploy.json")
    sim_up = sim("up")
    try:
        samples, completed = timed([os.path.join(BIN, "python"), os.path.join(ROOT, "tools", "sample_caches.py")])
        if completed.returncode != 0:
            raise SystemExit("sample_caches.py failed: %s" % completed.stderr[-2000:])
        rounds = []
        for number in range(ROUNDS):
            deploy_s, deploy_changed = playbook("deploy.yml")
            rerun_s, rerun_changed = playbook("deploy.yml")
            floor_s = timed([os.path.join(BIN, "ansible"), "localhost", "-m", "ansible.builtin.ping"])[0]
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
