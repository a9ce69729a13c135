"""The serving PVC of a ReadWriteOnce cache (distribute/serving.py) against the real local control plane (kwok nodes)
and registry: bound at once, rerun writes nothing, a digest change while a pod reads it, removal, a foreign PVC
of the cache's name, and a new serving PVC already Bound when the run that made it returns."""

import time

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, AuditWrites, run_module
from tests.integration.modules.test_cache_distribute import (
    EXTRACT_IMAGE,
    GPU_TOLERATION,
    WORKERS,
    tolerated,
    unique,
    wait_until,
    workload_pod,
)

pytestmark = [pytest.mark.cluster, pytest.mark.registry]


@pytest.fixture(scope="module")
def images(registry):
    return [kcache_images.build_image(registry.host, "serving/vector-add", tag,
                                      kcache_images.CacheSpec(backend="hip", seed=seed, compiled=True))
            for tag, seed in (("v1", 1), ("v2", 2))]


def distribute(sim, **args):
    args.setdefault("registry_plain_http", True)
    args.setdefault("extract_image", EXTRACT_IMAGE)
    args.setdefault("host_path_root", NODE_DISK)
    return run_module("cache_distribute", sim.kubeconfig, **args)


def serving_pvc(kube, namespace, name):
    return client.CoreV1Api(kube).read_namespaced_persistent_volume_claim(name, namespace)


def readiness(kube, namespace, name):
    """{node: value} of the cache's readiness label on the test's workers."""
    key = "cache.gkm.io/%s.%s" % (namespace, name)
    core = client.CoreV1Api(kube)
    return {node: (core.read_node(node).metadata.labels or {}).get(key) for node in WORKERS}


def bound(kube, namespace, name):
    return serving_pvc(kube, namespace, name).status.phase == "Bound"


