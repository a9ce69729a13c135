"""The GKMCache and ClusterGKMCache CRDs: GKM's manifests apply unchanged, bad specs are refused."""

import json

import pytest
from kubernetes.client.rest import ApiException

GROUP, VERSION = "gkm.io", "v1alpha1"


def test_upstream_gkm_manifests_apply_unchanged(crds, namespace):
    # Shapes of GKM's own examples (seed 000): RWO default, ROX + RWO, a podTemplate.
    crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
        "apiVersion": "gkm.io/v1alpha1", "kind": "GKMCache",
        "metadata": {"name": "vector-add-cache-rocm", "namespace": namespace},
        "spec": {"image": "quay.io/gkm/cache-examples:vector-add-cache-rocm",
                 "podTemplate": {"spec": {"tolerations": [
                     {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]}}},
    })
    created = crds.get_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", "vector-add-cache-rocm")
    assert created["spec"]["accessModes"] == ["ReadWriteOnce"]  # GKM's default
    crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
        "apiVersion": "gkm.io/v1alpha1", "kind": "GKMCache", "metadata": {"name": "shared"},
        "spec": {"image": "quay.io/example/my-image:tag", "storageClassName": "standard",
                 "accessModes": ["ReadWriteOnce", "ReadOnlyMany"]},
    })
    name = "cache-cl-%s" % namespace[-5:]
    crds.create_cluster_custom_object(GROUP, VERSION, "clustergkmcaches", {
        "apiVersion": "gkm.io/v1alpha1", "kind": "ClusterGKMCache", "metadata": {"name": name},
        "spec": {"image": "quay.io/example/my-image@sha256:" + "a" * 64, "workloadNamespaces": ["myns1", "myns2"]},
    })
    crds.delete_cluster_custom_object(GROUP, VERSION, "clustergkmcaches", name)


@pytest.mark.parametrize("plural, spec, complaint", [
    ("clustergkmcaches", {"image": "quay.io/x:y"}, "workloadNamespaces: Required value"),
    ("clustergkmcaches", {"image": "quay.io/x:y", "workloadNamespaces": []}, "should have at least 1 items"),
    ("clustergkmcaches", {"image": "quay.io/x:y", "workloadNamespaces": ["Not_A_Namespace"]}, "should match"),
    ("gkmcaches", {}, "image: Required value"),
    ("gkmcaches", {"image": "quay.io/x:y", "accessModes": ["ReadManyWriteNone"]}, "Unsupported value"),
    ("gkmcaches", {"image": "has spaces:tag"}, "should match"),
])
def test_invalid_specs_are_refused_by_the_api_server(crds, namespace, plural, spec, complaint):
    kind = "ClusterGKMCache" if plural == "clustergkmcaches" else "GKMCache"
    body = {"apiVersion": "gkm.io/v1alpha1", "kind": kind, "metadata": {"name": "bad"}, "spec": spec}
    with pytest.raises(ApiException) as refused:
        if plural == "clustergkmcaches":
            crds.create_cluster_custom_object(GROUP, VERSION, plural, body)
        else:
            crds.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
    assert refused.value.status == 422
    assert complaint in refused.value.body


def test_status_subresource_and_printer_columns(crds, kube, namespace):
    crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
        "apiVersion": "gkm.io/v1alpha1", "kind": "GKMCache", "metadata": {"name": "columns"},
        "spec": {"image": "quay.io/x:y"}})
    crds.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "gkmcaches", "columns", {
        "status": {"phase": "Extracted", "nodeCnt": 3, "nodeInUseCnt": 1, "nodeNotInUseCnt": 2, "nodeErrorCnt": 0,
                   "podRunningCnt": 1, "podOutdatedCnt": 0}})
    # The table the API server renders for `kubectl get gkmcache` is built from the printer columns.
    response = kube.call_api(
        "GET", kube.configuration.host + "/apis/gkm.io/v1alpha1/namespaces/%s/gkmcaches/columns" % namespace,
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    response.read()
    table = json.loads(response.data)
    headers = [column["name"] for column in table["columnDefinitions"]]
    # Node-Excluded, Pulled (an imageVolume cache's nodes that pulled it) and Message (the Ready condition's), all
    # priority 1, show with -o wide only.
    assert headers == ["Name", "Status", "Nodes", "Node-In-Use", "Node-Not-In-Use", "Node-Error", "Pod-Running",
                       "Pod-Outdated", "Age", "Node-Excluded", "Pulled", "Message"]
    assert [column["priority"] for column in table["columnDefinitions"][-3:]] == [1, 1, 1]
    assert table["rows"][0]["cells"][1:8] == ["Extracted", 3, 1, 2, 0, 1, 0]
