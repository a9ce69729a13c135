"""distribute/reconcile.py reads the cache resource with a GET unless the caller already holds it (live=, a
controller's watch event): then it sends no request for it (row 1 of the reads, docs/controller-design.md)."""

from ansible_collections.gkm.cluster.plugins.module_utils.distribute import reconcile as cache_reconcile


class NoRequest:
    def request(self, method, path, *args, **kwargs):
        raise AssertionError("%s %s sent" % (method, path))


def test_a_live_resource_is_read_instead_of_a_get(monkeypatch):
    passed = []
    monkeypatch.setattr(cache_reconcile, "distribute", lambda kube, params, *args: passed.append(args) or {})
    live = {"kind": "GKMCache", "metadata": {"name": "vector-add", "namespace": "team-a", "uid": "u-1"}}
    result = cache_reconcile.reconcile(NoRequest(), "GKMCache", "vector-add", "team-a", {"state": "absent"},
                                       source="the source", live=live)
    assert result["resource"] == {"kind": "GKMCache", "name": "vector-add", "namespace": "team-a", "found": True}
    assert passed[0][-1] == "the source"  # handed to the pipeline