def test_serving_pvc_binds_serves_any_pod_survives_a_digest_change_while_mounted_and_goes_with_the_cache(
        sim, kube, images, namespace):
    name = unique("serve")
    args = tolerated(name=name, namespace=namespace, image=images[0].ref, wait=True, wait_timeout=120)
    core = client.CoreV1Api(kube)
    old_hex, new_hex = (image.digest.split(":")[1] for image in images)
    try:
        first = distribute(sim, **args)
        assert not first.get("failed"), first.get("msg")
        wait_until("serving PVC bound", lambda: bound(kube, namespace, name), timeout=30)
        pvc = serving_pvc(kube, namespace, name)
        assert pvc.spec.access_modes == ["ReadOnlyMany"] and pvc.spec.storage_class_name == ""
        pv = core.read_persistent_volume(pvc.spec.volume_name)
        assert pv.spec.node_affinity is None
        assert pv.spec.host_path.type == "Directory"
        # The node's store, which every namespace's slot PV points at (system_namespace_jobs).
        assert pv.spec.host_path.path == "%s/%s/%s/_store/%s/cache" % (NODE_DISK, namespace, name, old_hex)
        # Each node's slot PV is that directory's parent: the path is the same on every node. (The PV its Job wrote
        # the store through, labelled gkm.io/store, goes once the slot is marked.)
        slot_pvs = core.list_persistent_volume(label_selector="gkm.io/cache=%s,gkm.io/node,!gkm.io/store" % name).items
        assert {p.spec.host_path.path for p in slot_pvs} == {pv.spec.host_path.path[:-len("/cache")]}
        assert len(slot_pvs) == len(WORKERS)

        # Every worker's slot is Extracted: each is labelled ready at the digest, written once.
        assert readiness(kube, namespace, name) == {node: old_hex[:12] for node in WORKERS}
        assert sorted(change["node"] for change in first["node_labels"]) == WORKERS

        audit = AuditWrites()
        again = distribute(sim, **args)
        assert again["changed"] is False and again["api_writes"] == 0, again["plan"]
        assert audit.since(name) == [] and again["node_labels"] == []

        reader = workload_pod(kube, namespace, name, WORKERS[0])
        running = distribute(sim, **args)
        assert running["status"]["counts"]["pod_running"] == 1 and running["status"]["phase"] == "Running"

        # A new digest while a pod reads the serving PVC: it keeps its PV, and the reader's node keeps its old slot.
        changed = distribute(sim, **{**args, "image": images[1].ref, "node_details": True})
        assert not changed.get("failed"), changed.get("msg")
        assert serving_pvc(kube, namespace, name).metadata.uid == pvc.metadata.uid
        outdated = [e for e in changed["status"]["entries"] if e["phase"] == "Outdated"]
        assert sorted(e["node"] for e in outdated) == ["", WORKERS[0]]
        assert changed["status"]["counts"]["pod_outdated"] == 1 and changed["status"]["phase"] == "Outdated"
        assert readiness(kube, namespace, name) == {node: new_hex[:12] for node in WORKERS}
        # Every node has the new digest: the alias serves it to new pods (the steering webhook points them at it).
        alias = "%s-%s" % (name, new_hex[:12])
        wait_until("the alias bound", lambda: bound(kube, namespace, alias), timeout=30)
        assert core.read_persistent_volume(serving_pvc(kube, namespace, alias).spec.volume_name) \
            .spec.host_path.path.endswith(new_hex + "/cache")
        assert sorted((s["pvc"], s["digest"]) for s in changed["status"]["serving"]) == [(alias, new_hex[:12])]

        core.delete_namespaced_pod(reader, namespace, grace_period_seconds=0)
        wait_until("reader gone", lambda: not core.list_namespaced_pod(
            namespace, field_selector="metadata.name=%s" % reader).items)
        released = distribute(sim, **{**args, "image": images[1].ref})
        assert not released.get("failed"), released.get("msg")
        wait_until("new serving PVC bound", lambda: bound(kube, namespace, name), timeout=30)
        renewed = serving_pvc(kube, namespace, name)
        assert renewed.metadata.uid != pvc.metadata.uid
        assert core.read_persistent_volume(renewed.spec.volume_name).spec.host_path.path.endswith(new_hex + "/cache")
        assert released["status"]["counts"]["pod_outdated"] == 0 and released["status"]["phase"] == "Extracted"
        # The alias, unused, went with its PV.
        assert [s["pvc"] for s in released["status"]["serving"]] == [name]
        assert not core.list_namespaced_persistent_volume_claim(
            namespace, field_selector="metadata.name=" + alias).items
        assert not [p for p in core.list_persistent_volume(label_selector="gkm.io/cache=%s" % name).items
                    if old_hex in p.spec.host_path.path]
    finally:
        distribute(sim, name=name, namespace=namespace, state="absent", force=True)
    assert readiness(kube, namespace, name) == {node: None for node in WORKERS}
    assert not [p for p in core.list_persistent_volume(label_selector="gkm.io/cache=%s" % name).items
                if not p.metadata.deletion_timestamp]


def test_a_new_serving_pvc_is_bound_when_the_run_that_made_it_returns(sim, kube, images, namespace):
    """The slots extracted first without a serving PVC, so the run that makes it has nothing else to wait for: it
    must not report the PVC before the PV controller bound it (a pod naming the cache would wait meanwhile)."""
    name = unique("bind")
    args = tolerated(name=name, namespace=namespace, image=images[0].ref, wait=True, wait_timeout=120)
    try:
        slots = distribute(sim, **args, serving_pvc=False)
        assert not slots.get("failed"), slots.get("msg")
        started = time.monotonic()
        made = distribute(sim, **args)
        returned = time.monotonic()
        assert not made.get("failed"), made.get("msg")
        assert [s["pvc"] for s in made["status"]["serving"]] == [name]
        phase = serving_pvc(kube, namespace, name).status.phase
        wait_until("serving PVC bound", lambda: bound(kube, namespace, name), timeout=30)
        late = time.monotonic() - returned
        print("serving PVC: run %.1f s, Bound %.1f s after it returned (phase at return: %s)" % (
            returned - started, late, phase))
        assert phase == "Bound", "the run returned with its new serving PVC %s; it bound %.1f s later" % (phase, late)
    finally:
        distribute(sim, name=name, namespace=namespace, state="absent", force=True)


