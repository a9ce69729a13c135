"""Scrubbing the nodes' disks before slot PVs are deleted, against the real local control plane and registry.

On kwok nodes the scrub Job's pod runs nothing (kwok marks Job pods Succeeded): these tests check the
objects (node pin, paths, security context, the system namespace they live in), the order (slot PVs deleted
only after the Job succeeded), gone nodes, failures and check mode. The files really leaving a disk is checked
on real nodes. The module's system namespace is one of this file's, which the first scrub creates.
"""

import os
import threading
import time
import uuid

import pytest
from kubernetes import client, watch

from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, AuditWrites, run_module

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
WORKERS = ["gkm-gpu-worker-1", "gkm-gpu-worker-2"]
EXTRACT_IMAGE = "gkm-cluster-tools:test"
SCRUB_SELECTOR = "gkm.io/scrub=true"
CLI_MODULE = "ansible_collections.gkm.cluster.plugins.module_utils.extract.scrub_main"
POD_SECURITY = "pod-security.kubernetes.io/enforce"
SYSTEM = "gkm-sys-%s" % uuid.uuid4().hex[:6]


@pytest.fixture(scope="module", autouse=True)
def system_namespace(kube):
    """The scrubs' namespace: made by the first scrub that needs it, deleted after the file."""
    yield SYSTEM
    client.CoreV1Api(kube).delete_namespace(SYSTEM)


@pytest.fixture(scope="module")
def image(registry):
    return kcache_images.build_image(registry.host, "scrub/vector-add", "v1", kcache_images.CacheSpec(backend="hip"))


def distribute(sim, nodes, check=False, **args):
    args.setdefault("registry_plain_http", True)
    args.setdefault("extract_image", EXTRACT_IMAGE)
    args.setdefault("host_path_root", NODE_DISK)
    args.setdefault("system_namespace", SYSTEM)
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]} for name in nodes]
    args["pod_template"] = {"spec": {"tolerations": [GPU_TOLERATION], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}}
    return run_module("cache_distribute", sim.kubeconfig, check=check, **args)


def slot_pvs(kube, name):
    """The cache's per-node slot PVs (its serving PV is on no node and holds no slot of its own; the PV its Job writes
    the node's store through, labelled gkm.io/store, goes once the slot is marked extracted)."""
    return client.CoreV1Api(kube).list_persistent_volume(
        label_selector="gkm.io/cache=%s,gkm.io/node,!gkm.io/store" % name).items


def wait_store_access_gone(kube, name, timeout=60):
    """The PV a Job wrote the store through, deleted by the run that waited, goes once that Job's pod has."""
    deadline = time.monotonic() + timeout
    while client.CoreV1Api(kube).list_persistent_volume(label_selector="gkm.io/cache=%s,gkm.io/store" % name).items:
        assert time.monotonic() < deadline, "the store's access PVs of %s still there after %ss" % (name, timeout)
        time.sleep(0.3)


def wait_pvs_gone(kube, name, timeout=30):
    """Deleted PVs linger while their PVC goes (pv-protection finalizer)."""
    deadline = time.monotonic() + timeout
    while client.CoreV1Api(kube).list_persistent_volume(label_selector="gkm.io/cache=%s,gkm.io/node" % name).items:
        assert time.monotonic() < deadline, "PVs of %s still there after %ss" % (name, timeout)
        time.sleep(0.3)


def scrub_objects(kube, namespace):
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    return (core.list_persistent_volume(label_selector=SCRUB_SELECTOR).items
            + core.list_namespaced_persistent_volume_claim(namespace, label_selector=SCRUB_SELECTOR).items
            + batch.list_namespaced_job(namespace, label_selector=SCRUB_SELECTOR).items)


