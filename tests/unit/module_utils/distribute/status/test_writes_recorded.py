"""The status stage's writes made through Kube.request (a Node's label, a per-node object's create, status patch and
delete) land in Kube.written at the reply's resourceVersion, as apply and delete do, so a controller's next plan
waits until its index shows them (facts/index.py IndexSource)."""

import types

from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import node_labels, node_writer
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_objects import (
    CREATE,
    DELETE,
    PATCH_STATUS,
    NodeWrite,
)


class Answering(Kube):
    """A Kube whose requests get the given answers ((status, reply)) in turn, or by path when given a dict; the
    requests are kept."""

    def __init__(self, *answers, dry_run=False):
        super().__init__(client.ApiClient(), dry_run=dry_run)
        self.answers, self.sent = answers[0] if isinstance(answers[0], dict) else list(answers), []

    def request(self, method, path, query=None, body=None, content_type="application/json", what=None, **_options):
        with self._lock:
            self.sent.append((method, path))
            return self.answers[path] if isinstance(self.answers, dict) else self.answers.pop(0)


def replied(resource_version):
    return 200, {"metadata": {"resourceVersion": resource_version}}


def test_a_node_label_is_recorded_at_the_replys_version_and_a_vanished_node_as_gone():
    kube = Answering({"/api/v1/nodes/gpu-1": replied("41"), "/api/v1/nodes/gpu-2": (404, None)})
    node_labels.sync_labels(kube, types.SimpleNamespace(state="present"), "cache.gkm.io/llm", {"gpu-1": "abc"}, [
        {"metadata": {"name": "gpu-1", "labels": {}}}, {"metadata": {"name": "gpu-2", "labels": {
            "cache.gkm.io/llm": "old"}}}])
    assert sorted(kube.sent) == [("PATCH", "/api/v1/nodes/gpu-1"), ("PATCH", "/api/v1/nodes/gpu-2")]
    assert sorted(kube.written) == [("Node", "", "gpu-1", "41"), ("Node", "", "gpu-2", None)]


def test_a_per_node_objects_writes_are_recorded_in_order_and_a_check_run_records_none():
    kube = Answering(replied("7"), replied("8"))
    writes = [NodeWrite(CREATE, "gpu-1", {"metadata": {"name": "gpu-1"}}), NodeWrite(PATCH_STATUS, "gpu-1", {})]
    assert node_writer._write_node(kube, "ClusterGKMCache", None, writes) is None
    assert kube.written == [("ClusterGKMCacheNode", "", "gpu-1", "7"), ("ClusterGKMCacheNode", "", "gpu-1", "8")]
    gone = Answering((404, None))
    assert node_writer._write_node(gone, "GKMCache", "team-a", [NodeWrite(DELETE, "gpu-2", resource_version="9")]) \
        is None
    assert gone.written == [("GKMCacheNode", "team-a", "gpu-2", None)]
    checked = Answering(replied("7"), dry_run=True)
    node_writer._write_node(checked, "ClusterGKMCache", None, writes[:1])
    assert checked.written == []
