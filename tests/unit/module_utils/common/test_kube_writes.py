"""common/kube.py Kube.written: each object a run applied (at its reply's resourceVersion) or deleted, in order,
so a reader fed by watches can wait until it shows them (facts/index.py IndexSource); a dry run records none. A batch
(Kube.map) reports each object's failure, but a write the caller's guard refused ends it."""

import pytest
from kubernetes.client import ApiClient

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube, KubeError, WriteRefused

PVC = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "slot", "namespace": "team-a"}}


class Replying(Kube):
    """Answers a server-side apply with the object at resourceVersion 41 and a deletion with 200."""

    def __init__(self, dry_run=False):
        super().__init__(ApiClient(), dry_run=dry_run)

    def request(self, method, path, query=None, body=None, *args, **kwargs):
        if method == "PATCH":
            return 200, dict(body, metadata=dict(body["metadata"], resourceVersion="41"))
        return 200, {}


def test_applied_and_deleted_objects_are_recorded_in_order_and_a_dry_run_records_none():
    kube = Replying()
    kube.apply(PVC)
    kube.delete("Job", "extract", "team-a")
    kube.delete("PersistentVolume", "slot-pv")
    assert kube.written == [("PersistentVolumeClaim", "team-a", "slot", "41"), ("Job", "team-a", "extract", None),
                            ("PersistentVolume", "", "slot-pv", None)]
    dry = Replying(dry_run=True)
    dry.apply(PVC)
    dry.delete("Job", "extract", "team-a")
    assert dry.written == []


def test_a_batch_returns_each_objects_failure_but_a_refused_write_ends_it():
    kube = Replying()

    def write(name):
        if name == "broken":
            raise KubeError("PVC broken: 422")
        if name == "refused":
            raise WriteRefused("GKMCache team-a/a: it has a deletion timestamp; refused POST PVC refused")
        return name

    results = kube.map(write, ["a", "broken", "b"])
    assert results[0] == "a" and isinstance(results[1], KubeError) and results[2] == "b"
    with pytest.raises(WriteRefused, match="refused POST PVC refused"):
        kube.map(write, ["a", "refused", "b"])
    with pytest.raises(WriteRefused):
        kube.map(write, ["refused"])
