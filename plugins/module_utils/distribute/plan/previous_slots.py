# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make before break, pure: which slots of a previous digest the planner (plan.py) keeps, and why.

A node keeps, per namespace, the newest slot of a previous digest that was extracted until its new PVC is marked
extracted (the webhook hands that one out from then on); a serving PVC kept at a previous digest keeps every slot
of that digest in its namespace, since pods on any node read them through it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.marks import holds_extracted
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (
    job_condition,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.pod_use import holders_text


def was_extracted(members):
    """True when a slot's PVC is marked extracted at its own digest or its Job completed (the Job verified it)."""
    for obj in members:
        if obj["kind"] == "Job" and job_condition(obj, "Complete") is not None:
            return True
        if obj["kind"] == "PersistentVolumeClaim" and holds_extracted(obj):
            return True
    return False


def kept_groups(groups, current_extracted, serving_kept, namespaces):
    """The keys of the stale slot groups to keep.

    groups: {(namespace, node label, short digest): live objects} not claimed by the plan.
    current_extracted: {(namespace, node label): whether the node's current PVC is marked extracted} of the nodes
    that get the cache. serving_kept: {namespace: short digest its serving PVC keeps}. namespaces: the cache's.
    """
    newest = {}
    for key, members in groups.items():
        namespace, node, digest = key
        if serving_kept.get(namespace) == digest and namespace in namespaces:
            newest[key] = ("", key)
            continue
        if not node or current_extracted.get((namespace, node), True) or not was_extracted(members):
            continue
        created = max(obj["metadata"].get("creationTimestamp") or "" for obj in members)
        if newest.get((namespace, node), ("",))[0] <= created:
            newest[(namespace, node)] = (created, key)
    return {key for _created, key in newest.values()}


def held_digests(groups, current, users_of):
    """{node label: {short digest: pods using it}}: the previous digests of the cache each node keeps whatever this run
    plans, the count extract_limits.max_digests bounds with the current one. A previous digest counts when a pod uses
    it (it is never deleted under a pod), and per namespace the newest extracted one while the current digest is not
    marked extracted there (make before break keeps it, and a node whose new digest waits keeps it too). Any other
    previous slot is deleted by this run, so it does not count.

    groups: {(namespace, node label, short digest): live objects}; current: the current short digest; users_of(pvc):
    the pods using a PVC (directly or through the serving PVC).
    """
    held, newest = {}, {}
    marked = {(namespace, node) for (namespace, node, digest), members in groups.items()
              if digest == current and any(obj["kind"] == "PersistentVolumeClaim" and holds_extracted(obj)
                                           for obj in members)}
    for (namespace, node, digest), members in groups.items():
        if not node or digest == current:
            continue
        users = [user for obj in members if obj["kind"] == "PersistentVolumeClaim" for user in users_of(obj)]
        if users:
            held.setdefault(node, {}).setdefault(digest, []).extend(users)
        if (namespace, node) not in marked and was_extracted(members):
            created = max(obj["metadata"].get("creationTimestamp") or "" for obj in members)
            if newest.get((namespace, node), ("",))[0] <= created:
                newest[(namespace, node)] = (created, digest)
    for (_namespace, node), (_created, digest) in newest.items():
        held.setdefault(node, {}).setdefault(digest, [])
    return held


def over_limit_reason(spec, node, held, limit):
    """The status message of a node's current slot not planned because of extract_limits.max_digests."""
    pods = sorted({"%s/%s" % (user["namespace"], user["name"]) for users in held.values() for user in users})
    return ("digest %s waits on node %s: the node holds %d previous digest(s) of the cache (%s)%s and "
            "extract_limits.max_digests is %d; it is extracted once a previous one is released (its pods end)" % (
                short_digest(spec.digest), node, len(held), ", ".join(sorted(held)),
                "; used by %s" % ", ".join(pods) if pods else "", limit))


def kept_reason(spec, namespace, node, digest, users):
    """The status message of a kept slot (node '' for a serving PVC), with the pods that still read it."""
    current = short_digest(spec.digest)
    if node:
        reason = "kept until digest %s is extracted on node %s (make before break)" % (current, node)
    else:
        reason = ("serving PVC kept at digest %s until %s is extracted on every node in namespace %s (make before "
                  "break)" % (digest, current, namespace))
    return reason + ("; %s" % holders_text(users) if users else "")
