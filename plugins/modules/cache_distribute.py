#!/usr/bin/python
# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cache_distribute
short_description: Distribute a GPU kernel cache to PVCs on Kubernetes, per node or shared
version_added: "0.1.0"
description:
  - Turns one cache's desired state (GKM's C(GKMCache) or C(ClusterGKMCache) spec) into PersistentVolumeClaims,
    hostPath PersistentVolumes where the storage class has no provisioner, extraction Jobs and, when the registry
    needs credentials or a CA, a registry Secret per namespace, and keeps them converged on every later run.
  - With C(ReadOnlyMany) in O(access_modes), one PVC named as the cache per namespace; otherwise one PVC and one
    Job pinned to each eligible node, per namespace.
  - Names are deterministic (cache, namespace, node and digest), objects are found again with one label-selected
    LIST per kind, and writes are server-side apply with the field manager C(gkm.cluster), sent concurrently.
  - Objects of an old digest, a node that left or a namespace no longer listed are pruned, except a PVC that a
    running pod still mounts; it is reported as C(Outdated) and pruned by a later run once unused.
  - Check mode is a server-side dry run and reports the plan; diff mode shows it per object.
author:
  - gkm.cluster contributors (@gkm-cluster)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gkm.cluster.registry
  - gkm.cluster.distribution
  - gkm.cluster.cluster_access
options:
  name:
    description: Cache name, a DNS-1123 label; ReadOnlyMany PVCs carry this name, so workloads use it as claimName.
    type: str
    required: true
  scope:
    description:
      - C(namespaced) for a GKMCache living in O(namespace), C(cluster) for a ClusterGKMCache serving
        O(workload_namespaces).
    type: str
    choices: [namespaced, cluster]
    default: namespaced
  namespace:
    description: Namespace of a namespaced cache. Not allowed with O(scope=cluster).
    type: str
  workload_namespaces:
    description: Namespaces whose pods mount a cluster cache. Required with O(scope=cluster) and O(state=present).
    type: list
    elements: str
  image:
    description:
      - Kernel-cache image, by tag or digest, with its registry host. A tag is resolved to a digest on every run
        and all objects are pinned to that digest. Required with O(state=present).
    type: str
  access_modes:
    description: PVC access modes. Include C(ReadOnlyMany) when the storage backend shares one volume across nodes.
    type: list
    elements: str
    choices: [ReadWriteOnce, ReadOnlyMany, ReadWriteMany, ReadWriteOncePod]
    default: [ReadWriteOnce]
  storage_class_name:
    description: Storage class of the PVCs; the cluster's default class when omitted.
    type: str
  size:
    description:
      - PVC size as a Kubernetes quantity. Defaults to the image's C(cache-size-bytes) label times 1.5 plus 32Mi.
    type: str
  pod_template:
    description:
      - GKM's C(podTemplate) for the extraction Jobs' pods. C(metadata) may hold C(labels); C(spec) may hold
        C(nodeSelector), C(tolerations) and C(affinity).
      - C(metadata.annotations) and C(spec.priorityClassName), which GKM's API has, are refused with the field named,
        since the Jobs may run in the system namespace (O(system_namespace_jobs)), where they could reach its admission
        webhooks or preempt its pods.
      - C(metadata.labels) is refused with the field named when the Jobs run in the system namespace (hostPath slots
        with O(system_namespace_jobs)), where a label could match a selector of a Service, PodDisruptionBudget or
        NetworkPolicy there; elsewhere the labels are copied to the Jobs' pods.
      - C(spec.nodeSelector) is merged with the per-node pin, never replacing it.
    type: dict
requirements:
  - oras
notes:
  - The extraction container runs under the C(restricted) Pod Security profile (uid 1000, fsGroup 1000, no
    capabilities, read-only root filesystem, no service account token); a pinned Job gets its node's GPUs as
    arguments and never calls the API server.
  - Directories of hostPath PVs are created by the kubelet as root and do not honour fsGroup, so Jobs filling the
    hostPath PVs this module creates run the extractor as uid 0 with every capability dropped
    (O(set_volume_owner)), so the tree it publishes (no write bit) is root's. Such pods need the C(baseline) Pod
    Security level; without it they meet C(restricted).
  - Registry credentials (O(registry_username)/O(registry_password) or the image registry's inline entry of
    O(registry_docker_config)) and O(registry_ca_file) reach the Jobs through a Secret per cache and namespace,
    mounted read-only; they never appear in a Job spec, in the diff (values are redacted) or in a log.
  - Per node, failures are reported with a reason, the message and the fix; a tools image that cannot be pulled
    is an Error at once, without waiting for O(wait_timeout).
seealso:
  - module: gkm.cluster.cache_info
  - module: gkm.cluster.cache_extract
