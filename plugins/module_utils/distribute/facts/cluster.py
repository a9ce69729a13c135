# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every read a reconcile makes of the cluster, in one place (I/O): one paged, label-selected LIST per kind of the
cache's objects, the Nodes trimmed to what the planner reads, the Namespaces' names, the storage classes, the rival
cache resources and claims, and the pods of the cache's namespaces. The planner is pure: a later engine can feed it
these same ClusterFacts from watches instead of LISTs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    cache_selector,
    managed_selector,
    pinned_reference,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CACHE_KINDS, GROUP, VERSION
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.spec import spec_claims


class ClusterFacts:
    """What the planner knows about the cluster, as plain API dicts.

    objects: {"PersistentVolumeClaim": [...], "PersistentVolume": [...], "Job": [...], "Secret": [...]} of this
    cache only.
    storage_class: the class PVCs use (named or default), or None when the cluster has none.
    pods: pods of the namespaces involved (to find PVCs in use).
    rivals: the other cache resources that could want this cache's objects (conflicts.py).
    named_claims: live PVCs named as a ReadOnlyMany cache, whoever they belong to.
    """

    def __init__(self, nodes, namespaces, objects, pods, storage_class=None, rivals=(), named_claims=()):
        self.rivals = list(rivals)
        self.named_claims = list(named_claims)
        self.nodes = nodes
        self.namespaces = set(namespaces)
        self.objects = objects
        self.pods = pods
        self.storage_class = storage_class


OBJECT_KINDS = ("PersistentVolumeClaim", "PersistentVolume", "Job", "Secret")


DEFAULT_STORAGE_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def has_pulled(node, reference):
    """True when the node's kubelet reports the image among those it pulled: one of status.images[].names (the
    kubelet lists at most nodeStatusMaxImages images, the largest first, and refreshes the list every 30 s)."""
    return any(reference in (image.get("names") or []) for image in (node.get("status") or {}).get("images") or [])


def node_facts(node, pulled_image=None):
    """What a reconcile reads of a Node: name, labels, taints, cordon and capacity (its GPU count). A Node's
    images, conditions and addresses are most of its size, so a large cluster's Nodes are kept without them;
    pulled_image (an imageVolume cache's pinned reference) keeps the one image entry saying the node pulled it."""
    metadata, spec = node["metadata"], node.get("spec") or {}
    status = {"capacity": (node.get("status") or {}).get("capacity") or {}}
    if pulled_image and has_pulled(node, pulled_image):
        status["images"] = [{"names": [pulled_image]}]
    return {"metadata": {"name": metadata["name"], "labels": metadata.get("labels") or {}},
            "spec": {key: spec[key] for key in ("taints", "unschedulable") if key in spec},
            "status": status}


def job_condition(job, condition_type):
    """The Job's condition of that type when it is True, else None."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == condition_type and condition.get("status") == "True":
            return condition
    return None


def _storage_class(spec, classes):
    if spec.storage_class_name:
        for storage_class in classes:
            if storage_class["metadata"]["name"] == spec.storage_class_name:
                return storage_class
        if spec.create_pvs != "always":
            raise DistributeError("storage_class_name %r does not exist; create it, pick one of %s, or set "
                                  "create_pvs: always" % (spec.storage_class_name,
                                                          [c["metadata"]["name"] for c in classes] or "none"),
                                  reason="StorageClassMissing")
        return None
    defaults = [c for c in classes
                if (c["metadata"].get("annotations") or {}).get(DEFAULT_STORAGE_CLASS_ANNOTATION) == "true"]
    return defaults[0] if defaults else None


def _node_facts(kube, spec):
    pulled_image = pinned_reference(spec.image, spec.digest) if spec.image_volume else None
    return [node_facts(node, pulled_image) for node in kube.items("Node")]


def _namespace_names(kube):
    return {namespace["metadata"]["name"] for namespace in kube.items("Namespace", metadata_only=True)}


def _listed(kube, kind, **query):
    """Every object of a LIST the planner reads, without metadata.managedFields, page by page: the server's record
    of which manager set each field is a large part of a small object, and nothing here reads it."""
    listed = []
    for obj in kube.items(kind, **query):
        obj["metadata"].pop("managedFields", None)
        listed.append(obj)
    return listed


def gather_facts(kube, spec):
    """Cluster facts for the planner: one paged LIST per kind, the cache's objects by label selector, the Nodes
    kept at what the planner reads of them, the Namespaces' names only."""
    selector = cache_selector(spec.name, spec.cache_namespace)
    present = spec.state == "present"
    calls = [lambda kind=kind: _listed(kube, kind, label_selector=selector) for kind in OBJECT_KINDS]
    if present:
        calls += [lambda: _node_facts(kube, spec), lambda: _namespace_names(kube), lambda: kube.list("StorageClass")]
    results = kube.map_all(lambda call: call(), calls, "reading the cluster", DistributeError)
    objects = {kind: results[index] for index, kind in enumerate(OBJECT_KINDS)}
    nodes, namespace_names, classes = results[len(OBJECT_KINDS):] if present else ([], set(), [])
    rivals, named_claims = conflict_facts(kube, spec) if present else ([], [])
    facts = ClusterFacts(nodes, namespace_names, objects, list_pods(kube, spec.namespaces, objects, namespace_names),
                         _storage_class(spec, classes) if present else None, rivals, named_claims)
    return facts


