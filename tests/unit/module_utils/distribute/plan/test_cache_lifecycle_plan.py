"""Caches that end and caches that collide, without a cluster: owner references and the kind label (ownership.py),
orphans, foreign objects and undeclared resources (lifecycle.py, the cache_orphans, cache_foreign and cache_undeclared
filters), name conflicts
(conflicts.py) through the planner."""

import pytest

from ansible_collections.gkm.cluster.plugins.filter.cache_foreign import cache_foreign
from ansible_collections.gkm.cluster.plugins.filter.cache_orphans import cache_orphans
from ansible_collections.gkm.cluster.plugins.filter.cache_undeclared import cache_undeclared
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KIND_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (
    ClusterFacts,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import (
    conflicts,
    ownership,
    planner,
    slot_states,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import cache_status
from tests.helpers.distribute import CSI_CLASS, as_live, facts, make_spec

EARLY, LATE = "2026-11-24T10:00:00Z", "2026-11-24T10:00:05Z"


def owner(kind="GKMCache", name="vector-add", namespace="team-a", uid="uid-1", created=LATE):
    resource = {"kind": kind, "metadata": {"name": name, "uid": uid, "creationTimestamp": created}}
    if namespace:
        resource["metadata"]["namespace"] = namespace
    return ownership.resource_owner(resource)


def resource(kind, name, namespace=None, created=EARLY, access_modes=("ReadOnlyMany",), workload=("team-a",),
             labels=None):
    metadata = {"name": name, "creationTimestamp": created}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    spec = {"image": "registry.local/caches/vector-add:v1", "accessModes": list(access_modes)}
    if kind == "ClusterGKMCache":
        spec["workloadNamespaces"] = list(workload)
    return {"kind": kind, "metadata": metadata, "spec": spec}


def by_kind(plan):
    objects = {}
    for action in plan.actions:
        objects.setdefault(action.kind, []).append(action.body)
    return objects


# ---------------------------------------------------------------- ownership


def test_a_gkmcache_owns_its_namespaced_objects_and_labels_its_pvs_without_a_reference():
    spec = make_spec(owner=owner())
    objects = by_kind(planner.plan(spec, facts()))
    for kind in ("PersistentVolumeClaim", "Job"):
        for obj in objects[kind]:
            assert obj["metadata"]["labels"][CACHE_KIND_LABEL] == "GKMCache"
            if obj["metadata"]["namespace"] == "team-a":
                assert obj["metadata"]["ownerReferences"] == [
                    {"apiVersion": "gkm.io/v1alpha1", "kind": "GKMCache", "name": "vector-add", "uid": "uid-1"}]
                continue
            # In the system namespace (its Jobs, their access PVCs): no reference can cross namespaces, the labels
            # and the resource's uid say whose they are.
            assert obj["metadata"]["namespace"] == "gkm-system" and "ownerReferences" not in obj["metadata"]
            assert obj["metadata"]["annotations"]["gkm.io/owner-uid"] == "uid-1"
    for pv in objects["PersistentVolume"]:
        # Cluster-scoped: no namespaced owner; and the collector would beat the scrub to it.
        assert "ownerReferences" not in pv["metadata"]
        assert pv["metadata"]["labels"][CACHE_KIND_LABEL] == "GKMCache"


def test_a_cluster_cache_owns_objects_in_every_workload_namespace_but_not_its_pvs():
    spec = make_spec(scope="cluster", workload_namespaces=["team-a", "team-b"],
                     owner=owner("ClusterGKMCache", namespace=None))
    objects = by_kind(planner.plan(spec, facts()))
    assert {pvc["metadata"]["namespace"] for pvc in objects["PersistentVolumeClaim"]} == {
        "team-a", "team-b", "gkm-system"}
    assert all(pvc["metadata"]["ownerReferences"][0]["kind"] == "ClusterGKMCache"
               for pvc in objects["PersistentVolumeClaim"] + objects["Job"])
    assert all("ownerReferences" not in pv["metadata"] for pv in objects["PersistentVolume"])


def test_a_namespaced_owner_never_references_objects_of_another_namespace():
    pvc = {"kind": "PersistentVolumeClaim", "metadata": {"name": "x", "namespace": "team-b"}}
    assert not ownership.may_reference(owner(), pvc)
    assert ownership.may_reference(owner("ClusterGKMCache", namespace=None), pvc)


def test_a_manifest_not_applied_yet_labels_its_objects_but_references_no_uid():
    spec = make_spec(owner=owner(uid=None, created=None))
    for obj in planner.plan(spec, facts()).desired:
        assert "ownerReferences" not in obj["metadata"]
        assert obj["metadata"]["labels"][CACHE_KIND_LABEL] == "GKMCache"


def test_cache_distribute_objects_stay_as_rendered():
    for obj in planner.plan(make_spec(), facts()).desired:
        assert "ownerReferences" not in obj["metadata"]
        assert CACHE_KIND_LABEL not in obj["metadata"]["labels"]


def test_objects_from_before_owner_references_or_of_a_recreated_resource_are_updated_in_place():
    old = planner.plan(make_spec(), facts()).desired
    updated = planner.plan(make_spec(owner=owner()), facts(objects=as_live(old, complete_jobs=True, marked=True)))
    # The marked slots' Jobs in the system namespace are gone already (as_live): the PVCs and PVs are updated.
    assert {(a.verb, a.kind) for a in updated.actions} == {
        ("update", "PersistentVolumeClaim"), ("update", "PersistentVolume")}
    live = as_live(updated.desired, complete_jobs=True, marked=True)
    assert planner.plan(make_spec(owner=owner()), facts(objects=live)).actions == []
    recreated = planner.plan(make_spec(owner=owner(uid="uid-2")), facts(objects=live))
    assert {a.verb for a in recreated.actions} == {"update"}
    assert all(a.body["metadata"].get("ownerReferences", [{}])[0].get("uid", "uid-2") == "uid-2"
               for a in recreated.actions)


# ---------------------------------------------------------------- orphans and undeclared caches


def labelled(kind, namespace, name, cache_namespace="", object_kind="PersistentVolumeClaim", owned=True):
    """An object labelled with a cache resource: the collection's (an owner reference to it) unless owned=False."""
    labels = {"app.kubernetes.io/managed-by": "gkm.cluster", "gkm.io/cache": name,
              "gkm.io/cache-namespace": cache_namespace, CACHE_KIND_LABEL: kind}
    metadata = {"name": "obj", "labels": labels}
    if namespace:
        metadata["namespace"] = namespace
    if owned and object_kind != "PersistentVolume":
        metadata["ownerReferences"] = [ownership.owner_reference(owner(kind, name, cache_namespace))]
    return {"kind": object_kind, "metadata": metadata}


def test_orphans_are_the_caches_whose_resource_is_gone_once_each():
    objects = [labelled("GKMCache", "team-a", "gone", "team-a"),
               labelled("GKMCache", "", "gone", "team-a", object_kind="PersistentVolume"),
               labelled("GKMCache", "team-a", "here", "team-a"),
               labelled("ClusterGKMCache", "", "wide", object_kind="PersistentVolume"),
               {"metadata": {"labels": {"app.kubernetes.io/managed-by": "gkm.cluster", "gkm.io/cache": "direct",
                                        "gkm.io/cache-namespace": "team-a"}}}]
    found = [resource("GKMCache", "here", "team-a")]
    assert cache_orphans(objects, found) == [
        {"kind": "ClusterGKMCache", "namespace": "", "name": "wide"},
        {"kind": "GKMCache", "namespace": "team-a", "name": "gone"}]
    assert cache_orphans(objects, [*found, resource("ClusterGKMCache", "wide"),
                                   resource("GKMCache", "gone", "team-a")]) == []


def test_objects_labelled_as_a_caches_that_the_collection_did_not_make_are_foreign_and_name_no_orphan():
    forged = [
        # A tenant's PVC: a label value that is no resource name (the removal of that cache would be refused).
        labelled("GKMCache", "tenant", "Not_A_Name", "tenant", owned=False),
        labelled("GKMCache", "tenant", "Not_A_Name", "tenant"),
        # Labels alone, or labels naming another namespace's GKMCache.
        labelled("GKMCache", "tenant", "victim", "tenant", owned=False),
        labelled("GKMCache", "tenant", "victim", "team-a"),
        labelled("ClusterGKMCache", "tenant", "wide", object_kind="Job", owned=False),
    ]
    assert cache_orphans(forged, []) == []
    report = cache_foreign(forged)
    assert len(report) == 5 and all(line.endswith("; left alone") for line in report)
    assert report[0].startswith("Job tenant/obj, labelled as ClusterGKMCache wide: no owner reference to the "
                                "ClusterGKMCache")
    assert any("is not a valid DNS-1123 label" in line and "Not_A_Name" in line for line in report)
    assert any("outside the namespace of the GKMCache" in line for line in report)
    ours = [labelled("GKMCache", "team-a", "gone", "team-a"), labelled("ClusterGKMCache", "team-b", "wide"),
            labelled("ClusterGKMCache", "", "wide", object_kind="PersistentVolume")]
    assert cache_foreign(ours) == []
    assert cache_orphans(ours + forged, []) == [{"kind": "ClusterGKMCache", "namespace": "", "name": "wide"},
                                                {"kind": "GKMCache", "namespace": "team-a", "name": "gone"}]


def test_only_resources_the_inventory_applied_are_removed_once_undeclared():
    declared_label = {"gkm.io/declared-by": "inventory"}
    found = [resource("GKMCache", "kept", "team-a", labels=declared_label),
             resource("GKMCache", "dropped", "team-a", labels=declared_label),
             resource("ClusterGKMCache", "dropped", labels=declared_label),
             resource("GKMCache", "by-kubectl", "team-a")]
    declared = [resource("GKMCache", "kept", "team-a")]
    assert cache_undeclared(found, declared) == [
        {"kind": "ClusterGKMCache", "namespace": "", "name": "dropped"},
        {"kind": "GKMCache", "namespace": "team-a", "name": "dropped"}]
    assert cache_undeclared(found, found) == []


# ---------------------------------------------------------------- conflicts


# ReadOnlyMany caches need a class whose volumes every node shares (on hostPath PVs they are refused).
SHARED = CSI_CLASS


def rox_spec(created=LATE, kind="GKMCache"):
    if kind == "GKMCache":
        return make_spec(access_modes=["ReadOnlyMany"], owner=owner(created=created))
    return make_spec(scope="cluster", workload_namespaces=["team-a", "team-b"], access_modes=["ReadOnlyMany"],
                     owner=owner("ClusterGKMCache", namespace=None, created=created))


@pytest.mark.parametrize("cluster_created", [EARLY, "2026-11-24T11:00:00Z"])
def test_a_gkmcache_of_a_cluster_caches_name_is_refused_naming_it_whichever_came_first(cluster_created):
    rivals = [resource("ClusterGKMCache", "vector-add", created=cluster_created),
              resource("GKMCache", "vector-add", "team-a", created=LATE)]
    with pytest.raises(conflicts.CacheConflictError) as refused:
        planner.plan(rox_spec(LATE), facts_with(rivals))
    message = str(refused.value)
    assert message.startswith("PVC team-a/vector-add is wanted by GKMCache team-a/vector-add and by ClusterGKMCache "
                              "vector-add, which comes first (a ClusterGKMCache outranks the other caches of its "
                              "name in its namespaces)")
    assert "make one ReadWriteOnce" in message and "GKMCache team-a/vector-add is refused until then" in message
    # The first is unaffected: planned as if alone.
    first = planner.plan(rox_spec(cluster_created, "ClusterGKMCache"), facts_with(rivals, storage_class=SHARED))
    assert {"PersistentVolumeClaim", "Job"} <= {a.kind for a in first.actions}


def facts_with(rivals, named_claims=(), storage_class=None):
    base = facts(storage_class=storage_class)
    return ClusterFacts(base.nodes, base.namespaces, {}, [], base.storage_class, rivals, named_claims)


def test_a_tie_in_creation_time_goes_to_the_cluster_cache_by_kind():
    rivals = [resource("ClusterGKMCache", "vector-add", created=LATE, workload=("team-a", "team-b"))]
    with pytest.raises(conflicts.CacheConflictError):
        planner.plan(rox_spec(LATE), facts_with(rivals))
    assert planner.plan(rox_spec(LATE, "ClusterGKMCache"), facts_with(
        [resource("GKMCache", "vector-add", "team-a", created=LATE)], storage_class=SHARED)).actions


def test_caches_whose_pvc_names_cannot_meet_are_no_conflict():
    elsewhere = [resource("ClusterGKMCache", "vector-add", workload=("team-z",))]
    assert planner.plan(rox_spec(LATE), facts_with(elsewhere, storage_class=SHARED)).actions
    # A ReadWriteOnce cache without a serving PVC names its PVCs after node and slot hash: nothing to check.
    assert planner.plan(make_spec(owner=owner(), serving_pvc=False),
                        facts_with([resource("ClusterGKMCache", "vector-add")])).actions


def test_a_serving_pvc_is_named_as_the_cache_so_it_meets_an_earlier_rival_of_any_access_mode():
    read_write_once = [resource("ClusterGKMCache", "vector-add", access_modes=("ReadWriteOnce",))]
    for spec in (rox_spec(LATE), make_spec(owner=owner(), serving_pvc=True)):
        with pytest.raises(conflicts.CacheConflictError) as refused:
            planner.plan(spec, facts_with(read_write_once))
        assert "PVC team-a/vector-add is wanted by GKMCache team-a/vector-add" in str(refused.value)
    foreign = live_pvc("team-a", "vector-add", {"app": "mine"})
    with pytest.raises(conflicts.CacheConflictError) as refused:
        planner.plan(make_spec(owner=owner(), serving_pvc=True), facts_with([], [foreign]))
    assert "belongs to no cache (gkm.cluster did not make it)" in str(refused.value)


def live_pvc(namespace, name, labels, owner_uid=None, owner_kind="GKMCache"):
    metadata = {"name": name, "namespace": namespace, "labels": labels}
    if owner_uid:
        metadata["ownerReferences"] = [{"apiVersion": "gkm.io/v1alpha1", "kind": owner_kind, "name": name,
                                        "uid": owner_uid}]
    return {"kind": "PersistentVolumeClaim", "metadata": metadata}


def test_a_live_pvc_is_the_caches_own_by_its_owner_reference_never_by_labels():
    foreign = live_pvc("team-a", "vector-add", {"app": "mine"})
    with pytest.raises(conflicts.CacheConflictError) as refused:
        planner.plan(rox_spec(), facts_with([], [foreign]))
    assert "belongs to no cache (gkm.cluster did not make it)" in str(refused.value)

    direct = live_pvc("team-a", "vector-add", {"app.kubernetes.io/managed-by": "gkm.cluster",
                                               "gkm.io/cache": "vector-add", "gkm.io/cache-namespace": ""})
    with pytest.raises(conflicts.CacheConflictError) as refused:
        planner.plan(rox_spec(), facts_with([], [direct]))
    assert "cache_distribute state=absent" in str(refused.value)

    # Every label of this cache's own, with the kind label that a resource's objects carry: still not its own.
    labels = {"app.kubernetes.io/managed-by": "gkm.cluster", "gkm.io/cache": "vector-add",
              "gkm.io/cache-namespace": "team-a", "gkm.io/cache-kind": "GKMCache"}
    with pytest.raises(conflicts.CacheConflictError) as refused:
        planner.plan(rox_spec(), facts_with([], [live_pvc("team-a", "vector-add", labels)], storage_class=SHARED))
    assert "belongs to no cache (gkm.cluster did not make it)" in str(refused.value)
    # Its own: the owner reference with its resource's uid (owner() is uid-1).
    mine = live_pvc("team-a", "vector-add", labels, owner_uid="uid-1")
    assert planner.plan(rox_spec(), facts_with([], [mine], storage_class=SHARED)).actions
    gone = live_pvc("team-a", "vector-add", labels, owner_uid="uid-0")
    with pytest.raises(conflicts.CacheConflictError) as refused:
        planner.plan(rox_spec(), facts_with([], [gone], storage_class=SHARED))
    assert "a cache resource that is gone (uid uid-0)" in str(refused.value)


def test_the_outranked_gkmcaches_live_pvc_refuses_the_cluster_cache_in_that_namespace_until_deleted():
    spec = make_spec(scope="cluster", workload_namespaces=["team-a", "team-b"], serving_pvc=True,
                     owner=owner("ClusterGKMCache", namespace=None, uid="uid-cluster"))
    rival = dict(resource("GKMCache", "vector-add", "team-a", created=EARLY))
    rival["metadata"] = dict(rival["metadata"], uid="uid-tenant")
    held = live_pvc("team-a", "vector-add", {}, owner_uid="uid-tenant")
    plan = planner.plan(spec, facts_with([rival], [held]))
    assert {a.namespace for a in plan.actions if a.kind in ("PersistentVolumeClaim", "Job")} == {"team-b", "gkm-system"}
    assert all(a.body["metadata"]["labels"]["gkm.io/store"] == "true" for a in plan.actions
               if a.namespace == "gkm-system")
    [refused] = [slot for slot in plan.slots if slot.outcome == planner.REFUSED]
    assert refused.namespace == "team-a" and ("belongs to GKMCache team-a/vector-add, which ClusterGKMCache "
                                              "vector-add outranks (that one is refused): delete GKMCache "
                                              "team-a/vector-add to free it") in refused.reason, refused.reason


def test_someone_elses_pvc_in_one_namespace_of_a_cluster_cache_refuses_it_there_only():
    spec = make_spec(scope="cluster", workload_namespaces=["team-a", "team-b"], serving_pvc=True,
                     owner=owner("ClusterGKMCache", namespace=None))
    squatted = live_pvc("team-a", "vector-add", {"app": "mine"})
    plan = planner.plan(spec, facts_with([], [squatted]))
    assert {a.namespace for a in plan.actions if a.kind in ("PersistentVolumeClaim", "Job")} == {"team-b", "gkm-system"}
    assert all(a.body["metadata"]["labels"]["gkm.io/store"] == "true" for a in plan.actions
               if a.namespace == "gkm-system")
    refused = [slot for slot in plan.slots if slot.outcome == planner.REFUSED]
    assert [(slot.namespace, slot.pvc) for slot in refused] == [("team-a", "vector-add")]
    assert refused[0].reason.startswith("PVC team-a/vector-add, which ClusterGKMCache vector-add names after itself, "
                                        "belongs to no cache (gkm.cluster did not make it)")
    assert refused[0].reason.endswith("is refused in namespace team-a until then")
    # In the status: an Error entry with reason Conflict for that namespace, on no node.
    entries = slot_states.slot_entries(plan.slots, [], {}, {}, [])[0]
    assert [(e["namespace"], e["phase"], e.get("reason")) for e in entries if e["phase"] == "Error"] == [
        ("team-a", "Error", conflicts.CONFLICT)]
    status = cache_status.cache_status(plan.slots, [n["metadata"]["name"] for n in plan.eligibility.eligible],
                                       [], {}, {}, [])
    assert status["counts"]["node_error"] == 0
    # Squatted in every namespace: refused whole, naming each.
    with pytest.raises(conflicts.CacheConflictError) as whole:
        planner.plan(spec, facts_with([], [squatted, live_pvc("team-b", "vector-add", {})]))
    assert "PVC team-a/vector-add" in str(whole.value) and "PVC team-b/vector-add" in str(whole.value)


def test_a_gkmcache_s_objects_in_the_system_namespace_are_ours_by_the_uid_annotation_there_only():
    """No owner reference crosses namespaces: a GKMCache's Jobs, their Secret and access PVCs in the system namespace
    carry its uid instead, which counts only there (no tenant writes in it)."""
    def job(namespace, annotated=True):
        obj = labelled("GKMCache", namespace, "gone", "team-a", object_kind="Job", owned=False)
        if annotated:
            obj["metadata"]["annotations"] = {"gkm.io/owner-uid": "uid-1"}
        return obj

    assert cache_orphans([job("gkm-system")], []) == [{"kind": "GKMCache", "namespace": "team-a", "name": "gone"}]
    assert cache_orphans([job("operators")], [], "operators") == [
        {"kind": "GKMCache", "namespace": "team-a", "name": "gone"}]
    forged = [job("team-a"), job("team-b"), job("gkm-system", annotated=False)]
    assert cache_orphans(forged, []) == []
    assert len(cache_foreign(forged)) == 3
    assert cache_foreign([job("gkm-system")]) == []