class Recorder:
    """Watches scrub Jobs and one cache's PVs while a module runs; events keep their resourceVersion, which a
    single etcd orders globally, so 'PV deleted after the Job completed' is checked without clock races."""

    def __init__(self, kube, namespace, cache):
        self.events = []
        self._stop = threading.Event()
        batch, core = client.BatchV1Api(kube), client.CoreV1Api(kube)
        self._threads = [
            threading.Thread(target=self._watch, args=("Job", batch.list_namespaced_job, (namespace,),
                                                       SCRUB_SELECTOR), daemon=True),
            threading.Thread(target=self._watch, args=("PersistentVolume", core.list_persistent_volume, (),
                                                       "gkm.io/cache=%s" % cache), daemon=True),
        ]

    def _watch(self, kind, list_call, args, selector):
        version = list_call(*args, label_selector=selector).metadata.resource_version
        stream = watch.Watch()
        while not self._stop.is_set():
            for event in stream.stream(list_call, *args, label_selector=selector, resource_version=version,
                                       timeout_seconds=2):
                obj = event["object"]
                version = obj.metadata.resource_version
                self.events.append((kind, event["type"], obj))

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        time.sleep(0.5)  # both watches are open before the module starts
        return self

    def __exit__(self, *exc):
        time.sleep(1)
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def jobs(self):
        return {obj.metadata.name: obj for kind, _type, obj in self.events if kind == "Job"}

    def completed_at(self):
        """Job name -> resourceVersion of the first event showing it Complete."""
        done = {}
        for kind, _type, obj in self.events:
            if kind == "Job" and any(c.type == "Complete" and c.status == "True"
                                     for c in (obj.status.conditions or [])):
                done.setdefault(obj.metadata.name, int(obj.metadata.resource_version))
        return done

    def pv_deletions(self):
        """PV name -> resourceVersion at which its deletion was first seen."""
        deleted = {}
        for kind, kind_event, obj in self.events:
            if kind == "PersistentVolume" and (kind_event == "DELETED" or obj.metadata.deletion_timestamp):
                deleted.setdefault(obj.metadata.name, int(obj.metadata.resource_version))
        return deleted


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:6])


def test_slot_pvs_go_only_after_each_node_s_scrub_job_succeeded(sim, kube, namespace, image):
    name = unique("disk")
    created = distribute(sim, WORKERS, name=name, namespace=namespace, image=image.ref, wait=True)
    assert not created.get("failed"), created.get("msg")
    wait_store_access_gone(kube, name)
    pvs = {pv.metadata.name: pv for pv in slot_pvs(kube, name)}
    assert len(pvs) == 2
    paths = {pv.spec.node_affinity.required.node_selector_terms[0].match_expressions[0].values[0]:
             os.path.relpath(pv.spec.host_path.path, NODE_DISK) for pv in pvs.values()}

    with Recorder(kube, SYSTEM, name) as recorder:
        removed = distribute(sim, WORKERS, name=name, namespace=namespace, state="absent", wait_timeout=60)
    assert not removed.get("failed"), removed.get("msg")

    jobs = recorder.jobs()
    assert len(jobs) == 2, jobs.keys()
    for job in jobs.values():
        pod = job.spec.template.spec
        node = pod.node_name
        container = pod.containers[0]
        assert container.image == EXTRACT_IMAGE
        assert container.command == ["python3", "-m", CLI_MODULE, "--root", "/gkm-root", paths[node]]
        security = container.security_context
        assert security.capabilities.drop == ["ALL"] and security.capabilities.add == ["DAC_OVERRIDE"]
        assert security.allow_privilege_escalation is False and security.read_only_root_filesystem is True
        assert pod.security_context.run_as_user == 0
        assert pod.security_context.seccomp_profile.type == "RuntimeDefault"
        assert [volume.persistent_volume_claim.claim_name for volume in pod.volumes] == [job.metadata.name]
    completed, deletions = recorder.completed_at(), recorder.pv_deletions()
    # The serving PV (the cache's, on no node, holding no slot of its own) needs no scrub.
    slot_deletions = {pv: at for pv, at in deletions.items() if pv in pvs}
    assert set(completed) == set(jobs) and set(slot_deletions) == set(pvs), deletions
    assert set(deletions) - set(pvs) == {pv for pv in deletions if "-serving-" in pv}, deletions
    assert min(slot_deletions.values()) > max(completed.values()), (completed, deletions)

    report = {entry["node"]: entry for entry in removed["scrub"]["nodes"]}
    assert sorted(report) == sorted(WORKERS)
    assert all(entry["result"] == "removed" and entry["paths"] == [paths[node]] and entry["root"] == NODE_DISK
               for node, entry in report.items())
    assert not removed.get("warnings")
    wait_pvs_gone(kube, name)
    # The scrub's own PV, PVC and Job are gone too, from the system namespace, which the scrub made if it had to.
    assert scrub_objects(kube, SYSTEM) == []
    labels = client.CoreV1Api(kube).read_namespace(SYSTEM).metadata.labels
    assert (labels["app.kubernetes.io/managed-by"], labels[POD_SECURITY]) == ("gkm.cluster", "baseline")


