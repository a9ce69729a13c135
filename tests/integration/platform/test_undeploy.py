"""playbooks/undeploy.yml on the real simulated cluster, run as users run it (ansible-playbook -i inventories/sim).

deploy.yml installs the inventory's sample caches (a GKMCache and a ClusterGKMCache over two namespaces) and
the webhook; a workload pod then mounts one node's cache PVC. Next to them lies what undeploy must clean up
without a cache resource to start from, as other runs and earlier versions leave it: a workload namespace
labelled as ours (earlier versions created them labelled) holding the PVC, hostPath PV and Job of a cache
whose resource is gone, and a workload pod of the namespace's owner that mounts that PVC.

Undeploy must refuse while either pod mounts a cache PVC, listing both and removing nothing, and so for the pods of a
DaemonSet started later that mount a serving PVC (what it reads are the pods, at undeploy time); with gkm_force
it goes ahead, and once the pods have ended no object labelled app.kubernetes.io/managed-by=gkm.cluster
remains in any namespace or at cluster scope, whatever else used the cluster before. The scan asks the API
server for every listable kind it serves, not a list of the kinds we expect to have written. The labelled
workload namespace is not deleted: it only loses our label.
"""

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from tests.helpers import platform
from tests.helpers.paths import ROOT
from tests.helpers.roles import run_sim_playbook

MANAGED = "app.kubernetes.io/managed-by=gkm.cluster"
# What deploy.yml writes with inventories/sim: the webhook's namespace and configuration, per cache the
# PVCs, hostPath PVs and extraction Jobs (whose pods carry the Job's labels), and the per-node status objects.
DEPLOYED_KINDS = {"Namespace", "MutatingWebhookConfiguration", "PersistentVolumeClaim", "PersistentVolume", "Job",
                  "GKMCacheNode", "ClusterGKMCacheNode"}
WORKLOAD_NAMESPACE = "gkm-demo"
GHOST_CACHE = "ghost-cache"
plain_node = platform.plain_node


def playbook(name, sim_dir, *extra):
    """The playbook against the session's cluster, which is already up (no gpu_sim role)."""
    return run_sim_playbook(name, sim_dir, "-e", "gkm_platform=none", *extra)


def labelled_objects(kube):
    """(kind, namespace, name) of every object labelled as ours, over every listable kind the server serves.

    Discovery is asked afresh each time (a cached one would still list the CRDs undeploy removed).
    """
    from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube

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


def run_pod(core, namespace, name, node, claim):
    """A workload pod of the namespace's owner (not labelled as ours) that mounts claim; waits until it runs."""
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": name, "image": "registry.example/inference:1",
                            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}],
            "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": claim}}],
        },
    })
    deadline = time.monotonic() + 60
    while core.read_namespaced_pod(name, namespace).status.phase != "Running":
        assert time.monotonic() < deadline, "the workload pod %s/%s never ran" % (namespace, name)
        time.sleep(0.5)


def delete_pod(core, namespace, name):
    from kubernetes import client

    try:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    except client.ApiException as error:
        if error.status != 404:
            raise


