"""Two operator replicas, leader election on: exactly one holds the Lease and reconciles; killed, the other takes over.

Both run the engine as sim.py operator-up does (operator_plan.py: same watches, flags and Lease), each in network,
mount and UTS namespaces of its own (tests/helpers/operator_replicas.py): the engine's fixed ports allow one replica
per network namespace, as in a cluster, where each pod has its own. Root only (ip netns).
"""

import json
import os
import sys
import time
import urllib.parse
import uuid

import pytest
import yaml
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.operator_caches import apply, cache_objects, kubectl, live, per_node, phase_is, poll, pool_nodes
from tests.helpers.operator_replicas import Replica
from tests.helpers.sim import sim_control

pytestmark = [pytest.mark.cluster, pytest.mark.registry,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")]

plan = sim_control.operator_plan
# Inside each replica's own network namespace: the same ports for both.
PORTS = {"metrics": 8080, "health": 8081}


def server_addresses(sim):
    """(host, port) of the API server and of the registry, as the replicas' kubeconfig and images name them."""
    with open(sim.kubeconfig, encoding="utf-8") as handle:
        server = urllib.parse.urlsplit(yaml.safe_load(handle)["clusters"][0]["cluster"]["server"])
    registry = urllib.parse.urlsplit("//" + sim.registry)
    return [(server.hostname, server.port), (registry.hostname, registry.port)]


def lease_holder(kube):
    try:
        lease = client.CoordinationV1Api(kube).read_namespaced_lease(plan.LEADER_ELECTION_ID, plan.NAMESPACE)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return lease.spec.holder_identity


def holder_replica(kube, replicas):
    """The replica whose host name starts the Lease's holder identity (the engine's `<host name>_<uuid>`)."""
    holder = lease_holder(kube) or ""
    return next((replica for replica in replicas if holder.startswith(replica.name + "_")), None)


def ran_for(replica, cache):
    """Whether the replica's engine logged a run for the cache (its task events name the resource)."""
    return '"name":"%s"' % cache in replica.log()


@pytest.fixture
def replicas(sim, crds, kube, tmp_path):
    if sim_control.is_running(sim_control.load_state()["processes"].get("operator")):
        pytest.skip("sim.py's operator runs and would compete for the Lease: sim.py operator-down first")
    core = client.CoreV1Api(kube)
    try:
        core.create_namespace({"metadata": {"name": plan.NAMESPACE}})
    except client.ApiException as error:
        if error.status != 409:
            raise
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(plan.extra_vars("%s/gkm-cluster/tools:sim" % sim.registry, sim.kubeconfig)))
    binary = os.path.join(sim_control.operator_dir(), "bin", "ansible-operator")
    argv = plan.argv(binary, sim_control.ROOT, str(vars_file), PORTS)
    environment = plan.environment(os.environ, sim_control.ROOT, os.path.dirname(sys.executable), sim.kubeconfig)
    suffix = uuid.uuid4().hex[:4]
    started = []
    try:
        for letter in "ab":
            replica = Replica("gkm-op-%s-%s" % (letter, suffix), server_addresses(sim))
            started.append(replica)
            replica.start(argv, environment, str(tmp_path / ("%s.log" % letter)))
        yield started
    finally:
        for replica in started:
            replica.remove()
        # No replica is left to renew it: the next operator need not wait for it to expire.
        try:
            client.CoordinationV1Api(kube).delete_namespaced_lease(plan.LEADER_ELECTION_ID, plan.NAMESPACE)
        except client.ApiException as error:
            if error.status != 404:
                raise


@pytest.fixture(scope="module")
def image(registry):
    return kcache_images.build_image(registry.host, "operator/replicas", "v1", kcache_images.CacheSpec(backend="hip"))


def test_one_replica_leads_and_the_other_takes_over_mid_run_when_it_dies(
        replicas, sim, crds, kube, namespace, image, sim_nodes, record_property):
    pool = "rep-%s" % uuid.uuid4().hex[:4]
    pool_nodes(sim_nodes, pool, 2)
    poll("both replicas serving their health probes",
         lambda: all(replica.get(PORTS["health"], "/readyz") == 200 for replica in replicas), 120)
    leader = poll("one replica holding the Lease", lambda: holder_replica(kube, replicas), 120)
    follower = next(replica for replica in replicas if replica is not leader)

    apply(sim, "first", namespace, image.ref, pool)
    poll("first Extracted on 2 nodes", lambda: phase_is(crds, namespace, "first", "Extracted", 2), 180)
    assert ran_for(leader, "first")
    # The follower started no controller: it ran nothing, and still waits for the Lease.
    assert not ran_for(follower, "first")
    assert follower.running() and "successfully acquired lease" not in follower.log()
    assert holder_replica(kube, replicas) is leader

    # Killed mid-run: the leader has written part of the second cache's objects, and waits for their Jobs.
    apply(sim, "second", namespace, image.ref, pool)
    poll("the leader's first objects of second", lambda: cache_objects(kube, namespace, "second")["pvcs"], 60, 0.1)
    assert not phase_is(crds, namespace, "second", "Extracted", 2), "second was Extracted before the kill"
    leader.kill()
    killed = time.monotonic()
    poll("the follower holding the Lease", lambda: holder_replica(kube, replicas) is follower, 90)
    record_property("takeover_s", round(time.monotonic() - killed, 1))
    poll("second Extracted on 2 nodes", lambda: phase_is(crds, namespace, "second", "Extracted", 2), 180)
    assert ran_for(follower, "second")
    # Converged, with nothing twice: one slot PVC, PV and Job per node.
    objects = cache_objects(kube, namespace, "second")
    nodes = sorted(per_node(objects["pvcs"]))
    assert len(nodes) == 2 and all(per_node(objects[kind]) == dict.fromkeys(nodes, 1) for kind in objects), {
        kind: per_node(items) for kind, items in objects.items()}

    # The new leader's finalizer removes both caches (the first one's too, which its predecessor reconciled).
    kubectl(sim, "delete", "gkmcache", "first", "second", "-n", namespace, "--wait=false")
    poll("both caches gone", lambda: live(crds, namespace, "first") is None and live(crds, namespace, "second") is None,
         180)
