"""Operator mode on the real API server with kwok nodes: ansible-operator runs the collection's reconcile for
GKMCache and Node events, with no playbook run (sim.py operator-up; roles/gkm/files/operator/watches.yaml).

The operator reconciles every cache of the cluster while it runs, so the module starts it and stops it again;
each test's cache is placed on a node pool of its own (a label), so other caches and nodes play no part.
"""

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.operator_caches import (
    apply,
    assert_module_beside_writes_nothing,
    cache_objects,
    kubectl,
    kwok_tools_image,
    live,
    per_node,
    phase_is,
    poll,
    pool_nodes,
    settled,
)
from tests.helpers.paths import ROOT
from tests.helpers.sim import SIM_SCRIPT, sim_control

pytestmark = [pytest.mark.cluster, pytest.mark.registry]


def sim_command(*args):
    result = subprocess.run([sys.executable, SIM_SCRIPT, *args], check=True, cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def operator(sim, crds):
    started = sim_command("operator-up", "--tools-image", kwok_tools_image(sim))
    yield started
    sim_command("operator-down")


@pytest.fixture(scope="module")
def image(registry):
    return kcache_images.build_image(registry.host, "operator/vector-add", "v1",
                                     kcache_images.CacheSpec(backend="hip"))


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
    assert_module_beside_writes_nothing(sim, crds, namespace, name, "operator")

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


def test_a_node_whose_gpu_changes_loses_the_cache_and_gets_it_back_without_a_playbook(
        operator, sim, crds, kube, namespace, image, sim_nodes, record_property):
    """A hip cache on 2 kwok AMD nodes. One node's GPU labels become an NVIDIA GPU's: its Node event alone has the
    operator remove the cache's objects there (the image cannot run on it) and count it Incompatible; with its AMD
    labels back, the node gets the cache again."""
    pool = "gpu-%s" % uuid.uuid4().hex[:4]
    nodes = pool_nodes(sim_nodes, pool, 2)
    name = "op-gpu-%s" % uuid.uuid4().hex[:4]
    core = client.CoreV1Api(kube)
    apply(sim, name, namespace, image.ref, pool)
    try:
        poll("Extracted on 2 nodes", lambda: phase_is(crds, namespace, name, "Extracted", 2), 180)
        amd = {key: value for key, value in core.read_node(nodes[0]).metadata.labels.items()
               if key.startswith("gkm.io/gpu-") or key == "amd.com/gpu.present"}
        started = time.monotonic()
        core.patch_node(nodes[0], {"metadata": {"labels": dict(NVIDIA_GPU_LABELS, **{"amd.com/gpu.present": None})}})
        status = poll("the node left out as Incompatible", lambda: _held_on(kube, crds, namespace, name, [nodes[1]]),
                      120)
        to_incompatible = time.monotonic() - started
        assert status["nodeIncompatibleCnt"] == 1, status

        started = time.monotonic()
        core.patch_node(nodes[0], {"metadata": {"labels": dict(amd, **{"nvidia.com/gpu.present": None})}})
        poll("the cache back on both nodes", lambda: _held_on(kube, crds, namespace, name, nodes), 120)
        to_extracted = time.monotonic() - started
        record_property("gpu_change_to_removed_s", round(to_incompatible, 1))
        record_property("gpu_back_to_extracted_s", round(to_extracted, 1))
        print("operator: GPU labels to NVIDIA -> objects removed, Incompatible %.1fs; back to AMD -> Extracted %.1fs"
              % (to_incompatible, to_extracted))
    finally:
        kubectl(sim, "delete", "gkmcache", name, "-n", namespace, "--wait=false")
        poll("the cache resource gone", lambda: live(crds, namespace, name) is None, 180)


NVIDIA_GPU_LABELS = {"gkm.io/gpu-backend": "cuda", "gkm.io/gpu-arch": "90", "gkm.io/gpu-warp-size": "32",
                     "nvidia.com/gpu.present": "true"}


def _held_on(kube, crds, namespace, name, nodes):
    """The cache's status once it is Extracted on exactly these nodes, each with its slot PVC and PV, and no other."""
    status = phase_is(crds, namespace, name, "Extracted", len(nodes))
    objects = cache_objects(kube, namespace, name)
    held = [sorted(per_node(objects[kind])) for kind in ("pvcs", "pvs")]
    return status if held == [sorted(nodes)] * 2 else None


# A run of the operator waits this long walking a rollout's waves. Each wave polls its Job at least once (1 s), so
# every run of a 3-node rollout at maxUnavailable 1 ends still moving after one wave: the next run comes from the
# requeue, not from the reconcile period.
SHORT_WAIT_SECONDS = 1
# Shorter than the role's 15 s default, to keep the test short; the mechanism is the same.
REQUEUE_PERIOD = "5s"
REQUEUE_LOGGED = "Set the reconciliation to occur after %s" % REQUEUE_PERIOD


@contextlib.contextmanager
def operator_with(sim, run_vars):
    """The operator restarted with these variables for its runs inside the block, as the module fixture starts it
    after."""
    sim_command("operator-down")
    try:
        sim_command("operator-up", "--tools-image", kwok_tools_image(sim), "--run-vars", json.dumps(run_vars))
        yield
    finally:
        sim_command("operator-down")
        sim_command("operator-up", "--tools-image", kwok_tools_image(sim))


def requeues_logged(name):
    """The engine's log lines of requeue_after periods it set for the named resource."""
    with open(os.path.join(sim_control.SIM_DIR, "logs", "operator.log")) as handle:
        return sum(1 for line in handle if REQUEUE_LOGGED in line and '"name":"%s"' % name in line)


def test_a_rollout_longer_than_a_run_is_requeued_and_completes_without_a_playbook(
        operator, sim, crds, namespace, image, registry, sim_nodes, record_property):
    """The cache moves to a new digest with upgradePolicy maxUnavailable 1 over 3 kwok nodes: the operator's runs
    end with the rollout still moving, have the engine requeue the cache (roles/operator_events), and complete it long
    before the 5-minute reconcile period."""
    pool = "roll-%s" % uuid.uuid4().hex[:4]
    pool_nodes(sim_nodes, pool, 3)
    name = "op-roll-%s" % uuid.uuid4().hex[:4]
    moved = kcache_images.build_image(registry.host, "operator/vector-add", "v2",
                                      kcache_images.CacheSpec(backend="hip", seed=31))
    policy = {"maxUnavailable": 1}
    apply(sim, name, namespace, image.ref, pool, policy)
    try:
        poll("Extracted on 3 nodes", lambda: phase_is(crds, namespace, name, "Extracted", 3), 180)
        with operator_with(sim, {"caches_wait_timeout": SHORT_WAIT_SECONDS,
                                 "operator_events_rollout_requeue": REQUEUE_PERIOD}):
            started = time.monotonic()
            apply(sim, name, namespace, moved.ref, pool, policy)
            status = poll("the rollout Complete", lambda: _upgrade_complete(crds, namespace, name, moved.digest), 240)
            rollout_seconds = time.monotonic() - started
            requeues = requeues_logged(name)
            record_property("rollout_3_nodes_s", round(rollout_seconds, 1))
            assert status["resolvedDigest"] == moved.digest and status["upgrade"]["counts"]["upgraded"] == 3, status
            # Runs ended with the rollout moving, and the engine took the short period from them.
            assert requeues >= 1, "no requeue_after in the operator's log for %s" % name
            # The run that completed it asked for none: the watch's period is back.
            poll("the operator settled", lambda: settled(crds, namespace, name), 60)
            assert requeues_logged(name) == requeues
        print("operator rollout: 3 nodes, maxUnavailable 1, runs waiting %ds: Complete %.1fs after the move, "
              "%d requeue(s)" % (SHORT_WAIT_SECONDS, rollout_seconds, requeues))
        assert rollout_seconds < 150, "the rollout took %.1fs, half the reconcile period" % rollout_seconds
    finally:
        kubectl(sim, "delete", "gkmcache", name, "-n", namespace, "--wait=false")
        poll("the cache resource gone", lambda: live(crds, namespace, name) is None, 180)


def _upgrade_complete(crds, namespace, name, digest):
    """The status once status.upgrade says Complete at the digest (the first install's says so at its own)."""
    status = (live(crds, namespace, name) or {}).get("status") or {}
    upgrade = status.get("upgrade") or {}
    return status if upgrade.get("phase") == "Complete" and upgrade.get("digest") == digest[7:19] else None


def test_the_operator_holds_the_leader_lease(operator, kube):
    # Two replicas, one leading: test_operator_replicas.py (the kopf controller, the in-cluster operator's engine).
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