def plant_leftovers(kube, node):
    """A workload namespace labelled as ours with a cache's PVC, PV and Job but no cache resource; its name."""
    from kubernetes import client

    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    namespace = "gkm-legacy-%s" % uuid.uuid4().hex[:6]
    labels = {"app.kubernetes.io/managed-by": "gkm.cluster", "gkm.io/cache": GHOST_CACHE,
              "gkm.io/cache-namespace": namespace, "gkm.io/node": node, "gkm.io/digest": "0123456789ab"}
    core.create_namespace({"metadata": {"name": namespace, "labels": {"app.kubernetes.io/managed-by": "gkm.cluster"}}})
    core.create_persistent_volume({
        "metadata": {"name": "gkm-%s-%s" % (GHOST_CACHE, namespace), "labels": labels},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": "/var/lib/gkm/%s/%s" % (namespace, GHOST_CACHE), "type": "DirectoryOrCreate"},
                 "claimRef": {"namespace": namespace, "name": GHOST_CACHE}},
    })
    core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": GHOST_CACHE, "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "volumeName": "gkm-%s-%s" % (GHOST_CACHE, namespace),
                 "resources": {"requests": {"storage": "1Gi"}}},
    })
    batch.create_namespaced_job(namespace, {
        "metadata": {"name": "%s-extract" % GHOST_CACHE, "labels": labels},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": labels},
            "spec": {"restartPolicy": "Never", "nodeName": node,
                     "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "extract", "image": "quay.io/gkm-cluster/tools:0.1.0"}]}}},
    })
    deadline = time.monotonic() + 60
    while core.read_namespaced_persistent_volume_claim(GHOST_CACHE, namespace).status.phase != "Bound":
        assert time.monotonic() < deadline, "the leftover PVC never bound"
        time.sleep(0.5)
    return namespace


@pytest.fixture(scope="module")
def deployed(sim, kube, tools_image):
    """The sim inventory deployed, a workload pod that mounts vector-add's PVC on its node, and the leftovers.

    Yields (state directory, the labelled workload namespace).
    """
    from kubernetes import client

    sim_dir = os.path.dirname(sim.kubeconfig)
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "sample_caches.py")], check=True,
                   env=dict(os.environ, GKM_SIM_DIR=sim_dir), capture_output=True)
    # With real nodes the webhook server runs in the cluster, from this checkout's tools image.
    run = playbook("deploy.yml", sim_dir, "-e", "gkm_tools_image=%s" % tools_image)
    assert run.returncode == 0, run.failures()
    pvcs = client.CoreV1Api(kube).list_namespaced_persistent_volume_claim(
        WORKLOAD_NAMESPACE, label_selector=MANAGED + ",gkm.io/cache=vector-add,gkm.io/node").items
    assert pvcs, "deploy.yml made no PVC of vector-add in %s" % WORKLOAD_NAMESPACE
    pvc = pvcs[0]
    node = pvc.metadata.labels["gkm.io/node"]
    core = client.CoreV1Api(kube)
    run_pod(core, WORKLOAD_NAMESPACE, "inference", node, pvc.metadata.name)
    legacy = plant_leftovers(kube, node)
    run_pod(core, legacy, "reader", node, GHOST_CACHE)
    yield sim_dir, legacy
    delete_pod(core, WORKLOAD_NAMESPACE, "inference")
    try:
        core.delete_namespace(legacy)
    except client.ApiException as error:
        if error.status != 404:
            raise


def test_undeploy_refuses_while_a_pod_mounts_a_cache(deployed, kube):
    sim_dir, legacy = deployed
    before = labelled_objects(kube)
    assert {entry[0] for entry in before} >= DEPLOYED_KINDS, sorted(before)

    run = playbook("undeploy.yml", sim_dir)

    assert run.returncode != 0
    messages = " ".join(run.failures())
    # The pod on a cache with a resource (cache_info) and the pod on the PVC of a cache without one.
    assert "%s/inference" % WORKLOAD_NAMESPACE in messages
    assert "%s/reader" % legacy in messages
    assert "gkm_force=true" in messages
    after = labelled_objects(kube)
    assert {o for o in before if o[0] != "Pod"} == {o for o in after if o[0] != "Pod"}


