# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The desired state of one distributed cache, validated before anything touches the cluster.

`cache_spec_from_params` turns cache_distribute's options (GKM's GKMCache/ClusterGKMCache spec in
Ansible form) into a CacheSpec, or raises SpecError with a message that names the option and the fix.
The image is resolved elsewhere; here it only has to be pinned to a digest before planning.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import math

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import name_problem
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    IMAGE_VOLUME,
    MOUNT_MODES,
    PVC,
    SYSTEM_NAMESPACE,
)
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.plan import overlay_plan

READ_WRITE_ONCE = "ReadWriteOnce"
READ_ONLY_MANY = "ReadOnlyMany"
ACCESS_MODES = (READ_WRITE_ONCE, READ_ONLY_MANY, "ReadWriteMany", "ReadWriteOncePod")
COMPATIBILITY_MODES = ("skip", "fail", "ignore")
CREATE_PVS_MODES = ("auto", "always", "never")
SET_VOLUME_OWNER_MODES = ("auto", "always", "never")
POD_TEMPLATE_METADATA_FIELDS = ("labels",)
POD_TEMPLATE_SPEC_FIELDS = ("nodeSelector", "tolerations", "affinity")
# GKM's podTemplate fields the extraction Jobs refuse: they run in the system namespace, where a priority class
# preempts others' pods and an annotation can ask a mutating webhook there for sidecars, mounts or a profile.
POD_TEMPLATE_REFUSED = {
    "metadata": {"annotations": "annotations could ask the system namespace's admission webhooks for more"},
    "spec": {"priorityClassName": "a priority class there could preempt the cluster's own pods"},
}

# Unpacked caches are many small files: filesystem blocks and inodes cost more than the label says.
SIZE_HEADROOM_FACTOR = 1.5
SIZE_HEADROOM_MI = 32
MI = 1024 * 1024

DEFAULT_JOB_LIMITS = {"backoff_limit": 2, "active_deadline_seconds": 900, "ttl_seconds_after_finished": 86400}
# The admin's per-cache extraction limits and the extractor's flags for them (extract/job_main.py); a limit left
# unset is the extractor's own default (extract/pull.py DEFAULTS).
EXTRACT_LIMIT_FLAGS = {"max_bytes": "--max-bytes", "max_files": "--max-files",
                       "max_expansion_ratio": "--max-expansion-ratio"}
# The one limit the planner keeps rather than the extractor: digests of one cache a node holds at once, the current
# one included (plan/previous_slots.py held_digests). Make before break needs two: the new digest and the one it
# replaces, kept until the new one is extracted.
MAX_DIGESTS = "max_digests"
MIN_DIGESTS = 2


class SpecError(ValueError):
    """An option is invalid; the message names it and says how to fix it."""