"""

EXAMPLES = r"""
- name: Per-node cache for one namespace, tolerating the GPU taint
  gkm.cluster.cache_distribute:
    name: vector-add
    namespace: team-a
    image: quay.io/gkm/cache-examples:vector-add-cache-rocm-v2
    extract_image: quay.io/gkm/gkm-cluster-tools:0.1.0
    pod_template:
      spec:
        tolerations:
          - key: gpu
            operator: Exists
            effect: NoSchedule
    wait: true

- name: Cluster cache on a ReadOnlyMany storage class, shared by two namespaces
  gkm.cluster.cache_distribute:
    name: vllm-llama
    scope: cluster
    workload_namespaces: [serving-a, serving-b]
    access_modes: [ReadWriteOnce, ReadOnlyMany]
    storage_class_name: cephfs
    image: registry.example.com/caches/vllm-llama:2026-08
    extract_image: registry.example.com/gkm/tools:0.1.0

- name: Remove a cache, keeping PVCs still mounted
  gkm.cluster.cache_distribute:
    name: vector-add
    namespace: team-a
    state: absent
"""

RETURN = r"""
cache:
  description:
    - The cache as distributed. C(signature_check) is what its Jobs verify the signature with (format and key
      digest, for example C(v3 sha256:...)), or null when they do not verify; in imageVolume mode, what the run
      verified the digest with before recording it.
    - C(mount_mode) is O(mount_mode) (for a cache resource, its C(spec.mountMode) when set); with C(imageVolume) no PVC,
      PV or Job is planned. C(targets) are the image's GPU targets.
    - C(kernel_overlay) says whether pods given the cache by annotation get the kernel overlay (a Triton image);
      C(variable) names the variable the webhook sets to it, or is null with C(reason) saying why not.
  returned: success
  type: dict
  sample: {"name": "vector-add", "namespace": "team-a", "scope": "namespaced", "digest": "sha256:...",
           "image": "registry/caches/vector-add@sha256:...", "size": "33Mi", "access_modes": ["ReadWriteOnce"],
           "state": "present", "signature_check": null, "mount_mode": "PVC",
           "targets": [{"backend": "hip", "arch": "gfx90a", "warp_size": 64}],
           "kernel_overlay": {"variable": "TRITON_CACHE_DIR", "reason": null}}
plan:
  description: What this run wrote (or, in check mode, would write).
  returned: success
  type: dict
  contains:
    summary:
      description: Counts per action (create, update, replace, delete) and kind.
      type: dict
      sample: {"create": {"PersistentVolumeClaim": 3, "PersistentVolume": 3, "Job": 3, "Secret": 1}}
    actions:
      description: One entry per object with action, kind, namespace, name and reason.
      type: list
      elements: dict
