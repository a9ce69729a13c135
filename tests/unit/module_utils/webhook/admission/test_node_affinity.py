"""The merge of a cache's node requirements into a pod's own required node affinity (admission/node_affinity.py)."""

from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission import node_affinity

READY = {"key": "cache.gkm.io/apps.c", "operator": "In", "values": ["aaaaaaaaaaaa"]}
ZONE = {"key": "zone", "operator": "In", "values": ["z1"]}
HIP = [{"backend": "hip", "arch": "gfx90a", "warp_size": 64}]


def test_targets_sharing_backend_and_warp_size_share_one_alternative_and_cuda_archs_take_both_spellings():
    alternatives = node_affinity.gpu_alternatives([
        {"backend": "CUDA", "arch": "sm_90", "warp_size": "32"},
        {"backend": "cuda", "arch": "80", "warp_size": 32},
        *HIP,
    ])
    assert [[e["values"] for e in alternative] for alternative in alternatives] == [
        [["cuda"], ["80", "90", "sm_80", "sm_90"], ["32"]], [["hip"], ["gfx90a"], ["64"]]]


def test_an_empty_term_stays_empty_since_it_selects_no_node():
    requirement = node_affinity.cache_requirement("cache.gkm.io/apps.c", "aaaaaaaaaaaa", [])
    assert node_affinity.merged_terms([{}, {"matchExpressions": [ZONE]}], [requirement]) == [
        {}, {"matchExpressions": [ZONE, READY]}]


def test_a_digest_change_replaces_the_readiness_requirement_instead_of_stacking_a_second_one():
    old = {"key": "cache.gkm.io/apps.c", "operator": "In", "values": ["bbbbbbbbbbbb"]}
    requirement = node_affinity.cache_requirement("cache.gkm.io/apps.c", "aaaaaaaaaaaa", HIP)
    merged = node_affinity.merged_terms([{"matchExpressions": [ZONE, old]}], [requirement])
    assert merged == [{"matchExpressions": [ZONE, READY, *requirement.alternatives[0][1:]]}]
    assert node_affinity.merged_terms(merged, [requirement]) == merged


def test_a_cache_that_asks_nothing_leaves_a_pod_without_affinity_alone():
    requirement = node_affinity.cache_requirement(None, None, [])
    assert node_affinity.merged_terms([], [requirement]) == []
    assert node_affinity.affinity_operations({}, "/spec", []) == []


def test_two_caches_multiply_their_alternatives():
    first = node_affinity.CacheRequirement([[{"key": "a", "operator": "Exists"}], [{"key": "b", "operator": "Exists"}]])
    second = node_affinity.CacheRequirement([[{"key": "c", "operator": "Exists"}]])
    merged = node_affinity.merged_terms([], [first, second])
    assert [[e["key"] for e in term["matchExpressions"]] for term in merged] == [["a", "c"], ["b", "c"]]
