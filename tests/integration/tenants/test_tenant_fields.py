"""A tenant's malformed podTemplate fields are refused by the API server at admission, where only its own request
fails, instead of reaching the loops the operator shares between every cache (docs/security.md, class 8)."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import API_VERSION

pytestmark = [pytest.mark.cluster, pytest.mark.tenant]

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
GPU_TOLERATION = {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def create(tenant, name, pod_spec):
    cache = {"apiVersion": API_VERSION, "kind": "GKMCache", "metadata": {"name": name},
             "spec": {"image": "quay.io/example/cache:v1", "podTemplate": {"spec": pod_spec}}}
    return tenant.kube.request("POST", tenant.gkmcaches_path(), body=cache)[0]


def test_a_well_formed_affinity_and_tolerations_are_accepted(crds, tenant):
    affinity = {
        "nodeAffinity": {
            REQUIRED: {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {
            "labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}}]},
    }
    tolerations = [GPU_TOLERATION, {"operator": "Exists"},
                   {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
    assert create(tenant, "well-formed", {"affinity": affinity, "tolerations": tolerations}) == 201


@pytest.mark.parametrize("pod_spec, complaint", [
    ({"affinity": {"nodeAffinity": "x"}}, "spec.podTemplate.spec.affinity.nodeAffinity"),
    ({"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": "x"}}}}, "nodeSelectorTerms"),
    ({"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": ["x"]}]}}}},
     "matchExpressions[0]"),
    ({"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": "b"}]}]}}}}, "values"),
    ({"tolerations": [{"key": 5}]}, "spec.podTemplate.spec.tolerations[0].key"),
    ({"tolerations": [{"key": "gpu", "tolerationSeconds": "soon"}]}, "tolerationSeconds"),
])
def test_a_malformed_affinity_or_toleration_is_refused_at_admission(crds, tenant, pod_spec, complaint):
    with pytest.raises(KubeError) as refused:
        create(tenant, "malformed", pod_spec)
    assert refused.value.status == 422
    assert complaint in str(refused.value)
