# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every name the collection's writers and readers share: the API group and kinds, labels, annotations, mount
modes, phases and conditions.

What one part writes another reads (the reconcile, the webhook, the operator's events, the roles' filters, Kyverno's
policies): a name defined here once cannot drift between them. Nothing of ours is imported here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOMAIN = "gkm.io"

# ------------------------------------------------------------------ API
GROUP = DOMAIN
VERSION = "v1alpha1"
API_VERSION = GROUP + "/" + VERSION
CACHE_KIND = "GKMCache"
CLUSTER_CACHE_KIND = "ClusterGKMCache"
CACHE_NODE_KIND = "GKMCacheNode"
CLUSTER_CACHE_NODE_KIND = "ClusterGKMCacheNode"
# cache kind -> (plural, namespaced)
CACHE_KINDS = {CACHE_KIND: ("gkmcaches", True), CLUSTER_CACHE_KIND: ("clustergkmcaches", False)}
# cache kind -> (its per-node kind, that kind's plural, namespaced)
NODE_KINDS = {
    CACHE_KIND: (CACHE_NODE_KIND, "gkmcachenodes", True),
    CLUSTER_CACHE_KIND: (CLUSTER_CACHE_NODE_KIND, "clustergkmcachenodes", False),
}
PLURALS = tuple(plural for plural, _namespaced in CACHE_KINDS.values()) + tuple(
    plural for _kind, plural, _namespaced in NODE_KINDS.values())

# The collection's own namespace when none is given: ownership records, the scrub's Jobs (the gkm role's gkm_namespace).
SYSTEM_NAMESPACE = "gkm-system"

# ------------------------------------------------------------------ labels on the objects a cache owns
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGER = "gkm.cluster"
CACHE_LABEL = DOMAIN + "/cache"
CACHE_NAMESPACE_LABEL = DOMAIN + "/cache-namespace"
CACHE_KIND_LABEL = DOMAIN + "/cache-kind"
NODE_LABEL = DOMAIN + "/node"
DIGEST_LABEL = DOMAIN + "/digest"
SERVING_LABEL = DOMAIN + "/serving"
SCRUB_LABEL = DOMAIN + "/scrub"
# On a cache's objects in the system namespace (its extraction Jobs, the PVC and PV they write a slot through): the
# workload namespace of the slot they serve, or STORE_LABEL when they fill the node's store directory every namespace's
# slot shares. SLOT_ACCESS_LABEL marks that PVC and PV (not a slot's own, never scrubbed).
SLOT_NAMESPACE_LABEL = DOMAIN + "/slot-namespace"
STORE_LABEL = DOMAIN + "/store"
SLOT_ACCESS_LABEL = DOMAIN + "/slot-access"
EXTRACTION_FAILED_LABEL = DOMAIN + "/extraction-failed"
PROBE_LABEL = DOMAIN + "/probe"
# Pod Security's level on the namespaces the collection creates for its own pods (the webhook's, the scrub's).
POD_SECURITY_LABEL = "pod-security.kubernetes.io/enforce"

# ------------------------------------------------------------------ annotations on the objects a cache owns
SPEC_HASH_ANNOTATION = DOMAIN + "/spec-hash"
IMAGE_ANNOTATION = DOMAIN + "/image"
EXTRACTED_DIGEST_ANNOTATION = DOMAIN + "/extracted-digest"
EXTRACTION_FAILURE_ANNOTATION = DOMAIN + "/extraction-failure"
# The uid of the cache resource an object outside its namespace belongs to: owner references cannot cross namespaces.
OWNER_UID_ANNOTATION = DOMAIN + "/owner-uid"

# ------------------------------------------------------------------ labels on cache resources
SIGNATURE_FORMAT_LABEL = DOMAIN + "/signature-format"
DECLARED_LABEL = DOMAIN + "/declared-by"
# The finalizer on cache resources, kept by the operator (controller/gkm_controller, kopf's finalizer name): the same
# one the collection's earlier operator engine used, so an installation moving over needs no write to its caches.
CACHE_FINALIZER = DOMAIN + "/cache-cleanup"

