# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # Options of plugins/module_utils/distribute/args.py DISTRIBUTION_ARG_SPEC besides the registry's.
    DOCUMENTATION = r"""
options:
  node_selector:
    description: Labels a node must carry to get the cache.
    type: dict
  compatibility:
    description:
      - What to do with GPU nodes whose C(gkm.io/gpu-*) labels match none of the image's targets. C(skip) leaves
        them out and reports them C(Incompatible), C(fail) stops before any change, C(ignore) skips the check
        (and includes nodes without GPU labels).
    type: str
    choices: [skip, fail, ignore]
    default: skip
  create_namespaces:
    description: Create missing namespaces instead of failing.
    type: bool
    default: false
  create_pvs:
    description:
      - Create hostPath PersistentVolumes for the PVCs. C(auto) does when the storage class has no provisioner
        (as on kind); each cache, namespace and digest gets its own directory under O(host_path_root).
    type: str
    choices: [auto, always, never]
    default: auto
  host_path_read_only_many:
    description:
      - Allow ReadOnlyMany caches on the hostPath PVs of O(create_pvs). A hostPath PV is a directory on whichever node
        mounts it, so the cache's one extraction Job fills one node's and pods on every other node mount an empty
        directory; such a cache is therefore refused, with the fix, unless this is true.
      - Only for a cluster of one node, or where every pod that mounts the cache is pinned to the node its Job ran on.
    type: bool
    default: false
  host_path_root:
    description:
      - Directory on the nodes under which hostPath PVs keep the extracted caches.
      - Before a hostPath PV of ours is deleted (an old digest, a node or namespace no longer served, O(state=absent)),
        its directory is removed from the node's disk. One Job per node, pinned to it, runs the tools image's scrub
        program on a PV of its own whose hostPath is this root, and removes exactly the slot directories being
        deleted, without following symbolic links, then their empty parents up to, not including, the root. A
        ReadOnlyMany PV has no node affinity, so its directory is removed on every node.
      - The scrub Job, its PVC and its PV's claim live in O(system_namespace), under a name with a random part, and
        the PV is bound to that PVC's uid, so no tenant can claim or mount the root. The Job runs as uid 0 with every
        capability dropped except DAC_OVERRIDE (the files belong to the extraction uid 1000, their parents to root),
        so that namespace must admit Pod Security C(baseline). A PV whose scrub fails or does not finish in
        O(wait_timeout) is not deleted, and the run fails with the Job's termination message; a rerun tries again.
        A node that no longer exists cannot be scrubbed; a warning names it and the path left. Check mode creates
        no scrub Job; RV(scrub) says what would be removed.
    type: str
    default: /var/lib/gkm-cluster/caches
  system_namespace:
    description:
      - The collection's own namespace (the gkm role's C(gkm_namespace)), where the scrub Jobs and their PVCs run
        (see O(host_path_root)); tenants need no right there.
      - Created when missing, labelled as ours and enforcing Pod Security C(baseline); an existing one keeps its
        labels and must admit C(baseline). While it terminates, no scrub runs and the PVs stay.
    type: str
    default: gkm-system
  system_namespace_jobs:
    description:
      - Run the extraction Jobs of hostPath slots (see O(create_pvs)) in O(system_namespace), with their registry
        Secret (Docker config, CA, C(cosign.pub)), so that no tenant's namespace holds the admin's credentials or key
        or a Job that mounts them.
      - One Job per node and digest extracts the cache into the node's store, C(<root>/<cache namespace or
        _cluster>/<cache>/_store/<digest>), which every workload namespace's slot PV (and serving PV) of that node
        points at, so a cache over several namespaces takes one Job and one copy on disk per node. The Job writes
        through a PVC of that namespace and a PV of the store bound to that PVC's uid; once the slots' PVCs are
        marked extracted, the Job and both are deleted (its finished pod would hold that PVC until the Job's TTL). A
        namespace added later gets its slots marked at once; the store's directory is scrubbed once no PV points at
        it. Turning it on moves the slot PVs to the store with make before break.
      - Jobs and Secrets a cache has in its workload namespaces from before are deleted (a completed Job still counts
        as the slot's extraction). A provisioned volume can only be mounted through the slot's own PVC, so those Jobs
        stay in the workload namespace.
      - Set C(false) for the layout before the store (a Job, its Secret and a directory per node and workload
        namespace, all in that namespace); turning it back on moves the slot PVs to the store with make before break.
        docs/security.md, classes 1, 3, 4 and 12.
    type: bool
    default: true
  serving_pvc:
    description:
      - For a ReadWriteOnce cache whose PVs this collection creates (see O(create_pvs)), also create in each namespace
        a PVC named exactly as the cache, bound to a hostPath PV without node affinity at the directory every node's
        extraction publishes (C(<host_path_root>/<cache namespace or _cluster>/<cache>/<namespace>/<digest>/cache)).
        Any pod that names the cache in C(claimName) then mounts its own node's copy; on a node without the cache the
        kubelet refuses the mount (hostPath type C(Directory)) until it is extracted.
      - A new digest replaces that PVC at once while no pod mounts it; a mounted one is kept, reported Outdated, and
        replaced by the first run that finds it unused. A slot a pod reads through it is never pruned under the pod.
      - Set C(false) to leave it out (only the per-node PVCs, for the C(gkm.io/pvc-mutation) webhook).
    type: bool
    default: true
  mount_mode:
    description:
      - How pods get the cache. V(PVC) - extraction Jobs fill PVCs (per node, or one shared with C(ReadOnlyMany)).
        V(imageVolume) - nothing is extracted and no PVC, PV or Job is made; pods annotated C(gkm.io/cache) get the
        digest-pinned image as a Kubernetes image volume from the webhook, and the kubelet pulls it (containerd >= 2.1
        or CRI-O >= 1.31 with the C(ImageVolume) feature; docs/modes/image-volume.md). O(extract_image) is not needed.
      - With gkm.cluster.cache_reconcile this is the default of the resources that do not set C(spec.mountMode); a
        resource's C(spec.mountMode) wins.
    type: str
    choices: [PVC, imageVolume]
    default: PVC
  set_volume_owner:
    description:
      - Runs the extraction container as uid 0 with every capability dropped, instead of uid 1000. fsGroup does not
        apply to hostPath volumes, whose directories the kubelet creates as root; root without capabilities writes
        only what root owns, and the tree it publishes (no write bit) is root's, so no other uid changes it.
      - C(auto) does so when this collection creates hostPath PVs (see O(create_pvs)); C(always) and C(never) force
        it. Leave it out for storage classes whose volumes honour fsGroup.
      - With it the Jobs' pods need the C(baseline) Pod Security level, without it they meet C(restricted).
    type: str
    choices: [auto, always, never]
    default: auto
  extract_image:
    description:
      - The gkm.cluster tools image whose cache_extract command the Jobs run (C(make images REGISTRY=...) builds and
        pushes it). Required with O(state=present), unless O(mount_mode=imageVolume).
      - If a node cannot pull it, that node's entry is an C(Error) with reason C(ToolsImageNotPullable) at once.
      - The scrub Jobs run it too; with O(state=absent) and no O(extract_image), the image of an extraction Job being
        deleted is used, and without either the directories stay on the nodes (a warning names them).
    type: str
  signature_public_key:
    description:
      - Cosign public key (PEM text, or a path to a PEM file on the controller) the extraction Jobs verify the image's
        signature with before they extract it. The signature must name the exact digest the Job extracts.
      - With gkm.cluster.cache_reconcile only a resource labelled C(gkm.io/signature-format) is verified (every one
        with O(signature_required)), in the format the label names (V(cosign-v2) - the C(sha256-<digest>.sig) tag,
        V(cosign-v3) - a sigstore bundle referrer);
        its condition C(SignatureVerified) says who checked it. This is the only check a ClusterGKMCache gets (Kyverno
        does not see cluster-scoped resources). gkm.cluster.cache_distribute verifies every Job, either format.
      - The key is put in the Jobs' Secret beside the registry credentials, per namespace. A Job whose check fails
        extracts nothing and fails at once; its entry is an C(Error) with reason C(SignatureNotVerified) and the
        extractor's message.
      - Giving, changing or removing the key extracts the verified caches again (data checked with another key, or
        not at all, is not what is asked for); volumes pods mount are kept until unused, like an old digest's.
      - A labelled resource with C(spec.mountMode=imageVolume) has no Job, so gkm.cluster.cache_reconcile verifies the
        resolved digest itself, with the extractor's check, before it records it in C(status.resolvedDigest) (what
        pods mount) - C(SignatureVerified) C(True) with reason C(VerifiedByReconcile), or the task fails with phase
        C(Error), C(SignatureVerified) C(False) (C(VerificationFailed)) and the refused digest not recorded (the
        previous digest stays if it still verifies).
    type: str
  signature_required:
    description:
      - Require a verified signature of every cache, whatever its C(gkm.io/signature-format) label says. The label is
        the cache owner's and only chooses the format; an unlabelled cache is checked in either format (cosign v3,
        then v2). The caches role sets it from C(caches_require_signature) (all caches, or those of the namespaces
        listed).
      - Without O(signature_public_key) a required check fails the cache at once (phase C(Error)); nothing is
        distributed unchecked.
    type: bool
    default: false
  job_limits:
    description: Bounds of the extraction Jobs.
    type: dict
    suboptions:
      backoff_limit:
        description: Retries before a Job fails.
        type: int
        default: 2
      active_deadline_seconds:
        description: Time a Job may run in total.
        type: int
        default: 900
      ttl_seconds_after_finished:
        description:
          - Time a finished Job is kept. Finished extractions, and failed ones, are also recorded on the PVC, so a
            Job removed by this TTL is not run again. A failed one stays Error, its PVC labelled
            C(gkm.io/extraction-failed), until that PVC is deleted (the retry), the Job's template changes or the
            digest changes.
        type: int
        default: 86400
  extract_limits:
    description:
      - What one cache may cost a node, the same for every cache (the caches role sets it from
        C(caches_extract_limits)). A tenant's cache over a limit is refused, not extracted - before any object is
        written when the image's C(cache-size-bytes) label already says so, otherwise by its extraction Jobs, which
        stop at the limit and leave nothing behind. Unset limits are the extractor's own (those of
        M(gkm.cluster.cache_extract)).
    type: dict
    suboptions:
      max_bytes:
        description: Bytes a cache may hold unpacked (the extractor's default is 8 GiB).
        type: int
      max_files:
        description: Files and links a cache may hold (the extractor's default is 100000).
        type: int
      max_expansion_ratio:
        description: Unpacked bytes per compressed byte of the layer (the extractor's default is 250).
        type: int
      max_digests:
        description:
          - Digests of one cache a node holds at once, the current one included (at least 2; no limit when unset).
            Make before break keeps a node's previous digest until the new one is extracted there, and a digest a pod
            still uses is never deleted, so pods that stay on old digests keep their directories on the node.
          - A node that already holds O(extract_limits.max_digests) previous digests gets no slot of a new digest (it
            would be one over) - nothing is written there and nothing deleted under a pod - and keeps serving the
            digest it has.
            Its status entry is C(Pending), reason C(DigestLimit), naming the digests held, the pods using them and
            the limit; a later run extracts the new digest once those pods end. A slot already there is never removed
            for the limit. A rolling upgrade's wave with such a node waits for it.
        type: int
  state:
    description: C(present) distributes the cache; C(absent) removes every object of it.
    type: str
    choices: [present, absent]
    default: present
  prune:
    description: Delete objects no longer desired (old digests, nodes that left, namespaces removed).
    type: bool
    default: true
  force:
    description: Delete PVCs even while pods mount them (they stay Terminating until those pods end).
    type: bool
    default: false
  wait:
    description:
      - Wait until every extraction Job has finished (or failed), then record finished extractions on the PVCs.
      - When no node is eligible nothing is waited for - the status is C(Pending) with the reasons and fixes
        (C(status.unplaced)), and the run does not fail.
      - A rolling upgrade (a resource's C(spec.upgradePolicy), M(gkm.cluster.cache_reconcile)) is waited for wave
        after wave. One still moving at O(wait_timeout) ends the wait with a warning instead of failing - every node
        that had a verified digest still serves it, and the next run goes on where this one stopped.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds to wait for extractions.
      - Scrub Jobs and the deletion of replaced objects wait this long too, and at least 60 seconds.
    type: int
    default: 300
  concurrency:
    description: Parallel API requests.
    type: int
    default: 16
  node_details:
    description:
      - Return the per-node lists - C(status.entries) (one per namespace and node), C(eligible_nodes) and
        C(excluded_nodes) - and every unschedulable Job.
      - Without it the result keeps the counts, the phase, at most 10 of the worst problems (C(status.problems),
        with C(status.problem_count)), at most 10 unschedulable Jobs and one line per reason nodes do not get the
        cache (C(excluded_reasons)), so its size does not grow with the cluster; the lists cost the Ansible
        controller seconds at thousands of nodes. M(gkm.cluster.cache_info) reports every node's state.
    type: bool
    default: false
"""
