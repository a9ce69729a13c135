from ansible_collections.gkm.cluster.plugins.filter.cache_table import cache_table

CACHES = [
    {"name": "vector-add", "namespace": "team-a", "status": {"phase": "Extracted", "counts": {
        "nodes": 3, "node_in_use": 1, "node_not_in_use": 2, "node_error": 0, "pod_running": 1, "pod_outdated": 0},
        "entries": [{"namespace": "team-a", "node": "gpu-1", "pvc": "vector-add-gpu-1-abc", "phase": "Extracted"}]}},
    {"name": "llama", "namespace": "", "status": {"phase": "Pending", "counts": {"nodes": 2}, "entries": []}},
]


def test_table_has_gkm_columns_aligned():
    lines = cache_table(CACHES)
    assert lines[0].split() == ["NAMESPACE", "NAME", "STATUS", "NODES", "NODE-IN-USE", "NODE-NOT-IN-USE",
                                "NODE-ERROR", "POD-RUNNING", "POD-OUTDATED"]
    assert lines[1].split() == ["team-a", "vector-add", "Extracted", "3", "1", "2", "0", "1", "0"]
    assert lines[2].split() == ["(cluster)", "llama", "Pending", "2", "0", "0", "0", "0", "0"]
    assert lines[1].index("Extracted") == lines[0].index("STATUS")


def test_node_detail_lines():
    lines = cache_table(CACHES, nodes=True)
    assert lines[2] == "    team-a gpu-1 pvc=vector-add-gpu-1-abc phase=Extracted"
    assert len(lines) == 4


def test_an_excluded_gpu_node_says_why():
    excluded = {"namespace": "", "node": "gpu-9", "digest": "abc", "phase": "Excluded", "reason": "UntoleratedTaint",
                "message": "untolerated taint team=ml:NoSchedule"}
    cache = dict(CACHES[0], status=dict(CACHES[0]["status"], entries=[excluded]))
    assert cache_table([cache], nodes=True)[2] == (
        "     gpu-9 pvc= phase=Excluded reason=UntoleratedTaint (untolerated taint team=ml:NoSchedule)")


def test_module_results_render_like_cache_info():
    result = {"cache": {"name": "vector-add", "namespace": "team-a"}, "status": CACHES[0]["status"]}
    assert cache_table([result]) == cache_table(CACHES[:1])


def test_cache_namespaces_once_each_in_order():
    from ansible_collections.gkm.cluster.plugins.filter.cache_namespaces import cache_namespaces

    resources = [
        {"kind": "GKMCache", "metadata": {"name": "a", "namespace": "ns-2"}},
        {"kind": "ClusterGKMCache", "metadata": {"name": "b"}},
        {"kind": "GKMCache", "metadata": {"name": "c", "namespace": "ns-1"}},
        {"kind": "GKMCache", "metadata": {"name": "d", "namespace": "ns-2"}},
    ]
    assert [ns["metadata"]["name"] for ns in cache_namespaces(resources)] == ["ns-2", "ns-1"]
    assert "labels" not in cache_namespaces(resources)[0]["metadata"]