# ------------------------------------------------------------------ labels on nodes
GPU_BACKEND_LABEL = DOMAIN + "/gpu-backend"
GPU_ARCH_LABEL = DOMAIN + "/gpu-arch"
GPU_WARP_SIZE_LABEL = DOMAIN + "/gpu-warp-size"
# The three, as messages name them.
GPU_LABELS = DOMAIN + "/gpu-*"
# `cache.gkm.io/<cache namespace>.<cache>`: the short digest whose slots are all extracted on the node.
READINESS_LABEL_PREFIX = "cache." + DOMAIN + "/"
# `upgrade.gkm.io/<cache namespace>.<cache>`: the node's state in a rolling upgrade.
UPGRADE_STATE_LABEL_PREFIX = "upgrade." + DOMAIN + "/"
SIM_NODE_LABEL = DOMAIN + "/sim-node"
REAL_NODE_LABEL = DOMAIN + "/real-node"
SIM_SCOPE_LABEL = DOMAIN + "/sim-scope"

# Kubernetes' own node label, which our Jobs and per-node objects select on.
HOSTNAME_LABEL = "kubernetes.io/hostname"

# ------------------------------------------------------------------ what workloads say
PVC_MUTATION_LABEL = DOMAIN + "/pvc-mutation"
CACHE_ANNOTATION = DOMAIN + "/cache"
MOUNT_PATH_ANNOTATION = DOMAIN + "/cache-mount-path"
CONTAINERS_ANNOTATION = DOMAIN + "/cache-containers"
STEERING_ANNOTATION = DOMAIN + "/cache-steering"
# A pod annotated OVERLAY_ANNOTATION: OVERLAY_DISABLED keeps the plain mount of a Triton cache (no kernel overlay):
# for a workload that manages its own Triton directory.
OVERLAY_ANNOTATION = DOMAIN + "/cache-overlay"
OVERLAY_DISABLED = "disabled"
# A pod's opt-in to capture (capture/policy.py): the kernels it compiled may go into the cache it names, if the admin's
# cache_capture allows that cache and the pod's namespace.
CAPTURE_ANNOTATION = DOMAIN + "/capture"
# On a pod admitted to wait for its node's cache: why it is Pending.
CACHE_PENDING_ANNOTATION = DOMAIN + "/cache-pending"

# ------------------------------------------------------------------ status fields read by others than the reconcile
# status.kernelOverlay: {variable: NAME}, present when pods given the cache by annotation get the kernel overlay
# (kernels/plan.py), the variable naming it; the webhook's view reads it.
KERNEL_OVERLAY_STATUS = "kernelOverlay"
# status.kernelUse: what the pods given the overlay found in the cache and compiled (distribute/status/kernel_use.py);
# the webhook server's /metrics exports it.
KERNEL_USE_STATUS = "kernelUse"
# The kernel-use sidecar the webhook adds beside the overlay (kernels/usage_main.py); the reconcile reads its log.
KERNEL_USE_PREFIX = "gkm-kernel-use-"

# ------------------------------------------------------------------ mount modes (spec.mountMode)
PVC = "PVC"
IMAGE_VOLUME = "imageVolume"
MOUNT_MODES = (PVC, IMAGE_VOLUME)
READ_ONLY_MANY = "ReadOnlyMany"
READ_WRITE_ONCE = "ReadWriteOnce"

# ------------------------------------------------------------------ phases (status.phase, per-node states)
PENDING = "Pending"
EXTRACTING = "Extracting"
EXTRACTED = "Extracted"
ERROR = "Error"
INCOMPATIBLE = "Incompatible"
OUTDATED = "Outdated"
RUNNING = "Running"
UNSCHEDULABLE = "Unschedulable"
# An imageVolume cache is Resolved, not Extracted: nothing is extracted, its pods pull the image.
RESOLVED = "Resolved"

# ------------------------------------------------------------------ condition types
READY_CONDITION = "Ready"
SIGNATURE_VERIFIED_CONDITION = "SignatureVerified"
UPGRADED_CONDITION = "Upgraded"
