"""The operator in the cluster, as the gkm role installs it (gkm_reconcile=operator, gkm_operator_local=false): the
controller image (sim.py controller-image, the kopf controller) runs on a real node under the namespace's Pod
Security (baseline, for the scrub Jobs that run there), as its own ServiceAccount, and a GKMCache created as kubectl
would reaches Extracted with no playbook; undeploy removes it all.

The operator's RBAC is the one the role installs, unwidened, in its narrowest form: every extraction Job in the
operator's namespace (caches_system_namespace_jobs, caches_create_pvs always), so no Secret granted cluster-wide
(docs/security.md, class 12). The watches, the cache's reconcile (distribute, the Job's wait, the per-node objects,
the node readiness labels, the status) and its finalizer's (the scrub, the deletes) pass with it, and the
controller's log names no refused request. The default RBAC grants all of this and Secrets cluster-wide
(tests/unit/collection/test_operator_rules_table.py).
"""

import json
import subprocess
import sys
import time

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK
from tests.helpers.operator_caches import GROUP, VERSION, kubectl, live, poll
from tests.helpers.real_nodes import (
    AMD_NODE,
    BASELINE,
    GPU_TOLERATION,
    REAL_NODE_LABEL,
    delete_namespace,
    labelled_namespace,
    pod_logs,
    real_pod_template,
    unique,
)
from tests.helpers.roles import run_role
from tests.helpers.sim import SIM_SCRIPT

pytestmark = [pytest.mark.cluster, pytest.mark.real_nodes]

OPERATOR = "gkm-operator"


@pytest.fixture(scope="module")
def operator_image(sim, real_nodes):
    """The controller image of this checkout's code in the cluster's registry (cached builds)."""
    result = subprocess.run([sys.executable, SIM_SCRIPT, "controller-image"], check=True, stdout=subprocess.PIPE,
                            text=True)
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def cache_image(registry, real_nodes):
    spec = kcache_images.CacheSpec(backend="hip", kernels=2, seed=15)
    return kcache_images.build_image(registry.host, "real/operator-in-cluster", "v1", spec)


def role_vars(sim, namespace, tools_image, operator_image, **extra):
    """The webhook and the operator on the real nodes (the API server calls the webhook for the Jobs' pods)."""
    return dict(gkm_kubeconfig=sim.kubeconfig, gkm_namespace=namespace, gkm_tools_image=tools_image,
                gkm_webhook_node_selector={REAL_NODE_LABEL: "true"}, gkm_webhook_tolerations=[GPU_TOLERATION],
                gkm_webhook_replicas=1, gkm_webhook_failure_policy="Ignore",
                gkm_reconcile="operator", gkm_operator_local=False, gkm_operator_image=operator_image,
                gkm_operator_node_selector={REAL_NODE_LABEL: "true"}, gkm_operator_tolerations=[GPU_TOLERATION],
                gkm_operator_caches_options={"caches_host_path_root": NODE_DISK, "caches_registry_plain_http": True,
                                             "caches_system_namespace_jobs": True, "caches_create_pvs": "always"},
                **extra)


def rbac_exists(kube, namespace):
    rbac = client.RbacAuthorizationV1Api(kube)
    name = "gkm.cluster:%s:%s" % (namespace, OPERATOR)
    found = []
    for read in (lambda: rbac.read_cluster_role(name), lambda: rbac.read_cluster_role_binding(name),
                 lambda: rbac.read_namespaced_role(OPERATOR, namespace),
                 lambda: rbac.read_namespaced_role_binding(OPERATOR, namespace),
                 lambda: client.CoreV1Api(kube).read_namespaced_service_account(OPERATOR, namespace)):
        try:
            found.append(read())
        except client.ApiException as error:
            if error.status != 404:
                raise
    return found


def cache_objects(core, name):
    selector = "gkm.io/cache=%s" % name
    return (core.list_persistent_volume_claim_for_all_namespaces(label_selector=selector).items
            + core.list_persistent_volume(label_selector=selector).items)


