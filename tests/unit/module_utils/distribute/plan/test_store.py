"""The node's store (naming.Slot.shared): with the Jobs in the system namespace, one Job per node and digest fills one
directory that every namespace's slot of the node points at; the slots of a namespace added later are marked at once,
a failure is every slot's, and a directory stays while any PV of it does."""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.marks import holds_extracted
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    EXTRACTION_FAILURE_ANNOTATION,
    SPEC_HASH_ANNOTATION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner, scrub
from tests.helpers.distribute import (
    DIGEST_A,
    DIGEST_B,
    SYSTEM_NAMESPACE,
    WORKERS,
    as_live,
    by_kind,
    is_access,
    make_spec,
    merged,
    pod,
)
from tests.helpers.distribute import facts as cluster_facts
from tests.unit.module_utils.distribute.plan.test_failure_record import applied, failed

NAMESPACES = ("team-a", "team-b", "team-c")
STORE = "/var/lib/gkm-cluster/caches/_cluster/vector-add/_store/" + DIGEST_A.split(":")[1]


def facts(**params):
    return cluster_facts(namespaces=(*NAMESPACES, SYSTEM_NAMESPACE), **params)


def cluster_spec(namespaces=NAMESPACES, digest=DIGEST_A, **params):
    return make_spec(digest, scope="cluster", workload_namespaces=list(namespaces), **params)


def is_serving(obj):
    return "gkm.io/serving" in (obj["metadata"].get("labels") or {})


def counts(plan):
    return sorted((a.verb, a.kind, is_access(a.body)) for a in plan.actions)


def test_three_namespaces_take_one_job_and_one_access_pair_per_node_and_one_directory():
    plan = planner.plan(cluster_spec(), facts())
    per_node = {}
    for action in plan.actions:
        node = action.body["metadata"]["labels"].get("gkm.io/node")
        per_node.setdefault(node, []).append((action.kind, action.namespace, is_access(action.body)))
    for worker in WORKERS:
        store = [("Job", "gkm-system", False), ("PersistentVolume", "", True),
                 ("PersistentVolumeClaim", "gkm-system", True)]
        slots = [("PersistentVolume", "", False)] * 3 + [("PersistentVolumeClaim", ns, False) for ns in NAMESPACES]
        assert sorted(per_node[worker]) == sorted(store + slots)
    assert {pv["spec"]["hostPath"]["path"] for pv in by_kind(plan.desired, "PersistentVolume")} == {STORE}
    assert {pv["spec"]["hostPath"]["path"] for pv in by_kind(plan.desired, "PersistentVolume", access=True)} == {STORE}
    # Every namespace's slot of a node names the one Job that fills it.
    for worker in WORKERS:
        assert len({slot.job for slot in plan.slots if slot.node == worker}) == 1


def test_a_namespace_added_to_an_extracted_store_gets_marked_slots_and_no_job():
    live = as_live(planner.plan(cluster_spec(NAMESPACES[:2]), facts()).desired, complete_jobs=True, marked=True)
    plan = planner.plan(cluster_spec(), facts(objects=live))
    assert counts(plan) == [("create", "PersistentVolume", False)] * 3 + [
        ("create", "PersistentVolumeClaim", False)] * 3
    for action in plan.actions:
        assert action.kind == "PersistentVolume" or (
            action.namespace == "team-c" and holds_extracted(action.body, DIGEST_A))
    assert {slot.outcome for slot in plan.slots} == {"current"}


def test_a_job_completed_marks_every_namespace_s_slot_and_goes_once_they_are_marked():
    live = as_live(planner.plan(cluster_spec(), facts()).desired, complete_jobs=True)
    marking = planner.plan(cluster_spec(), facts(objects=live))
    assert counts(marking) == [("update", "PersistentVolumeClaim", False)] * 9
    assert all(holds_extracted(a.body, DIGEST_A) for a in marking.actions)
    marked = as_live(marking.desired, complete_jobs=True, marked=True)
    marked["Job"] = live["Job"]
    assert counts(planner.plan(cluster_spec(), facts(objects=marked))) == [("delete", "Job", False)] * 3


def test_a_failed_store_job_is_recorded_on_every_namespace_s_slot_and_not_run_again():
    live, pods = failed(as_live(planner.plan(cluster_spec(), facts()).desired))
    recording = planner.plan(cluster_spec(), facts(objects=live, pods=pods))
    updates = [a for a in recording.actions if a.verb == "update"]
    assert sorted(a.namespace for a in updates) == sorted(NAMESPACES * 3)
    assert all("signature does not verify" in a.body["metadata"]["annotations"][EXTRACTION_FAILURE_ANNOTATION]
               for a in updates)
    assert not [a for a in recording.actions if a.kind == "Job" and a.verb in ("create", "replace")]
    recorded = applied(recording, live)
    assert not [a for a in planner.plan(cluster_spec(), facts(objects=recorded, pods=pods)).actions
                if a.kind == "Job"]


def test_a_removed_namespace_leaves_the_store_and_its_directory_to_the_others():
    live = as_live(planner.plan(cluster_spec(), facts()).desired, complete_jobs=True, marked=True)
    plan = planner.plan(cluster_spec(NAMESPACES[1:]), facts(objects=live))
    assert counts(plan) == [("delete", "PersistentVolume", False)] * 3 + [
        ("delete", "PersistentVolumeClaim", False)] * 3
    assert {path for path, _node in plan.kept_directories} == {STORE}
    # The last namespace's removal leaves nothing of the store, so its directory is scrubbed.
    gone = planner.plan(cluster_spec(state="absent"), facts(objects=live))
    assert not gone.kept_directories
    assert {a.verb for a in gone.actions} == {"delete"}


