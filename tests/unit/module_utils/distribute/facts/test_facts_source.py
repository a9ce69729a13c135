"""The facts seam (facts/source.py, facts/index.py, facts/cluster.py assemble_facts): the same ClusterFacts whether
the reads are LISTs (ListSource, what the modules send) or an in-memory index fed by watch events (IndexSource, what
the controller of issue 33 reads); the LISTs are exactly the ones the modules sent before the seam; the index answers
with no request and ignores a Node's heartbeat."""

import copy
import json
import re
import threading
import time

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import managed_selector
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    NODE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts import cluster as facts_cluster
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts import index as facts_index
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts import source
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (
    DEFAULT_STORAGE_CLASS_ANNOTATION,
    assemble_facts,
    gather_facts,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import spec as cache_spec
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.scrub import job_image
from tests.helpers.distribute import DIGEST_A, NO_PROVISIONER_CLASS, default_nodes, make_spec

PLURALS = {"gkmcaches": "GKMCache", "clustergkmcaches": "ClusterGKMCache"}
NODE_PLURALS = {"gkmcachenodes": "GKMCacheNode", "clustergkmcachenodes": "ClusterGKMCacheNode"}


class FakeApi:
    """A cluster of objects behind the reads common/kube.py offers, filtering as the API server does and counting
    every request (a paged LIST counts once)."""

    def __init__(self, objects):
        self.objects = [copy.deepcopy(obj) for obj in objects]
        self.requests = []

    def _select(self, kind, namespace=None, label_selector=None, field_selector=None):
        found = []
        for obj in self.objects:
            if obj["kind"] != kind or (namespace and obj["metadata"].get("namespace") != namespace):
                continue
            if label_selector and not facts_index.labels_match(obj, label_selector):
                continue
            if field_selector and not facts_index.fields_match(obj, field_selector):
                continue
            found.append(copy.deepcopy(obj))
        return found

    def items(self, kind, namespace=None, label_selector=None, field_selector=None, metadata_only=False):
        self.requests.append(("LIST", kind, namespace, label_selector, field_selector, metadata_only))
        for obj in self._select(kind, namespace, label_selector, field_selector):
            if metadata_only:
                obj = {"kind": kind, "metadata": obj["metadata"]}
            yield obj

    def list(self, kind, namespace=None, label_selector=None, field_selector=None, metadata_only=False):
        return list(self.items(kind, namespace, label_selector, field_selector, metadata_only))

    def request(self, method, path, query=None, what=None):
        assert method == "GET"
        self.requests.append(("LIST", path, None, None, dict(query or {}).get("fieldSelector"), False))
        kind = PLURALS[path.rsplit("/", 1)[-1]]
        return 200, {"items": self._select(kind, field_selector=dict(query or {}).get("fieldSelector"))}

    def list_pages(self, path, label_selector=None):
        self.requests.append(("LIST", path, None, label_selector, None, False))
        plural = path.rsplit("/", 1)[-1]
        namespace = path.split("/namespaces/", 1)[1].split("/", 1)[0] if "/namespaces/" in path else None
        return self._select(NODE_PLURALS[plural], namespace, label_selector)

    def map_all(self, function, items, what, error=Exception):
        results = []
        for item in items:
            try:
                results.append(function(item))
            except Exception as failure:
                raise error("%s: %s" % (what, failure)) from failure
        return results


def cache_labels(cache="vector-add", namespace="team-a"):
    return {MANAGED_BY_LABEL: MANAGER, CACHE_LABEL: cache, CACHE_NAMESPACE_LABEL: namespace}


def obj(kind, name, namespace=None, labels=None, **fields):
    metadata = {"name": name, "labels": dict(labels or {}), "resourceVersion": "1"}
    if namespace:
        metadata["namespace"] = namespace
    return dict({"kind": kind, "metadata": metadata}, **fields)


def heartbeat_fields(node, beat=1):
    """What a kubelet's status update carries besides what the planner reads."""
    node = copy.deepcopy(node)
    node["kind"] = "Node"
    node["metadata"]["resourceVersion"] = str(beat)
    status = node.setdefault("status", {})
    status["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-27T10:%02d:00Z" % beat}]
    status["addresses"] = [{"type": "InternalIP", "address": "10.0.0.%d" % beat}]
    pinned, tagged = "registry.local/caches/vector-add@" + DIGEST_A, "registry.local/caches/vector-add:1"
    status["images"] = [{"names": [pinned, tagged]}, {"names": ["registry.local/other:2"], "sizeBytes": 5}]
    return node


