# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The facts a reconcile plans from (ClusterFacts), assembled from a facts source: the cache's own objects by
label, the Nodes trimmed to what the planner reads, the Namespaces' names, the storage classes, the rival cache
resources and claims, and the pods of the cache's namespaces. One implementation of the reads whatever the source:
gather_facts(kube, spec), what the modules run, is assemble_facts over ListSource (paged LISTs); a controller passes
an IndexSource (facts/index.py) and reads nothing from the API server. The planner is pure and sees the same
ClusterFacts either way."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    cache_selector,
    pinned_reference,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CACHE_KINDS, NODE_LABEL
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.source import ListSource
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.trimmed import OBJECT_KINDS
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


DEFAULT_STORAGE_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


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


def gather_facts(kube, spec):
    """Cluster facts for the planner read with LISTs (what the modules send): assemble_facts over ListSource."""
    return assemble_facts(ListSource(kube), spec)


def assemble_facts(source, spec):
    """Cluster facts for the planner from a facts source: the cache's objects by label selector, then (a present
    cache only) the Nodes kept at what the planner reads of them, the Namespaces' names and the storage classes,
    all in one group of independent reads; then the rivals and the pods, which depend on those."""
    selector = cache_selector(spec.name, spec.cache_namespace)
    present = spec.state == "present"
    calls = [lambda kind=kind: source.cache_objects(kind, selector) for kind in OBJECT_KINDS]
    if present:
        pulled_image = pinned_reference(spec.image, spec.digest) if spec.image_volume else None
        calls += [lambda: source.nodes(pulled_image), source.namespace_names, source.storage_classes]
    results = source.gather(calls, "reading the cluster")
    objects = {kind: results[index] for index, kind in enumerate(OBJECT_KINDS)}
    nodes, namespace_names, classes = results[len(OBJECT_KINDS):] if present else ([], set(), [])
    rivals, named_claims = _conflicts(source, spec) if present else ([], [])
    return ClusterFacts(nodes, namespace_names, objects, pods_of(source, spec.namespaces, objects, namespace_names),
                        _storage_class(spec, classes) if present else None, rivals, named_claims)


def _conflicts(source, spec):
    """(cache resources of the cache's name, live PVCs of its name): what conflicts.py checks a cache that names
    a PVC after itself against (ReadOnlyMany, or a serving PVC). Resources are read for resource-backed
    caches only (a cache_distribute run is checked against the live PVCs)."""
    if not spec_claims(spec):
        return [], []
    kinds = sorted(CACHE_KINDS) if spec.owner else []
    calls = [lambda: source.claims_named(spec.name)]
    calls += [lambda kind=kind: source.cache_resources_named(kind, spec.name) for kind in kinds]
    results = source.gather(calls, "reading the cluster")
    return [item for listed in results[1:] for item in listed], results[0]


def _failing_job_namespaces(jobs):
    """Namespaces with a Job that had a pod fail and has not completed: their failed pods say why."""
    return {job["metadata"]["namespace"] for job in jobs
            if (job.get("status") or {}).get("failed") and not job_condition(job, "Complete")}


def pods_of(source, namespaces, objects, existing_namespaces=None):
    """Unfinished pods of the namespaces given (a cache's workload namespaces) and of every namespace its objects are
    in (who mounts what, stuck Jobs), their finished pods that are not ours (who still holds a claim), and the failed
    pods of its failing Jobs (their termination messages)."""
    namespaces = set(namespaces)
    for kind in ("PersistentVolumeClaim", "Job"):
        namespaces.update(obj["metadata"]["namespace"] for obj in objects.get(kind, []))
    if existing_namespaces is not None:
        namespaces &= existing_namespaces
    calls = [lambda ns=ns: source.unfinished_pods(ns) for ns in sorted(namespaces)]
    calls += [lambda ns=ns: source.finished_workload_pods(ns) for ns in sorted(namespaces)]
    calls += [lambda ns=ns: source.failed_managed_pods(ns)
              for ns in sorted(_failing_job_namespaces(objects.get("Job", [])))]
    return [pod for pods in source.gather(calls, "listing pods") for pod in pods]


def list_pods(kube, namespaces, objects, existing_namespaces=None):
    """pods_of read with LISTs (cache_info's report)."""
    return pods_of(ListSource(kube), namespaces, objects, existing_namespaces)


# ------------------------------------------------------------------ a node's share of the facts


def node_of(obj):
    """The node an object of a cache belongs to (its gkm.io/node label), None for a namespace-level one (a serving
    PVC and its PV, the registry Secret)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(NODE_LABEL)


def narrow_to_node(facts, node_name):
    """The facts a node event's reconcile plans with: that Node alone (none when it is gone), the cache's objects on
    that node, and the namespace-level objects as they are. Only the plan's actions on that node's objects may be
    written from such a plan (a plan that sees one node would judge the namespace-level objects by it alone)."""
    objects = {kind: [obj for obj in listed if node_of(obj) in (None, node_name)]
               for kind, listed in facts.objects.items()}
    return ClusterFacts([node for node in facts.nodes if node["metadata"]["name"] == node_name], facts.namespaces,
                        objects, facts.pods, facts.storage_class, facts.rivals, facts.named_claims)