def test_scrub_pv_is_the_root_pinned_to_the_node_and_claimed_in_the_system_namespace_by_uid(
        sim, kube, namespace, image):
    name = unique("disk-pv")
    assert not distribute(sim, WORKERS[:1], name=name, namespace=namespace, image=image.ref).get("failed")
    core = client.CoreV1Api(kube)
    seen = []
    stream = watch.Watch()

    def watch_pvs():
        for event in stream.stream(core.list_persistent_volume, label_selector=SCRUB_SELECTOR, timeout_seconds=60):
            seen.append(event["object"])
            if event["type"] == "DELETED":
                stream.stop()

    thread = threading.Thread(target=watch_pvs, daemon=True)
    thread.start()
    time.sleep(0.5)
    removed = distribute(sim, WORKERS[:1], name=name, namespace=namespace, state="absent", wait_timeout=60)
    thread.join(timeout=60)
    assert not removed.get("failed"), removed.get("msg")
    pv = seen[0]
    assert pv.spec.host_path.path == NODE_DISK and pv.spec.host_path.type == "DirectoryOrCreate"
    assert pv.spec.persistent_volume_reclaim_policy == "Retain"
    term = pv.spec.node_affinity.required.node_selector_terms[0].match_fields[0]
    assert (term.key, term.values) == ("metadata.name", [WORKERS[0]])
    assert (pv.spec.claim_ref.namespace, pv.spec.claim_ref.name) == (SYSTEM, pv.metadata.name)
    # Bound to the claim the run created, by its uid, from the PV's creation on.
    assert pv.spec.claim_ref.uid and pv.metadata.name.startswith("gkm-scrub-")


def test_check_mode_reports_what_would_be_removed_and_creates_nothing(sim, kube, namespace, image):
    name = unique("disk-check")
    assert not distribute(sim, WORKERS[:1], name=name, namespace=namespace, image=image.ref).get("failed")
    audit = AuditWrites()
    planned = distribute(sim, WORKERS[:1], check=True, name=name, namespace=namespace, state="absent")
    assert not planned.get("failed"), planned.get("msg")
    assert [(e["node"], e["result"]) for e in planned["scrub"]["nodes"]] == [(WORKERS[0], "would remove")]
    # The node's store, which the slot PV points at (system_namespace_jobs).
    assert planned["scrub"]["nodes"][0]["paths"][0].startswith("%s/%s/_store/" % (namespace, name))
    assert audit.since("gkm-scrub-") == []
    assert len(slot_pvs(kube, name)) == 1
    assert not distribute(sim, WORKERS[:1], name=name, namespace=namespace, state="absent").get("failed")
    wait_pvs_gone(kube, name)


def test_pvs_whose_namespace_is_gone_are_scrubbed_all_the_same(sim, kube, image):
    core = client.CoreV1Api(kube)
    namespace = unique("t-disk-gone-ns")
    core.create_namespace({"metadata": {"name": namespace, "labels": {"gkm.io/test": "true"}}})
    name = unique("disk-orphan")
    assert not distribute(sim, WORKERS[:1], name=name, namespace=namespace, image=image.ref).get("failed")
    core.delete_namespace(namespace)
    deadline = time.monotonic() + 60
    while namespace in {ns.metadata.name for ns in core.list_namespace().items}:
        assert time.monotonic() < deadline, "namespace %s never went" % namespace
        time.sleep(0.5)
    removed = distribute(sim, WORKERS[:1], name=name, namespace=namespace, state="absent", wait_timeout=60)
    assert not removed.get("failed"), removed.get("msg")
    assert [(e["job"].split("/")[0], e["result"]) for e in removed["scrub"]["nodes"]] == [(SYSTEM, "removed")]
    wait_pvs_gone(kube, name)
    assert scrub_objects(kube, SYSTEM) == []


