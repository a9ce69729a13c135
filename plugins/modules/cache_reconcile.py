#!/usr/bin/python
# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cache_reconcile
short_description: Reconcile a GKMCache or ClusterGKMCache and write its status
version_added: "0.1.0"
description:
  - Reads one C(GKMCache) (namespaced) or C(ClusterGKMCache) (cluster-scoped) from the cluster, distributes it
    exactly as M(gkm.cluster.cache_distribute) would with the resource's spec (C(image), C(accessModes),
    C(storageClassName), C(podTemplate), C(workloadNamespaces)) and this module's distribution options, and
    writes the outcome to the resource's status subresource, so C(kubectl get gkmcache) shows GKM's columns.
  - One module call reconciles one cache, whatever the number of nodes and namespaces.
  - The per-node state goes to one C(GKMCacheNode) (in the cache's namespace) or C(ClusterGKMCacheNode) per node,
    named as the node - GKM's kinds - which caches share; a run writes only its own cache's entry, as merge
    patches of what changed guarded by the resourceVersion read (a concurrent change is read and planned again).
    Every GPU node that does not get the cache has an entry with C(reason) (C(NotSelected), C(NoGPU),
    C(GPULabelsUnusable), C(Incompatible), C(UntoleratedTaint)), the message and the untolerated taints.
  - The resource's own status keeps GKM's counts, the phase, the conditions, the ten worst problems with their
    total (C(problems), C(problemCnt)) and one line per reason nodes do not get the cache (C(excludedReasons),
    C(nodeExcludedCnt)), so its size does not grow with the cluster. With C(spec.upgradePolicy) it also has
    C(upgrade) (the target digest, the phase C(Progressing), C(Paused), C(Stopped) or C(Complete), the counts of
    nodes per state) and the condition C(Upgraded). In imageVolume mode it has C(imageVolume) - the pinned
    C(reference), the nodes whose kubelet reports the image pulled and the pods mounting it (C(pulledNodes), C(pods),
    at most ten each, with C(pulledNodeCnt) and C(podCnt)).
  - A resource without C(spec.mountMode) gets O(mount_mode).
  - A failed extraction is recorded on its PVC (label C(gkm.io/extraction-failed)), so it outlives the Job's TTL
    and the node is not retried unasked; deleting that PVC (or changing the Job's template) is the retry.
  - The status and the per-node objects are written only when they say something new, so a run that changes
    nothing writes nothing.
  - With O(state=absent) the cache's distributed objects are removed; the resource itself is left to the caller.
  - Check mode is a server-side dry run and reports the plan; no status and no per-node object is written (their
    planned writes are counted in RV(node_objects); with C(--diff), the changed per-node entries are shown, at most
    20 nodes).
  - With O(state=absent) the cache's entries leave the per-node objects (an object left empty is deleted).
  - A resource being deleted (a deletion timestamp, held by the operator's finalizer C(gkm.io/cache-cleanup)) is never
    distributed again, since its namespace may be terminating. With O(state=present) its objects are removed as with
    O(state=absent), then the finalizer is taken off (not in check mode), so the deletion completes without the
    operator. With O(state=absent), as the operator's finalizer runs it, the finalizer is left to the caller.
author:
  - gkm.cluster contributors (@gkm-cluster)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gkm.cluster.registry
  - gkm.cluster.distribution
  - gkm.cluster.cluster_access
options:
  kind:
    description: Kind of the cache resource.
    type: str
    choices: [GKMCache, ClusterGKMCache]
    default: GKMCache
  name:
    description: Name of the cache resource.
    type: str
    required: true
  namespace:
    description: Namespace of a C(GKMCache). Not used for a C(ClusterGKMCache).
    type: str
  definition:
    description:
      - The declared manifest of the resource (same kind, name and namespace). Its spec is distributed instead of
        the live resource's, so a check-mode run shows the plan for a changed or new cache before it is applied.
      - Without it the resource must exist, and its live spec is used.
      - The status subresource is only written when the resource exists.
    type: dict
requirements:
  - oras
notes:
  - The objects are those of M(gkm.cluster.cache_distribute) - the extraction Jobs meet Pod Security C(restricted),
    or C(baseline) with the extractor as root (O(set_volume_owner)), and registry credentials and CA reach them in a
    Secret - and the per-node objects' conditions carry the same reason and message per namespace and node.
  - The objects are labelled C(gkm.io/cache-kind) with the resource's kind, and those the garbage collector may
    remove carry an owner reference to the resource - PVCs, Jobs and Secrets; never PVs (a GKMCache, namespaced,
    cannot own cluster-scoped objects, and a ClusterGKMCache's collected PV would go before the scrub removed its
    directory from the node's disk). The gkm.cluster.caches role removes what is left of a deleted resource at
    its next run.
  - A ReadOnlyMany cache names its PVC after itself, so a C(GKMCache) and a C(ClusterGKMCache) of one name, both
    ReadOnlyMany, whose namespaces meet want one PVC. The one created later (C(creationTimestamp), then kind and
    name) is refused before anything is written, naming the other; so is a cache whose PVC name is taken by an
    object of no rival resource.
  - Every outcome reaches the status. A refused reconcile (invalid image reference, missing tag, unreachable
    registry, missing workload namespace, an invalid C(podTemplate), an object the API server refuses in its dry run,
    any other refusal) writes phase C(Error), a C(Ready=False) condition and GKM's C(Error) (or C(NoNamespace))
    condition whose message names the resource's own field (for example C(spec.podTemplate.spec.tolerations[0].value))
    and the fix, zeroes the counts and clears C(problems) and C(excludedReasons), so nothing of an earlier run
    stays; the task still fails.
  - A cache no node can hold yet is C(Pending), with the reasons and fixes in the C(Ready) condition, and the task
    does not fail. C(status.excludedReasons) says why nodes do not get the cache; the webhook's denials quote the
    reason in the node's per-node object.
  - C(kubectl get gkmcache -o wide) shows the C(Ready) condition's message in the MESSAGE column.
  - A resource labelled C(gkm.io/signature-format) (V(cosign-v2) or V(cosign-v3)) gets the condition
    C(SignatureVerified). With O(signature_public_key) its extraction Jobs verify the signature in that format -
    C(True) with reason C(VerifiedByExtraction) once every volume is extracted, C(Unknown) (C(VerificationPending))
    before, C(False) (C(VerificationFailed)) with the Job's message when one refused the image (its node's entry is
    an C(Error), reason C(SignatureNotVerified)). Without the key it is C(Unknown) (C(ReportedByKyverno))
    when the annotation C(kyverno.io/verify-images) records a pass - a note, never C(True), since whoever may edit the
    resource can write it - otherwise C(False) (C(NotVerified)) saying that nothing checked the image, and the task
    warns.
  - With C(spec.mountMode=imageVolume) no Job runs, so with the key the module verifies the resolved digest's
    signature before it records C(status.resolvedDigest) - C(True) with reason C(VerifiedByReconcile); a refusal
    fails the task with phase C(Error), reason C(SignatureNotVerified), C(SignatureVerified) C(False)
    (C(VerificationFailed)) naming the image, the digest, why and the fix, and C(resolvedDigest) keeps the previous
    digest only if its signature still verifies, else it is empty.
seealso:
  - module: gkm.cluster.cache_distribute
  - module: gkm.cluster.cache_info
"""

EXAMPLES = r"""
- name: Reconcile a namespaced cache on the simulated cluster and wait for its extractions
  gkm.cluster.cache_reconcile:
    kind: GKMCache
    name: vector-add
    namespace: team-a
    extract_image: registry.example.com:5000/gkm-cluster/tools:0.1.0
    registry_plain_http: true
    wait: true

- name: In check mode, plan a changed image before the changed resource is applied
  gkm.cluster.cache_reconcile:
    kind: GKMCache
    name: vector-add
    namespace: team-a
    definition:
      apiVersion: gkm.io/v1alpha1
      kind: GKMCache
      metadata:
        name: vector-add
        namespace: team-a
      spec:
        image: registry.example.com/caches/vector-add:v2
  check_mode: true

- name: Remove the objects of a cluster cache
  gkm.cluster.cache_reconcile:
    kind: ClusterGKMCache
    name: llama
    state: absent
"""

RETURN = r"""
resource:
  description: The reconciled resource and the status written to it.
  returned: success
  type: dict
  sample: {"kind": "GKMCache", "name": "vector-add", "namespace": "team-a", "found": true,
           "status": {"phase": "Extracted", "nodeCnt": 3, "resolvedDigest": "sha256:..."}}
  contains:
    deleting:
      description: The resource has a deletion timestamp, so its objects were removed instead of distributed.
      returned: when O(state=present) found the resource being deleted
      type: bool
    finalizer_released:
      description: This run took the finalizer C(gkm.io/cache-cleanup) off the resource being deleted.
      returned: when it did
      type: bool
status_changed:
  description: Whether the status subresource was (or, in check mode, would be) updated.
  returned: when state is present
  type: bool
cache:
  description: The cache as distributed (as M(gkm.cluster.cache_distribute) returns it).
  returned: success
  type: dict
plan:
  description: What this run wrote (or, in check mode, would write); see M(gkm.cluster.cache_distribute).
  returned: success
  type: dict
status:
  description:
    - GKM's counts, the phase and the worst problems, or with O(node_details) the phase per namespace and node; see
      M(gkm.cluster.cache_distribute).
  returned: success
  type: dict
eligible_nodes:
  description: Nodes that get the cache.
  returned: success, with node_details
  type: list
  elements: str
excluded_nodes:
  description: Every other node with the reasons.
  returned: success, with node_details
  type: dict
excluded_reasons:
  description: One line per distinct reason nodes do not get the cache; see M(gkm.cluster.cache_distribute).
  returned: success, without node_details
  type: list
  elements: dict
node_objects:
  description: Writes to the per-node objects (planned ones in check mode).
  returned: success
  type: dict
  contains:
    created:
      description: Objects created (a create and a status patch each).
      type: int
    patched:
      description: Status patches.
      type: int
    deleted:
      description: Objects deleted because no cache is left on them.
      type: int
    conflicts:
      description: Writes refused because the object changed meanwhile, then read and planned again.
      type: int
node_labels:
  description:
    - The node readiness labels this run wrote, C(node) and C(value) (null when removed). A ReadWriteOnce cache
      labels each node whose current slots are all Extracted with C(cache.gkm.io/<cache namespace>.<cache>)
      (C(cache.gkm.io/<cache>) for a cluster cache; hashed past 63 characters) set to the short digest, and removes
      it when that no longer holds. Empty when every label already matched.
  returned: success
  type: list
  elements: dict
rollout:
  description:
    - The rolling upgrade of a ReadWriteOnce cache whose resource sets C(spec.upgradePolicy) (docs/upgrades.md) - its
      C(digest), C(policy), C(budget) (nodes upgrading at once), C(active), C(paused), C(stopped), C(complete),
      the nodes per state (C(pending), C(upgrading), C(upgraded), C(failed), C(rolled-back)), C(starting), the
      C(waves) still to come, C(moving) (a later run can move it on - neither complete, stopped nor paused, some node
      upgrading or pending; the operator reconciles the cache again soon while it is), C(message), and C(labels),
      the node labels C(upgrade.gkm.io/<cache namespace>.<cache>) this run wrote (C(node), C(value), null when
      removed).
    - With C(spec.upgradePolicy.restart) - C(restart) (nodes whose new digest is Extracted and whose named workloads
      still run on the previous one), C(evict) (their pods due for eviction at the plan's time, C(namespace/name)),
      C(evicted) (pods this run evicted) and C(eviction_refused) (C(pod), C(message)) for pods a
      PodDisruptionBudget kept at the run's end.
  returned: success, when the resource sets spec.upgradePolicy
  type: dict
scrub:
  description: The node disks scrubbed before hostPath PVs were deleted (see O(host_path_root)).
  returned: success
  type: dict
  contains:
    nodes:
      description:
        - One entry per scrub Job - C(node), C(root), C(paths) (relative to the root), C(pvs), C(job) and C(result)
          (C(removed), or C(would remove) in check mode), or C(error) with the Job's termination message.
      type: list
      elements: dict
api_requests:
  description: API requests made by the distribution.
  returned: success
  type: int
api_writes:
  description: Writes made by the distribution and to the per-node objects (the status write is not counted).
  returned: success
  type: int
timings:
  description:
    - Seconds per phase of the run, to find where a run (a rerun that changes nothing above all) spends its time.
    - C(startup) is the module process's age when its work began (interpreter, imports, argument checks; Linux
      only, else null) and C(work) the whole work after it; the phases inside C(work) are C(resource) (reading the
      resource), C(resolve) (the image's digest and labels from the registry), C(read) (the cluster's LISTs),
      C(plan), C(validate) (the dry runs), C(write), C(wait), C(status), C(node_objects), C(node_labels) and
      C(resource_status) (writing the resource's status). A phase that did not run is missing.
  returned: success
  type: dict
  sample: {"startup": 0.82, "work": 0.41, "resource": 0.01, "resolve": 0.02, "read": 0.21, "plan": 0.09}
"""

from ansible_collections.gkm.cluster.plugins.module_utils.common.module import run_module  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.args import DISTRIBUTION_ARG_SPEC  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.tasks import cache_reconcile  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.oci.args import (  # noqa: E402
    REGISTRY_MUTUALLY_EXCLUSIVE,
    REGISTRY_REQUIRED_BY,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import ORAS_IMPORT_ERROR  # noqa: E402

ARGUMENT_SPEC = dict(
    DISTRIBUTION_ARG_SPEC,
    kind=dict(type="str", choices=["GKMCache", "ClusterGKMCache"], default="GKMCache"),
    name=dict(type="str", required=True),
    namespace=dict(type="str"),
    definition=dict(type="dict"),
)


def main():
    run_module(ARGUMENT_SPEC, cache_reconcile, libraries=[("oras", ORAS_IMPORT_ERROR)],
               mutually_exclusive=REGISTRY_MUTUALLY_EXCLUSIVE, required_by=REGISTRY_REQUIRED_BY,
               required_if=[("kind", "GKMCache", ("namespace",))])


if __name__ == "__main__":
    main()
