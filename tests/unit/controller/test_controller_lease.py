"""Writes only while this replica leads (controller/gkm_controller/lease.py): the Lease's local deadline, on the
monotonic clock, checked before every write of a reconcile alongside the deletion guard."""

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import ClusterIndex
from controller.gkm_controller.deletion import DeletionGuard, GuardedKube
from controller.gkm_controller.lease import LeaseDeadline, NotLeading
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
