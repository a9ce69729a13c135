"""A rolling upgrade that restarts a workload onto its node's new cache, on a real node, under a
PodDisruptionBudget (upgradePolicy.restart, docs/upgrades.md).

The workload is a DaemonSet whose pods the in-cluster webhook hands the node's extracted PVC. When the cache moves
to a new digest, its pod keeps the previous digest's PVC until it is evicted; the eviction goes through policy/v1,
so a budget that allows no disruption holds it (the pod keeps running, the node stays upgrading), and once the
budget allows it the pod is evicted, its replacement gets the new digest, and the rollout completes.
"""

import time

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.operator_caches import GROUP, VERSION
from tests.helpers.real_nodes import (
    AMD_NODE,
    delete_namespace,
    pod_logs,
    real_pod_template,
    run_daemonset,
    running_pods,
    unique,
)
from tests.helpers.tenant import REAL_NODES_TOKEN_SECONDS, tenant_namespace
from tests.helpers.webhook import wait_until
from tests.integration.webhook.test_webhook_in_cluster import install_server, real_options, remove

pytestmark = [pytest.mark.cluster, pytest.mark.real_nodes]

PLURAL = "gkmcaches"
# sh as PID 1 ignores SIGTERM unless it traps it: without the trap each eviction would wait out the grace period.
READER = "trap 'exit 0' TERM; cat /kernels/.gkm-cache.json; echo; sleep 3600 & wait"


@pytest.fixture(scope="module")
def images(registry, real_nodes):
    return [kcache_images.build_image(registry.host, "real/restarts", tag, kcache_images.CacheSpec(
        backend="hip", kernels=2, seed=seed)) for tag, seed in (("v1", 31), ("v2", 32))]


def reconcile(sim, tools_image, name, namespace, wait_timeout):
    return run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=namespace,
                      registry_plain_http=True, extract_image=tools_image, host_path_root=NODE_DISK,
                      serving_pvc=False, wait=True, wait_timeout=wait_timeout, node_details=True)


def reader_pod(core, namespace):
    pods = [pod for pod in running_pods(core, namespace, "app=reader") if not pod.metadata.deletion_timestamp]
    return pods[0] if len(pods) == 1 else None


def test_a_budget_holds_the_restart_until_it_allows_it_then_the_pod_reads_the_new_digest(
        sim, kube, crds, tools_image, images):
    # The tenant (`edit` in the namespace, through its ServiceAccount's token) owns the cache, the DaemonSet and the
    # budget; the admin runs the reconcile and the webhook.
    tenant = tenant_namespace(kube, unique("t-restart"), "baseline", REAL_NODES_TOKEN_SECONDS)
    namespace, core, caches = tenant.namespace, tenant.core, tenant.caches
    apps, policy = client.AppsV1Api(tenant.api), client.PolicyV1Api(tenant.api)
    name = unique("rs")
    webhook = real_options(unique("wh"), unique("gkm-wh"), tools_image, replicas=1, wait_timeout=180)
    old, new = images
    caches.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache", "metadata": {"name": name},
        "spec": {"image": old.ref, "podTemplate": real_pod_template(), "upgradePolicy": {
            "maxUnavailable": 1, "restart": [{"kind": "DaemonSet", "name": "reader"}]}}})
    try:
        install_server(sim.kubeconfig, **webhook)
        first = reconcile(sim, tools_image, name, namespace, 180)
        assert not first.get("failed"), first.get("msg")
        run_daemonset(apps, namespace, "reader", tools_image, READER, labels={"gkm.io/pvc-mutation": "true"},
                      volumes=[{"name": "kernels", "persistentVolumeClaim": {"claimName": name}}],
                      mounts=[{"name": "kernels", "mountPath": "/kernels", "subPath": "cache", "readOnly": True}])
        apps.patch_namespaced_daemon_set("reader", namespace, {"spec": {"template": {"spec": {
            "nodeSelector": {"kubernetes.io/hostname": AMD_NODE}, "terminationGracePeriodSeconds": 5}}}})
        before = wait_until("the reader running", lambda: reader_pod(core, namespace), timeout=120)
        wait_until("the reader's marker", lambda: old.digest in pod_logs(core, namespace, before.metadata.name),
                   timeout=60)
        policy.create_namespaced_pod_disruption_budget(namespace, {
            "metadata": {"name": "reader"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "reader"}}}})
        wait_until("the budget observed", lambda: (policy.read_namespaced_pod_disruption_budget(
            "reader", namespace).status.observed_generation or 0) >= 1, timeout=30)

        caches.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": {"image": new.ref}})
        started = time.monotonic()
        held = reconcile(sim, tools_image, name, namespace, 45)
        held_s = time.monotonic() - started
        assert not held.get("failed"), held.get("msg")
        rollout = held["rollout"]
        # The new digest is extracted on the node, but the budget refused the eviction: the pod runs on, on the
        # previous digest, and the node stays upgrading.
        assert rollout["restart"] == [AMD_NODE] and rollout["upgrading"] == [AMD_NODE], rollout
        assert rollout["evicted"] == [], rollout
        refusal = rollout["eviction_refused"]
        assert [r["pod"] for r in refusal] == ["%s/%s" % (namespace, before.metadata.name)], rollout
        assert "disruption budget" in refusal[0]["message"], refusal
        assert reader_pod(core, namespace).metadata.uid == before.metadata.uid

        policy.patch_namespaced_pod_disruption_budget("reader", namespace, {"spec": {"minAvailable": 0}})
        started = time.monotonic()
        moved = reconcile(sim, tools_image, name, namespace, 120)
        moved_s = time.monotonic() - started
        assert not moved.get("failed"), moved.get("msg")
        assert moved["rollout"]["complete"] and moved["rollout"]["upgraded"] == [AMD_NODE], moved["rollout"]
        assert moved["rollout"]["evicted"] == ["%s/%s" % (namespace, before.metadata.name)], moved["rollout"]
        after = wait_until("the new reader running", lambda: reader_pod(core, namespace), timeout=60)
        assert after.metadata.uid != before.metadata.uid
        wait_until("the new reader's marker", lambda: new.digest in pod_logs(core, namespace, after.metadata.name),
                   timeout=60)
        current = next(e for e in moved["status"]["entries"] if e["node"] == AMD_NODE and e["phase"] == "Extracted")
        assert after.spec.volumes[0].persistent_volume_claim.claim_name == current["pvc"]
        print("restart under a budget: held run %.1fs (refused), released run %.1fs (evicted, complete)" % (
            held_s, moved_s))
    finally:
        apps.delete_collection_namespaced_daemon_set(namespace)
        remove(sim.kubeconfig, webhook["name"], webhook["namespace"])
        run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=namespace,
                   state="absent", force=True, extract_image=tools_image, host_path_root=NODE_DISK)
        caches.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        delete_namespace(client.CoreV1Api(kube), namespace)