def test_undeploy_refuses_for_pods_started_after_the_last_reconcile(deployed, kube):
    """A DaemonSet started after deploy's last reconcile, its pods reading vector-add through the serving PVC: the
    refusal must name them (it reads the pods, not what that reconcile recorded) and remove nothing."""
    from kubernetes import client

    sim_dir, _legacy = deployed
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    labels = {"app": "late-readers"}
    apps.create_namespaced_daemon_set(WORKLOAD_NAMESPACE, {
        "metadata": {"name": "late-readers"},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            # kwok's GPU nodes only: nothing runs the image.
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gkm.io/real-node", "operator": "DoesNotExist"},
                                      {"key": "hardware-type", "operator": "In", "values": ["gpu"]}]}]}}},
            "containers": [{"name": "reader", "image": "registry.example/inference:1",
                            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}],
            "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "vector-add"}}]}}}})
    try:
        deadline = time.monotonic() + 60
        while True:
            pods = core.list_namespaced_pod(WORKLOAD_NAMESPACE, label_selector="app=late-readers").items
            if pods and all(p.status.phase == "Running" for p in pods):
                break
            assert time.monotonic() < deadline, "the DaemonSet's pods never ran: %s" % [
                (p.metadata.name, p.status.phase) for p in pods]
            time.sleep(0.5)
        before = labelled_objects(kube)

        run = playbook("undeploy.yml", sim_dir)

        assert run.returncode != 0
        messages = " ".join(run.failures())
        for pod in pods:
            assert "%s/%s" % (WORKLOAD_NAMESPACE, pod.metadata.name) in messages, messages
        after = labelled_objects(kube)
        assert {o for o in before if o[0] != "Pod"} == {o for o in after if o[0] != "Pod"}
    finally:
        apps.delete_namespaced_daemon_set("late-readers", WORKLOAD_NAMESPACE)
        deadline = time.monotonic() + 60
        while core.list_namespaced_pod(WORKLOAD_NAMESPACE, label_selector="app=late-readers").items:
            assert time.monotonic() < deadline, "the DaemonSet's pods are still there"
            time.sleep(0.5)


def test_forced_undeploy_leaves_nothing_labelled_as_ours(deployed, kube):
    from kubernetes import client

    sim_dir, legacy = deployed
    core = client.CoreV1Api(kube)
    run = playbook("undeploy.yml", sim_dir, "-e", "gkm_force=true", "-e", "gkm_remove_crds=true")
    assert run.returncode == 0, run.failures()

    # The forced run leaves the mounted PVCs Terminating until their pods end, as the refusal message says.
    delete_pod(core, WORKLOAD_NAMESPACE, "inference")
    delete_pod(core, legacy, "reader")
    assert wait_until_none_labelled(kube) == set()
    crds = {crd.metadata.name for crd in client.ApiextensionsV1Api(kube).list_custom_resource_definition().items}
    assert not {"gkmcaches.gkm.io", "clustergkmcaches.gkm.io"} & crds
    # Workloads live in the labelled namespace: it stays, without our label.
    namespace = core.read_namespace(legacy)
    assert namespace.status.phase == "Active"
    assert "app.kubernetes.io/managed-by" not in (namespace.metadata.labels or {})


def test_undeploy_removes_the_kyverno_it_installed(sim, kube, plain_node, tmp_path):
    """Kyverno's ownership record lives in the webhook's namespace, which undeploy empties before it removes
    Kyverno: the record must survive that step, or undeploy would forget that we installed Kyverno and strand it.
    Kyverno is the stand-in (tests/fixtures/standins): its objects, not its behaviour."""
    from kubernetes import client

    sim_dir = os.path.dirname(sim.kubeconfig)
    manifest, standin_objects = platform.standin(tmp_path, "kyverno.yaml", "v1.15.1")
    kyverno = ["-e", json.dumps({
        "gkm_signature_policies": True, "kyverno_manifest_path": manifest, "kyverno_wait_timeout": 60,
        "kyverno_readiness_retries": 3, "kyverno_readiness_delay": 1,
        "kyverno_attestor_keyless_issuer": "https://token.actions.githubusercontent.com",
        "kyverno_attestor_keyless_subject": "https://github.com/example-org/caches/.github/workflows/build.yml"
                                            "@refs/heads/main"})]
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "sample_caches.py")], check=True,
                   env=dict(os.environ, GKM_SIM_DIR=sim_dir), capture_output=True)
    try:
        run = playbook("deploy.yml", sim_dir, *kyverno)
        assert run.returncode == 0, run.failures()
        assert platform.record(kube, "gkm-system", "kyverno"), "deploy.yml did not record that it installed Kyverno"

        run = playbook("undeploy.yml", sim_dir, "-e", "gkm_force=true", *kyverno)
        assert run.returncode == 0, run.failures()
        assert not platform.crd_exists(kube, "clusterpolicies.kyverno.io"), "undeploy left the Kyverno it installed"
        assert wait_until_none_labelled(kube) == set()
        assert "gkm-system" not in {ns.metadata.name for ns in client.CoreV1Api(kube).list_namespace().items
                                    if ns.status.phase == "Active"}
    finally:
        platform.delete_objects(kube, standin_objects)
