"""The kopf controller (controller/gkm_controller, `python -m controller.gkm_controller.main`) run out of cluster as a
subprocess against the real API server, kwok nodes only: a GKMCache created reaches what the module path writes,
heartbeats start no reconcile, a deleted cache is finalized once and stays gone, and of two controllers only the one
holding the Lease runs until it stops.

kwok completes the extraction Jobs' pods on its nodes, as for the operator tests (tests/integration/operator/), so
the tools image is any reference. The controller reconciles every cache of the cluster while it runs: the module
starts it and stops it again, and each test's cache is placed on a node pool of its own.
"""

import re
import time
import uuid
from datetime import datetime, timezone

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.controller_process import start_controller
from tests.helpers.modules import AuditWrites
from tests.helpers.operator_caches import (
    GROUP,
    VERSION,
    apply,
    assert_module_beside_writes_nothing,
    cache_objects,
    kubectl,
    live,
    phase_is,
    poll,
    pool_nodes,
    settled,
)

pytest.importorskip("kopf")  # requirements/dev.txt pins it for Python 3.11 and later

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

HEARTBEATS = 200


@pytest.fixture(scope="module")
def lease_namespace(kube):
    """The controllers' own namespace, where their Lease is (not the operator's gkm-system)."""
    name = "t-controller-%s" % uuid.uuid4().hex[:5]
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": name, "labels": {"gkm.io/test": "true"}}})
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def controller(sim, crds, lease_namespace, tmp_path_factory):
    started = start_controller(sim, str(tmp_path_factory.mktemp("controller") / "controller.log"), lease_namespace)
    started.ready_s = started.become_ready()
    print("controller: start -> ready %.1fs (%s)" % (started.ready_s, started.lines(r" ready: ")[0]))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def image(registry):
    return kcache_images.build_image(registry.host, "controller/vector-add", "v1",
                                     kcache_images.CacheSpec(backend="hip"))


