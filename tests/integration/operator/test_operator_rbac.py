"""The in-cluster operator's RBAC, applied as the gkm role renders it, against the real API server: requests made
as ServiceAccount gkm-operator through its TokenRequest token (docs/security.md, class 12). The operator itself does
not run: what is judged is what its account may do."""

import uuid

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube, KubeError
from tests.helpers.operator_rbac import SERVICE_ACCOUNT, rbac_objects, render_operator
from tests.helpers.tenant import apply_objects, object_path, service_account_client

pytestmark = [pytest.mark.cluster, pytest.mark.tenant]


@pytest.fixture
def operator_kube(kube):
    """A Kube acting as the operator's ServiceAccount, with the RBAC of the template in a namespace of its own."""
    admin = Kube(kube)
    system = "gkmop-%s" % uuid.uuid4().hex[:6]
    admin.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": system}})
    objects = rbac_objects(render_operator(system))
    apply_objects(admin, objects)
    yield Kube(service_account_client(kube, system, SERVICE_ACCOUNT))
    for obj in objects:
        if not obj["metadata"].get("namespace"):
            admin.request("DELETE", object_path(obj))
    admin.request("DELETE", "/api/v1/namespaces/%s" % system)


def test_the_operator_evicts_a_workload_pod_as_upgrade_policy_restart_does(kube, namespace, operator_kube):
    admin = Kube(kube)
    admin.request("POST", "/api/v1/namespaces/%s/pods" % namespace, body={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader"},
        "spec": {"containers": [{"name": "c", "image": "registry.example/reader:1"}]}})
    # The request distribute/apply/evictions.py sends.
    status, _body = operator_kube.request(
        "POST", "/api/v1/namespaces/%s/pods/reader/eviction" % namespace, retry_busy=False,
        body={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "reader", "namespace": namespace}})
    assert status == 201


def test_the_operator_may_not_change_rbac(operator_kube, namespace):
    with pytest.raises(KubeError) as refused:
        operator_kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles" % namespace, body={
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "more"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
    assert refused.value.status == 403
