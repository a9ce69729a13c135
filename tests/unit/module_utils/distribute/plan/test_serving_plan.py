"""The serving PVC of a ReadWriteOnce cache (distribute/serving.py) through the planner, the status and the scrub
plan, without a cluster."""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.marks import (
    is_serving,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    serving_alias_name,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    EXTRACTED,
    RUNNING,
    SERVING_LABEL,
    SPEC_HASH_ANNOTATION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner, scrub, serving
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.render import spec_hash
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import cache_status as status
from tests.helpers.distribute import (
    CSI_CLASS,
    DIGEST_A,
    DIGEST_B,
    WORKERS,
    as_live,
    by_kind,
    facts,
    make_spec,
    merged,
    pod,
    verbs,
)

HOST_ROOT = "/var/lib/gkm-cluster/caches"


def serving_spec(digest=DIGEST_A, **params):
    return make_spec(digest, serving_pvc=True, **params)


def serving_objects(objects):
    return [obj for obj in objects if is_serving(obj)]


def live_after(result, **marks):
    return as_live(result.desired, **marks)


def test_one_serving_pvc_named_as_the_cache_bound_to_an_unpinned_pv_at_the_published_directory():
    result = planner.plan(serving_spec(), facts())
    pv, pvc = serving_objects(result.desired)
    assert pvc["metadata"]["name"] == "vector-add" and pvc["metadata"]["namespace"] == "team-a"
    # The PV's claimRef binds them; a volumeName on the PVC would race the PV controller's two workers (serving.py).
    assert "volumeName" not in pvc["spec"] and pvc["spec"]["storageClassName"] == ""
    assert pv["spec"]["claimRef"] == {"namespace": "team-a", "name": "vector-add"}
    # The hash is the one of the PVC that named its PV: serving PVCs made before are not replaced; with the store it
    # covers the PV's path too (test_store.py).
    assert pvc["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == spec_hash(
        dict(pvc["spec"], volumeName=pv["metadata"]["name"], path=pv["spec"]["hostPath"]["path"]))
    own_pv, own_pvc = serving_objects(planner.plan(serving_spec(system_namespace_jobs=False), facts()).desired)
    assert own_pvc["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == spec_hash(
        dict(own_pvc["spec"], volumeName=own_pv["metadata"]["name"]))
    assert "nodeAffinity" not in pv["spec"]
    assert pv["spec"]["hostPath"] == {"path": "%s/team-a/vector-add/_store/%s/cache" % (HOST_ROOT, "a" * 64),
                                      "type": "Directory"}
    # Every node's slot PV is that directory's parent: the extraction's swap publishes exactly there.
    slot_paths = {p["spec"]["hostPath"]["path"] for p in by_kind(result.desired, "PersistentVolume")
                  if not is_serving(p)}
    assert slot_paths == {pv["spec"]["hostPath"]["path"].rsplit("/", 1)[0]}
    assert len(by_kind(result.desired, "Job")) == len(WORKERS)
    assert pv["metadata"]["labels"][SERVING_LABEL] == "true"
    assert [(s.outcome, s.pvc) for s in result.slots if s.outcome == serving.SERVING] == [
        (serving.SERVING, "vector-add")]


def test_off_rox_no_eligible_node_and_a_provisioner_class_get_no_serving_pvc():
    assert not serving_objects(planner.plan(make_spec(), facts()).desired)
    assert not serving_objects(planner.plan(serving_spec(access_modes=["ReadOnlyMany"]),
                                            facts(storage_class=CSI_CLASS)).desired)
    assert not serving_objects(planner.plan(serving_spec(pod_template={}), facts()).desired)
    assert not serving_objects(planner.plan(serving_spec(), facts(storage_class=CSI_CLASS)).desired)


def test_an_update_of_a_serving_pvc_that_names_its_pv_keeps_the_name():
    """A serving PVC of an earlier version named its PV in volumeName, immutable once bound: an update of its metadata
    must not apply the spec without it (the API server would refuse its removal)."""
    first = planner.plan(serving_spec(), facts())
    live = live_after(first)
    pvc = next(p for p in live["PersistentVolumeClaim"] if serving.is_serving(p))
    pvc["spec"]["volumeName"] = "gkm-vector-add-serving-old"
    pvc["metadata"]["labels"].pop(serving.SERVING_LABEL)
    [update] = [a for a in planner.plan(serving_spec(), facts(objects=live)).actions if a.verb == "update"]
    assert update.name == "vector-add" and update.body["spec"]["volumeName"] == "gkm-vector-add-serving-old"


def test_rerun_writes_nothing():
    spec = serving_spec()
    first = planner.plan(spec, facts())
    assert planner.plan(spec, facts(objects=live_after(first))).actions == []


def upgraded(first, pods=()):
    """Live objects after a digest change's first run, once every new slot is extracted: (old, old and new)."""
    live = live_after(first, complete_jobs=True, marked=True)
    started = planner.plan(serving_spec(DIGEST_B), facts(objects=live, pods=pods))
    return live, merged(live, as_live([obj for obj in started.desired if not is_serving(obj)],
                                      complete_jobs=True, marked=True))


def test_new_digest_keeps_the_serving_pvc_until_every_node_extracted_it():
    first = planner.plan(serving_spec(), facts())
    live = live_after(first, complete_jobs=True, marked=True)
    second = planner.plan(serving_spec(DIGEST_B), facts(objects=live))
    assert not [a for a in second.actions if a.verb != "create"]
    assert not serving_objects(a.body for a in second.actions)
    kept = sorted((s.node, s.pvc) for s in second.slots if s.outcome == planner.PREVIOUS)
    assert kept[0] == ("", "vector-add") and [node for node, _pvc in kept[1:]] == WORKERS
    assert "until bbbbbbbbbbbb is extracted on every node in namespace team-a" in next(
        s.reason for s in second.slots if s.outcome == planner.PREVIOUS and not s.node)
    # One node done: still kept, for the nodes not done and for the serving PVC's readers on the done one.
    one_done = merged(live, as_live([obj for obj in second.desired if WORKERS[0] in obj["metadata"]["name"]],
                                    complete_jobs=True, marked=True))
    assert not [a for a in planner.plan(serving_spec(DIGEST_B), facts(objects=one_done)).actions
                if a.verb in ("delete", "replace")]


def test_new_digest_replaces_an_unused_serving_pvc_and_deletes_the_old_pv_without_scrubbing():
    first = planner.plan(serving_spec(), facts())
    _old, live = upgraded(first)
    second = planner.plan(serving_spec(DIGEST_B), facts(objects=live))
    old_pv, = [p["metadata"]["name"] for p in serving_objects(first.desired) if p["kind"] == "PersistentVolume"]
    new_pv, = [p["metadata"]["name"] for p in serving_objects(second.desired) if p["kind"] == "PersistentVolume"]
    assert old_pv != new_pv
    serving_actions = [a for a in verbs(second) if a[2] in (old_pv, new_pv, "vector-add")]
    assert serving_actions == [("create", "PersistentVolume", new_pv), ("delete", "PersistentVolume", old_pv),
                               ("replace", "PersistentVolumeClaim", "vector-add")]
    # The scrub removes slot directories only: the serving PV merely points into them.
    deleted_pvs = [a.body for a in second.actions if a.verb == "delete" and a.kind == "PersistentVolume"]
    assert sum(scrub.is_slot_pv(p) for p in deleted_pvs) == len(WORKERS)
    assert not any(scrub.is_slot_pv(p) for p in deleted_pvs if p["metadata"]["name"] == old_pv)


def test_a_mounted_serving_pvc_keeps_its_digest_and_the_slots_its_pods_read_until_unused():
    first = planner.plan(serving_spec(), facts())
    reader = pod("reader", "team-a", "vector-add", node=WORKERS[0])
    old, live = upgraded(first, [reader])
    second = planner.plan(serving_spec(DIGEST_B), facts(objects=live, pods=[reader]))
    deleted = {(a.kind, a.name) for a in second.actions if a.verb == "delete"}
    assert not any(name == "vector-add" or "serving" in name for _kind, name in deleted)
    assert not any(a.name == "vector-add" for a in second.actions)
    outdated = [(s.node, s.pvc) for s in second.slots if s.outcome == "outdated"]
    # The old serving PVC, and the old slot of the reader's node, stay; the other nodes' old slots go.
    assert ("", "vector-add") in outdated
    assert [node for node, _pvc in outdated if node] == [WORKERS[0]]
    assert {name for kind, name in deleted if kind == "Job"}.isdisjoint({s.job for s in second.slots if s.node})
    counts = status.cache_status(second.slots, WORKERS, [], {}, old, [reader])["counts"]
    assert counts["pod_outdated"] == 1 and counts["pod_running"] == 0


def test_a_serving_pvc_a_finished_pod_still_names_is_kept_not_replaced():
    """The API server keeps a deleted claim that a scheduled pod names, finished or not (pvc-protection): a replace
    would wait for it until the run's deadline (a finished pod a capture read held one for 294 s). The claim stays at
    its digest until the pod is deleted; the pod counts as no running reader."""
    first = planner.plan(serving_spec(), facts())
    finished = pod("batch-1", "team-a", "vector-add", node=WORKERS[0], phase="Succeeded")
    old, live = upgraded(first, [finished])
    second = planner.plan(serving_spec(DIGEST_B), facts(objects=live, pods=[finished]))
    assert not any(a.name == "vector-add" for a in second.actions)
    kept = [s for s in second.slots if s.outcome == "outdated" and s.pvc == "vector-add"]
    assert [[(u["name"], u["phase"]) for u in s.users] for s in kept] == [[("batch-1", "Succeeded")]]
    reported = status.cache_status(second.slots, WORKERS, [], {}, old, [finished])
    assert reported["counts"]["pod_outdated"] == 0 and reported["counts"]["pod_running"] == 0
    assert [e["message"] for e in reported["entries"] if e["pvc"] == "vector-add" and e["phase"] == "Outdated"] == [
        "named by finished pod(s) batch-1: deleting them releases it"]
    gone = planner.plan(serving_spec(DIGEST_B), facts(objects=live))
    assert ("replace", "PersistentVolumeClaim", "vector-add") in verbs(gone)


def test_pods_of_the_current_serving_pvc_count_as_running_on_their_nodes():
    first = planner.plan(serving_spec(), facts())
    live = live_after(first, complete_jobs=True, marked=True)
    readers = [pod("r%d" % index, "team-a", "vector-add", node=node) for index, node in enumerate(WORKERS[:2])]
    second = planner.plan(serving_spec(), facts(objects=live, pods=readers))
    result = status.cache_status(second.slots, WORKERS, [], {}, live, readers)
    assert result["counts"]["pod_running"] == 2 and result["counts"]["node_in_use"] == 2
    assert result["phase"] == RUNNING
    served, = result["serving"]
    assert served["pvc"] == "vector-add" and sorted(served["mounted_by"]) == ["team-a/r0", "team-a/r1"]
    assert all(entry["node"] for entry in result["entries"])


def test_cache_info_tells_the_serving_pvc_from_a_slot():
    first = planner.plan(serving_spec(), facts())
    live = live_after(first, complete_jobs=True, marked=True)
    slots, nodes = status.slots_from_live(live)
    assert nodes == sorted(WORKERS)
    assert [s.pvc for s in slots if s.outcome == serving.SERVING] == ["vector-add"]
    assert status.cache_status(slots, nodes, [], {}, live, [])["phase"] == EXTRACTED


def test_pv_name_fits_a_dns_label_for_the_longest_cache_name():
    spec = serving_spec(name="c" * 63)
    name = serving.pv_name(spec, "team-a")
    assert len(name) <= 63 and name.startswith("gkm-ccc") and "-serving-" in name


ALIAS = "vector-add-" + "b" * 12


def test_a_mounted_serving_pvc_gets_an_alias_at_the_new_digest_once_every_node_has_it():
    first = planner.plan(serving_spec(), facts())
    reader = pod("reader", "team-a", "vector-add", node=WORKERS[0])
    _old, live = upgraded(first, [reader])
    second = planner.plan(serving_spec(DIGEST_B), facts(objects=live, pods=[reader]))
    pv, pvc = [obj for obj in serving_objects(second.desired) if obj["metadata"]["name"] != "vector-add"]
    assert pvc["metadata"]["name"] == ALIAS and pv["spec"]["claimRef"]["name"] == ALIAS
    assert pv["spec"]["claimRef"] == {"namespace": "team-a", "name": ALIAS}
    assert pv["spec"]["hostPath"]["path"] == serving.published_path(serving_spec(DIGEST_B), "team-a", True)
    assert pvc["metadata"]["labels"]["gkm.io/digest"] == "b" * 12
    assert ("create", "PersistentVolumeClaim", ALIAS) in verbs(second)
    assert [(s.pvc, s.digest) for s in second.slots if s.outcome == serving.SERVING] == [(ALIAS, "b" * 12)]
    # The kept serving PVC is untouched, and the next run writes nothing.
    assert not any(a.name == "vector-add" for a in second.actions)
    after = merged(live, as_live([a.body for a in second.actions if a.verb == "create"]))
    assert [a for a in planner.plan(serving_spec(DIGEST_B), facts(objects=after, pods=[reader])).actions
            if is_serving(a.body)] == []


def test_no_alias_while_a_node_lacks_the_new_digest():
    first = planner.plan(serving_spec(), facts())
    reader = pod("reader", "team-a", "vector-add", node=WORKERS[0])
    live = live_after(first, complete_jobs=True, marked=True)
    second = planner.plan(serving_spec(DIGEST_B), facts(objects=live, pods=[reader]))
    assert not [obj for obj in serving_objects(second.desired) if obj["metadata"]["name"] == ALIAS]


def test_the_alias_stays_while_pods_mount_it_and_goes_when_unused_once_the_serving_pvc_is_renewed():
    first = planner.plan(serving_spec(), facts())
    reader = pod("reader", "team-a", "vector-add", node=WORKERS[0])
    _old, live = upgraded(first, [reader])
    second = planner.plan(serving_spec(DIGEST_B), facts(objects=live, pods=[reader]))
    live = merged(live, as_live([a.body for a in second.actions if a.verb == "create"]))
    # The old reader gone, a new one on the alias: the serving PVC named as the cache is renewed, the alias kept.
    new_reader = pod("new-reader", "team-a", ALIAS, node=WORKERS[1])
    renewed = planner.plan(serving_spec(DIGEST_B), facts(objects=live, pods=[new_reader]))
    assert ("replace", "PersistentVolumeClaim", "vector-add") in verbs(renewed)
    assert not any(a.name == ALIAS for a in renewed.actions)
    assert sorted(s.pvc for s in renewed.slots if s.outcome == serving.SERVING) == ["vector-add", ALIAS]
    result = status.cache_status(renewed.slots, WORKERS, [], {}, live, [new_reader])
    assert result["counts"]["pod_running"] == 1 and result["counts"]["pod_outdated"] == 0
    # Unused, it goes with its PV.
    unused = planner.plan(serving_spec(DIGEST_B), facts(objects=live))
    assert ("delete", "PersistentVolumeClaim", ALIAS) in verbs(unused)


def test_alias_names_fit_a_dns_label_and_keep_long_cache_names_apart():
    assert serving_alias_name("vector-add", "b" * 12) == ALIAS
    long_names = {serving_alias_name(prefix + "c" * 60, "b" * 12) for prefix in ("a", "b")}
    assert len(long_names) == 2 and all(len(name) <= 63 and name.endswith("-" + "b" * 12) for name in long_names)