def test_the_role_runs_the_operator_in_the_cluster_and_it_reconciles_a_kubectl_cache(
        sim, kube, crds, tools_image, operator_image, cache_image, tmp_path):
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    namespace, cache_namespace, name = unique("gkm-op"), labelled_namespace(core, unique("t-op"), BASELINE), unique("c")
    variables = role_vars(sim, namespace, tools_image, operator_image)
    try:
        started = time.monotonic()
        installed = run_role("gkm", tmp_path, variables)
        assert installed.ok, installed.failures()
        installed_after = time.monotonic() - started

        # Running on a real node, as its own ServiceAccount, in a namespace at baseline (its scrub Jobs run there;
        # the operator's pod itself meets restricted).
        assert core.read_namespace(namespace).metadata.labels["pod-security.kubernetes.io/enforce"] == "baseline"
        [pod] = core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/name=%s" % OPERATOR).items
        assert pod.status.phase == "Running"
        assert core.read_node(pod.spec.node_name).metadata.labels.get(REAL_NODE_LABEL) == "true"
        assert pod.spec.service_account_name == OPERATOR
        assert pod.spec.containers[0].security_context.read_only_root_filesystem
        assert len(rbac_exists(kube, namespace)) == 5

        # A GKMCache as kubectl creates it; the operator alone takes it to Extracted (the hip image fits the AMD node).
        manifest = {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
                    "metadata": {"name": name, "namespace": cache_namespace},
                    "spec": {"image": cache_image.ref, "podTemplate": real_pod_template()}}
        applied = time.monotonic()
        kubectl(sim, "apply", "-f", "-", stdin=json.dumps(manifest))
        status = poll("the cache Extracted", lambda: (
            ((live(crds, cache_namespace, name) or {}).get("status") or {}).get("phase") == "Extracted"
            and live(crds, cache_namespace, name)["status"]), timeout=90)
        extracted_after = time.monotonic() - applied
        assert status["nodeCnt"] >= 1, status
        assert "gkm.io/cache-cleanup" in live(crds, cache_namespace, name)["metadata"]["finalizers"]
        claims = core.list_namespaced_persistent_volume_claim(
            cache_namespace, label_selector="gkm.io/node=%s" % AMD_NODE).items
        assert [claim.status.phase for claim in claims] == ["Bound"], claims
        # The Jobs and their registry Secret ran in the operator's namespace: none of ours in the tenant's.
        ours = "app.kubernetes.io/managed-by=gkm.cluster"
        assert client.BatchV1Api(kube).list_namespaced_job(cache_namespace, label_selector=ours).items == []
        assert core.list_namespaced_secret(cache_namespace, label_selector=ours).items == []

        # Its finalizer runs in the pod too: the cache's objects are deleted before the resource goes; the PVCs'
        # protection holds them until their Jobs' pods are gone.
        kubectl(sim, "delete", "gkmcache", name, "-n", cache_namespace, "--timeout=60s")
        poll("the cache's PVCs and PVs gone", lambda: cache_objects(core, name) == [], timeout=60)
        log = pod_logs(core, namespace, pod.metadata.name)
        assert "forbidden" not in log.lower(), log[-3000:]
        print("role install %.1fs, kubectl apply to Extracted %.1fs" % (installed_after, extracted_after))
    finally:
        try:
            kubectl(sim, "delete", "gkmcache", name, "-n", cache_namespace, "--ignore-not-found", "--timeout=60s")
            removed = run_role("gkm", tmp_path, dict(variables, gkm_state="absent"))
        finally:
            delete_namespace(core, cache_namespace)
    assert removed.ok, removed.failures()
    assert apps.list_namespaced_deployment(namespace).items == []
    assert rbac_exists(kube, namespace) == []
    # Nothing of ours is left on the real node: its namespace goes only once the kubelet has torn its pods down
    # (their network namespaces too).
    poll("the operator's namespace %s gone" % namespace, lambda: namespace not in {
        item.metadata.name for item in core.list_namespace().items}, timeout=120)
