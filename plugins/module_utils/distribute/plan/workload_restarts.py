# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which running pods a rolling upgrade restarts, pure: the pods of the workloads upgradePolicy.restart names
that still mount a previous digest's PVC on their node (upgrade_policy.py; workload_restarts_runner.py evicts).

A node's previous digest stays on its per-node PVC (make before break) until the pods that mount it go: a pod
holds the PVC it was admitted with. So a pod on a node whose mounted PVC of the cache is of another digest than
the cache's current one reads the previous digest; once evicted, its controller makes a new pod, which the
webhook hands the node's extracted PVC of the new digest.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    DIGEST_LABEL,
    NODE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.pod_use import finished

# A Deployment's pods belong to its ReplicaSet "<deployment>-<pod-template-hash>".
TEMPLATE_HASH_LABEL = "pod-template-hash"


class OutdatedPod:
    """A pod to restart: namespace, name, node, and whether its deletion already began (an eviction or its
    controller); one that did is waited for, not evicted again."""

    __slots__ = ("name", "namespace", "node", "terminating")

    def __init__(self, namespace, name, node, terminating):
        self.namespace = namespace
        self.name = name
        self.node = node
        self.terminating = terminating

    def __repr__(self):
        return "%s/%s" % (self.namespace, self.name)


def pod_workload(pod):
    """(kind, name) of the workload that runs the pod, a Deployment through its ReplicaSet; None for a bare pod."""
    metadata = pod["metadata"]
    owner = next((ref for ref in metadata.get("ownerReferences") or [] if ref.get("controller")), None)
    if owner is None:
        return None
    template_hash = (metadata.get("labels") or {}).get(TEMPLATE_HASH_LABEL)
    suffix = "-%s" % template_hash
    if owner["kind"] == "ReplicaSet" and template_hash and owner["name"].endswith(suffix):
        return "Deployment", owner["name"][:-len(suffix)]
    return owner["kind"], owner["name"]


def _named(workloads, namespace, workload):
    """True when the pod's workload (kind, name) in namespace is one of upgradePolicy.restart's."""
    return any((w.kind, w.name) == workload and w.namespace in (None, namespace) for w in workloads)


def outdated_pods(workloads, digest, pvcs, pods):
    """{node: [OutdatedPod]}: the running or starting pods of the named workloads that mount one of the cache's
    per-node PVCs (pvcs: the cache's live PVCs) of another digest than `digest`, on that PVC's node.

    A ReplicaSet named in restart matches its own pods; a Deployment's pods match the Deployment's name."""
    if not workloads:
        return {}
    current = short_digest(digest)
    previous = {(pvc["metadata"].get("namespace"), pvc["metadata"]["name"]) for pvc in pvcs
                if (pvc["metadata"].get("labels") or {}).get(NODE_LABEL)
                and (pvc["metadata"].get("labels") or {}).get(DIGEST_LABEL) not in (None, current)}
    by_node = {}
    for pod in pods:
        metadata, spec = pod["metadata"], pod.get("spec") or {}
        namespace, node = metadata.get("namespace"), spec.get("nodeName")
        if not node or finished(pod):
            continue
        claims = {(namespace, (volume.get("persistentVolumeClaim") or {}).get("claimName"))
                  for volume in spec.get("volumes") or []}
        if not claims & previous:
            continue
        workload = pod_workload(pod)
        if workload and _named(workloads, namespace, workload):
            by_node.setdefault(node, []).append(
                OutdatedPod(namespace, metadata["name"], node, bool(metadata.get("deletionTimestamp"))))
    return {node: sorted(found, key=repr) for node, found in by_node.items()}


def evictions_due(outdated, restart_nodes):
    """The pods to evict now: on the nodes the WavePlan restarts (their new cache is Extracted), not terminating."""
    return [pod for node in sorted(restart_nodes) for pod in outdated.get(node, []) if not pod.terminating]