def job_spec(image="registry.local/gkm/tools@" + DIGEST_A):
    """A Job's spec as the server returns it: the rendered pod template and the server's defaults."""
    return {"backoffLimit": 2, "completions": 1, "parallelism": 1, "selector": {"matchLabels": {"uid": "u-2"}},
            "template": {"metadata": {"labels": {"job-name": "vector-add-abc-w1"}}, "spec": {
                "restartPolicy": "Never", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
                "containers": [{"name": "extract", "image": image, "args": ["extract", "--digest", DIGEST_A],
                                "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log",
                                "securityContext": {"runAsNonRoot": True}, "volumeMounts": [
                                    {"name": "slot", "mountPath": "/cache"}]}],
                "volumes": [{"name": "slot", "persistentVolumeClaim": {"claimName": "vector-add-abc-w1"}}]}}}


def cluster():
    """A cluster where the cache `vector-add` of team-a has objects, a rival and a foreign claim share its name, a
    workload mounts it, a Job failed once, and other caches' objects must stay out."""
    mine, other = cache_labels(), cache_labels("other")
    managed = {MANAGED_BY_LABEL: MANAGER}
    return [
        *(heartbeat_fields(node) for node in default_nodes()),
        obj("Namespace", "team-a"), obj("Namespace", "team-b"), obj("Namespace", "idle"),
        dict(obj("StorageClass", NO_PROVISIONER_CLASS["metadata"]["name"]),
             provisioner=NO_PROVISIONER_CLASS["provisioner"]),
        dict(obj("StorageClass", "standard"), provisioner="rancher.io/local-path",
             metadata={"name": "standard", "annotations": {DEFAULT_STORAGE_CLASS_ANNOTATION: "true"}}),
        obj("PersistentVolumeClaim", "vector-add-abc-w1", "team-a", mine, status={"phase": "Bound"}),
        obj("PersistentVolumeClaim", "vector-add", "team-a", mine, status={"phase": "Bound"}),
        obj("PersistentVolumeClaim", "vector-add", "team-b", {"app": "theirs"}, status={"phase": "Bound"}),
        obj("PersistentVolumeClaim", "other-abc-w1", "team-a", other),
        obj("PersistentVolume", "gkm-vector-add-abc-w1", None, mine),
        obj("Job", "vector-add-abc-w1", "team-a", mine, status={"failed": 1}, spec=job_spec()),
        obj("Job", "other-abc-w1", "team-a", other, status={"failed": 2}),
        obj("Secret", "vector-add-registry", "team-a", mine),
        obj("Pod", "workload", "team-a", {"app": "x"}, status={"phase": "Running"},
            spec={"volumes": [{"persistentVolumeClaim": {"claimName": "vector-add"}}]}),
        obj("Pod", "done", "team-a", {"app": "x"}, status={"phase": "Succeeded"}),
        obj("Pod", "extract-1", "team-a", dict(managed, **{"job-name": "vector-add-abc-w1"}),
            status={"phase": "Failed"}),
        obj("Pod", "stranger-failed", "team-a", {"app": "x"}, status={"phase": "Failed"}),
        obj("Pod", "elsewhere", "idle", {"app": "x"}, status={"phase": "Running"}),
        obj("GKMCache", "vector-add", "team-b", {}, spec={"image": "x"}),
        obj("ClusterGKMCache", "vector-add", None, {}, spec={"image": "y"}),
        obj("ClusterGKMCache", "unrelated", None, {}, spec={"image": "z"}),
    ]


def serving_spec(**params):
    spec = make_spec(serving_pvc=True, **params)
    spec.owner = {"uid": "u-1", "creationTimestamp": "2026-11-27T09:00:00Z", "kind": "GKMCache", "name": "vector-add"}
    return spec


def indexed(objects, **index_args):
    index = facts_index.ClusterIndex(**index_args)
    for item in objects:
        index.apply(None, copy.deepcopy(item))
    return index


