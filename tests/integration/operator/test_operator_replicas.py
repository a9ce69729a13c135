"""Two replicas of the operator (the kopf controller, as the gkm role's Deployment runs it): exactly one holds the
Lease and reconciles; killed mid-run (SIGKILL, no release), the other takes over within 15 s and finishes its work.

Both run here as processes of the test (tests/helpers/controller_process.py), each with its own identity and probe
port, their Lease in a namespace of the test's: what a pod adds (image, RBAC, Pod Security) is
test_operator_in_cluster.py's.
"""

import time
import urllib.request
import uuid

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.controller_process import start_controller
from tests.helpers.operator_caches import apply, cache_objects, kubectl, live, per_node, phase_is, poll, pool_nodes
from tests.helpers.sim import sim_control

pytest.importorskip("kopf")  # requirements/dev.txt pins it for Python 3.11 and later

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

TAKE_OVER_S = 15


def healthy(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def reconciled(replica, namespace, cache):
    return replica.lines(r"reconcile GKMCache %s/%s \(present; " % (namespace, cache))


@pytest.fixture
def replicas(sim, crds, kube, tmp_path):
    core = client.CoreV1Api(kube)
    lease_namespace = "t-replicas-%s" % uuid.uuid4().hex[:5]
    core.create_namespace({"metadata": {"name": lease_namespace, "labels": {"gkm.io/test": "true"}}})
    started = []
    try:
        for letter in "ab":
            replica = start_controller(sim, str(tmp_path / ("%s.log" % letter)), lease_namespace,
                                       identity="gkm-operator-%s" % letter, probe_port=sim_control.free_port())
            started.append(replica)
        yield started
    finally:
        for replica in started:
            if replica.process.poll() is None:
                replica.stop()
        core.delete_namespace(lease_namespace)


@pytest.fixture(scope="module")
def image(registry):
    return kcache_images.build_image(registry.host, "operator/replicas", "v1", kcache_images.CacheSpec(backend="hip"))


def test_one_replica_leads_and_the_other_takes_over_mid_run_when_it_dies(
        replicas, sim, crds, kube, namespace, image, sim_nodes, record_property):
    pool = "rep-%s" % uuid.uuid4().hex[:4]
    pool_nodes(sim_nodes, pool, 2)
    poll("both replicas answering their probes", lambda: all(healthy(replica.probe_port) for replica in replicas), 60)
    leader = poll("one replica leading", lambda: next(
        (replica for replica in replicas if replica.lines(r"leading: ")), None), 60)
    follower = next(replica for replica in replicas if replica is not leader)
    leader.become_ready()

    apply(sim, "first", namespace, image.ref, pool)
    poll("first Extracted on 2 nodes", lambda: phase_is(crds, namespace, "first", "Extracted", 2), 120)
    assert reconciled(leader, namespace, "first")
    # The follower started no kopf: it listed nothing, reconciled nothing, and still waits for the Lease.
    assert follower.process.poll() is None and not follower.lines(r"leading: |ready: |reconcile "), follower.log()
    assert healthy(follower.probe_port)

    # Killed mid-run: the leader has written part of the second cache's objects, and waits for their Jobs.
    apply(sim, "second", namespace, image.ref, pool)
    poll("the leader's first objects of second", lambda: cache_objects(kube, namespace, "second")["pvcs"], 60, 0.05)
    assert not phase_is(crds, namespace, "second", "Extracted", 2), "second was Extracted before the kill"
    leader.process.kill()
    leader.process.wait()
    killed = time.monotonic()
    poll("the follower leading", lambda: follower.lines(r"leading: take"), TAKE_OVER_S + 5, 0.1)
    leads_s = time.monotonic() - killed
    poll("the follower ready", lambda: follower.lines(r" ready: "), TAKE_OVER_S + 5, 0.1)
    take_over_s = time.monotonic() - killed
    record_property("leads_after_kill_s", round(leads_s, 1))
    record_property("takeover_s", round(take_over_s, 1))
    print("replicas: SIGKILL of the leader -> the follower leads %.1fs, ready %.1fs" % (leads_s, take_over_s))
    assert take_over_s <= TAKE_OVER_S, follower.log()[-4000:]

    poll("second Extracted on 2 nodes", lambda: phase_is(crds, namespace, "second", "Extracted", 2), 120)
    assert reconciled(follower, namespace, "second")
    # Converged, with nothing twice: one slot PVC and PV per node, and at most one Job (with its PVC and PV, labelled
    # gkm.io/store) filling the node's store, gone once the slot is marked.
    objects = cache_objects(kube, namespace, "second")
    slots = {kind: [obj for obj in objects[kind] if "gkm.io/store" not in (obj.metadata.labels or {})]
             for kind in ("pvcs", "pvs")}
    nodes = sorted(per_node(slots["pvcs"]))
    counts = {kind: per_node(items) for kind, items in objects.items()}
    assert len(nodes) == 2 and all(per_node(slots[kind]) == dict.fromkeys(nodes, 1) for kind in slots), counts
    assert set(counts["jobs"]) <= set(nodes) and set(counts["jobs"].values()) <= {1}, counts

    # The new leader's finalizer removes both caches (the first one's too, which its predecessor reconciled).
    kubectl(sim, "delete", "gkmcache", "first", "second", "-n", namespace, "--wait=false")
    poll("both caches gone", lambda: live(crds, namespace, "first") is None and live(crds, namespace, "second") is None,
         120)
    assert follower.process.poll() is None, follower.log()[-4000:]
