"""The in-cluster operator's RBAC, applied as the gkm role renders it, against the real API server: requests made
as ServiceAccount gkm-operator through its TokenRequest token (docs/security.md, class 12). The operator itself does
not run: what is judged is what its account may do: evict, never write RBAC, and, when every extraction Job runs in
its namespace, read Secrets there alone."""

import contextlib
import uuid

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube, KubeError
from tests.helpers.operator_rbac import SERVICE_ACCOUNT, rbac_objects, render_operator
from tests.helpers.tenant import apply_objects, object_path, service_account_client

pytestmark = [pytest.mark.cluster, pytest.mark.tenant]


@contextlib.contextmanager
def operator_account(kube, caches_options=None):
    """(a Kube acting as the operator's ServiceAccount, its namespace), with the RBAC the template renders for the
    caches_* variables `caches_options`, in a namespace of its own."""
    admin = Kube(kube)
    system = "gkmop-%s" % uuid.uuid4().hex[:6]
    admin.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": system}})
    objects = rbac_objects(render_operator(system, caches_options))
    apply_objects(admin, objects)
    try:
        yield Kube(service_account_client(kube, system, SERVICE_ACCOUNT)), system
    finally:
        for obj in objects:
            if not obj["metadata"].get("namespace"):
                admin.request("DELETE", object_path(obj))
        admin.request("DELETE", "/api/v1/namespaces/%s" % system)


@pytest.fixture
def operator_kube(kube):
    with operator_account(kube) as (account, _system):
        yield account


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


def test_with_every_extraction_job_in_its_namespace_the_operator_reads_secrets_there_only(kube, namespace):
    narrowed = {"caches_system_namespace_jobs": True, "caches_create_pvs": "always"}
    with operator_account(kube, narrowed) as (account, system):
        # The controller's Secret watch lists there (render.registry_secrets_namespace), and the Jobs' Secret is
        # applied there.
        assert account.request("GET", "/api/v1/namespaces/%s/secrets" % system)[0] == 200
        assert account.request("POST", "/api/v1/namespaces/%s/secrets" % system, body={
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry"}})[0] == 201
        for path in ("/api/v1/secrets", "/api/v1/namespaces/%s/secrets" % namespace):
            with pytest.raises(KubeError) as refused:
                account.request("GET", path)
            assert refused.value.status == 403, path
