"""Names, labels and selectors of distributed cache objects."""

import re

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract import naming
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    NODE_LABEL,
)

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def rwo(node="gkm-gpu-worker-1", digest=DIGEST_A, cache="vector-add", cache_ns="", ns="team-a"):
    return naming.Slot(cache, cache_ns, ns, node, digest)


def assert_valid_name(name):
    assert len(name) <= 63, name
    assert DNS1123.match(name), name


def test_rox_pvc_is_named_as_the_cache_and_job_carries_a_hash():
    slot = naming.Slot("vector-add", "team-a", "team-a", "", DIGEST_A)
    assert slot.pvc_name() == "vector-add"
    assert re.match(r"^vector-add-[0-9a-f]{10}$", slot.job_name())
    assert slot.pv_name().startswith("gkm-vector-add-")


def test_rwo_names_are_readable_valid_and_deterministic():
    slot = rwo()
    assert slot.pvc_name().startswith("vector-add-gkm-gpu-worker-1-")
    for name in (slot.pvc_name(), slot.job_name(), slot.pv_name()):
        assert_valid_name(name)
    assert slot.pvc_name() == rwo().pvc_name()


@pytest.mark.parametrize(
    "changed",
    [
        dict(node="gkm-gpu-worker-2"),
        dict(digest=DIGEST_B),
        dict(ns="team-b"),
        dict(cache_ns="team-a"),
        dict(cache="vector-add-2"),
    ],
)
def test_every_slot_field_changes_every_name(changed):
    base, other = rwo(), rwo(**changed)
    assert base.pvc_name() != other.pvc_name()
    assert base.job_name() != other.job_name()
    assert base.pv_name() != other.pv_name()


def test_ambiguous_joins_get_different_names():
    left = naming.Slot("cache-a", "", "ns", "b-c", DIGEST_A)
    right = naming.Slot("cache-a-b", "", "ns", "c", DIGEST_A)
    assert left.pvc_name() != right.pvc_name()
    assert left.pv_name() != right.pv_name()


def test_long_and_dotted_node_names_are_shortened_with_a_hash():
    node = "ip-10-0-12-34.eu-west-1.compute.internal.with-a-very-long-suffix-for-testing-purposes"
    slot = rwo(node=node, cache="c" * 63)
    for name in (slot.pvc_name(), slot.job_name(), slot.pv_name()):
        assert_valid_name(name)
    labels = slot.labels()
    assert len(labels[NODE_LABEL]) <= 63
    assert naming.is_label_value(labels[NODE_LABEL])
    other = rwo(node=node + "x", cache="c" * 63)
    assert other.labels()[NODE_LABEL] != labels[NODE_LABEL]


def test_labels_of_namespaced_and_cluster_caches():
    namespaced = naming.Slot("vector-add", "team-a", "team-a", "gkm-gpu-worker-1", DIGEST_A).labels()
    assert namespaced == {
        "app.kubernetes.io/managed-by": "gkm.cluster",
        "gkm.io/cache": "vector-add",
        "gkm.io/cache-namespace": "team-a",
        "gkm.io/node": "gkm-gpu-worker-1",
        "gkm.io/digest": "a" * 12,
    }
    cluster_rox = naming.Slot("vector-add", "", "team-a", "", DIGEST_A).labels()
    assert cluster_rox["gkm.io/cache-namespace"] == ""
    assert "gkm.io/node" not in cluster_rox


def test_host_paths_differ_per_cache_namespace_and_digest():
    paths = {
        rwo().host_path("/var/lib/gkm/"),
        rwo(digest=DIGEST_B).host_path("/var/lib/gkm"),
        rwo(ns="team-b").host_path("/var/lib/gkm"),
        rwo(cache="other").host_path("/var/lib/gkm"),
        rwo(cache_ns="team-a").host_path("/var/lib/gkm"),
    }
    assert len(paths) == 5
    assert rwo().host_path("/var/lib/gkm/") == "/var/lib/gkm/_cluster/vector-add/team-a/" + "a" * 64


def test_selectors():
    assert naming.cache_selector("c", "") == (
        "app.kubernetes.io/managed-by=gkm.cluster,gkm.io/cache=c,gkm.io/cache-namespace="
    )
    assert naming.managed_selector() == "app.kubernetes.io/managed-by=gkm.cluster"


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("", "must not be empty"), ("A", "not a valid DNS-1123"), ("a" * 64, "64 characters"), ("a.b", "DNS-1123")],
)
def test_name_problems_name_the_field(value, fragment):
    problem = naming.name_problem("name", value)
    assert problem.startswith("name")
    assert fragment in problem
    assert naming.name_problem("name", "ok-name") is None


def test_short_digest_rejects_tags():
    assert naming.short_digest(DIGEST_A) == "a" * 12
    with pytest.raises(ValueError, match="not an image digest"):
        naming.short_digest("latest")