def as_dict(facts):
    return {"nodes": facts.nodes, "namespaces": facts.namespaces, "objects": facts.objects,
            "pods": sorted(facts.pods, key=lambda pod: pod["metadata"]["name"]), "storage_class": facts.storage_class,
            "rivals": facts.rivals, "named_claims": facts.named_claims}


CACHE_OBJECTS = "app.kubernetes.io/managed-by=gkm.cluster,gkm.io/cache=vector-add,gkm.io/cache-namespace=team-a"
# The LISTs gather_facts sent for this cluster before it read through a facts source (recorded then), so wiring the
# seam in changed no request a module sends.
OWN_OBJECTS = [("LIST", kind, None, CACHE_OBJECTS, None, False)
               for kind in ("PersistentVolumeClaim", "PersistentVolume", "Job", "Secret")]
CLUSTER_WIDE = [("LIST", "Node", None, None, None, False), ("LIST", "Namespace", None, None, None, True),
                ("LIST", "StorageClass", None, None, None, False)]
RIVALS = [("LIST", "PersistentVolumeClaim", None, None, "metadata.name=vector-add", False),
          ("LIST", "/apis/gkm.io/v1alpha1/clustergkmcaches", None, None, "metadata.name=vector-add", False),
          ("LIST", "/apis/gkm.io/v1alpha1/gkmcaches", None, None, "metadata.name=vector-add", False)]
UNFINISHED = [("LIST", "Pod", "team-a", None, "status.phase!=Succeeded,status.phase!=Failed", False)]
# Added since: the finished pods that are not ours, which still hold the claims they name.
FINISHED_WORKLOADS = [("LIST", "Pod", "team-a", "app.kubernetes.io/managed-by!=gkm.cluster",
                       "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown", False)]
