"""gkm.cluster.sweep (undeploy's last step) against an API server stand-in: what is deleted, kept and unlabelled."""

import json

from ansible_collections.gkm.cluster.plugins.module_utils.platform import sweep

OURS = {"app.kubernetes.io/managed-by": "gkm.cluster"}
CORE_KINDS = ("PersistentVolumeClaim", "PersistentVolume", "ConfigMap", "Namespace")
KINDS = [{"api_version": "v1", "kind": kind} for kind in CORE_KINDS]
KINDS += [{"api_version": "batch/v1", "kind": "Job"}, {"api_version": "kyverno.io/v1", "kind": "ClusterPolicy"}]
DISCOVERY = {
    "/api/v1": {"resources": [
        {"name": "persistentvolumeclaims", "kind": "PersistentVolumeClaim", "namespaced": True},
        {"name": "persistentvolumeclaims/status", "kind": "PersistentVolumeClaim", "namespaced": True},
        {"name": "persistentvolumes", "kind": "PersistentVolume", "namespaced": False},
        {"name": "configmaps", "kind": "ConfigMap", "namespaced": True},
        {"name": "namespaces", "kind": "Namespace", "namespaced": False},
    ]},
    "/apis/batch/v1": {"resources": [{"name": "jobs", "kind": "Job", "namespaced": True}]},
}


def labelled(name, namespace=None, **fields):
    metadata = {"name": name, "labels": dict(OURS)}
    if namespace:
        metadata["namespace"] = namespace
    return dict({"metadata": metadata}, **fields)


class StandIn:
    """Answers discovery and labelled lists from fixed data and records every write."""

    def __init__(self, lists):
        self.lists = lists
        self.writes = []

    def request(self, method, path, query=None, body=None, content_type="application/json", what=None):
        if method == "GET" and path in DISCOVERY:
            return 200, DISCOVERY[path]
        if method == "GET" and path.startswith("/api"):
            if path not in self.lists and path.rsplit("/", 1)[0] not in DISCOVERY:
                return 404, None
            assert query == [("labelSelector", "app.kubernetes.io/managed-by=gkm.cluster")]
            return 200, {"items": self.lists.get(path, [])}
        self.writes.append({"method": method, "path": path, "body": body, "content_type": content_type})
        return 200, {}

    def map(self, function, items):
        return [function(item) for item in items]


def run(lists, check_mode=False):
    kube = StandIn(lists)
    return sweep.sweep(kube, KINDS, ["gkm-system"], check_mode, "gkm-system"), kube.writes


def test_deletes_the_objects_of_a_cache_without_a_resource_and_skips_unserved_kinds():
    result, writes = run({
        "/api/v1/persistentvolumeclaims": [labelled("ghost", "team-a")],
        "/api/v1/persistentvolumes": [labelled("gkm-ghost")],
        "/apis/batch/v1/jobs": [labelled("ghost-extract", "team-a")],
    })
    assert sorted(result["deleted"]) == ["Job team-a/ghost-extract", "PersistentVolume gkm-ghost",
                                         "PersistentVolumeClaim team-a/ghost"]
    assert result["skipped_kinds"] == ["ClusterPolicy"] and result["changed"]
    paths = {write["path"] for write in writes if write["method"] == "DELETE"}
    assert paths == {"/api/v1/namespaces/team-a/persistentvolumeclaims/ghost", "/api/v1/persistentvolumes/gkm-ghost",
                     "/apis/batch/v1/namespaces/team-a/jobs/ghost-extract"}
    assert all(write["body"]["propagationPolicy"] == "Background" and "dryRun" not in write["body"] for write in writes)


def test_workload_namespaces_lose_the_label_and_the_own_namespace_goes_last():
    result, writes = run({
        "/api/v1/namespaces": [labelled("gkm-system"), labelled("team-a")],
        "/api/v1/persistentvolumeclaims": [labelled("ghost", "team-a")],
    })
    assert result["unlabelled"] == ["team-a"]
    assert result["deleted"] == ["PersistentVolumeClaim team-a/ghost", "Namespace gkm-system"]
    deletes = [write["path"] for write in writes if write["method"] == "DELETE"]
    assert deletes[-1] == "/api/v1/namespaces/gkm-system"
    patches = [write for write in writes if write["method"] == "PATCH"]
    assert patches == [{"method": "PATCH", "path": "/api/v1/namespaces/team-a",
                        "body": {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}},
                        "content_type": "application/merge-patch+json"}]


def test_ownership_records_of_installed_components_and_their_namespace_stay():
    record = labelled("gkm-cluster-ownership", "gkm-system", data={"kyverno": json.dumps({"version": "v1.15.1"})})
    result, writes = run({
        "/api/v1/namespaces": [labelled("gkm-system")],
        "/api/v1/configmaps": [record, labelled("leftover", "gkm-system", data={"key": "not a record"})],
    })
    assert result["deleted"] == ["ConfigMap gkm-system/leftover"]
    assert result["kept"] == ["ConfigMap gkm-system/gkm-cluster-ownership: records an installed component",
                              "Namespace gkm-system: holds an ownership record"]
    assert [write["path"] for write in writes] == ["/api/v1/namespaces/gkm-system/configmaps/leftover"]


def test_objects_being_deleted_are_left_alone_and_nothing_left_changes_nothing():
    terminating = labelled("ghost", "team-a")
    terminating["metadata"]["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    result, writes = run({"/api/v1/persistentvolumeclaims": [terminating]})
    assert (result["deleted"], result["unlabelled"], result["changed"], writes) == ([], [], False, [])


def test_check_mode_puts_the_dry_run_in_the_delete_body():
    result, writes = run({"/api/v1/persistentvolumes": [labelled("gkm-ghost")]}, check_mode=True)
    assert result["deleted"] == ["PersistentVolume gkm-ghost"]
    assert writes[0]["body"]["dryRun"] == ["All"]
