"""Writes only while this replica leads (controller/gkm_controller/lease.py): the Lease's local deadline, on the
monotonic clock, checked before every write of a reconcile alongside the deletion guard."""

import copy
from datetime import datetime, timedelta, timezone

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import ClusterIndex
from controller.gkm_controller.deletion import DeletionGuard, GuardedKube
from controller.gkm_controller.lease import LEASE_NAME, LeaseDeadline, LeaseElector, NotLeading
from controller.gkm_controller.reconciles import Reconciler


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_no_write_before_the_first_renewal_nor_past_the_deadline_and_reads_always():
    clock = Clock()
    lease = LeaseDeadline(margin=1.0, clock=clock)
    lease.check("GET", "a read")
    with pytest.raises(NotLeading, match="refused PATCH PersistentVolume pv-1"):
        lease.check("PATCH", "PersistentVolume pv-1")
    lease.renewed(at=100.0, duration=8)
    lease.check("PATCH", "PersistentVolume pv-1")
    clock.now = 106.9
    assert lease.leading()
    clock.now = 107.0  # 8 s less the margin
    assert not lease.leading()
    with pytest.raises(NotLeading):
        lease.check("DELETE", "Job j")
    lease.renewed(at=106.0, duration=8)
    assert lease.leading()
    lease.lost()
    assert not lease.leading()


def test_a_guarded_kube_asks_every_guard_and_the_reconciler_adds_the_lease():
    clock = Clock()
    lease = LeaseDeadline(clock=clock)
    kube = GuardedKube(client.ApiClient(), DeletionGuard("GKMCache", "x", "team-a", body={"metadata": {}}), lease)
    with pytest.raises(NotLeading):
        kube.request("POST", "/api/v1/namespaces/team-a/persistentvolumeclaims", what="PVC")
    assert kube.requests == 0

    seen = []
    body = {"kind": "GKMCache", "metadata": {"name": "x", "namespace": "team-a", "uid": "u"}}
    Reconciler(client.ApiClient(), ClusterIndex(), {}, lease=lease,
               run=lambda kube, *args, **kwargs: seen.append(kube))("GKMCache", body, False)
    assert seen[0].guards[1] is lease


# ------------------------------------------------------------------ taking and renewing the Lease (LeaseElector)

WALL = datetime(2026, 11, 27, 17, 0, 0, tzinfo=timezone.utc)


class Server:
    """The Lease as the API server keeps it: a write carrying a stale resourceVersion is a conflict."""

    def __init__(self, lease=None):
        self.lease, self.version = lease, 1

    def read(self):
        return copy.deepcopy(self.lease)

    def write(self, elector, step):
        sent = step.body["metadata"].get("resourceVersion")
        held = (self.lease or {}).get("metadata", {}).get("resourceVersion")
        if (step.action == "create") != (self.lease is None) or sent != held:
            elector.refused(step)
            return False
        self.version += 1
        self.lease = copy.deepcopy(step.body)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        elector.written(step, self.read())
        return True

    def turn(self, elector):
        step = elector.decide(self.read())
        if step.body is not None:
            self.write(elector, step)
        return step


def elector(identity, clock, **kwargs):
    return LeaseElector(identity, "gkm-system", deadline=LeaseDeadline(margin=1.0, clock=clock), clock=clock,
                        wall=lambda: WALL + timedelta(seconds=clock.now), **kwargs)


def held_by(holder, duration=15, renewed="2026-11-27T16:59:59.000000Z"):
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE_NAME, "namespace": "gkm-system", "resourceVersion": "7"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": renewed,
                     "acquireTime": "2026-11-27T16:00:00.000000Z", "leaseTransitions": 3}}


def test_the_first_replica_creates_the_lease_and_renews_it_every_period():
    clock, server = Clock(), Server()
    a = elector("gkm-operator-a", clock)
    step = server.turn(a)
    assert step.action == "create" and a.leading and a.deadline.leading()
    assert server.lease["spec"] == {"holderIdentity": "gkm-operator-a", "leaseDurationSeconds": 8,
                                    "acquireTime": "2026-11-27T17:01:40.000000Z",
                                    "renewTime": "2026-11-27T17:01:40.000000Z", "leaseTransitions": 0}
    assert server.lease["metadata"]["name"] == "gkm-cluster-operator" and a.period() == 2
    clock.now += 2
    assert server.turn(a).action == "renew"
    assert server.lease["spec"]["renewTime"] == "2026-11-27T17:01:42.000000Z"
    assert server.lease["spec"]["acquireTime"] == "2026-11-27T17:01:40.000000Z"
    assert server.lease["spec"]["leaseTransitions"] == 0
    clock.now += 6.9  # the deadline runs from the last renewal's send time: 102 + 8 - 1
    assert a.deadline.leading()
    clock.now += 0.1
    assert not a.deadline.leading()