def test_the_scrub_reads_a_store_pv_as_its_cache_s_store_directory():
    pv = by_kind(planner.plan(cluster_spec(), facts()).desired, "PersistentVolume")[0]
    root, relative = scrub.slot_location(pv)
    assert (root, relative) == ("/var/lib/gkm-cluster/caches", "_cluster/vector-add/_store/" + DIGEST_A.split(":")[1])
    pv["spec"]["hostPath"]["path"] = "/var/lib/gkm-cluster/caches/_cluster/other/_store/" + DIGEST_A.split(":")[1]
    assert scrub.slot_location(pv) is None


def test_a_store_stays_while_one_namespace_s_pod_keeps_its_slot_of_that_digest():
    old = as_live(planner.plan(cluster_spec(), facts()).desired, complete_jobs=True)
    # The new digest is extracted and marked everywhere: make before break keeps no old slot for it.
    live = merged(old, as_live(planner.plan(cluster_spec(digest=DIGEST_B), facts()).desired, marked=True))
    held = next(pvc for pvc in old["PersistentVolumeClaim"]
                if pvc["metadata"]["namespace"] == "team-a" and pvc["metadata"]["labels"]["gkm.io/node"] == WORKERS[0])
    reader = pod("reader", "team-a", held["metadata"]["name"], node=WORKERS[0])
    plan = planner.plan(cluster_spec(digest=DIGEST_B), facts(objects=live, pods=[reader]))
    deleted = {(a.kind, a.namespace, a.name) for a in plan.actions if a.verb == "delete"}
    old_jobs = {(job["metadata"]["namespace"], job["metadata"]["labels"]["gkm.io/node"], job["metadata"]["name"])
                for job in old["Job"]}
    # The reader's node keeps the old digest's Job (its store's) with the reader's slot; the other nodes' go.
    assert {("Job", ns, name) for ns, node, name in old_jobs if node != WORKERS[0]} <= deleted
    assert not {("Job", ns, name) for ns, node, name in old_jobs if node == WORKERS[0]} & deleted
    outdated = [slot for slot in plan.slots if slot.outcome == "outdated"]
    assert [(slot.namespace, slot.node) for slot in outdated] == [("team-a", WORKERS[0])]
    assert outdated[0].job in {name for _ns, node, name in old_jobs if node == WORKERS[0]}
    # The old store's directory stays on the reader's node alone: the path is the same on every node.
    old_store = {scrub.directory(pv) for pv in old["PersistentVolume"]}
    assert len(old_store) == 3
    assert {d for d in old_store if WORKERS[0] in d[1]} == old_store & plan.kept_directories


def test_moving_to_the_store_keeps_a_mounted_serving_pvc_and_its_pv_until_unused():
    """A serving PV made before the store points at the namespace's own directory; bound and mounted, it cannot be
    replaced under its PVC, so the PVC's hash covers the path and both are kept, as for a new digest."""
    before = make_spec(serving_pvc=True, system_namespace_jobs=False)
    live = as_live(planner.plan(before, facts()).desired, complete_jobs=True, marked=True)
    reader = pod("reader", "team-a", "vector-add", node=WORKERS[0])
    after = make_spec(serving_pvc=True, system_namespace_jobs=True)
    mounted = planner.plan(after, facts(objects=live, pods=[reader]))
    assert [a for a in mounted.actions if is_serving(a.body)] == []
    assert [(s.namespace, s.node, s.reason) for s in mounted.slots if s.outcome == "outdated" and not s.node] == [
        ("team-a", "", "mounted by reader")]
    # Unused, once every node's slot in the store is marked: replaced, PVC and PV.
    moved = as_live(planner.plan(after, facts()).desired, complete_jobs=True, marked=True)
    for kind in ("PersistentVolume", "PersistentVolumeClaim"):
        moved[kind] = [obj for obj in moved[kind] if not is_serving(obj)] + [
            obj for obj in live[kind] if is_serving(obj)]
    unused = planner.plan(after, facts(objects=moved))
    assert sorted((a.verb, a.kind) for a in unused.actions if is_serving(a.body)) == [
        ("replace", "PersistentVolume"), ("replace", "PersistentVolumeClaim")]


def test_a_slot_replaced_beside_an_extracted_store_is_recreated_marked_and_says_so():
    live = as_live(planner.plan(cluster_spec(), facts()).desired, complete_jobs=True, marked=True)
    # team-c's slot PV of one node rendered from another spec (its own directory, from before the store, say).
    stale = next(pv for pv in live["PersistentVolume"] if pv["spec"]["claimRef"]["namespace"] == "team-c")
    stale["metadata"]["annotations"][SPEC_HASH_ANNOTATION] = "another spec"
    replaced = [a for a in planner.plan(cluster_spec(), facts(objects=live)).actions if a.verb == "replace"]
    assert sorted(a.kind for a in replaced) == ["PersistentVolume", "PersistentVolumeClaim"]
    assert {a.reason for a in replaced} == {"holds another digest or spec; recreated at the node's store, already "
                                            "extracted"}
    assert holds_extracted(next(a.body for a in replaced if a.kind == "PersistentVolumeClaim"), DIGEST_A)