FAILED = [("LIST", "Pod", "team-a", "app.kubernetes.io/managed-by=gkm.cluster", "status.phase=Failed", False)]
SPECS = {
    "serving-pvc": (serving_spec(), OWN_OBJECTS + CLUSTER_WIDE + RIVALS + UNFINISHED + FINISHED_WORKLOADS + FAILED),
    "image-volume": (serving_spec(mount_mode=cache_spec.IMAGE_VOLUME),
                     OWN_OBJECTS + CLUSTER_WIDE + RIVALS + UNFINISHED + FINISHED_WORKLOADS + FAILED),
    "per-node-only": (make_spec(), OWN_OBJECTS + CLUSTER_WIDE + UNFINISHED + FINISHED_WORKLOADS + FAILED),
    "absent": (make_spec(state="absent"), OWN_OBJECTS + FAILED),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_list_source_and_index_source_give_the_same_facts_and_the_lists_are_the_modules_own(name):
    spec, requests = SPECS[name]
    api = FakeApi(cluster())
    expected = as_dict(gather_facts(api, spec))
    assert api.requests == requests  # the same LISTs, in the same order, as before the seam

    api.requests.clear()
    assert as_dict(assemble_facts(source.ListSource(api), spec)) == expected
    assert api.requests == requests

    api.requests.clear()
    assert as_dict(assemble_facts(facts_index.IndexSource(indexed(cluster())), spec)) == expected
    assert api.requests == []


def test_cache_info_lists_the_pods_it_reports_as_the_reconcile_does():
    api = FakeApi(cluster())
    objects = {"Job": [obj("Job", "vector-add-abc-w1", "team-a", cache_labels(), status={"failed": 1})]}
    pods = facts_cluster.list_pods(api, {"team-a"}, objects)
    assert sorted(pod["metadata"]["name"] for pod in pods) == ["done", "extract-1", "stranger-failed", "workload"]
    assert api.requests == UNFINISHED + FINISHED_WORKLOADS + FAILED


def test_the_facts_read_only_this_caches_objects_and_the_pods_that_matter():
    facts = assemble_facts(facts_index.IndexSource(indexed(cluster())), serving_spec())
    names = {kind: sorted(o["metadata"]["name"] for o in objects) for kind, objects in facts.objects.items()}
    assert names == {"PersistentVolumeClaim": ["vector-add", "vector-add-abc-w1"],
                     "PersistentVolume": ["gkm-vector-add-abc-w1"], "Job": ["vector-add-abc-w1"],
                     "Secret": ["vector-add-registry"]}
    # unfinished pods of the cache's namespaces, their finished pods that are not ours, and the failed pods of ours
    # where a Job is failing
    assert sorted(pod["metadata"]["name"] for pod in facts.pods) == ["done", "extract-1", "stranger-failed", "workload"]
    assert [(r["kind"], r["metadata"].get("namespace")) for r in facts.rivals] == [
        ("ClusterGKMCache", None), ("GKMCache", "team-b")]
    assert sorted(c["metadata"]["namespace"] for c in facts.named_claims) == ["team-a", "team-b"]
    assert facts.storage_class["metadata"]["name"] == "standard"  # the default class


def test_an_image_volume_cache_sees_whether_each_node_pulled_its_image():
    spec = serving_spec(mount_mode=cache_spec.IMAGE_VOLUME)
    facts = assemble_facts(facts_index.IndexSource(indexed(cluster())), spec)
    assert all(node["status"]["images"] == [{"names": ["registry.local/caches/vector-add@" + DIGEST_A]}]
               for node in facts.nodes)
    watched_elsewhere = indexed(cluster(), watched_images={"registry.local/elsewhere@" + DIGEST_A})
    facts = assemble_facts(facts_index.IndexSource(watched_elsewhere), spec)
    assert all("images" not in node["status"] for node in facts.nodes)


def test_a_heartbeat_changes_nothing_held_and_a_label_or_taint_change_does():
    node = default_nodes()[0]
    index = indexed([heartbeat_fields(node, beat=1)])
    assert index.apply("MODIFIED", heartbeat_fields(node, beat=2)) is False
    relabelled = heartbeat_fields(node, beat=3)
    relabelled["metadata"]["labels"]["gkm.io/gpu-arch"] = "gfx942"
    assert index.apply("MODIFIED", relabelled) is True
    cordoned = copy.deepcopy(relabelled)
    cordoned["spec"]["unschedulable"] = True
    assert index.apply("MODIFIED", cordoned) is True
    assert index.apply("MODIFIED", cordoned) is False
    assert index.apply("DELETED", cordoned) is True
    assert index.apply("DELETED", cordoned) is False
    assert index.count("Node") == 0


def test_an_objects_status_change_is_a_change_and_deletion_removes_it():
    pvc = obj("PersistentVolumeClaim", "vector-add-abc-w1", "team-a", cache_labels(), status={"phase": "Pending"})
    index = indexed([pvc])
    bound = copy.deepcopy(pvc)
    bound["status"]["phase"] = "Bound"
    bound["metadata"]["resourceVersion"] = "2"
    assert index.apply("MODIFIED", bound) is True
    assert index.select("PersistentVolumeClaim")[0]["status"] == {"phase": "Bound"}
    assert index.apply("DELETED", bound) is True
    assert assemble_facts(facts_index.IndexSource(index), make_spec()).objects["PersistentVolumeClaim"] == []


def test_the_index_drops_managed_fields_and_hands_out_copies():
    pvc = obj("PersistentVolumeClaim", "vector-add-abc-w1", "team-a", cache_labels())
    pvc["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    index = indexed([pvc])
    held = index.select("PersistentVolumeClaim")[0]
    assert "managedFields" not in held["metadata"]
    held["metadata"]["labels"]["edited"] = "by a reconcile"
    assert "edited" not in index.select("PersistentVolumeClaim")[0]["metadata"]["labels"]
    assert pvc["metadata"]["managedFields"] == [{"manager": "kubectl"}]  # the event's body is left as it came
    pvc["metadata"]["labels"]["edited"] = "by whoever holds the event's body"
    node = heartbeat_fields(default_nodes()[0])
    index.apply("ADDED", node)
    node["metadata"]["labels"]["edited"] = "later"
    assert "edited" not in index.select("PersistentVolumeClaim")[0]["metadata"]["labels"]
    assert "edited" not in index.select("Node")[0]["metadata"]["labels"]


def test_a_job_is_read_as_its_metadata_status_and_images_from_either_source():
    job = obj("Job", "vector-add-abc-w1", "team-a", cache_labels(), status={"failed": 1}, spec=job_spec())
    job["metadata"]["managedFields"] = [{"manager": "kube-controller-manager"}]
    expected = {"kind": "Job", "metadata": {"name": "vector-add-abc-w1", "namespace": "team-a",
                                            "labels": cache_labels(), "resourceVersion": "1"},
                "status": {"failed": 1}, "spec": {"template": {"spec": {"containers": [
                    {"name": "extract", "image": "registry.local/gkm/tools@" + DIGEST_A}]}}}}
    listed = source.ListSource(FakeApi([job])).cache_objects("Job", CACHE_OBJECTS)
    assert listed == [expected]
    assert indexed([job]).select("Job") == [expected]
    assert job["spec"] == job_spec()  # the index trims its own copy, never the event's body
    assert job_image(listed[0]) == "registry.local/gkm/tools@" + DIGEST_A  # what a scrub runs


def test_the_index_holds_one_copy_of_a_string_that_many_objects_repeat():
    def decoded_alone(name):  # as a watch event is: each body from its own JSON line
        return json.loads(json.dumps(obj("PersistentVolumeClaim", name, "team-a", cache_labels())))

    first, second = indexed([decoded_alone("vector-add-abc-w1"), decoded_alone("vector-add-abc-w2")]).select(
        "PersistentVolumeClaim")
    [first_key], [second_key] = ([key for key in held["metadata"]["labels"] if key == CACHE_LABEL]
                                 for held in (first, second))
    assert first_key is second_key
    assert first["metadata"]["namespace"] is second["metadata"]["namespace"]
    assert first["metadata"]["labels"][CACHE_LABEL] is second["metadata"]["labels"][CACHE_LABEL]


def test_the_index_gets_one_object_by_name_as_a_copy_and_selects_by_namespace():
    pvc = obj("PersistentVolumeClaim", "slot", "team-a", cache_labels())
    index = indexed([pvc, obj("PersistentVolumeClaim", "slot", "team-b", cache_labels()),
                     heartbeat_fields(default_nodes()[0])])
    node_name = default_nodes()[0]["metadata"]["name"]
    assert index.get("Node", node_name)["metadata"]["name"] == node_name
    assert index.get("Node", "no-such-node") is None
    assert index.get("PersistentVolumeClaim", "slot") is None  # namespaced: the namespace is part of the name
    held = index.get("PersistentVolumeClaim", "slot", "team-a")
    held["metadata"]["labels"]["edited"] = "by a reconcile"
    assert "edited" not in index.get("PersistentVolumeClaim", "slot", "team-a")["metadata"]["labels"]
    assert [p["metadata"]["namespace"] for p in index.select("PersistentVolumeClaim", "team-b",
                                                             field_selector="metadata.name=slot")] == ["team-b"]
    assert len(index.select("PersistentVolumeClaim", field_selector="metadata.name=slot")) == 2


def test_what_is_on_a_node_is_found_without_a_scan_and_as_a_selector_would_find_it():
    """held_on_node follows each object's node label through adds, moves, deletions and a relist; a per-node status
    object is on the node it is named after."""
    index = indexed([])

    def claim(name, node, version="1"):
        labels = {**cache_labels(), **({NODE_LABEL: node} if node else {})}
        return dict(obj("PersistentVolumeClaim", name, "team-a", labels), status={"phase": "Bound", "v": version})

    def agree(node):
        found = index.held_on_node("PersistentVolumeClaim", node)
        assert found == index.select("PersistentVolumeClaim", label_selector="%s=%s" % (NODE_LABEL, node))
        return sorted(claim["metadata"]["name"] for claim in found)

    for name, node in (("a", "gpu-1"), ("b", "gpu-1"), ("c", "gpu-2"), ("d", None)):
        index.apply("ADDED", claim(name, node))
    assert (agree("gpu-1"), agree("gpu-2"), agree("gpu-3")) == (["a", "b"], ["c"], [])
    index.apply("MODIFIED", claim("b", "gpu-2", "2"))
    index.apply("MODIFIED", claim("a", "gpu-1", "2"))  # a change that keeps the node
    index.apply("DELETED", claim("c", "gpu-2"))
    assert (agree("gpu-1"), agree("gpu-2")) == (["a"], ["b"])
    index.relisted("PersistentVolumeClaim", [claim("e", "gpu-3"), claim("b", "gpu-2")])
    assert (agree("gpu-1"), agree("gpu-2"), agree("gpu-3")) == ([], ["b"], ["e"])
    status = {"kind": "GKMCacheNode", "metadata": {"name": "gpu-2", "namespace": "team-a"}}
    index.apply("ADDED", status)
    assert index.held_on_node("GKMCacheNode", "gpu-2") == [status] and index.held_on_node("GKMCacheNode", "x") == []
    # Copies, as every read of the index hands out.
    index.held_on_node("PersistentVolumeClaim", "gpu-2")[0]["metadata"]["labels"].clear()
    assert agree("gpu-2") == ["b"]


def test_the_index_refuses_a_kind_it_does_not_hold():
    with pytest.raises(ValueError, match="ConfigMap"):
        facts_index.ClusterIndex().apply("ADDED", obj("ConfigMap", "x", "team-a"))


@pytest.mark.parametrize("selector, labels, expected", [
    (managed_selector(), {MANAGED_BY_LABEL: MANAGER}, True),
    (managed_selector(), {}, False),
    ("a=b,c!=d", {"a": "b"}, True),
    ("a=b,c!=d", {"a": "b", "c": "d"}, False),
    ("a==b", {"a": "b"}, True),
])
def test_label_selectors_match_as_the_api_server_reads_them(selector, labels, expected):
    assert facts_index.labels_match({"metadata": {"labels": labels}}, selector) is expected


def test_field_selectors_and_unknown_selector_forms():
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}
    assert facts_index.fields_match(pod, "status.phase!=Succeeded,status.phase!=Failed")
    assert not facts_index.fields_match(pod, "metadata.name=q")
    with pytest.raises(ValueError, match="key=value"):
        facts_index.labels_match(pod, "app in (a,b)")


def test_a_failed_read_is_a_distribute_error_naming_the_read():
    class Broken(facts_index.IndexSource):
        def storage_classes(self):
            raise KeyError("storage classes not indexed yet")

    with pytest.raises(DistributeError, match="reading the cluster from the index"):
        assemble_facts(Broken(indexed(cluster())), serving_spec())


def test_a_poll_on_the_index_wakes_at_the_change_not_at_the_end_of_its_interval():
    pvc = obj("PersistentVolumeClaim", "vector-add-abc-w1", "team-a", cache_labels(), status={"phase": "Pending"})
    index = indexed([pvc])
    reader = facts_index.IndexSource(index)
    reader.gather([], "reading")
    bound = copy.deepcopy(pvc)
    bound["status"]["phase"] = "Bound"
    timer = threading.Timer(0.05, index.apply, ("MODIFIED", bound))
    started = time.monotonic()
    timer.start()
    try:
        assert reader.pause(30) is True
    finally:
        timer.cancel()
    assert time.monotonic() - started < 10


def test_a_poll_on_the_index_that_sees_no_change_waits_its_interval_and_says_so():
    index = indexed(cluster())
    reader = facts_index.IndexSource(index)
    reader.gather([], "reading")
    assert index.apply("MODIFIED", heartbeat_fields(default_nodes()[0], beat=7)) is False  # a heartbeat
    assert reader.pause(0.01) is False


def test_a_change_between_the_read_and_the_poll_is_not_missed():
    pvc = obj("PersistentVolumeClaim", "vector-add-abc-w1", "team-a", cache_labels())
    index = indexed([pvc])
    reader = facts_index.IndexSource(index)
    reader.gather([], "reading")
    index.apply("DELETED", pvc)
    assert reader.pause(30) is True  # at once: the change came after the facts were read
    assert reader.pause(0.01) is False


def test_a_read_after_the_runs_own_writes_waits_until_the_index_shows_them():
    # The run created a slot PVC (the reply's resourceVersion 7), deleted a Job and labelled a Node (9): the watch
    # events come a moment later, and the read that plans again waits for all three. A Node is held without its
    # resourceVersion; the last one its events carried counts, a heartbeat's after the label included.
    job = obj("Job", "vector-add-abc-w1", "team-a", cache_labels())
    node = default_nodes()[0]
    index = indexed([job, heartbeat_fields(node, beat=3)])
    name = node["metadata"]["name"]
    written = [("PersistentVolumeClaim", "team-a", "vector-add-abc-w2", "7"),
               ("Job", "team-a", job["metadata"]["name"], None), ("Node", "", name, "9")]
    reader = facts_index.IndexSource(index, written)
    created = obj("PersistentVolumeClaim", "vector-add-abc-w2", "team-a", cache_labels())
    created["metadata"]["resourceVersion"] = "7"
    events = [threading.Timer(0.1, index.apply, ("ADDED", created)),
              threading.Timer(0.2, index.apply, ("DELETED", job)),
              threading.Timer(0.3, index.apply, ("MODIFIED", heartbeat_fields(node, beat=10)))]
    started = time.monotonic()
    for event in events:
        event.start()
    try:
        assert index.unshown(written) == written
        [pvcs] = reader.gather([lambda: index.select("PersistentVolumeClaim", "team-a")], "reading")
    finally:
        for event in events:
            event.cancel()
    assert 0.25 < time.monotonic() - started < 10
    assert index.unshown(written) == []
    assert [pvc["metadata"]["name"] for pvc in pvcs] == ["vector-add-abc-w2"]
    assert index.select("Job") == []
    # Shown once, never waited for again; a later version, or a deletion under way, shows a write too.
    assert reader.gather([lambda: None], "reading") == [None]
    assert index.wait_for_writes([("PersistentVolumeClaim", "team-a", "vector-add-abc-w2", "6")], 0)
    # An object applied, then deleted in the same run, is waited for as deleted.
    superseded = facts_index.IndexSource(index, [("Job", "team-a", "scrub", "5"), ("Job", "team-a", "scrub", None)])
    started = time.monotonic()
    assert superseded.gather([lambda: None], "reading") == [None]
    assert time.monotonic() - started < 1
    assert index.unshown([("Job", "team-a", "scrub", "5"), ("Job", "team-a", "scrub", None)]) == []
    assert index.wait_for_writes([("Job", "team-a", "scrub", "5"), ("Job", "team-a", "scrub", None)], 0)
    terminating = obj("PersistentVolumeClaim", "gone", "team-a", cache_labels(), status={})
    terminating["metadata"]["deletionTimestamp"] = "2026-11-28T18:00:00Z"
    index.apply("ADDED", terminating)
    assert index.wait_for_writes([("PersistentVolumeClaim", "team-a", "gone", None)], 0)


def test_an_earlier_runs_writes_are_waited_for_by_the_first_read_only():
    node = default_nodes()[0]
    index = indexed([heartbeat_fields(node, beat=3)])
    labelled = [("Node", "", node["metadata"]["name"], "5")]
    reader = facts_index.IndexSource(index, [], earlier=labelled)
    timer = threading.Timer(0.1, index.apply, ("MODIFIED", heartbeat_fields(node, beat=5)))
    started = time.monotonic()
    timer.start()
    try:
        assert reader.gather([lambda: 1], "reading") == [1]
    finally:
        timer.cancel()
    assert 0.05 < time.monotonic() - started < 10
    # A Namespace counts the same way; a deleted one is shown once it is gone.
    index.apply("ADDED", {"kind": "Namespace", "metadata": {"name": "team-a", "resourceVersion": "4"}})
    assert index.unshown([("Namespace", "", "team-a", "4"), ("Namespace", "", "team-b", None)]) == []
    assert index.unshown([("Namespace", "", "team-a", "6")]) == [("Namespace", "", "team-a", "6")]


def test_a_write_the_index_never_shows_holds_a_read_for_a_bounded_time_only(monkeypatch, caplog):
    monkeypatch.setattr(facts_index, "WRITES_SHOWN_SECONDS", 0.2)
    index = indexed([obj("Namespace", "team-a")])
    assert index.wait_for_writes([("PersistentVolumeClaim", "team-a", "taken-back", "8")], 0.05) is False
    reader = facts_index.IndexSource(index, [("PersistentVolumeClaim", "team-a", "taken-back", "8"),
                                             ("Namespace", "", "team-a", None)])
    started = time.monotonic()
    assert reader.gather([lambda: 1], "reading") == [1]
    assert 0.2 <= time.monotonic() - started < 5
    # The lag is logged: how many of the writes the index showed when the wait ran out.
    [message] = [record.getMessage() for record in caplog.records if record.name == "gkm.index"]
    assert re.fullmatch(r"reading: the index shows 0 of the reconcile's last 2 writes after [\d.]+ s; read as it is",
                        message), message


def claims_shown_one_by_one(index, count, every, first_version):
    """(the writes of `count` claims, timers that apply each claim's event `every` seconds apart, started)."""
    claims = [obj("PersistentVolumeClaim", "w%d" % (first_version + number), "team-a", cache_labels())
              for number in range(count)]
    for number, claim in enumerate(claims):
        claim["metadata"]["resourceVersion"] = str(first_version + number)
    events = [threading.Timer(every * (number + 1), index.apply, ("ADDED", claim))
              for number, claim in enumerate(claims)]
    for event in events:
        event.start()
    return [("PersistentVolumeClaim", "team-a", claim["metadata"]["name"], claim["metadata"]["resourceVersion"])
            for claim in claims], events


def test_a_wait_for_writes_goes_on_while_the_index_shows_more_of_them():
    """Thousands of writes trail their events for longer than the bound: each event that shows one more starts the
    bound again, an index that shows none more for the bound ends the wait, and `most` ends it in any case."""
    index = indexed([])
    written, events = claims_shown_one_by_one(index, 4, 0.2, 10)
    started = time.monotonic()
    try:
        assert index.wait_for_writes(written, 0.5) is True  # 0.8 s in all, never 0.5 s without one more shown
    finally:
        for event in events:
            event.cancel()
    assert 0.7 < time.monotonic() - started < 10
    started = time.monotonic()
    assert index.wait_for_writes([*written, ("PersistentVolumeClaim", "team-a", "never", "20")], 0.3) is False
    assert 0.3 <= time.monotonic() - started < 5
    written, events = claims_shown_one_by_one(index, 20, 0.1, 30)
    started = time.monotonic()
    try:
        assert index.wait_for_writes(written, 0.5, most=0.6) is False
    finally:
        for event in events:
            event.cancel()
    assert 0.55 < time.monotonic() - started < 1.5


def test_a_poll_through_lists_sleeps_its_interval(monkeypatch):
    slept = []
    monkeypatch.setattr(source.time, "sleep", slept.append)
    assert source.ListSource(FakeApi([])).pause(1.0) is False
    assert slept == [1.0]


def test_a_relisting_drops_what_was_deleted_while_the_watch_was_down():
    kept = obj("PersistentVolumeClaim", "vector-add-abc-w1", "team-a", cache_labels())
    gone = obj("PersistentVolumeClaim", "vector-add-abc-w2", "team-a", cache_labels())
    index = indexed([kept, gone, obj("Namespace", "team-a")])
    before = index.version
    relisting = index.relisted("PersistentVolumeClaim", [copy.deepcopy(kept)])
    assert relisting.changed is True and index.version == before + 1
    assert [(pvc["kind"], pvc["metadata"]["name"]) for pvc in relisting.vanished] == [
        ("PersistentVolumeClaim", "vector-add-abc-w2")]
    assert [pvc["metadata"]["name"] for pvc in index.select("PersistentVolumeClaim")] == ["vector-add-abc-w1"]
    again = index.relisted("PersistentVolumeClaim", [copy.deepcopy(kept)])
    assert (again.changed, again.vanished, index.version) == (False, [], before + 1)  # an idle relist wakes nothing
    assert index.count("Namespace") == 1  # other kinds are left alone
    with pytest.raises(ValueError, match="Namespace"):
        index.relisted("PersistentVolumeClaim", [obj("Namespace", "x")])


def test_the_per_node_objects_read_from_lists_or_the_index_are_the_same():
    managed = {MANAGED_BY_LABEL: MANAGER}
    status = {"caches": {"vector-add": {"digest": DIGEST_A}}}
    objects = [obj("GKMCacheNode", "w1", "team-a", managed, status=status),
               obj("GKMCacheNode", "w1", "team-b", managed, status=status),
               obj("GKMCacheNode", "w2", "team-a", {}, status=status),  # not the collection's
               obj("ClusterGKMCacheNode", "w1", None, managed, status=status)]
    api = FakeApi(objects)
    index = indexed(objects)
    for cache_kind, namespace, expected in [("GKMCache", "team-a", [("team-a", "w1")]),
                                            ("ClusterGKMCache", None, [(None, "w1")])]:
        listed = source.ListSource(api).node_objects(cache_kind, namespace)
        held = facts_index.IndexSource(index).node_objects(cache_kind, namespace)
        assert listed == held
        assert [(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in held] == expected
    assert len(api.requests) == 2