def conflict_facts(kube, spec):
    """(cache resources of the cache's name, live PVCs of its name): what conflicts.py checks a cache that names
    a PVC after itself against (ReadOnlyMany, or a serving PVC). Resources are read for resource-backed
    caches only (a cache_distribute run is checked against the live PVCs)."""
    if not spec_claims(spec):
        return [], []
    by_name = "metadata.name=%s" % spec.name
    # Every kind's collection across namespaces: /apis/<group>/<version>/<plural>.
    kinds = sorted(CACHE_KINDS) if spec.owner else []
    paths = ["/apis/%s/%s/%s" % (GROUP, VERSION, CACHE_KINDS[kind][0]) for kind in kinds]
    calls = [lambda: kube.list("PersistentVolumeClaim", field_selector=by_name)]
    calls += [lambda path=path: kube.request("GET", path, [("fieldSelector", by_name)], what="list %s" % path)
              for path in paths]
    results = kube.map_all(lambda call: call(), calls, "reading the cluster", DistributeError)
    rivals = []
    for kind, (status, data) in zip(kinds, results[1:]):
        rivals += [dict(item, kind=kind) for item in ((data or {}).get("items") or []) if status == 200]
    return rivals, results[0]


# Finished pods neither mount a PVC nor say why an extraction is stuck; after a converge they are most
# of a namespace's pods (one per extraction Job), so the server leaves them out.
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def _failing_job_namespaces(jobs):
    """Namespaces with a Job that had a pod fail and has not completed: their failed pods say why."""
    return {job["metadata"]["namespace"] for job in jobs
            if (job.get("status") or {}).get("failed") and not job_condition(job, "Complete")}


def list_pods(kube, namespaces, objects, existing_namespaces=None):
    """Unfinished pods of the namespaces given (a cache's workload namespaces) and of every namespace its objects are
    in (who mounts what, stuck Jobs), and the failed pods of its failing Jobs (their termination messages)."""
    namespaces = set(namespaces)
    for kind in ("PersistentVolumeClaim", "Job"):
        namespaces.update(obj["metadata"]["namespace"] for obj in objects.get(kind, []))
    if existing_namespaces is not None:
        namespaces &= existing_namespaces
    calls = [lambda ns=ns: _listed(kube, "Pod", namespace=ns, field_selector=UNFINISHED_PODS)
             for ns in sorted(namespaces)]
    calls += [lambda ns=ns: _listed(kube, "Pod", namespace=ns, label_selector=managed_selector(),
                                    field_selector="status.phase=Failed")
              for ns in sorted(_failing_job_namespaces(objects.get("Job", [])))]
    results = kube.map_all(lambda call: call(), calls, "listing pods", DistributeError)
    return [pod for pods in results for pod in pods]
