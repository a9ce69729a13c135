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


class _Spec:
    overlay_variable = "TRITON_CACHE_DIR"
    verification = None
    mount_mode = "PVC"
    digest = "sha256:" + "a" * 64


class _Distribution:
    spec, result, status, source = _Spec(), {"changed": False}, {"entries": []}, None


class StatusKube:
    """Answers the reconcile's own requests: nothing to patch is expected but recorded."""

    def __init__(self):
        self.patched = []

    def request(self, method, path, *args, **kwargs):
        self.patched.append(kwargs.get("body"))
        return 200, {}


def _reconcile_with_kernel_use(monkeypatch, read, current):
    monkeypatch.setattr(cache_reconcile, "run", lambda *args: _Distribution())
    monkeypatch.setattr(cache_reconcile, "summary_status",
                        lambda distribution, now: {"phase": "Extracted", "conditions": []})
    monkeypatch.setattr(cache_reconcile, "read_kernel_use", read)
    live = {"kind": "GKMCache", "metadata": {"name": "vector-add", "namespace": "team-a", "uid": "u-1"},
            "spec": {"image": "r/x:1"}, "status": current}
    return cache_reconcile.reconcile(StatusKube(), "GKMCache", "vector-add", "team-a", {}, live=live)


def test_the_pods_kernel_use_is_written_to_the_status(monkeypatch):
    result = _reconcile_with_kernel_use(monkeypatch, lambda kube, spec, source: {"podCnt": 1, "hits": 6}, {})
    assert result["resource"]["status"]["kernelUse"] == {"podCnt": 1, "hits": 6}


def test_a_kernel_use_that_cannot_be_read_warns_and_keeps_the_last_one(monkeypatch):
    def refused(kube, spec, source):
        raise cache_reconcile.GkmError("list pods: HTTP 403")

    result = _reconcile_with_kernel_use(monkeypatch, refused, {"kernelUse": {"podCnt": 2}})
    assert result["resource"]["status"]["kernelUse"] == {"podCnt": 2}
    assert any("kernel use of its pods was not read" in warning for warning in result["warnings"])


DELETING = {"kind": "GKMCache", "metadata": {
    "name": "vector-add", "namespace": "team-a", "uid": "u-1", "deletionTimestamp": "2026-11-30T03:00:00Z",
    "finalizers": ["example.com/other", "gkm.io/cache-cleanup"]}, "spec": {"image": "r/x:1"}}


class RecordingKube:
    def __init__(self):
        self.requests = []

    def request(self, method, path, *args, **kwargs):
        self.requests.append((method, path, kwargs.get("body"), kwargs.get("content_type")))
        return 200, {}


def _removal_params(monkeypatch):
    passed = []
    monkeypatch.setattr(cache_reconcile, "distribute",
                        lambda kube, params, *args: passed.append(params) or {"changed": False})
    return passed


def test_a_resource_being_deleted_is_removed_not_distributed_and_its_finalizer_released(monkeypatch):
    passed = _removal_params(monkeypatch)
    kube = RecordingKube()
    result = cache_reconcile.reconcile(kube, "GKMCache", "vector-add", "team-a", {"state": "present"}, live=DELETING)
    assert [params["state"] for params in passed] == ["absent"]
    assert result["changed"] is True
    assert result["resource"]["deleting"] is True and result["resource"]["finalizer_released"] is True
    # Only ours, at its index, and only if it is still there.
    assert kube.requests == [("PATCH", "/apis/gkm.io/v1alpha1/namespaces/team-a/gkmcaches/vector-add", [
        {"op": "test", "path": "/metadata/finalizers/1", "value": "gkm.io/cache-cleanup"},
        {"op": "remove", "path": "/metadata/finalizers/1"}], "application/json-patch+json")]


def test_a_declared_definition_does_not_bring_a_resource_being_deleted_back(monkeypatch):
    passed = _removal_params(monkeypatch)
    result = cache_reconcile.reconcile(RecordingKube(), "GKMCache", "vector-add", "team-a", {"state": "present"},
                                       live=DELETING, definition=dict(DELETING, metadata={
                                           "name": "vector-add", "namespace": "team-a"}))
    assert [params["state"] for params in passed] == ["absent"] and result["resource"]["deleting"] is True


def test_check_mode_and_an_asked_removal_leave_the_finalizer(monkeypatch):
    _removal_params(monkeypatch)
    checked = cache_reconcile.reconcile(NoRequest(), "GKMCache", "vector-add", "team-a", {"state": "present"},
                                        check_mode=True, live=DELETING)
    assert checked["resource"]["deleting"] is True and "finalizer_released" not in checked["resource"]
    # The operator's finalizer asks for the removal and takes its finalizer off itself.
    asked = cache_reconcile.reconcile(NoRequest(), "GKMCache", "vector-add", "team-a", {"state": "absent"},
                                      live=DELETING)
    assert "deleting" not in asked["resource"]
