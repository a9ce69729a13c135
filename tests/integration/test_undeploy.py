"""playbooks/undeploy.yml on the real simulated cluster, run as users run it (ansible-playbook -i inventories/sim).

deploy.yml installs the inventory's sample caches (a GKMCache and a ClusterGKMCache over two namespaces) and
the webhook; a workload pod then mounts one node's cache PVC. Undeploy must refuse while the pod mounts it,
listing the pod and removing nothing; with gkm_force it goes ahead, and once the pod has ended no object
labelled app.kubernetes.io/managed-by=gkm.cluster remains in any namespace or at cluster scope. The scan
asks the API server for every listable kind it serves, not a list of the kinds we expect to have written.
"""

import json
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANAGED = "app.kubernetes.io/managed-by=gkm.cluster"
# What deploy.yml writes with inventories/sim: the webhook's namespace and configuration, and per cache the
# PVCs, hostPath PVs and extraction Jobs (whose pods carry the Job's labels).
DEPLOYED_KINDS = {"Namespace", "MutatingWebhookConfiguration", "PersistentVolumeClaim", "PersistentVolume", "Job"}
WORKLOAD_NAMESPACE = "gkm-demo"


def playbook(name, sim_dir, *extra):
    env = dict(os.environ, GKM_SIM_DIR=sim_dir, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([
                   os.path.join(ROOT, ".cache", "collections"),
                   os.path.join(ROOT, ".venv", "lib", "python3.11", "site-packages")]))
    command = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", os.path.join(ROOT, "inventories", "sim"),
               os.path.join(ROOT, "playbooks", name), "-e", "gkm_platform=none", *extra]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
    try:
        report = json.loads(completed.stdout)
    except ValueError as error:
        raise AssertionError("%s gave no JSON: %s %s" % (name, completed.stdout[-3000:], completed.stderr[-3000:])) \
            from error
    return completed.returncode, report


def failure_messages(report):
    messages = []
    for play in report["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get("localhost") or {}
            if result.get("failed"):
                messages.append(result.get("msg", ""))
    return messages


def labelled_objects(kube):
    """(kind, namespace, name) of every object labelled as ours, over every listable kind the server serves.

    Discovery is asked afresh each time (a cached one would still list the CRDs undeploy removed).
    """
    from ansible_collections.gkm.cluster.plugins.module_utils.kube import Kube

    api = Kube(kube)
    group_versions = ["/api/v1"] + ["/apis/%s" % version["groupVersion"]
                                    for group in api.request("GET", "/apis")[1]["groups"]
                                    for version in group["versions"]]
    found = set()
    for prefix in group_versions:
        status, listing = api.request("GET", prefix)
        if status == 404:
            continue
        for resource in listing["resources"]:
            if "/" in resource["name"] or "list" not in resource.get("verbs", []):
                continue
            status, items = api.request("GET", "%s/%s" % (prefix, resource["name"]), [("labelSelector", MANAGED)])
            for item in (items or {}).get("items", []) if status != 404 else []:
                found.add((resource["kind"], item["metadata"].get("namespace", ""), item["metadata"]["name"]))
    return found


def wait_until_none_labelled(kube, timeout=120):
    deadline = time.monotonic() + timeout
    remaining = labelled_objects(kube)
    while remaining and time.monotonic() < deadline:
        time.sleep(1)
        remaining = labelled_objects(kube)
    return remaining


@pytest.fixture(scope="module")
def deployed(sim, kube):
    """The sim inventory deployed, plus a workload pod that mounts vector-add's PVC on its node."""
    from kubernetes import client

    sim_dir = os.path.dirname(sim.kubeconfig)
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "sample_caches.py")], check=True,
                   env=dict(os.environ, GKM_SIM_DIR=sim_dir), capture_output=True)
    returncode, report = playbook("deploy.yml", sim_dir)
    assert returncode == 0, failure_messages(report)
    pvc = next(p for p in client.CoreV1Api(kube).list_namespaced_persistent_volume_claim(
        WORKLOAD_NAMESPACE, label_selector=MANAGED + ",gkm.io/cache=vector-add").items)
    node = pvc.metadata.labels["gkm.io/node"]
    core = client.CoreV1Api(kube)
    core.create_namespaced_pod(WORKLOAD_NAMESPACE, {
        "metadata": {"name": "inference", "labels": {"app": "inference"}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "inference", "image": "registry.example/inference:1",
                            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}],
            "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": pvc.metadata.name}}],
        },
    })
    deadline = time.monotonic() + 60
    while core.read_namespaced_pod("inference", WORKLOAD_NAMESPACE).status.phase != "Running":
        assert time.monotonic() < deadline, "the workload pod never ran"
        time.sleep(0.5)
    yield sim_dir
    try:
        core.delete_namespaced_pod("inference", WORKLOAD_NAMESPACE, grace_period_seconds=0)
    except client.ApiException as error:
        if error.status != 404:
            raise


def test_undeploy_refuses_while_a_pod_mounts_a_cache(deployed, kube):
    before = labelled_objects(kube)
    assert {kind for kind, _, _ in before} >= DEPLOYED_KINDS, sorted(before)

    returncode, report = playbook("undeploy.yml", deployed)

    assert returncode != 0
    messages = " ".join(failure_messages(report))
    assert "%s/inference" % WORKLOAD_NAMESPACE in messages
    assert "gkm_force=true" in messages
    after = labelled_objects(kube)
    assert {o for o in before if o[0] != "Pod"} == {o for o in after if o[0] != "Pod"}


def test_forced_undeploy_leaves_nothing_labelled_as_ours(deployed, kube):
    from kubernetes import client

    returncode, report = playbook("undeploy.yml", deployed, "-e", "gkm_force=true", "-e", "gkm_remove_crds=true")
    assert returncode == 0, failure_messages(report)

    # The forced run leaves the mounted PVC Terminating until its pod ends, as the refusal message says.
    client.CoreV1Api(kube).delete_namespaced_pod("inference", WORKLOAD_NAMESPACE, grace_period_seconds=0)
    assert wait_until_none_labelled(kube) == set()
    crds = {crd.metadata.name for crd in client.ApiextensionsV1Api(kube).list_custom_resource_definition().items}
    assert not {"gkmcaches.gkm.io", "clustergkmcaches.gkm.io"} & crds
