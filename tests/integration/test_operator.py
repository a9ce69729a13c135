"""Operator mode on the real API server with kwok nodes: ansible-operator runs the collection's reconcile for
GKMCache and Node events, with no playbook run (sim.py operator-up; roles/gkm/files/operator/watches.yaml).

The operator reconciles every cache of the cluster while it runs, so the module starts it and stops it again;
each test's cache is placed on a node pool of its own (a label), so other caches and nodes play no part.
"""

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.modules import AuditWrites, run_module
from tests.helpers.operator_caches import apply, kubectl, live, phase_is, poll, pool_nodes
from tests.helpers.sim import SIM_SCRIPT, sim_control

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sim_command(*args):
    result = subprocess.run([sys.executable, SIM_SCRIPT, *args], check=True, cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def tools_image(sim):
    # kwok runs no containers: any reference does, as long as the operator and a playbook give the same one.
    return "%s/gkm-cluster/tools:sim" % sim.registry


@pytest.fixture(scope="module")
def operator(sim, crds):
    started = sim_command("operator-up", "--tools-image", tools_image(sim))
    yield started
    sim_command("operator-down")


@pytest.fixture(scope="module")
def image(registry):
    return kcache_images.build_image(registry.host, "operator/vector-add", "v1",
                                     kcache_images.CacheSpec(backend="hip"))


def settled(crds, namespace, name, quiet_seconds=5):
    """True when the cache resource did not change for quiet_seconds."""
    version = live(crds, namespace, name)["metadata"]["resourceVersion"]
    time.sleep(quiet_seconds)
    return live(crds, namespace, name)["metadata"]["resourceVersion"] == version


def cache_objects(kube, namespace, name):
    """The cache's PVCs, Jobs and PVs (by the labels every object of a cache carries)."""
    selector = "gkm.io/cache=%s,gkm.io/cache-namespace=%s" % (name, namespace)
    return {
        "pvcs": client.CoreV1Api(kube).list_persistent_volume_claim_for_all_namespaces(label_selector=selector).items,
        "jobs": client.BatchV1Api(kube).list_job_for_all_namespaces(label_selector=selector).items,
        "pvs": client.CoreV1Api(kube).list_persistent_volume(label_selector=selector).items,
    }


def test_kubectl_apply_then_nodes_join_then_delete_without_a_playbook(
        operator, sim, crds, kube, namespace, image, sim_nodes, record_property):
    pool = "op-%s" % uuid.uuid4().hex[:4]
    first = pool_nodes(sim_nodes, pool, 3)
    name = "op-cache"
    started = time.monotonic()
    apply(sim, name, namespace, image.ref, pool)
    status = poll("Extracted on 3 nodes", lambda: phase_is(crds, namespace, name, "Extracted", 3), 180)
    apply_to_extracted = time.monotonic() - started
    record_property("apply_to_extracted_s", round(apply_to_extracted, 1))
    assert status["resolvedDigest"] == image.digest
    assert live(crds, namespace, name)["metadata"]["finalizers"] == ["gkm.io/cache-cleanup"]

    # A playbook's reconcile beside the operator, with the same options, writes nothing: neither undoes the other.
    # The operator first settles: the runs its own writes raise (status, node labels) end with nothing to change.
    poll("the operator settled", lambda: settled(crds, namespace, name), 60)
    audit = AuditWrites()
    beside = run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=namespace,
                        extract_image=tools_image(sim), registry_plain_http=True, wait=True)
    assert not beside.get("failed"), beside.get("msg")
    assert not beside["changed"] and not beside["status_changed"]
    assert audit.since("/namespaces/%s/" % namespace) == []

    # 50 GPU nodes join the pool: their Node events alone distribute the cache to them.
    started = time.monotonic()
    joined = pool_nodes(sim_nodes, pool, 50)
    poll("Extracted on 53 nodes", lambda: phase_is(crds, namespace, name, "Extracted", 53), 600)
    join_to_extracted = time.monotonic() - started
    record_property("nodes_join_to_extracted_s", round(join_to_extracted, 1))
    objects = cache_objects(kube, namespace, name)
    # Every node's slot PVC (the serving PVC named as the cache is the namespace's, on no node).
    nodes_with_pvc = {pvc.metadata.labels["gkm.io/node"] for pvc in objects["pvcs"]
                      if "gkm.io/node" in pvc.metadata.labels}
    assert nodes_with_pvc == set(first + joined)
    assert {pvc.status.phase for pvc in objects["pvcs"]} == {"Bound"}
    print("operator: apply->Extracted on 3 nodes %.1fs; 50 nodes join->Extracted on 53 %.1fs"
          % (apply_to_extracted, join_to_extracted))

    # Deleted with kubectl: the finalizer deletes every object of the cache, then the resource goes; PVCs and PVs
    # go once Kubernetes' own protection finalizers let them.
    kubectl(sim, "delete", "gkmcache", name, "-n", namespace, "--wait=false")
    poll("the cache resource gone", lambda: live(crds, namespace, name) is None, 180)
    poll("every object of the cache gone", lambda: not any(cache_objects(kube, namespace, name).values()), 60)


def test_the_operator_holds_the_leader_lease(operator, kube):
    # Two replicas, one leading: test_operator_replicas.py (each in a network namespace of its own).
    lease = poll("the operator's Lease", lambda: _lease(kube), 60)
    with open(os.path.join(sim_control.SIM_DIR, "logs", "operator.log")) as handle:
        log = handle.read()
    assert "successfully acquired lease gkm-system/gkm-cluster-operator" in log
    assert lease.spec.lease_duration_seconds > 0


def _lease(kube):
    try:
        lease = client.CoordinationV1Api(kube).read_namespaced_lease("gkm-cluster-operator", "gkm-system")
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return lease if lease.spec.holder_identity else None