def test_a_pvc_of_the_cache_name_that_is_not_ours_refuses_the_cache_and_stays(sim, kube, images, namespace):
    name = unique("taken")
    core = client.CoreV1Api(kube)
    core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"],
                                             "resources": {"requests": {"storage": "1Mi"}}}})
    refused = distribute(sim, **tolerated(name=name, namespace=namespace, image=images[0].ref))
    assert refused.get("failed") and "belongs to no cache (gkm.cluster did not make it)" in refused["msg"]
    assert not core.list_persistent_volume_claim_for_all_namespaces(label_selector="gkm.io/cache=%s" % name).items
    assert serving_pvc(kube, namespace, name).metadata.labels is None


def finished_batch_pod(kube, namespace, claim, node):
    """A Job's pod on a kwok node that names the claim and has Succeeded (kwok completes Job pods): the name of the
    pod. Its Job keeps it, as a batch Job does until its TTL."""
    job = {"metadata": {"name": unique("batch"), "namespace": namespace},
           "spec": {"backoffLimit": 0, "template": {"spec": {
               "restartPolicy": "Never", "nodeName": node, "tolerations": [GPU_TOLERATION],
               "containers": [{"name": "warmup", "image": "warmup:1",
                               "volumeMounts": [{"name": "k", "mountPath": "/root/.triton", "readOnly": True}]}],
               "volumes": [{"name": "k", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}]}}}}
    client.BatchV1Api(kube).create_namespaced_job(namespace, job)
    selector = "job-name=%s" % job["metadata"]["name"]
    core = client.CoreV1Api(kube)
    wait_until("the batch pod Succeeded", lambda: [
        p for p in core.list_namespaced_pod(namespace, label_selector=selector).items if p.status.phase == "Succeeded"])
    return job["metadata"]["name"], core.list_namespaced_pod(namespace, label_selector=selector).items[0].metadata.name


def test_a_serving_pvc_a_finished_pod_names_is_kept_at_its_digest_until_the_pod_goes(sim, kube, images, namespace):
    """A finished pod holds the claims it names until it is deleted (the API server's pvc-protection): a new digest
    keeps the serving PVC and the run completes, where a replace waited on the Terminating claim until the run's
    deadline (a capture's finished pod held one for 294 s). Once the pod goes, the next run renews the PVC."""
    name = unique("held")
    args = tolerated(name=name, namespace=namespace, image=images[0].ref, wait=True, wait_timeout=120)
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    new_hex = images[1].digest.split(":")[1]
    job = None
    try:
        assert not distribute(sim, **args).get("failed")
        wait_until("serving PVC bound", lambda: bound(kube, namespace, name), timeout=30)
        original = serving_pvc(kube, namespace, name).metadata.uid
        job, finished = finished_batch_pod(kube, namespace, name, WORKERS[0])

        started = time.monotonic()
        changed = distribute(sim, **{**args, "image": images[1].ref, "node_details": True})
        seconds = time.monotonic() - started
        assert not changed.get("failed"), changed.get("msg")
        held = serving_pvc(kube, namespace, name)
        assert held.metadata.uid == original and held.metadata.deletion_timestamp is None
        kept = [e for e in changed["status"]["entries"] if e["phase"] == "Outdated" and not e["node"]]
        assert [e.get("mounted_by") for e in kept] == [["%s/%s" % (namespace, finished)]], changed["status"]["entries"]
        assert "finished pod(s) %s" % finished in kept[0]["message"]
        assert changed["status"]["counts"]["pod_running"] == 0
        print("finished pod: the run with a new digest took %.1fs, the serving PVC kept" % seconds)

        batch.delete_namespaced_job(job, namespace, propagation_policy="Foreground")
        wait_until("the batch pod gone", lambda: not core.list_namespaced_pod(
            namespace, label_selector="job-name=%s" % job).items)
        job = None
        released = distribute(sim, **{**args, "image": images[1].ref})
        assert not released.get("failed"), released.get("msg")
        wait_until("the renewed serving PVC bound", lambda: bound(kube, namespace, name), timeout=30)
        renewed = serving_pvc(kube, namespace, name)
        assert renewed.metadata.uid != original
        assert core.read_persistent_volume(renewed.spec.volume_name).spec.host_path.path.endswith(new_hex + "/cache")
    finally:
        if job:
            batch.delete_namespaced_job(job, namespace, propagation_policy="Background")
        distribute(sim, name=name, namespace=namespace, state="absent", force=True)