status:
  description:
    - GKM's counts and the phase, computed; the worst problems, or with O(node_details) the phase per namespace and
      node.
  returned: success
  type: dict
  contains:
    phase:
      description: Error, Pending, Outdated, Running or Extracted, in that precedence; Resolved in imageVolume mode.
      type: str
    counts:
      description: nodes, node_in_use, node_not_in_use, node_error, pod_running, pod_outdated.
      type: dict
    entries:
      description:
        - One per namespace and node (node empty for ReadOnlyMany) with pvc, job, digest, phase (Pending,
          Extracting, Extracted, Error, Incompatible, Outdated), message, fix and mounted_by.
        - When something is wrong, reason says what - C(ToolsImageNotPullable), C(ExtractionRefused) (the
          extractor's own message), C(VolumeNotWritable), C(RegistryUnreachable),
          C(Unschedulable), or the failed Job's condition reason - and message names the node.
      type: list
      elements: dict
      returned: with node_details
    problems:
      description:
        - At most 10 entries (the fields of RV(status.entries)) that are wrong - errors first, then stuck slots, then
          old content kept for pods; within each, every distinct reason once before any repeats.
      type: list
      elements: dict
      returned: without node_details
    problem_count:
      description: How many entries are wrong in all.
      type: int
      returned: without node_details
    unschedulable:
      description:
        - Jobs whose pod the scheduler cannot place, with its message and the option that would fix it; at most 10
          without O(node_details).
      type: list
      elements: dict
    unschedulable_count:
      description: How many Jobs the scheduler cannot place in all.
      type: int
      returned: without node_details
    serving:
      description:
        - The serving PVCs of a ReadWriteOnce cache at the current digest, one per namespace - namespace, pvc (the
          cache's name), pv, digest and mounted_by (the pods using it). See O(serving_pvc).
      type: list
      elements: dict
      returned: when the cache has serving PVCs
    image_volume:
      description:
        - In imageVolume mode, reference (the digest-pinned image pods mount) and compatible_nodes (how many nodes
          have a GPU it fits).
        - pulled_nodes - the nodes whose kubelet reports the image pulled (Node C(status.images), which the kubelet
          refreshes every 30 s and caps at its largest 50 images by default) - and pods - the unfinished pods of the
          cache's namespaces whose image volume mounts the image, each with namespace, name, node, phase and digest;
          a digest other than the cache's is an older one (the pod counts in C(pod_outdated) while it runs). At most
          10 of each without O(node_details); pulled_node_count and pod_count count them all.
        - The counts follow GKM's columns - node_in_use are the nodes where a running pod mounts the current digest,
          node_not_in_use the nodes that pulled it without such a pod, pod_running and pod_outdated the running pods on
          the current and on an older digest; node_error is 0.
      type: dict
      returned: for a cache whose mount mode is imageVolume
    unplaced:
      description:
        - Present when no node is eligible for the cache yet - the nodes grouped by reason, each with the option that
          would fix it. The phase is then C(Pending) and the run does not fail (GKM's behaviour); a ReadOnlyMany
          cache's one extraction still runs on any node that can schedule it.
      type: str
      returned: when no node is eligible
eligible_nodes:
  description: Nodes that get the cache (their number is C(status.counts.nodes)).
  returned: success, with node_details
  type: list
  elements: str
excluded_nodes:
  description: Every other node with the reasons (node_selector, taints, affinity, GPU compatibility).
  returned: success, with node_details
  type: dict
excluded_reasons:
  description:
    - One line per distinct reason nodes do not get the cache, most nodes first - C(reason) (a code such as
      C(UntoleratedTaint), C(Incompatible), C(NoGPU)), C(message), C(nodeCnt) and at most 3 C(nodes); at most 16
      lines, the rest counted in a last line with reason C(Other). The same lines as a cache resource's
      C(status.excludedReasons), in the module's option names.
  returned: success, without node_details
  type: list
  elements: dict
node_labels:
  description:
    - The node readiness labels this run wrote, C(node) and C(value) (null when removed). A ReadWriteOnce cache
      labels each node whose current slots are all Extracted with C(cache.gkm.io/<cache namespace>.<cache>)
      (C(cache.gkm.io/<cache>) for a cluster cache; hashed past 63 characters) set to the short digest, and removes
      it when that no longer holds. Empty when every label already matched.
  returned: success
  type: list
  elements: dict
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
  description: API requests made by this run, the dry runs included.
  returned: success
  type: int
api_dry_runs:
  description:
    - Server-side dry runs made before the first write - one per object created or recreated (0 on a run that
      changes nothing). An object the API server refuses fails the run, naming its field, before anything is written.
  returned: success
  type: int
api_writes:
  description: Writes made by this run (0 on a run that changed nothing; dry runs do not count).
  returned: success
  type: int
duration_seconds:
  description: Wall time of the run.
  returned: success
  type: float
timings:
  description:
    - Seconds per phase of the run, to find where a run (a rerun that changes nothing above all) spends its time.
    - C(startup) is the module process's age when its work began (interpreter, imports, argument checks; Linux
      only, else null) and C(work) the whole work after it; the phases inside C(work) are C(resolve) (the image's
      digest and labels from the registry), C(read) (the cluster's LISTs), C(plan), C(validate) (the dry runs),
      C(write), C(wait), C(status), C(node_objects) and C(node_labels). A phase that did not run is missing.
  returned: success
  type: dict
  sample: {"startup": 0.82, "work": 0.41, "resolve": 0.02, "read": 0.21, "plan": 0.09, "node_objects": 0.03}
diff:
  description: Per-object before and after, in diff mode; a Secret's values show as C(<redacted>).
  returned: when diff mode is on
  type: list
  elements: dict
"""

from ansible_collections.gkm.cluster.plugins.module_utils.common.module import run_module  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.args import DISTRIBUTION_ARG_SPEC  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.tasks import cache_distribute  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.oci.args import (  # noqa: E402
    REGISTRY_MUTUALLY_EXCLUSIVE,
    REGISTRY_REQUIRED_BY,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import ORAS_IMPORT_ERROR  # noqa: E402

ARGUMENT_SPEC = dict(
    DISTRIBUTION_ARG_SPEC,
    name=dict(type="str", required=True),
    scope=dict(type="str", choices=["namespaced", "cluster"], default="namespaced"),
    namespace=dict(type="str"),
    workload_namespaces=dict(type="list", elements="str"),
    image=dict(type="str"),
    access_modes=dict(type="list", elements="str", default=["ReadWriteOnce"],
                      choices=["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]),
    storage_class_name=dict(type="str"),
    size=dict(type="str"),
    pod_template=dict(type="dict"),
)


def main():
    run_module(ARGUMENT_SPEC, cache_distribute, libraries=[("oras", ORAS_IMPORT_ERROR)],
               mutually_exclusive=REGISTRY_MUTUALLY_EXCLUSIVE, required_by=REGISTRY_REQUIRED_BY)


if __name__ == "__main__":
    main()
