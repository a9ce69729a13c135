import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gkm.cluster.plugins.filter.cache_targets import cache_targets


def cache(kind, name, namespace=None, image="registry.example/caches/a:v1"):
    metadata = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "gkm.io/v1alpha1", "kind": kind, "metadata": metadata, "spec": {"image": image}}


def test_declared_caches_carry_their_manifest_and_replace_what_was_found():
    found = [cache("GKMCache", "a", "team-a"), cache("ClusterGKMCache", "llama")]
    declared = [cache("GKMCache", "a", "team-a", image="registry.example/caches/a:v2")]
    targets = cache_targets(found, declared)
    assert targets == [
        {"kind": "ClusterGKMCache", "namespace": "", "name": "llama"},
        {"kind": "GKMCache", "namespace": "team-a", "name": "a", "definition": declared[0]},
    ]


def test_a_declared_cache_not_in_the_cluster_yet_is_a_target():
    declared = [cache("ClusterGKMCache", "new")]
    assert cache_targets([], declared) == [{"kind": "ClusterGKMCache", "namespace": "", "name": "new",
                                            "definition": declared[0]}]


def test_same_name_in_two_namespaces_are_two_targets():
    targets = cache_targets([cache("GKMCache", "a", "team-a"), cache("GKMCache", "a", "team-b")])
    assert [(t["namespace"], t["name"]) for t in targets] == [("team-a", "a"), ("team-b", "a")]


@pytest.mark.parametrize("bad, complaint", [
    ({"kind": "Pod", "metadata": {"name": "x"}}, "needs kind (one of GKMCache, ClusterGKMCache)"),
    ({"kind": "GKMCache", "metadata": {}}, "metadata.name"),
    ({"kind": "GKMCache", "metadata": {"name": "x"}}, "declared GKMCache x needs metadata.namespace"),
])
def test_malformed_declarations_name_the_missing_field(bad, complaint):
    with pytest.raises(AnsibleFilterError, match=complaint.replace("(", r"\(").replace(")", r"\)")):
        cache_targets([], [bad])
