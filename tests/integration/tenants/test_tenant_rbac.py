"""The tenant harness of issue 31: a test acts as a tenant through its ServiceAccount's TokenRequest token, with
`edit` in one namespace, and real RBAC decides what it may do (docs/security.md, "Tenant RBAC example")."""

import time

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube, KubeError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import API_VERSION
from tests.helpers.roles import run_role
from tests.helpers.sim import SIM_SCRIPT
from tests.helpers.tenant import OWNER_BINDING, gkmcaches_path, whoami

pytestmark = [pytest.mark.cluster, pytest.mark.tenant]


def gkmcache(name, namespace):
    return {"apiVersion": API_VERSION, "kind": "GKMCache", "metadata": {"name": name, "namespace": namespace},
            "spec": {"image": "quay.io/example/cache:v1"}}


def refusal(kube, method, path, body=None, content_type="application/json"):
    """The HTTP status of a request the caller expects refused."""
    with pytest.raises(KubeError) as refused:
        kube.request(method, path, body=body, content_type=content_type)
    return refused.value.status


def test_the_tenant_is_its_service_account_not_the_admin(tenant):
    assert whoami(tenant.kube) == "system:serviceaccount:%s:tenant" % tenant.namespace
    # No client certificate travels with the tenant's client: the token is all it has.
    assert tenant.api.configuration.cert_file is None and tenant.api.configuration.key_file is None


def test_the_tenant_creates_and_reads_a_gkmcache_in_its_namespace(crds, tenant):
    status, created = tenant.kube.request("POST", gkmcaches_path(tenant.namespace),
                                          body=gkmcache("mine", tenant.namespace))
    assert status == 201 and created["metadata"]["namespace"] == tenant.namespace
    assert tenant.kube.request("GET", gkmcaches_path(tenant.namespace, "mine"))[1]["spec"]["image"]
    # The status is the collection's to write.
    assert refusal(tenant.kube, "PATCH", gkmcaches_path(tenant.namespace, "mine") + "/status",
                   {"status": {"phase": "Extracted"}}, "application/merge-patch+json") == 403


@pytest.mark.parametrize("what", ["ClusterGKMCache", "GKMCache elsewhere", "Secret elsewhere", "PersistentVolume",
                                  "Role", "Namespace"])
def test_the_tenant_is_refused_past_its_namespace(crds, tenant, namespace, what):
    other = namespace  # the admin's namespace, not the tenant's
    requests = {
        "ClusterGKMCache": ("/apis/%s/clustergkmcaches" % API_VERSION, {
            "apiVersion": API_VERSION, "kind": "ClusterGKMCache", "metadata": {"name": "theirs-" + other[-5:]},
            "spec": {"image": "quay.io/example/cache:v1", "workloadNamespaces": [tenant.namespace]}}),
        "GKMCache elsewhere": (gkmcaches_path(other), gkmcache("theirs", other)),
        "Secret elsewhere": ("/api/v1/namespaces/%s/secrets" % other, {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "theirs"}, "stringData": {"a": "b"}}),
        "PersistentVolume": ("/api/v1/persistentvolumes", {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "theirs-" + other[-5:]},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "hostPath": {"path": "/", "type": "Directory"}}}),
        "Role": ("/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles" % tenant.namespace, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "more"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        "Namespace": ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": "theirs-" + other[-5:]}}),
    }
    path, body = requests[what]
    assert refusal(tenant.kube, "POST", path, body) == 403


def test_the_tenant_reads_secrets_in_its_own_namespace(tenant):
    """What `edit` gives: the reason a Secret of the admin's in a tenant namespace is the tenant's (class 3)."""
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "own"}, "stringData": {"a": "b"}}
    assert tenant.kube.request("POST", "/api/v1/namespaces/%s/secrets" % tenant.namespace, body=secret)[0] == 201
    assert tenant.kube.request("GET", "/api/v1/namespaces/%s/secrets/own" % tenant.namespace)[1]["data"]["a"]


