# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A GKMCache or ClusterGKMCache read once, its defaults included, for every part that reads one.

The reconcile, the webhook's views and the operator's node events all read cache resources. Each reading the spec
its own way let them disagree: under an imageVolume default, a cache without spec.mountMode was an image volume to
the reconcile and a PVC to the webhook. `read_cache` is the one reading; the mount mode's default is an input,
given by whoever runs the collection (the caches role's `caches_mount_mode`, the webhook's `--default-mount-mode`).

Pure. A malformed field does not raise: it is listed in `problems` (naming the field and the fix) and read as its
default, so the webhook keeps answering while the reconcile refuses the resource with those problems.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KINDS,
    CLUSTER_CACHE_KIND,
    KERNEL_OVERLAY_STATUS,
    KERNEL_USE_STATUS,
    MOUNT_MODES,
    PVC,
    READ_ONLY_MANY,
    READ_WRITE_ONCE,
    SIGNATURE_FORMAT_LABEL,
)

NAMESPACED, CLUSTER = "namespaced", "cluster"

# Each spec field a cache's owner writes, under the name the collection gives it: the CacheResource attribute and
# the distribution option of the same meaning. read_cache reads the spec by this table, and resource_terms turns a
# message about an option back into the field its owner wrote, so the two directions cannot drift apart.
SPEC_FIELDS = (
    ("image", "image"),
    ("access_modes", "accessModes"),
    ("storage_class_name", "storageClassName"),
    ("pod_template", "podTemplate"),
    ("upgrade_policy", "upgradePolicy"),
    ("mount_mode", "mountMode"),
    ("workload_namespaces", "workloadNamespaces"),
)
_FIELD = dict(SPEC_FIELDS)
# Option names that differ from their field, standing as words of their own (not inside a longer dotted name).
_RENAMED_OPTION = re.compile(r"(?<![\w.])(%s)(?!\w)" % "|".join(
    re.escape(option) for option, field in SPEC_FIELDS if option != field))


class CacheResource:
    """What a cache resource says. `digest` is status.resolvedDigest (what its reconcile resolved and, if asked,
    verified) or None; `pinned_digest` is the digest its spec.image pins, or None for a tag; `overlay_variable` is
    the variable status.kernelOverlay names (its pods get the kernel overlay as that variable), or None;
    `kernel_use` the per-node rows of status.kernelUse (kernel_use_rows)."""

    __slots__ = ("access_modes", "digest", "image", "kernel_use", "kind", "mount_mode", "name", "namespace",
                 "overlay_variable",
                 "pinned_digest", "pod_template", "problems", "signature_format", "status_targets",
                 "storage_class_name", "upgrade_policy", "workload_namespaces")

    @property
    def scope(self):
        return CLUSTER if self.kind == CLUSTER_CACHE_KIND else NAMESPACED

    @property
    def per_node(self):
        """True for a cache extracted per node (ReadWriteOnce), False for one PVC per namespace (ReadOnlyMany)."""
        return READ_ONLY_MANY not in self.access_modes

    def describe(self):
        if self.kind == CLUSTER_CACHE_KIND:
            return "ClusterGKMCache %s" % self.name
        return "%s %s/%s" % (self.kind, self.namespace, self.name)


def read_cache(obj, default_mount_mode=PVC, kind=None):
    """The CacheResource of a cache object (a dict as the API returns it; kind, when its LIST left it out)."""
    cache = CacheResource()
    metadata = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    status = _mapping(obj.get("status"))
    cache.kind = kind or obj.get("kind")
    cache.name = metadata.get("name")
    cache.namespace = metadata.get("namespace") if cache.kind != CLUSTER_CACHE_KIND else None
    cache.problems = []
    where = "%s %s" % (cache.kind, cache.name)
    if cache.kind not in CACHE_KINDS:
        cache.problems.append("kind must be one of %s, got %r" % (", ".join(sorted(CACHE_KINDS)), cache.kind))
    image = spec.get(_FIELD["image"])
    cache.image = image if isinstance(image, str) and image else None
    if cache.image is None:
        cache.problems.append("%s: spec.%s is required" % (where, _FIELD["image"]))
    cache.pinned_digest = _digest(cache.image.rpartition("@")[2]) if cache.image and "@" in cache.image else None
    cache.access_modes = _strings(spec.get(_FIELD["access_modes"])) or [READ_WRITE_ONCE]
    cache.storage_class_name = spec.get(_FIELD["storage_class_name"]) or None
    pod_template = spec.get(_FIELD["pod_template"])
    cache.pod_template = pod_template if isinstance(pod_template, dict) else None
    cache.upgrade_policy = spec.get(_FIELD["upgrade_policy"])
    cache.mount_mode = spec.get(_FIELD["mount_mode"]) or default_mount_mode or PVC
    if cache.mount_mode not in MOUNT_MODES:
        cache.problems.append("%s: spec.%s must be one of %s, got %r" % (
            where, _FIELD["mount_mode"], ", ".join(MOUNT_MODES), cache.mount_mode))
        cache.mount_mode = PVC
    workload_namespaces = _strings(spec.get(_FIELD["workload_namespaces"]))
    cache.workload_namespaces = workload_namespaces if cache.kind == CLUSTER_CACHE_KIND else []
    if cache.kind == CLUSTER_CACHE_KIND and not cache.workload_namespaces:
        cache.problems.append("ClusterGKMCache %s: spec.%s must list at least one namespace"
                              % (cache.name, _FIELD["workload_namespaces"]))
    cache.signature_format = _mapping(metadata.get("labels")).get(SIGNATURE_FORMAT_LABEL) or None
    cache.digest = _digest(status.get("resolvedDigest"))
    cache.status_targets = [t for t in status.get("targets") or () if isinstance(t, dict)] \
        if isinstance(status.get("targets"), list) else []
    variable = _mapping(status.get(KERNEL_OVERLAY_STATUS)).get("variable")
    cache.overlay_variable = variable if isinstance(variable, str) and variable else None
    cache.kernel_use = kernel_use_rows(status.get(KERNEL_USE_STATUS))
    return cache


# status.kernelUse keeps at most this many rows (distribute/status/kernel_use.py); a reader keeps no more.
MAX_KERNEL_USE_ROWS = 50


def kernel_use_rows(kernel_use):
    """[(node, pod namespace, pods, hits, misses, compile seconds saved or None)] of status.kernelUse.nodes, the
    malformed rows left out: what the webhook server's /metrics exports."""
    rows, nodes = [], _mapping(kernel_use).get("nodes")
    for row in nodes[:MAX_KERNEL_USE_ROWS] if isinstance(nodes, list) else ():
        row = _mapping(row)
        counts = [row.get(field) for field in ("podCnt", "hits", "misses")]
        if not all(isinstance(value, str) for value in (row.get("node"), row.get("namespace"))) or not all(
                isinstance(value, int) and not isinstance(value, bool) and value >= 0 for value in counts):
            continue
        seconds = row.get("compileSecondsSaved")
        seconds = float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else None
        rows.append((row["node"], row["namespace"], counts[0], counts[1], counts[2], seconds))
    return rows


def resource_terms(message):
    """The message with the collection's option names replaced by the spec fields they come from (pod_template ->
    spec.podTemplate): what a refusal or a problem says in a cache resource's status."""
    return _RENAMED_OPTION.sub(lambda match: "spec." + _FIELD[match.group(1)], message)


def _mapping(value):
    return value if isinstance(value, dict) else {}


def _strings(value):
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _digest(value):
    """`value` when it is an image digest ('sha256:<hex>'), else None."""
    try:
        short_digest(value)
    except ValueError:
        return None
    return value
