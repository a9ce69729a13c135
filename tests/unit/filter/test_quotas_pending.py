"""quotas_pending: the ResourceQuotas whose status does not count a resource as their spec sets it."""

from ansible_collections.gkm.cluster.plugins.filter.quotas_pending import quotas_pending

RESOURCE = "count/gkmcaches.gkm.io"


def quota(namespace, hard, status_hard=None, used=None):
    status = {}
    if status_hard is not None:
        status["hard"] = {RESOURCE: status_hard}
    if used is not None:
        status["used"] = {RESOURCE: used}
    return {"metadata": {"name": "gkm-caches", "namespace": namespace}, "spec": {"hard": {RESOURCE: hard}},
            "status": status}


def test_a_quota_is_pending_until_its_status_counts_the_resource_at_the_spec_s_value():
    quotas = [
        quota("new", "1"),  # not seen by the quota controller yet
        quota("unknown", "1", status_hard="1"),  # seen before the controller knew the kind: no usage
        quota("raised", "3", status_hard="1", used="0"),  # the spec changed since it was counted
        quota("counted", "1", status_hard="1", used="0"),
    ]
    assert quotas_pending(quotas, RESOURCE) == ["new/gkm-caches", "unknown/gkm-caches", "raised/gkm-caches"]
    assert quotas_pending([], RESOURCE) == [] and quotas_pending(None, RESOURCE) == []
