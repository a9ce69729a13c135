"""The relist gap (controller/gkm_controller/relist.py): a complete listing of a kind replaces what the index holds of
it; an object deleted while the watch was down is dropped and the cache it belonged to is re-planned, which puts the
object back; a listing that matches the index changes nothing and re-plans nothing."""

import copy

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import Slot
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    NODE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import assemble_facts
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import ClusterIndex, IndexSource
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner
from controller.gkm_controller.relist import Relister, caches_for_vanished
from tests.helpers.distribute import NO_PROVISIONER_CLASS, as_live, default_nodes, facts, make_spec


def resource(name="vector-add", namespace="team-a", kind="GKMCache", deleting=False):
    metadata = {"name": name, "uid": "u-" + name}
    if namespace:
        metadata["namespace"] = namespace
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    return {"kind": kind, "metadata": metadata, "spec": {"image": "registry.local/caches/vector-add:1"}}


def index_of(*objects):
    index = ClusterIndex()
    for obj in objects:
        index.apply(None, copy.deepcopy(obj))
    return index


def converged():
    """An index of a converged per-node cache `vector-add` of team-a (its PVCs, PVs and completed, marked Jobs), its
    resource and the cluster around it; the spec it was planned from."""
    spec = make_spec()
    nodes = default_nodes()
    live = as_live(planner.plan(spec, facts(nodes=nodes)).desired, complete_jobs=True, marked=True)
    objects = [*({**node, "kind": "Node"} for node in nodes),
               {"kind": "Namespace", "metadata": {"name": "team-a"}},
               {"kind": "Namespace", "metadata": {"name": "team-b"}},
               {"kind": "Namespace", "metadata": {"name": "gkm-system"}},
               # The cluster's default class, as the planner saw it.
               {**copy.deepcopy(NO_PROVISIONER_CLASS), "kind": "StorageClass", "metadata": {
                   "name": NO_PROVISIONER_CLASS["metadata"]["name"],
                   "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}},
               *(obj for items in live.values() for obj in items), resource()]
    return spec, index_of(*objects)


def creates(spec, index):
    """The create actions of a plan made from the index (the reads a cache reconcile makes there)."""
    plan = planner.plan(spec, assemble_facts(IndexSource(index), spec))
    return sorted((a.kind, a.namespace, a.name) for a in plan.actions if a.verb == "create")


def planner_for(spec, index, planned):
    """A submit that plans the handed cache from the index, as the cache reconcile would."""
    def submit(kind, cached):
        planned.append(((kind, cached["metadata"]["name"]), creates(spec, index)))
    return submit


def test_a_pvc_deleted_while_the_watch_was_down_is_dropped_and_its_cache_replanned_to_recreate_it():
    spec, index = converged()
    assert creates(spec, index) == []  # converged: a plan from the index creates nothing
    claims = index.select("PersistentVolumeClaim")
    gone, kept = claims[0], claims[1:]
    planned = []
    relisting, affected = Relister(index, planner_for(spec, index, planned)).relist(
        "PersistentVolumeClaim", copy.deepcopy(kept))
    assert relisting.changed and [obj["metadata"]["name"] for obj in relisting.vanished] == [gone["metadata"]["name"]]
    assert gone["metadata"]["name"] not in [obj["metadata"]["name"] for obj in index.select("PersistentVolumeClaim")]
    assert [resource["metadata"]["name"] for resource in affected] == ["vector-add"]
    # The slot is extracted again: its PVC, its Job and the PVC and PV of the system namespace the Job writes through.
    slot = Slot("vector-add", "team-a", "team-a", gone["metadata"]["labels"]["gkm.io/node"], spec.digest,
                shared=True)
    access, job = slot.access_name(), slot.job_name()
    assert planned == [(("GKMCache", "vector-add"),
                        [("Job", "gkm-system", job), ("PersistentVolume", "", access),
                         ("PersistentVolumeClaim", "gkm-system", access),
                         ("PersistentVolumeClaim", gone["metadata"]["namespace"], gone["metadata"]["name"])])]


def test_a_relisting_that_matches_the_index_changes_nothing_and_replans_nothing():
    spec, index = converged()
    before, planned = index.version, []
    relister = Relister(index, planner_for(spec, index, planned))
    for kind in ("PersistentVolumeClaim", "PersistentVolume", "Job", "Node", "Namespace", "StorageClass", "GKMCache"):
        relisting, affected = relister.relist(kind, [dict(obj, kind=kind) for obj in index.select(kind)])
        assert (relisting.changed, relisting.vanished, affected) == (False, [], [])
    assert index.version == before and planned == []


def test_an_object_added_or_changed_meanwhile_is_taken_without_a_replan():
    spec, index = converged()
    claims = index.select("PersistentVolumeClaim")
    claims[0]["status"] = {"phase": "Bound"}
    planned = []
    relisting, affected = Relister(index, planner_for(spec, index, planned)).relist("PersistentVolumeClaim", claims)
    assert relisting.changed and relisting.vanished == [] and affected == [] and planned == []
    assert index.select("PersistentVolumeClaim", field_selector="metadata.name=%s" % claims[0]["metadata"]["name"])[
        0]["status"] == {"phase": "Bound"}


def labelled(kind, name, namespace, cache="vector-add", cache_namespace="team-a", **labels):
    metadata = {"name": name, "labels": dict({MANAGED_BY_LABEL: MANAGER, CACHE_LABEL: cache,
                                              CACHE_NAMESPACE_LABEL: cache_namespace}, **labels)}
    if namespace:
        metadata["namespace"] = namespace
    return {"kind": kind, "metadata": metadata}


def names(resources):
    return [(resource["kind"], resource["metadata"]["name"], resource["metadata"].get("namespace")) for resource in
            resources]


def test_which_caches_each_vanished_kind_replans():
    caches = [resource(), resource("other"), resource("vector-add", "team-b"), resource("going", deleting=True),
              resource("fleet", None, "ClusterGKMCache")]
    index = index_of(*caches)
    mine = labelled("PersistentVolume", "gkm-vector-add-w1", None, **{NODE_LABEL: "gpu-1"})
    index.apply(None, mine)
    # ours: the cache named by its labels, in its namespace; a cache being deleted never
    assert names(caches_for_vanished(index, [labelled("Job", "x", "team-a")])) == [("GKMCache", "vector-add", "team-a")]
    assert names(caches_for_vanished(index, [labelled("Job", "x", "team-a", cache="going")])) == []
    # someone else's PVC named like caches: those caches (their rivals' check may now pass)
    foreign = {"kind": "PersistentVolumeClaim", "metadata": {"name": "vector-add", "namespace": "team-c"}}
    assert names(caches_for_vanished(index, [foreign])) == [("GKMCache", "vector-add", "team-a"),
                                                            ("GKMCache", "vector-add", "team-b")]
    # a Node: the caches holding objects on it (the index already dropped it)
    assert names(caches_for_vanished(index, [{"kind": "Node", "metadata": {"name": "gpu-1"}}])) == [
        ("GKMCache", "vector-add", "team-a")]
    # a per-node status object: the caches of its kind in its scope
    assert names(caches_for_vanished(index, [{"kind": "GKMCacheNode", "metadata": {
        "name": "gpu-1", "namespace": "team-b"}}])) == [("GKMCache", "vector-add", "team-b")]
    assert names(caches_for_vanished(index, [{"kind": "ClusterGKMCacheNode", "metadata": {"name": "gpu-1"}}])) == [
        ("ClusterGKMCache", "fleet", None)]
    # a Namespace or StorageClass: every cache not being deleted; a Pod naming no claim of a cache: none
    assert len(caches_for_vanished(index, [{"kind": "Namespace", "metadata": {"name": "team-c"}}])) == 4
    assert caches_for_vanished(index, [{"kind": "Pod", "metadata": {"name": "w", "namespace": "team-a"}}]) == []


def test_a_pod_gone_replans_the_caches_whose_claims_it_named_and_no_other():
    index = index_of(resource(), resource("other"), labelled("PersistentVolumeClaim", "vector-add", "team-a"),
                     labelled("PersistentVolumeClaim", "other", "team-a", cache="other"))

    def pod(*claims, labels=None):
        return {"kind": "Pod", "metadata": {"name": "w", "namespace": "team-a", "labels": labels or {}},
                "spec": {"volumes": [{"name": claim, "persistentVolumeClaim": {"claimName": claim}}
                                     for claim in claims] + [{"name": "scratch", "emptyDir": {}}]}}

    # The cache's claim, kept at its digest while the pod named it (pvc-protection), may now be released.
    assert names(caches_for_vanished(index, [pod("vector-add")])) == [("GKMCache", "vector-add", "team-a")]
    # A claim the index does not hold (someone else's) names no cache.
    assert caches_for_vanished(index, [pod("someone-elses")]) == []
    # Our own extraction Job's pod held nothing (the planner's rule): its going, collected after the Job, re-plans
    # nothing.
    assert caches_for_vanished(index, [pod("vector-add", labels={MANAGED_BY_LABEL: MANAGER})]) == []
