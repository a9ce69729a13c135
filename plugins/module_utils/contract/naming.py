# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Deterministic names, labels and label selectors for the objects a cache is distributed with.

Every PVC, PV and Job name is a pure function of the slot it serves: (cache, cache namespace, target
namespace, node, digest). A re-run therefore finds its own objects with one label-selected LIST per
kind and recomputes the names it expects, instead of guessing at random suffixes.

All names are DNS-1123 labels (at most 63 characters, [a-z0-9-]) so they are also valid label
values; the Job controller copies a Job's name into its pods' labels.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import re

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    DIGEST_LABEL,
    GROUP,
    KERNEL_USE_PREFIX,
    MANAGED_BY_LABEL,
    MANAGER,
    NODE_KINDS,
    NODE_LABEL,
    READINESS_LABEL_PREFIX,
    SLOT_NAMESPACE_LABEL,
    STORE_LABEL,
    UPGRADE_STATE_LABEL_PREFIX,
    VERSION,
)

MAX_NAME = 63
HASH_LENGTH = 10
SHORT_DIGEST_LENGTH = 12

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-fA-F0-9]{32,}$")


def is_dns1123_label(value):
    return bool(value) and len(value) <= MAX_NAME and bool(_DNS1123_LABEL.match(value))


def is_label_value(value):
    return len(value) <= MAX_NAME and bool(_LABEL_VALUE.match(value))


def name_problem(field, value):
    """Return why `value` cannot be used as a DNS-1123 label name for `field`, or None when it can."""
    if not value:
        return "{0} must not be empty".format(field)
    if len(value) > MAX_NAME:
        return "{0} {1!r} is {2} characters long; the limit is {3}".format(field, value, len(value), MAX_NAME)
    if not _DNS1123_LABEL.match(value):
        return (
            "{0} {1!r} is not a valid DNS-1123 label: use lower-case letters, digits and '-', "
            "starting and ending with a letter or digit".format(field, value)
        )
    return None


def stable_hash(*parts):
    """A short hash of the parts; the separator keeps ('a-b', 'c') apart from ('a', 'b-c')."""
    joined = "\0".join(parts).encode("utf-8")
    return hashlib.sha256(joined).hexdigest()[:HASH_LENGTH]


def short_digest(digest):
    """The first hex characters of an image digest ('sha256:abc...' -> 'abc...'), used as a label value."""
    if not _DIGEST.match(digest or ""):
        raise ValueError("{0!r} is not an image digest like 'sha256:<64 hex>'".format(digest))
    return digest.split(":", 1)[1][:SHORT_DIGEST_LENGTH].lower()


def _join_with_hash(readable_parts, hashed_parts):
    """`<readable parts joined by '-'>-<hash>`, the readable part cut so the whole fits in 63 characters."""
    suffix = "-" + stable_hash(*hashed_parts)
    readable = "-".join(_dns_safe(part) for part in readable_parts if part)
    readable = readable[: MAX_NAME - len(suffix)].rstrip("-")
    return readable + suffix


def _dns_safe(value):
    """Node names are DNS subdomains: lower-case them and turn anything outside [a-z0-9-] into '-'."""
    return re.sub(r"[^a-z0-9-]", "-", value.lower()).strip("-")


def label_value(value):
    """`value` itself when it is a valid label value, otherwise a readable prefix plus a stable hash."""
    if is_label_value(value):
        return value
    return _join_with_hash([value], [value])


# The directory in place of a namespace's under a cache's directory where the namespaces' slots of a node share one
# extraction (Slot.shared): a namespace name never starts with '_'.
STORE_DIRECTORY = "_store"


