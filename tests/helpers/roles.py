"""Run gkm.cluster roles the way users do (ansible-playbook) and read back what happened."""

import json
import os
import subprocess
from dataclasses import dataclass, field

import yaml

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import API_VERSION
from tests.helpers.modules import COLLECTIONS as CHECKOUT_COLLECTIONS
from tests.helpers.modules import NODE_DISK, ROOT, VENV_BIN, venv_site_packages

COLLECTIONS = os.pathsep.join([CHECKOUT_COLLECTIONS, venv_site_packages()])


@dataclass
class PlaybookRun:
    returncode: int
    stats: dict
    tasks: list = field(repr=False)
    stderr: str = field(repr=False, default="")

    @property
    def ok(self):
        return self.returncode == 0 and not self.stats.get("failures")

    @property
    def changed(self):
        return self.stats.get("changed", 0)

    @property
    def facts(self):
        """Facts set by set_fact, later ones winning."""
        merged = {}
        for _name, result in self.tasks:
            merged.update(result.get("ansible_facts") or {})
        return merged

    def failures(self):
        """Failure messages of failed tasks (not rescued ones' originals: those are marked ignored by rescue)."""
        messages = []
        for _name, result in self.tasks:
            for item in result.get("results") or [result]:
                if item.get("failed") and item.get("msg"):
                    messages.append(item["msg"])
        return messages

    def changed_tasks(self):
        return [name for name, result in self.tasks if result.get("changed")]

    def result(self, task_name):
        """The last result of the task whose name contains task_name."""
        found = [result for name, result in self.tasks if task_name in name]
        if not found:
            ran = [name for name, _result in self.tasks]
            raise AssertionError("no task named like %r ran; tasks: %s" % (task_name, ran))
        return found[-1]


def run_playbook(play, tmp_path, check=False, diff=False, env=None, timeout=900):
    """Run one play (a dict) on localhost; returns a PlaybookRun."""
    path = os.path.join(str(tmp_path), "playbook-%d.yml" % len(os.listdir(str(tmp_path))))
    with open(path, "w") as handle:
        yaml.safe_dump([dict({"hosts": "localhost", "gather_facts": False}, **play)], handle, sort_keys=False)
    options = (["--check"] if check else []) + (["--diff"] if diff else [])
    return _ansible_playbook([path, *options], env, timeout)


def run_sim_playbook(name, sim_dir, *options, timeout=900):
    """playbooks/<name> with inventories/sim against the simulated cluster in sim_dir, as users run it."""
    return _ansible_playbook(["-i", os.path.join(ROOT, "inventories", "sim"), os.path.join(ROOT, "playbooks", name),
                              *options], {"GKM_SIM_DIR": sim_dir}, timeout)


def _ansible_playbook(arguments, env, timeout):
    command = [os.path.join(VENV_BIN, "ansible-playbook"), *arguments]
    run_env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_STDOUT_CALLBACK="json",
                   ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
                   ANSIBLE_DEPRECATION_WARNINGS="0", **(env or {}))
    completed = subprocess.run(command, env=run_env, capture_output=True, text=True, timeout=timeout, check=False)
    try:
        report = json.loads(completed.stdout)
    except ValueError as error:
        raise AssertionError("ansible-playbook gave no JSON: %s %s" % (
            completed.stdout[-3000:], completed.stderr[-3000:])) from error
    tasks = []
    for play_report in report.get("plays", []):
        for task in play_report.get("tasks", []):
            result = task["hosts"].get("localhost")
            if result is not None:
                tasks.append((task["task"]["name"], result))
    return PlaybookRun(completed.returncode, report.get("stats", {}).get("localhost", {}), tasks, completed.stderr)


def run_role(role, tmp_path, role_vars=None, check=False, diff=False, env=None, post_tasks=None):
    """Run gkm.cluster.<role> with role_vars in a one-play playbook."""
    play = {"roles": [dict({"role": "gkm.cluster.%s" % role}, **({"vars": role_vars} if role_vars else {}))]}
    if post_tasks:
        play["post_tasks"] = post_tasks
    return run_playbook(play, tmp_path, check=check, diff=diff, env=env)


# ------------------------------------------------------------------------- the caches role

PINNED_NODE = "gkm-gpu-worker-1"


def caches_role_vars(sim, declared, **extra):
    """The caches role against the simulated cluster: its registry over plain HTTP, the node disk, no waiting."""
    return dict({"caches_kubeconfig": sim.kubeconfig, "caches_declared": declared, "caches_registry_plain_http": True,
                 "gkm_tools_image": "gkm-cluster-tools:test", "caches_host_path_root": NODE_DISK,
                 "caches_wait": False}, **extra)


def pinned_template():
    """A podTemplate placing the Jobs on one named node (PINNED_NODE), which keeps every plan small."""
    return {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                         "nodeSelectorTerms": [{"matchFields": [
                             {"key": "metadata.name", "operator": "In", "values": [PINNED_NODE]}]}]}}}}}


def pinned_gkmcache(name, namespace, image_ref, access_modes=None):
    """A GKMCache of one named node (pinned_template)."""
    spec = {"image": image_ref, "podTemplate": pinned_template()}
    if access_modes:
        spec["accessModes"] = access_modes
    return {"apiVersion": API_VERSION, "kind": "GKMCache", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}