class CacheSpec:
    """Validated desired state. `cache_namespace` is '' for a cluster cache.

    `namespaces` are where PVCs go: the cache's namespace, or the workload namespaces.
    `per_node` is True unless the access modes include ReadOnlyMany (GKM's rule).
    """

    def __init__(self, **fields):
        self.name = fields["name"]
        self.cache_namespace = fields.get("cache_namespace", "")
        self.namespaces = list(fields.get("namespaces") or [])
        self.image = fields.get("image")
        self.digest = fields.get("digest")
        self.targets = fields.get("targets")
        # The kernel overlay's variable from the image's labels (kernels/plan.py), or None with the reason in
        # overlay_reason; filled in with the image.
        self.overlay_variable = fields.get("overlay_variable")
        self.overlay_reason = fields.get("overlay_reason")
        # From the image's labels (oci/metadata.framework_facts), filled in with the image: what a pod's misses are
        # compared with, and what a hit is estimated to save (status/kernel_use.py).
        self.triton_version = fields.get("triton_version")
        self.compile_seconds_per_kernel = fields.get("compile_seconds_per_kernel")
        self.access_modes = list(fields.get("access_modes") or [READ_WRITE_ONCE])
        self.storage_class_name = fields.get("storage_class_name")
        self.size = fields.get("size")
        self.pod_template = copy.deepcopy(fields.get("pod_template") or {})
        self.node_selector = dict(fields.get("node_selector") or {})
        self.compatibility = fields.get("compatibility", "skip")
        self.create_pvs = fields.get("create_pvs", "auto")
        # ReadOnlyMany on hostPath PVs, which fill one node's directory only: refused unless the admin allows it.
        self.host_path_read_only_many = fields.get("host_path_read_only_many", False)
        self.extract_image = fields.get("extract_image")
        self.extract_args = list(fields.get("extract_args") or [])
        # {Secret key: text} the Jobs get from the registry options (registry_secret.py); filled in with the image.
        self.registry_files = dict(fields.get("registry_files") or {})
        # (extractor format, public key PEM) the Jobs verify the signature with, or None (verification.py).
        self.verification = fields.get("verification")
        self.set_volume_owner = fields.get("set_volume_owner", "auto")
        self.host_path_root = fields.get("host_path_root", "/var/lib/gkm-cluster/caches")
        self.job_limits = dict(DEFAULT_JOB_LIMITS, **(fields.get("job_limits") or {}))
        # Only the limits the admin set (extract_limit_args); the declared size is checked in pin_image.
        self.extract_limits = dict(fields.get("extract_limits") or {})
        self.state = fields.get("state", "present")
        self.prune = fields.get("prune", True)
        self.force = fields.get("force", False)
        self.create_namespaces = fields.get("create_namespaces", False)
        # A ReadWriteOnce cache also gets a PVC named as the cache in each namespace (distribute/serving.py).
        self.serving_pvc = fields.get("serving_pvc", True)
        # PVC: extracted onto PVCs by Jobs; imageVolume: pods mount the image itself, nothing is planned
        # (distribute/image_volume.py).
        self.mount_mode = fields.get("mount_mode", PVC)
        # The cache resource the objects belong to (ownership.resource_owner), None for cache_distribute.
        self.owner = fields.get("owner")
        # The resource's UpgradePolicy (upgrade_policy.py) when it declares one: a new digest rolls out in waves
        # (rollout.py); None moves every node at once (still make before break).
        self.upgrade_policy = fields.get("upgrade_policy")
        # The collection's own namespace, where the extraction Jobs of hostPath slots and their Secret live.
        self.system_namespace = fields.get("system_namespace") or SYSTEM_NAMESPACE
        self.system_namespace_jobs = fields.get("system_namespace_jobs", True)

    @property
    def per_node(self):
        return READ_ONLY_MANY not in self.access_modes

    @property
    def image_volume(self):
        return self.mount_mode == IMAGE_VOLUME

    @property
    def scope(self):
        return "namespaced" if self.cache_namespace else "cluster"

    def pod_metadata(self, field):
        return dict((self.pod_template.get("metadata") or {}).get(field) or {})

    def pod_spec(self, field, default=None):
        """A pod_template.spec field, shared by every rendered Job: callers copy before changing it."""
        return (self.pod_template.get("spec") or {}).get(field, default)


def _require_name(field, value):
    problem = name_problem(field, value)
    if problem:
        raise SpecError(problem)


def validate_pod_template(pod_template):
    """Only GKM's podTemplate fields are accepted; anything else is a typo the user wants to hear about."""
    if not pod_template:
        return
    unknown = sorted(set(pod_template) - {"metadata", "spec"})
    if unknown:
        raise SpecError("pod_template has unknown keys %s; it takes metadata and spec, as GKM's podTemplate" % unknown)
    for part, refused in POD_TEMPLATE_REFUSED.items():
        for field, why in refused.items():
            if (pod_template.get(part) or {}).get(field):
                raise SpecError("pod_template.%s.%s is refused: the extraction Jobs may run in the system namespace "
                                "(system_namespace_jobs), "
                                "and %s; remove it" % (part, field, why))
    metadata = pod_template.get("metadata") or {}
    unknown = sorted(set(metadata) - set(POD_TEMPLATE_METADATA_FIELDS))
    if unknown:
        raise SpecError("pod_template.metadata has unknown keys %s; allowed: labels" % unknown)
    spec = pod_template.get("spec") or {}
    unknown = sorted(set(spec) - set(POD_TEMPLATE_SPEC_FIELDS))
    if unknown:
        raise SpecError("pod_template.spec has unknown keys %s; allowed: %s" % (
            unknown, ", ".join(POD_TEMPLATE_SPEC_FIELDS)))
    if not isinstance(spec.get("nodeSelector") or {}, dict):
        raise SpecError("pod_template.spec.nodeSelector must be a mapping of label to value")
    if not isinstance(spec.get("tolerations") or [], list):
        raise SpecError("pod_template.spec.tolerations must be a list of tolerations")