def test_restricted_pod_security_refuses_the_tenants_privileged_pod(tenant):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"},
           "spec": {"containers": [{"name": "c", "image": "pause", "securityContext": {"runAsUser": 0}}]}}
    assert refusal(tenant.kube, "POST", "/api/v1/namespaces/%s/pods" % tenant.namespace, pod) == 403


def test_edit_alone_covers_gkmcaches_once_the_gkm_role_ran(sim, crds, kube, tenant, tmp_path):
    """The gkm role ships ClusterRoles aggregated into `edit`: a tenant with only `edit` creates and reads its
    GKMCaches, still may not create a ClusterGKMCache, and loses the GKMCaches with the role's removal.

    The role's cache quota (gkm_tenant_cache_quota, one GKMCache for the tenant's namespace) refuses the tenant's
    second GKMCache at admission; the tenant cannot raise it; the role's removal takes it away."""
    admin = Kube(kube)
    admin.request("DELETE", "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings/%s"
                  % (tenant.namespace, OWNER_BINDING))
    wait_for_refusal(tenant.kube, tenant.namespace)
    role_vars = dict(gkm_kubeconfig=sim.kubeconfig, gkm_webhook_endpoint="url", gkm_webhook_local=True,
                     gkm_sim_script=SIM_SCRIPT, gkm_tools_image="%s/gkm-cluster/tools:sim" % sim.registry,
                     gkm_tenant_cache_quota={"max_caches": 1, "namespaces": [tenant.namespace]})
    quota_path = "/api/v1/namespaces/%s/resourcequotas/gkm-caches" % tenant.namespace
    installed = run_role("gkm", tmp_path, role_vars)
    assert installed.ok, installed.failures()
    try:
        assert create_when_allowed(tenant.kube, gkmcache("by-edit", tenant.namespace)) == 201
        assert tenant.kube.request("GET", gkmcaches_path(tenant.namespace, "by-edit"))[0] == 200
        assert tenant.kube.request("GET", "/apis/%s/namespaces/%s/gkmcachenodes"
                                   % (API_VERSION, tenant.namespace))[0] == 200
        cluster_cache = {"name": "by-edit-" + tenant.namespace[-5:]}
        assert refusal(tenant.kube, "POST", "/apis/%s/clustergkmcaches" % API_VERSION, {
            "apiVersion": API_VERSION, "kind": "ClusterGKMCache", "metadata": cluster_cache,
            "spec": {"image": "quay.io/example/cache:v1", "workloadNamespaces": [tenant.namespace]}}) == 403
        with pytest.raises(KubeError, match="exceeded quota: gkm-caches"):
            tenant.kube.request("POST", gkmcaches_path(tenant.namespace), body=gkmcache("second", tenant.namespace))
        assert refusal(tenant.kube, "PATCH", quota_path, {"spec": {"hard": {"count/gkmcaches.gkm.io": "9"}}},
                       "application/merge-patch+json") == 403
    finally:
        removed = run_role("gkm", tmp_path, dict(role_vars, gkm_state="absent"))
    assert removed.ok, removed.failures()
    assert admin.request("GET", quota_path)[0] == 404
    wait_for_refusal(tenant.kube, tenant.namespace)


def create_when_allowed(kube, cache, timeout=20):
    """POST a GKMCache, asked again while RBAC refuses it (aggregation copies new rules into `edit` a moment later)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return kube.request("POST", gkmcaches_path(cache["metadata"]["namespace"]), body=cache)[0]
        except KubeError as error:
            if error.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def wait_for_refusal(kube, namespace, timeout=30):
    """Until the tenant may no longer create a GKMCache (RBAC's cache follows a deleted binding within moments)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kube.request("POST", gkmcaches_path(namespace), query=[("dryRun", "All")],
                         body=gkmcache("probe", namespace))
        except KubeError as error:
            if error.status == 403:
                return
            raise
        time.sleep(0.5)
    raise AssertionError("the tenant may still create GKMCaches without its Role")
