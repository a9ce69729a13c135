"""Issue 31, class 1, the refusal the API server makes itself: with gkm_read_only_claims, the gkm role's
ValidatingAdmissionPolicies refuse a pod that mounts a cache's claim writable, whatever the webhook's state (here it is
gone altogether). The tenant acts through its own token; its pods are created as dry runs, which admission sees in
full and which leave nothing behind."""

import time
import uuid

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube, KubeError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import API_VERSION
from tests.helpers.roles import run_role
from tests.helpers.sim import SIM_SCRIPT
from tests.helpers.tenant import gkmcaches_path
from tests.integration.tenants.test_tenant_rbac import gkmcache, refusal

pytestmark = [pytest.mark.cluster, pytest.mark.tenant]

POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gkm.io-read-only-claims-%s"
REFUSED = "kernel caches are read-only"


def pod(claim, read_only=False):
    volume = {"claimName": claim}
    if read_only:
        volume["readOnly"] = True
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "reader-"}, "spec": {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "pause", "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        "volumes": [{"name": "cache", "persistentVolumeClaim": volume}]}}


def admitted(tenant, claim, read_only=False):
    """True when the API server admits the tenant's pod (a dry run); False when our policy refuses it."""
    try:
        tenant.kube.request("POST", "/api/v1/namespaces/%s/pods" % tenant.namespace, body=pod(claim, read_only),
                            query=[("dryRun", "All")])
        return True
    except KubeError as error:
        assert REFUSED in str(error) and error.status == 403, error
        return False


def cluster_cache(name, namespaces):
    return {"apiVersion": API_VERSION, "kind": "ClusterGKMCache", "metadata": {"name": name},
            "spec": {"image": "quay.io/example/cache:v1", "workloadNamespaces": namespaces}}


def test_the_api_server_refuses_a_writable_mount_of_a_cache_s_claim_without_the_webhook(
        sim, crds, kube, tenant, tmp_path):
    admin = Kube(kube)
    suffix = uuid.uuid4().hex[:5]
    role_vars = dict(gkm_kubeconfig=sim.kubeconfig, gkm_webhook_endpoint="url", gkm_webhook_local=True,
                     gkm_sim_script=SIM_SCRIPT, gkm_tools_image="%s/gkm-cluster/tools:sim" % sim.registry,
                     gkm_read_only_claims=True)
    # Extraction Jobs that write through a workload namespace's claims would be refused: the role says so first.
    refused = run_role("gkm", tmp_path, role_vars)
    assert not refused.ok and "caches_system_namespace_jobs=true" in str(refused.failures())
    assert admin.request("GET", POLICIES % "gkmcache")[0] == 404
    # The caches options the role reads from the inventory's caches_* variables.
    role_vars.update(gkm_operator_caches_options={"caches_system_namespace_jobs": True, "caches_create_pvs": "always"})
    installed = run_role("gkm", tmp_path, role_vars)
    assert installed.ok, installed.failures()
    long_name = ("long-" + "x" * 40 + suffix)[:50]
    shared, elsewhere = "shared-" + suffix, "elsewhere-" + suffix
    try:
        # A cluster without the webhook: nothing mutates the tenant's pods.
        for hook in admin.list("MutatingWebhookConfiguration",
                               label_selector="app.kubernetes.io/managed-by=gkm.cluster"):
            admin.request("DELETE", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/%s"
                          % hook["metadata"]["name"])
        for name in ("guarded", long_name):
            tenant.kube.request("POST", gkmcaches_path(tenant.namespace), body=gkmcache(name, tenant.namespace))
        for name, namespaces in ((shared, [tenant.namespace]), (elsewhere, ["default"])):
            admin.request("POST", "/apis/%s/clustergkmcaches" % API_VERSION, body=cluster_cache(name, namespaces))
        deadline = time.monotonic() + 30
        while admitted(tenant, "guarded") or admitted(tenant, shared):
            assert time.monotonic() < deadline, "the policies never saw their params"
            time.sleep(0.5)
        # Its serving PVC, a slot PVC, a serving alias; a long name's claims, cut as contract/naming.py cuts them.
        for claim in ("guarded", "guarded-gkm-gpu-worker-1-0123456789", "guarded-aaaaaaaaaaaa",
                      long_name[:39] + "-9876543210-bbbbbbbbbbbb", long_name[:52] + "-0123456789", shared):
            assert not admitted(tenant, claim), claim
            assert admitted(tenant, claim, read_only=True), claim
        # The tenant's own claims, and a cluster cache that does not serve this namespace, are not ours to guard.
        for claim in ("data", "guardedx", elsewhere):
            assert admitted(tenant, claim), claim
        # The tenant cannot lift them.
        assert refusal(tenant.kube, "DELETE", POLICIES % "gkmcache") == 403
    finally:
        for name in (shared, elsewhere):
            admin.request("DELETE", "/apis/%s/clustergkmcaches/%s" % (API_VERSION, name))
        removed = run_role("gkm", tmp_path, dict(role_vars, gkm_state="absent"))
    assert removed.ok, removed.failures()
    for kind in ("gkmcache", "clustergkmcache"):
        assert admin.request("GET", POLICIES % kind)[0] == 404
    assert admitted(tenant, "guarded")