def test_a_follower_waits_while_the_holder_renews_and_takes_over_after_the_recorded_duration():
    clock, server = Clock(), Server()
    a, b = elector("gkm-operator-a", clock), elector("gkm-operator-b", clock)
    server.turn(a)
    for _renewal in range(10):  # a renews every 2 s: b never takes
        clock.now += 2
        server.turn(a)
        assert server.turn(b).action == "wait" and not b.leading and not b.deadline.leading()
    # a dies after its last renewal; b counts the recorded 8 s on its own clock from the last change it saw
    died = clock.now
    actions = []
    while not b.leading:
        clock.now += 2
        actions.append((clock.now - died, server.turn(b).action))
    assert actions == [(2, "wait"), (4, "wait"), (6, "wait"), (8, "take")]
    assert not a.deadline.leading()  # a's own deadline passed 1 s before b could take
    assert server.lease["spec"]["holderIdentity"] == "gkm-operator-b"
    assert server.lease["spec"]["leaseTransitions"] == 1 and b.deadline.leading()


def test_a_leader_that_sees_another_holder_has_lost_and_stops_writing():
    clock, server = Clock(), Server()
    a = elector("gkm-operator-a", clock)
    server.turn(a)
    server.lease = held_by("gkm-operator-b")
    step = server.turn(a)
    assert step.action == "wait" and "lost" in step.reason
    assert (a.leading, a.lost, a.deadline.leading()) == (False, True, False)
    with pytest.raises(NotLeading):
        a.deadline.check("PATCH", "GKMCache team-a/vector-add")


def test_the_old_engines_recorded_duration_is_honoured_and_its_renewals_restart_the_count():
    clock = Clock()
    server = Server(held_by("gkm-operator-old", duration=15))
    b = elector("gkm-operator-new", clock)
    assert server.turn(b).action == "wait"  # first seen: the count starts now, whatever renewTime says
    clock.now += 14
    assert server.turn(b).action == "wait"
    server.lease["spec"]["renewTime"] = "2026-11-27T17:01:54.000000Z"  # the old engine renewed
    clock.now += 2
    assert server.turn(b).action == "wait"
    clock.now += 14.9
    assert server.turn(b).action == "wait"
    clock.now += 0.1
    step = server.turn(b)
    assert step.action == "take" and "recorded 15 s" in step.reason and b.leading
    assert server.lease["spec"]["leaseDurationSeconds"] == 8 and server.lease["spec"]["leaseTransitions"] == 4


def test_two_followers_taking_at_once_conflict_and_only_one_leads():
    clock = Clock()
    server = Server(held_by("gkm-operator-old", duration=8))
    b, c = elector("gkm-operator-b", clock), elector("gkm-operator-c", clock)
    for candidate in (b, c):
        assert candidate.decide(server.read()).action == "wait"
    clock.now += 8
    read = server.read()
    steps = [(candidate, candidate.decide(copy.deepcopy(read))) for candidate in (b, c)]
    assert [step.action for _candidate, step in steps] == ["take", "take"]
    assert [server.write(candidate, step) for candidate, step in steps] == [True, False]
    assert (b.leading, c.leading, c.deadline.leading()) == (True, False, False)
    clock.now += 2
    assert server.turn(c).action == "wait"  # b's take is a change: c counts again


def test_a_released_lease_is_taken_at_once_and_one_held_in_this_pods_name_is_renewed():
    clock = Clock()
    released = held_by("")
    assert elector("gkm-operator-b", clock).decide(released).action == "take"
    server = Server(held_by("gkm-operator-a"))
    a = elector("gkm-operator-a", clock)  # the container restarted: the process that wrote it is gone
    assert server.turn(a).action == "renew" and a.leading
    assert server.lease["spec"]["leaseTransitions"] == 3  # the same holder: no transition
    assert server.lease["spec"]["acquireTime"] == "2026-11-27T17:01:40.000000Z"


def test_a_failed_renewal_keeps_the_deadline_of_the_last_good_one():
    clock, server = Clock(), Server()
    a = elector("gkm-operator-a", clock)
    server.turn(a)
    clock.now += 2
    step = a.decide(server.read())
    a.refused(step)  # the API server did not answer
    assert a.leading and a.deadline.leading()
    clock.now += 5
    assert not a.deadline.leading()  # 100 + 8 - 1: writes end, whatever a believes
