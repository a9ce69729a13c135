"""GKMCaches the operator tests create: each on a kwok node pool of its own (a label), and polls of their state."""

import json
import subprocess
import time
import uuid

from kubernetes import client

from tests.helpers.modules import AuditWrites, run_module

GROUP, VERSION = "gkm.io", "v1alpha1"
POOL_LABEL = "gkm.test/operator-pool"


def pool_nodes(sim_nodes, pool, count):
    return sim_nodes([{"name": "%s-%s" % (pool, uuid.uuid4().hex[:3]), "count": count, "vendor": "amd",
                       "labels": {POOL_LABEL: pool}}], timeout=120)


def manifest(name, namespace, image_ref, pool, upgrade_policy=None):
    template = {"spec": {"nodeSelector": {POOL_LABEL: pool},
                         "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}}
    spec = {"image": image_ref, "podTemplate": template}
    if upgrade_policy is not None:
        spec["upgradePolicy"] = upgrade_policy
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def kubectl(sim, *args, stdin=None):
    return subprocess.run(["kubectl", "--kubeconfig", sim.kubeconfig, *args], check=True, input=stdin, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout


def apply(sim, name, namespace, image_ref, pool, upgrade_policy=None):
    kubectl(sim, "apply", "-f", "-", stdin=json.dumps(manifest(name, namespace, image_ref, pool, upgrade_policy)))


def poll(what, check, timeout, interval=0.5):
    """check() until it returns something true; its value, or fail naming what and the last value."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("%s not reached in %ss; last: %r" % (what, timeout, value))


def live(crds, namespace, name):
    try:
        return crds.get_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", name)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def settled(crds, namespace, name, quiet_seconds=5):
    """True when the cache resource did not change for quiet_seconds."""
    version = live(crds, namespace, name)["metadata"]["resourceVersion"]
    time.sleep(quiet_seconds)
    return live(crds, namespace, name)["metadata"]["resourceVersion"] == version


def phase_is(crds, namespace, name, phase, node_count):
    status = (live(crds, namespace, name) or {}).get("status") or {}
    return status if status.get("phase") == phase and status.get("nodeCnt") == node_count else None


def cache_objects(kube, namespace, name):
    """The cache's PVCs, Jobs and PVs (by the labels every object of a cache carries)."""
    selector = "gkm.io/cache=%s,gkm.io/cache-namespace=%s" % (name, namespace)
    return {
        "pvcs": client.CoreV1Api(kube).list_persistent_volume_claim_for_all_namespaces(label_selector=selector).items,
        "jobs": client.BatchV1Api(kube).list_job_for_all_namespaces(label_selector=selector).items,
        "pvs": client.CoreV1Api(kube).list_persistent_volume(label_selector=selector).items,
    }


def per_node(objects):
    """{node: count} of the objects labelled with a node (a cache's slot PVCs, PVs and Jobs)."""
    counts = {}
    for obj in objects:
        node = (obj.metadata.labels or {}).get("gkm.io/node")
        if node:
            counts[node] = counts.get(node, 0) + 1
    return counts


def kwok_tools_image(sim):
    """The tools image an engine and a module both name on kwok nodes: kwok runs no containers, so any reference
    does, as long as both give the same one."""
    return "%s/gkm-cluster/tools:sim" % sim.registry


def assert_module_beside_writes_nothing(sim, crds, namespace, name, engine):
    """Once the engine (operator or controller) settled, the module's reconcile with the same options finds nothing
    to change and writes nothing: neither undoes the other."""
    poll("the %s settled" % engine, lambda: settled(crds, namespace, name), 60)
    audit = AuditWrites()
    beside = run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=namespace,
                        extract_image=kwok_tools_image(sim), registry_plain_http=True, wait=True)
    assert not beside.get("failed"), beside.get("msg")
    assert not beside["changed"] and not beside["status_changed"]
    assert audit.since("/namespaces/%s/" % namespace) == []