def test_a_gone_node_is_a_warning_and_nothing_waits_for_it(sim, kube, namespace, image):
    from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
    from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes

    raw = Kube(kube)
    node = unique("gkm-gone-node")
    raw.request("POST", "/api/v1/nodes", body=gpu_nodes.render_node(node, {"vendor": "amd"}))
    try:
        deadline = time.monotonic() + 60
        while not any(c["type"] == "Ready" and c["status"] == "True"
                      for c in ((raw.get("Node", node) or {}).get("status") or {}).get("conditions") or []):
            assert time.monotonic() < deadline, "node %s never Ready" % node
            time.sleep(0.3)
        name = unique("disk-gone")
        assert not distribute(sim, [node], name=name, namespace=namespace, image=image.ref).get("failed")
        pv = slot_pvs(kube, name)[0]
    finally:
        raw.delete("Node", node)
    started = time.monotonic()
    removed = distribute(sim, [node], name=name, namespace=namespace, state="absent", wait_timeout=120)
    assert not removed.get("failed"), removed.get("msg")
    assert time.monotonic() - started < 60
    assert removed["warnings"] == ["node %s is gone: %s (PV %s) stays on its disk" % (
        node, pv.spec.host_path.path, pv.metadata.name)]
    assert removed["scrub"]["nodes"] == []
    wait_pvs_gone(kube, name)


def test_a_scrub_job_that_cannot_run_keeps_the_pvs_and_says_why(sim, kube, namespace, image):
    """Pod Security restricted in the system namespace refuses the scrub pod (uid 0, DAC_OVERRIDE): the Job never
    runs, the PVs stay; at baseline, which the docs ask for, the rerun scrubs and deletes them."""
    name = unique("disk-fail")
    assert not distribute(sim, WORKERS[:1], name=name, namespace=namespace, image=image.ref).get("failed")
    core = client.CoreV1Api(kube)
    if SYSTEM not in {ns.metadata.name for ns in core.list_namespace().items}:
        core.create_namespace({"metadata": {"name": SYSTEM}})
    core.patch_namespace(SYSTEM, {"metadata": {"labels": {POD_SECURITY: "restricted"}}})
    try:
        failed = distribute(sim, WORKERS[:1], name=name, namespace=namespace, state="absent", wait_timeout=8)
    finally:
        core.patch_namespace(SYSTEM, {"metadata": {"labels": {POD_SECURITY: "baseline"}}})
    assert failed.get("failed")
    error = next(e for e in failed["errors"] if e["action"] == "scrub")
    assert "pod refused" in error["error"] and "PodSecurity" in error["error"], error
    assert len(slot_pvs(kube, name)) == 1
    assert scrub_objects(kube, SYSTEM) == []

    removed = distribute(sim, WORKERS[:1], name=name, namespace=namespace, state="absent", wait_timeout=60)
    assert not removed.get("failed"), removed.get("msg")
    assert [e["result"] for e in removed["scrub"]["nodes"]] == ["removed"]
    wait_pvs_gone(kube, name)


@pytest.mark.real_nodes
def test_files_really_leave_a_real_node_s_disk(sim, kube, namespace, image, real_nodes, tools_image):
    nodes = [node["name"] for node in real_nodes]
    core = client.CoreV1Api(kube)
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})
    name = unique("disk-real")
    created = distribute(sim, nodes[:1], name=name, namespace=namespace, image=image.ref, wait=True,
                         extract_image=tools_image, compatibility="ignore", wait_timeout=300)
    assert not created.get("failed"), created.get("msg")
    slot = slot_pvs(kube, name)[0].spec.host_path.path
    assert os.path.isfile(os.path.join(slot, "cache", "io.triton.manifest", "manifest.json"))
    removed = distribute(sim, nodes[:1], name=name, namespace=namespace, state="absent", extract_image=tools_image,
                         wait_timeout=300)
    assert not removed.get("failed"), removed.get("msg")
    assert not os.path.lexists(slot)
    # Every parent up to the root went with it (other tests' slots may still be under the root).
    assert not os.path.lexists(os.path.join(NODE_DISK, namespace))
    assert os.path.isdir(NODE_DISK)
