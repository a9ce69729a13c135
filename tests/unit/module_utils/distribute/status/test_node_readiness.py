"""Node readiness labels (distribute/node_readiness.py), without a cluster."""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    readiness_label_key,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    READINESS_LABEL_PREFIX,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import node_readiness
from tests.helpers.distribute import DIGEST_A, make_spec


def entry(node, phase, namespace="team-a"):
    return {"namespace": namespace, "node": node, "phase": phase}


def node(name, labels=None):
    return {"metadata": {"name": name, "labels": labels or {}}}


def test_keys_tell_namespaced_from_cluster_caches_and_fit_a_label_name():
    assert readiness_label_key("vector-add", "team-a") == "cache.gkm.io/team-a.vector-add"
    assert readiness_label_key("vector-add", "") == "cache.gkm.io/vector-add"
    long_key = readiness_label_key("c" * 63, "n" * 63)
    name = long_key[len(READINESS_LABEL_PREFIX):]
    assert len(name) <= 63 and name != readiness_label_key("c" * 63, "m" * 63)[len(READINESS_LABEL_PREFIX):]


def test_a_node_is_ready_only_while_every_current_slot_on_it_is_extracted():
    spec = make_spec()
    entries = [entry("w1", "Extracted"), entry("w1", "Extracted", "team-b"),
               entry("w2", "Extracted"), entry("w2", "Error", "team-b"),
               entry("w3", "Pending"),
               entry("w4", "Extracted"), entry("w4", "Outdated"),
               entry("w5", "Incompatible")]
    assert node_readiness.ready_labels(spec, entries) == {"w1": "a" * 12, "w4": "a" * 12}


def test_rox_and_absent_caches_label_no_node():
    entries = [entry("w1", "Extracted")]
    assert node_readiness.ready_labels(make_spec(access_modes=["ReadOnlyMany"]), entries) == {}
    assert node_readiness.ready_labels(make_spec(state="absent", digest=DIGEST_A), entries) == {}


def test_changes_add_update_and_remove_and_nothing_when_the_labels_match():
    key = "cache.gkm.io/team-a.vector-add"
    nodes = [node("w1"), node("w2", {key: "old"}), node("w3", {key: "a" * 12}), node("w4", {key: "a" * 12})]
    desired = {"w1": "a" * 12, "w2": "a" * 12, "w3": "a" * 12}
    assert node_readiness.label_changes(nodes, key, desired) == [("w1", "a" * 12), ("w2", "a" * 12), ("w4", None)]
    settled = [node(name, {key: value}) for name, value in desired.items()]
    assert node_readiness.label_changes(settled, key, desired) == []
