# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read and write the per-node objects (GKMCacheNode / ClusterGKMCacheNode): the I/O around node_objects.py.

One paged, label-selected LIST of the objects of the cache's kind (and namespace), the writes
node_objects.plan_node_objects plans (nothing when nothing changed), node by node in the bounded pool.
Patches and deletes carry the resourceVersion read: when another cache's reconcile wrote the node's
object in between, the API server answers 409 and only those nodes are read again and planned again.
Check mode plans and reports without writing (a dry-run create would leave nothing to patch).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    node_object_path,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    NODE_KINDS,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.node_objects import NodeObjectsError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.source import ListSource
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_objects import (
    CREATE,
    DELETE,
    PATCH_STATUS,
    plan_node_objects,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_status import node_cache_states

MERGE_PATCH = "application/merge-patch+json"
# Rounds of re-reading and re-planning nodes whose object another writer changed meanwhile.
MAX_CONFLICT_ROUNDS = 5
# A diff names at most this many nodes; the count says how many more changed.
MAX_DIFF_NODES = 20


def _write_node(kube, cache_kind, namespace, writes):
    """One node's writes in order, each recorded as written (Kube.record_write: a controller's next plan waits until
    its index shows them); returns the node name on a conflict (its object changed meanwhile), else None."""
    version = None
    kind = NODE_KINDS[cache_kind][0]
    for write in writes:
        path = node_object_path(cache_kind, namespace, write.name)
        what = "%s %s" % (kind, write.name)
        try:
            if write.verb == CREATE:
                status, created = kube.request("POST", node_object_path(cache_kind, namespace), body=write.body,
                                               what=what, retry_conflicts=False)
                version = (created or {}).get("metadata", {}).get("resourceVersion")
            elif write.verb == PATCH_STATUS:
                body = dict(write.body, metadata={"resourceVersion": write.resource_version or version})
                status, patched = kube.request("PATCH", path + "/status", body=body, content_type=MERGE_PATCH,
                                               what=what + " status", retry_conflicts=False)
                version = (patched or {}).get("metadata", {}).get("resourceVersion")
            else:
                body = {"apiVersion": "v1", "kind": "DeleteOptions",
                        "preconditions": {"resourceVersion": write.resource_version}}
                status, _data = kube.request("DELETE", path, body=body, what=what, retry_conflicts=False)
                status, version = (200 if status == 404 else status), None  # 404: gone already
        except KubeError as error:
            if error.status == 409:
                return write.name
            raise
        if status == 404:
            return write.name  # deleted meanwhile: read again, create again
        kube.record_write(kind, namespace, write.name, version)
    return None


def _by_node(writes):
    grouped = {}
    for write in writes:
        grouped.setdefault(write.name, []).append(write)
    return grouped


def _count(writes, summary):
    for write in writes:
        key = {CREATE: "created", PATCH_STATUS: "patched", DELETE: "deleted"}[write.verb]
        summary[key] += 1


def node_diff(cache_kind, cache, states, existing, writes):
    """What a diff shows of the per-node objects: the cache's entry before and after on the first
    MAX_DIFF_NODES nodes written (timestamps left out), and how many nodes changed."""
    live = {obj["metadata"]["name"]: obj for obj in existing}
    names = sorted({write.name for write in writes})
    before, after = {}, {}
    for name in names[:MAX_DIFF_NODES]:
        was = ((live.get(name) or {}).get("status") or {}).get("caches", {}).get(cache)
        if was is not None:
            before[name] = _without_times(was)
        if states.get(name):
            after[name] = states[name]
    header = "%s objects of %s (%d node(s) change%s)" % (
        NODE_KINDS[cache_kind][0], cache, len(names),
        ", first %d shown" % MAX_DIFF_NODES if len(names) > MAX_DIFF_NODES else "")
    return {"before": before, "after": after, "before_header": header, "after_header": header}


def _without_times(digests):
    cleaned = {}
    for digest, state in digests.items():
        state = {key: value for key, value in state.items() if key != "lastUpdated"}
        if "pvcStatus" in state:
            state["pvcStatus"] = {ns: dict(pvc, conditions=[{k: v for k, v in c.items() if k != "lastTransitionTime"}
                                                            for c in pvc.get("conditions") or []])
                                  for ns, pvc in state["pvcStatus"].items()}
        cleaned[digest] = state
    return cleaned


def node_objects_kind(spec):
    """The cache kind whose per-node objects a run writes: a resource-backed cache's own kind; for a cache removed
    (state absent) the kind of its scope, so no entry of it is left behind; None for a cache_distribute cache."""
    if spec.owner:
        return spec.owner["kind"]
    if spec.state == "absent":
        return "GKMCache" if spec.cache_namespace else "ClusterGKMCache"
    return None


def sync_for_spec(kube, spec, eligibility, status, facts, check_mode=False, want_diff=False, upgrade_states=None,
                  source=None):
    """sync_node_objects for one reconcile's outcome (None when the cache has no per-node objects).

    upgrade_states: {node: state} of a rollout in waves (rollout.upgrade_states); source: the run's facts source."""
    kind = node_objects_kind(spec)
    if kind is None:
        return None
    states = node_cache_states(spec, eligibility, status["entries"], facts.nodes, facts.pods, upgrade_states) if (
        spec.state == "present") else {}
    return sync_node_objects(kube, kind, spec.cache_namespace or None, spec.name, states, facts.nodes,
                             check_mode, want_diff, source)


def sync_node_objects(kube, cache_kind, namespace, cache, states, nodes, check_mode=False, want_diff=False,
                      source=None):
    """Make the per-node objects say `states` ({node: {digest: state}}; {} removes the cache everywhere).

    Returns {created, patched, deleted, conflicts} (planned counts in check mode) and, with want_diff and something
    to write, `diff`. The objects there are read through source (facts/source.py; default a LIST through kube),
    the writes go through kube, and a write refused as a conflict is read again with a GET.
    """
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    existing = (source or ListSource(kube)).node_objects(cache_kind, namespace)
    writes = plan_node_objects(cache_kind, namespace, cache, states, nodes, existing, now)
    summary = {"created": 0, "patched": 0, "deleted": 0, "conflicts": 0}
    if want_diff and writes:
        summary["diff"] = node_diff(cache_kind, cache, states, existing, writes)
    del existing  # the largest list of the run: not kept past planning
    if check_mode:
        _count(writes, summary)
        return summary
    for _round in range(MAX_CONFLICT_ROUNDS):
        grouped = _by_node(writes)
        results = kube.map_all(lambda name, grouped=grouped: _write_node(kube, cache_kind, namespace, grouped[name]),
                               sorted(grouped), "writing the per-node objects", NodeObjectsError)
        conflicted = [name for name in results if name]
        _count([w for name, group in grouped.items() if name not in conflicted for w in group], summary)
        if not conflicted:
            return summary
        summary["conflicts"] += len(conflicted)
        fresh = kube.map_all(lambda name: _get(kube, cache_kind, namespace, name), conflicted,
                             "re-reading the per-node objects", NodeObjectsError)
        subset = {name: states[name] for name in conflicted if name in states}
        writes = plan_node_objects(cache_kind, namespace, cache, subset, nodes, [obj for obj in fresh if obj], now)
    raise NodeObjectsError("per-node objects of %s kept changing under %d rounds of writes; re-run" % (
        cache, MAX_CONFLICT_ROUNDS))


def _get(kube, cache_kind, namespace, name):
    status, data = kube.request("GET", node_object_path(cache_kind, namespace, name), what="%s %s" % (
        NODE_KINDS[cache_kind][0], name))
    return None if status == 404 else data