def default_size(size_bytes):
    """PVC size for an unpacked cache of `size_bytes`: 1.5x plus 32Mi, in whole Mi."""
    mebibytes = math.ceil(size_bytes * SIZE_HEADROOM_FACTOR / MI) + SIZE_HEADROOM_MI
    if mebibytes % 1024 == 0:
        return "%dGi" % (mebibytes // 1024)
    return "%dMi" % mebibytes


def cache_spec_from_params(params):
    """A CacheSpec (without image digest and targets) from cache_distribute's params; raises SpecError."""
    _require_name("name", params.get("name"))
    scope = params.get("scope") or "namespaced"
    workload_namespaces = params.get("workload_namespaces")
    if scope == "namespaced":
        if not params.get("namespace"):
            raise SpecError("namespace is required for a namespaced cache (or set scope: cluster with "
                            "workload_namespaces)")
        _require_name("namespace", params["namespace"])
        if workload_namespaces:
            raise SpecError("workload_namespaces is only for scope: cluster; a namespaced cache lives in "
                            "namespace %r only" % params["namespace"])
        cache_namespace, namespaces = params["namespace"], [params["namespace"]]
    elif scope == "cluster":
        if params.get("namespace"):
            raise SpecError("namespace is only for a namespaced cache; with scope: cluster list the namespaces "
                            "in workload_namespaces")
        if not workload_namespaces and params.get("state", "present") == "present":
            raise SpecError("workload_namespaces is required with scope: cluster (the namespaces whose pods "
                            "mount the cache)")
        namespaces = []
        for index, namespace in enumerate(workload_namespaces or []):
            _require_name("workload_namespaces[%d]" % index, namespace)
            if namespace not in namespaces:
                namespaces.append(namespace)
        cache_namespace = ""
    else:
        raise SpecError("scope must be namespaced or cluster, got %r" % scope)

    access_modes = params.get("access_modes") or [READ_WRITE_ONCE]
    unknown = [mode for mode in access_modes if mode not in ACCESS_MODES]
    if unknown:
        raise SpecError("access_modes: unknown mode(s) %s; use %s" % (unknown, ", ".join(ACCESS_MODES)))
    if params.get("storage_class_name"):
        _require_storage_class(params["storage_class_name"])
    validate_pod_template(params.get("pod_template"))
    for field, choices in (("compatibility", COMPATIBILITY_MODES), ("create_pvs", CREATE_PVS_MODES),
                           ("set_volume_owner", SET_VOLUME_OWNER_MODES), ("mount_mode", MOUNT_MODES)):
        if params.get(field) is not None and params[field] not in choices:
            raise SpecError("%s must be one of %s, got %r" % (field, ", ".join(choices), params[field]))
    limits = {key: value for key, value in (params.get("job_limits") or {}).items() if value is not None}
    for key, value in limits.items():
        if key not in DEFAULT_JOB_LIMITS or not isinstance(value, int) or value < 0:
            raise SpecError("job_limits.%s must be a whole number >= 0 (one of %s)" % (
                key, ", ".join(DEFAULT_JOB_LIMITS)))
    extract_limits = set_extract_limits(params)
    if params.get("state", "present") == "present" and not params.get("extract_image") and (
            params.get("mount_mode") != IMAGE_VOLUME):
        raise SpecError("extract_image is required: the tools image whose cache_extract command fills the PVCs")
    optional = {key: params[key] for key in ("size", "compatibility", "create_pvs", "host_path_root", "prune",
                                             "force", "create_namespaces", "state", "extract_args",
                                             "set_volume_owner", "owner", "verification", "serving_pvc",
                                             "upgrade_policy", "mount_mode", "host_path_read_only_many",
                                             "system_namespace", "system_namespace_jobs")
                if params.get(key) is not None}
    return CacheSpec(
        name=params["name"], cache_namespace=cache_namespace, namespaces=namespaces,
        access_modes=access_modes, storage_class_name=params.get("storage_class_name"),
        pod_template=params.get("pod_template"), node_selector=params.get("node_selector"),
        extract_image=params.get("extract_image"), job_limits=limits, extract_limits=extract_limits, **optional
    )


def set_extract_limits(params):
    """{limit: value} of the extract_limits the admin set; SpecError for one that is not a positive number."""
    limits = {key: value for key, value in (params.get("extract_limits") or {}).items() if value is not None}
    for key, value in limits.items():
        known = key in EXTRACT_LIMIT_FLAGS or key == MAX_DIGESTS
        if not known or not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise SpecError("extract_limits.%s must be a positive whole number (one of %s)" % (
                key, ", ".join((*EXTRACT_LIMIT_FLAGS, MAX_DIGESTS))))
    if limits.get(MAX_DIGESTS, MIN_DIGESTS) < MIN_DIGESTS:
        raise SpecError("extract_limits.%s must be at least %d: make before break keeps a node's previous digest until "
                        "the new one is extracted there" % (MAX_DIGESTS, MIN_DIGESTS))
    return limits


def extract_limit_args(extract_limits):
    """The extractor's arguments for the validated extract_limits the admin set."""
    return [argument for key, value in sorted(extract_limits.items()) if key in EXTRACT_LIMIT_FLAGS
            for argument in (EXTRACT_LIMIT_FLAGS[key], str(value))]


def _require_storage_class(name):
    # Storage class names are DNS subdomains; anything else cannot exist, so say so now.
    if len(name) > 253 or not all(name_problem("storage_class_name", part) is None for part in name.split(".")):
        raise SpecError("storage_class_name %r is not a valid storage class name (DNS subdomain)" % name)


def pin_image(spec, image_ref, digest, metadata, registry_files=None):
    """Fill in the resolved image: digest-pinned reference, digest, GPU targets, whether its pods get the kernel
    overlay, the default size and the registry files its Jobs need."""
    spec.image = image_ref
    spec.registry_files = dict(registry_files or {})
    spec.digest = digest
    spec.targets = (metadata or {}).get("targets")
    spec.overlay_variable, spec.overlay_reason = overlay_plan((metadata or {}).get("labels"))
    spec.triton_version = (metadata or {}).get("triton_version")
    spec.compile_seconds_per_kernel = (metadata or {}).get("compile_seconds_per_kernel")
    size_bytes = (metadata or {}).get("size_bytes")
    max_bytes = spec.extract_limits.get("max_bytes")
    if max_bytes and size_bytes is not None and size_bytes > max_bytes:
        # Refused before any object is written; an image that declares less than it holds stops in its Jobs.
        raise SpecError("image %s declares %d bytes unpacked (its cache-size-bytes label), over the %d bytes a cache "
                        "may hold (extract_limits.max_bytes, the caches role's caches_extract_limits); use a smaller "
                        "image or ask the cluster's admin to raise the limit" % (image_ref, size_bytes, max_bytes))
    if not spec.size:
        if size_bytes is None:
            raise SpecError("size is required: image %s has no cache-size-bytes label to size the PVCs from"
                            % image_ref)
        spec.size = default_size(size_bytes)
    return spec


def spec_claims(spec):
    """{(namespace, PVC name)} the cache being planned names after itself."""
    if spec.per_node and not spec.serving_pvc:
        return set()
    return {(namespace, spec.name) for namespace in spec.namespaces}