class Slot:
    """One place a cache is extracted to: a namespace, a node (ReadWriteOnce only) and a digest.

    `cache_namespace` is the namespace of a namespaced cache and '' for a cluster cache.
    `node` is '' for ReadOnlyMany, where one PVC per namespace serves every node.
    `shared`: the slot's directory is the node's store of the cache's digest, which one extraction Job in the system
    namespace fills for every namespace's slot of that node (the Job and the PVC it writes through are named for the
    store, not the namespace); otherwise each namespace's slot has its own directory and Job.
    """

    __slots__ = ("_memo", "cache", "cache_namespace", "digest", "namespace", "node", "shared")

    def __init__(self, cache, cache_namespace, namespace, node, digest, shared=False):
        self.cache = cache
        self.cache_namespace = cache_namespace
        self.namespace = namespace
        self.node = node
        self.digest = digest
        self.shared = shared
        # Names and labels are asked for several times per object; a 1,000-slot plan should hash once.
        self._memo = {}

    def _remember(self, key, compute):
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def key(self):
        return (self.cache, self.cache_namespace, self.namespace, self.node, self.digest)

    def extraction_key(self):
        """The key of what the slot's Job fills: the slot, or the node's store shared by every namespace."""
        if not self.shared:
            return self.key()
        return (self.cache, self.cache_namespace, STORE_DIRECTORY, self.node, self.digest)

    def __eq__(self, other):
        return isinstance(other, Slot) and self.key() == other.key() and self.shared == other.shared

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        return "Slot{0!r}".format(self.key() + (("shared",) if self.shared else ()))

    def pvc_name(self):
        """ReadOnlyMany: the cache's own name (what workloads put in claimName, as in GKM).

        ReadWriteOnce: `<cache>-<node>-<hash>`; the hash covers the digest so a new image gets a new
        PVC while pods may still mount the old one.
        """
        if not self.node:
            return self.cache
        return self._remember("pvc", lambda: _join_with_hash([self.cache, self.node], ("pvc", *self.key())))

    def job_name(self):
        return self._remember("job", lambda: _join_with_hash([self.cache, self.node], ("job", *self.extraction_key())))

    def access_name(self):
        """The PVC (in the system namespace) and PV its extraction Job writes the slot through: the hash covers the
        slot's namespace (or the store), so no two of them share it there."""
        return self._remember("access", lambda: _join_with_hash(["gkm", self.cache, self.node],
                                                                ("access", *self.extraction_key())))

    def pv_name(self):
        """PVs are cluster-scoped: the hash also covers the namespace, so names never collide."""
        return self._remember("pv", lambda: _join_with_hash(["gkm", self.cache, self.node], ("pv", *self.key())))

    def host_path(self, root):
        """Each cache, namespace (or the shared store) and digest has its own directory, so two caches never share
        one."""
        cache, cache_namespace, namespace, _node, digest = self.extraction_key()
        return "/".join([root.rstrip("/"), cache_namespace or "_cluster", cache, namespace,
                         digest.split(":", 1)[1].lower()])

    def labels(self):
        """A fresh dict each call (callers add to it); computed once."""
        return dict(self._remember("labels", self._labels))

    def _labels(self):
        labels = {
            MANAGED_BY_LABEL: MANAGER,
            CACHE_LABEL: self.cache,
            CACHE_NAMESPACE_LABEL: self.cache_namespace,
            DIGEST_LABEL: short_digest(self.digest),
        }
        if self.node:
            labels[NODE_LABEL] = label_value(self.node)
        return labels

    def system_labels(self):
        """The labels of the slot's objects in the system namespace: the slot's, and its namespace's name (or that they
        fill the shared store)."""
        if self.shared:
            return dict(self.labels(), **{STORE_LABEL: "true"})
        return dict(self.labels(), **{SLOT_NAMESPACE_LABEL: self.namespace})


def slot_namespace(obj):
    """The workload namespace of the slot a cache's object serves: its own, or for an object in the system namespace
    the one its label names; '' for an object of a node's shared store, which serves every namespace."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if labels.get(STORE_LABEL):
        return ""
    return labels.get(SLOT_NAMESPACE_LABEL) or metadata.get("namespace") or ""


def cache_selector(cache, cache_namespace):
    """Label selector for every object of one cache ('' namespace selects the cluster cache)."""
    return "{0}={1},{2}={3},{4}={5}".format(
        MANAGED_BY_LABEL, MANAGER, CACHE_LABEL, cache, CACHE_NAMESPACE_LABEL, cache_namespace
    )


def managed_selector():
    """Label selector for every object this collection manages, for listing all caches."""
    return "{0}={1}".format(MANAGED_BY_LABEL, MANAGER)


def unmanaged_selector():
    """Label selector for every object this collection does not manage (workload pods, not our Jobs' pods)."""
    return "{0}!={1}".format(MANAGED_BY_LABEL, MANAGER)


def readiness_label_key(cache, cache_namespace):
    """The node label saying which digest of a cache the node holds extracted: `cache.gkm.io/<namespace>.<cache>`."""
    return _node_label_key(READINESS_LABEL_PREFIX, cache, cache_namespace)


def upgrade_state_label_key(cache, cache_namespace):
    """The node label saying where the node stands in a cache's rolling upgrade."""
    return _node_label_key(UPGRADE_STATE_LABEL_PREFIX, cache, cache_namespace)


def _node_label_key(prefix, cache, cache_namespace):
    return prefix + label_value("%s.%s" % (cache_namespace, cache) if cache_namespace else cache)


def serving_alias_name(cache, digest):
    """`<cache>-<short digest>`, the serving PVC of a digest while the one named as the cache is kept at an older one;
    a long cache name is cut and a hash of it added, so the name stays within 63 characters."""
    name = "%s-%s" % (cache, digest)
    if len(name) <= MAX_NAME:
        return name
    suffix = "-%s-%s" % (stable_hash("serving-alias", cache), digest)
    return cache[:MAX_NAME - len(suffix)].rstrip("-") + suffix


def kernel_use_container(cache):
    """The kernel-use sidecar's name in a pod given the overlay of `cache`: the webhook names it, the reconcile reads
    that container's log. Two caches whose names share their first 48 characters share it: each reconcile then reads
    the other's pods too, whose figures a pod can only ever report about itself."""
    return (KERNEL_USE_PREFIX + cache)[:MAX_NAME].rstrip("-")


def pinned_reference(image, digest):
    """`repository@digest` of an image reference given by tag or digest ('host:5000/a/b:v1' -> 'host:5000/a/b@...')."""
    repository = image.split("@", 1)[0]
    last = repository.rsplit("/", 1)[-1]
    if ":" in last:
        repository = repository[:len(repository) - len(last)] + last.split(":", 1)[0]
    return "%s@%s" % (repository, digest)


def node_object_path(cache_kind, namespace=None, name=None):
    """API path of the per-node objects of a cache kind (collection path without a name)."""
    _kind, plural, namespaced = NODE_KINDS[cache_kind]
    path = "/apis/%s/%s" % (GROUP, VERSION)
    if namespaced:
        path += "/namespaces/%s" % namespace
    return path + "/" + plural + ("/" + name if name else "")