def heartbeat(core, name, beat):
    """A Node status update such as a kubelet's: the Ready condition's heartbeat time, nothing else."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    core.patch_node_status(name, {"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "heartbeat %d" % beat,
         "lastHeartbeatTime": now}]}})


def test_a_cache_reaches_the_modules_state_heartbeats_start_nothing_and_its_deletion_is_final(
        controller, sim, crds, kube, namespace, image, sim_nodes, record_property):
    record_property("start_to_ready_s", round(controller.ready_s, 1))
    pool = "ctl-%s" % uuid.uuid4().hex[:4]
    nodes = pool_nodes(sim_nodes, pool, 3)
    name = "ctl-cache"

    # (a) Created: the controller's reconcile writes the status, then Extracted on the pool's 3 nodes.
    started = time.monotonic()
    apply(sim, name, namespace, image.ref, pool)
    poll("a status written", lambda: ((live(crds, namespace, name) or {}).get("status") or {}).get("phase"), 120)
    to_status = time.monotonic() - started
    status = poll("Extracted on 3 nodes", lambda: phase_is(crds, namespace, name, "Extracted", 3), 180)
    to_extracted = time.monotonic() - started
    record_property("create_to_status_s", round(to_status, 1))
    record_property("create_to_extracted_s", round(to_extracted, 1))
    assert status["resolvedDigest"] == image.digest
    assert live(crds, namespace, name)["metadata"]["finalizers"] == ["gkm.io/cache-cleanup"]
    objects = cache_objects(kube, namespace, name)
    assert {pvc.metadata.labels.get("gkm.io/node") for pvc in objects["pvcs"]} - {None} == set(nodes)
    assert {pvc.status.phase for pvc in objects["pvcs"]} == {"Bound"}
    # Two GPU nodes join the pool: their Node events alone (coalesced, the whole cache reconciled) extend it.
    before, started = len(controller.reconciles(namespace=namespace)), time.monotonic()
    nodes += pool_nodes(sim_nodes, pool, 2)
    poll("Extracted on 5 nodes", lambda: phase_is(crds, namespace, name, "Extracted", 5), 120)
    to_joined = time.monotonic() - started
    record_property("nodes_join_to_extracted_s", round(to_joined, 1))
    joined_runs = len(controller.reconciles(namespace=namespace)) - before
    assert joined_runs >= 1
    print("controller: 2 nodes join -> Extracted on 5 nodes %.1fs, %d reconciles" % (to_joined, joined_runs))
    objects = cache_objects(kube, namespace, name)
    assert {pvc.metadata.labels.get("gkm.io/node") for pvc in objects["pvcs"]} - {None} == set(nodes)

    # The per-node objects: Extracted at the digest on the pool's nodes (the other GPU nodes say why not).
    per_node = {item["metadata"]["name"]: item["status"]["caches"][name]
                for item in crds.list_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcachenodes")["items"]}
    assert {node: per_node[node][image.digest]["state"] for node in nodes} == dict.fromkeys(nodes, "Extracted")
    assert all(per_node[node][image.digest]["state"] != "Extracted" for node in set(per_node) - set(nodes))

    # The module's reconcile beside it, with the same options, finds nothing to change: the same objects and status.
    assert_module_beside_writes_nothing(sim, crds, namespace, name, "controller")

    # (b) 200 heartbeat-only Node status updates of the pool's GPU nodes: they reach the controller, change nothing
    # it reads, and start no reconcile and no write.
    poll("the controller settled", lambda: settled(crds, namespace, name, quiet_seconds=3), 60)
    before, seen_before = len(controller.reconciles()), len(controller.lines(r"node event MODIFIED.*changed=False"))
    audit, cpu, started = AuditWrites(), controller.cpu_seconds(), time.monotonic()
    core = client.CoreV1Api(kube)
    for beat in range(HEARTBEATS):
        heartbeat(core, nodes[beat % len(nodes)], beat)
        # Each node's beats 0.15 s apart, each an event of its own (the Node watch is the controller's, no longer
        # kopf's, whose 0.1 s batching window kept an object's latest event of a burst).
        time.sleep(0.05)
    time.sleep(3)  # the last events delivered and, were anything started, its 0.5 s coalescing window passed
    heartbeat_cpu, heartbeat_s = controller.cpu_seconds() - cpu, time.monotonic() - started
    seen = len(controller.lines(r"node event MODIFIED.*changed=False")) - seen_before
    record_property("heartbeats_cpu_s", round(heartbeat_cpu, 2))
    print("controller: start->ready %.1fs; create->status %.1fs, ->Extracted on 3 nodes %.1fs; %d heartbeats in "
          "%.1fs: %d events seen, %.2f CPU s" % (
              controller.ready_s, to_status, to_extracted, HEARTBEATS, heartbeat_s, seen, heartbeat_cpu))
    assert seen >= HEARTBEATS / 2, seen  # kwok's own updates may fall in the same window as one of ours
    assert len(controller.reconciles()) == before, controller.reconciles()[before:]
    assert audit.since("/namespaces/%s/" % namespace, "/persistentvolumes", "gkm.io") == []

    # (c) Deleted: the finalizer's reconcile runs once, every object goes (no PV left behind), the resource goes,
    # and nothing is recreated afterwards.
    kubectl(sim, "delete", "gkmcache", name, "-n", namespace, "--wait=false")
    poll("the cache resource gone", lambda: live(crds, namespace, name) is None, 180)
    poll("every object of the cache gone", lambda: not any(cache_objects(kube, namespace, name).values()), 60)
    time.sleep(5)
    assert not any(cache_objects(kube, namespace, name).values())
    assert len(controller.lines(r"reconcile GKMCache %s/%s \(absent\)" % (re.escape(namespace), name))) == 1
    assert controller.process.poll() is None, controller.log()[-4000:]


def test_of_two_controllers_only_the_lease_holder_runs_and_the_other_takes_over_when_it_stops(
        controller, sim, lease_namespace, tmp_path_factory, record_property):
    """The module's controller holds the Lease; a second one started beside it waits, lists nothing and reconciles
    nothing; stopped with SIGTERM, the first releases the Lease and the second takes it at its next look. A third
    takes it from the second killed with SIGKILL after the Lease's recorded duration."""
    second = start_controller(sim, str(tmp_path_factory.mktemp("controller") / "second.log"), lease_namespace)
    try:
        poll("the second controller waiting", lambda: second.lines(r"waits for the Lease"), 60)
        time.sleep(6)  # three of its looks at the Lease
        assert second.process.poll() is None, second.log()[-4000:]
        assert not second.lines(r"leading: |ready: |reconcile "), second.log()[-4000:]
        assert controller.process.poll() is None

        stopped = time.monotonic()
        controller.stop()
        assert controller.process.returncode == 0, controller.log()[-4000:]
        assert controller.lines(r"released the Lease")
        poll("the second controller leading", lambda: second.lines(r"leading: take"), 30)
        take_over = time.monotonic() - stopped
        ready = second.become_ready() - (stopped - second.started)
        record_property("take_over_s", round(take_over, 1))
        record_property("take_over_to_ready_s", round(ready, 1))
        print("controller: SIGTERM of the leader -> the second leads %.1fs, ready %.1fs" % (take_over, ready))
        assert "(released)" in second.lines(r"leading: take")[0]

        # A third beside the second; the second killed (no release): the third takes the Lease once the record has
        # stood still for its recorded 8 s, at most one look (2 s) later.
        third = start_controller(sim, str(tmp_path_factory.mktemp("controller") / "third.log"), lease_namespace)
        try:
            poll("the third controller waiting", lambda: third.lines(r"waits for the Lease"), 60)
            time.sleep(3)
            assert not third.lines(r"leading: ")
            killed = time.monotonic()
            second.process.kill()
            second.process.wait()
            poll("the third controller leading", lambda: third.lines(r"leading: take"), 30)
            after_kill = time.monotonic() - killed
            record_property("take_over_after_kill_s", round(after_kill, 1))
            print("controller: SIGKILL of the leader -> the third leads %.1fs" % after_kill)
            assert 5.5 <= after_kill <= 8 + 2 + 2 + 1, after_kill  # from 8 less one look, to the worst case
            third.become_ready()
        finally:
            third.stop()
    finally:
        second.stop()
