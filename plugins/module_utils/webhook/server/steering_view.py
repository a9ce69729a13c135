# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the steering webhook knows of the cluster, fed by list+watch events, pure (no API calls).

- Cache resources (GKMCache, ClusterGKMCache): mount mode, access modes, workload namespaces, and from the status the
  reconcile writes, the resolved digest, the image's GPU targets (`status.targets`) and the kernel overlay's variable
  (`status.kernelOverlay`).
- Serving PVCs (distribute/serving.py), from the managed-PVC watch the PVC-mutation view already runs: the digest a
  pod naming the cache in claimName mounts, which stays the old one while pods keep an outdated serving PVC.
- Node slot PVCs marked extracted, from the same watch: which nodes hold a digest on disk, also the old one a kept
  serving PVC reads after their readiness label has moved on.
- The server's own tools image (its --tools-image), which a pod's kernel overlay runs.
- Nodes (a Node watch; the webhook's ServiceAccount needs list and watch on nodes): their labels, to answer "is any
  node usable for this pod?" before admitting it, indexed by readiness label and by GPU.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.marks import (
    is_serving,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    label_value,
    pinned_reference,
    readiness_label_key,
    serving_alias_name,
    short_digest,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KIND,
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    CLUSTER_CACHE_KIND,
    DIGEST_LABEL,
    HOSTNAME_LABEL,
    IMAGE_VOLUME,
    PVC,
    READINESS_LABEL_PREFIX,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.gpu_compat import (
    GPUSpecError,
    gpus_from_node_labels,
    normalize_gpu,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.view import pvc_record


class CacheTarget:
    """One cache as seen from a workload namespace.

    mode: PVC or imageVolume. digest: the resolved 'sha256:...' or None before the first reconcile. targets: the
    image's GPU targets ([] when unknown). readiness_key: the node label of a per-node PVC cache, else None.
    serving_digest: short digest of the namespace's serving PVC, None when it has none. serving_alias: while that PVC
    is kept at an older digest, the name of the alias serving the current one (distribute/serving.py), else None.
    overlay_variable: the variable a pod given the cache by annotation gets the kernel overlay as (kernels/plan.py,
    recorded by the reconcile), None when it gets the plain mount.
    """

    __slots__ = ("digest", "image", "mode", "name", "namespace", "overlay_variable", "readiness_key", "scope",
                 "serving_alias", "serving_digest", "targets")

    def __init__(self, name, namespace, scope, cache, serving_digest, serving_alias=None):
        self.name = name
        self.namespace = namespace
        self.scope = scope
        self.mode = cache.mode
        self.image = cache.image
        self.digest = cache.digest
        self.targets = cache.targets
        self.overlay_variable = cache.overlay_variable
        self.readiness_key = None
        if cache.mode == PVC and cache.per_node:
            self.readiness_key = readiness_label_key(name, namespace if scope == "namespaced" else "")
        self.serving_digest = serving_digest
        self.serving_alias = serving_alias

    @property
    def short_digest(self):
        return short_digest(self.digest) if self.digest else None

    @property
    def serving_claim(self):
        """The serving PVC a new pod mounts: the alias while there is one, else the PVC named as the cache."""
        return self.serving_alias or self.name

    def image_reference(self):
        """The digest-pinned reference an image volume mounts, None before the image is resolved."""
        return pinned_reference(self.image, self.digest) if self.digest and self.image else None

    def describe(self):
        if self.scope == "cluster":
            return 'ClusterGKMCache "{0}"'.format(self.name)
        return 'GKMCache "{0}/{1}"'.format(self.namespace, self.name)


class _Cache:
    __slots__ = ("digest", "image", "mode", "overlay_variable", "per_node", "targets", "workload_namespaces")

    def __init__(self, cache):
        self.mode = cache.mount_mode
        self.per_node = cache.per_node
        self.image = cache.image
        self.digest = cache.digest
        # An imageVolume cache that asks for a signature check mounts only the digest its reconcile recorded (verified
        # first when the operator has the key, distribute/image_signature.py), never its spec's own unchecked digest.
        if self.digest is None and not (self.mode == IMAGE_VOLUME and cache.signature_format):
            self.digest = cache.pinned_digest
        self.targets = _targets(cache.status_targets)
        self.overlay_variable = cache.overlay_variable
        self.workload_namespaces = frozenset(cache.workload_namespaces)


def _targets(listed):
    """The image's GPU targets from status.targets ({backend, arch, warpSize}); unusable ones are left out."""
    targets = []
    for target in listed if isinstance(listed, list) else ():
        if not isinstance(target, dict):
            continue
        try:
            targets.append(normalize_gpu({"backend": target.get("backend"), "arch": target.get("arch"),
                                          "warp_size": target.get("warpSize")}))
        except GPUSpecError:
            continue
    return targets


def _gpu_key(labels):
    try:
        gpus = gpus_from_node_labels(labels)
    except GPUSpecError:
        return None
    return tuple(sorted(gpus[0].items())) if gpus else None


def _discard(index, key, name):
    """Take name out of index[key], dropping the key once empty (old digests would otherwise pile up)."""
    index[key].discard(name)
    if not index[key]:
        del index[key]


def _key(obj):
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "", metadata.get("name") or ""


class SteeringView:
    """tools_image: the tools image the server runs, which a pod's kernel overlay init container runs
    (webhook/admission/kernel_overlay.py); None when the server was not told it, and then no pod gets the overlay."""

    def __init__(self, tools_image=None):
        self.tools_image = tools_image
        self._caches = {CACHE_KIND: {}, CLUSTER_CACHE_KIND: {}}  # kind -> {(namespace, name): _Cache}
        self._cluster_by_name = {}
        self._serving = {}  # (namespace, pvc name) -> (cache, cache namespace, short digest)
        self._nodes = {}  # name -> Node with metadata (name, labels) only
        self._node_by_label = {}  # label_value(name), as slot PVCs name their node -> name
        self._held = {}  # (namespace, cache, cache namespace, short digest) -> {node label value}
        self._held_by_pvc = {}  # (namespace, pvc name) -> (that key, node label value)
        self._ready = {}  # readiness key -> short digest -> {node}
        self._by_gpu = {}  # normalized GPU -> {node}

    # -- feeding ---------------------------------------------------------------------------

    def set_cache(self, kind, key, cache):
        """One cache read from its watch event (contract.read_cache), None once deleted; key: (namespace, name)."""
        if cache is None:
            self._caches[kind].pop(key, None)
        else:
            self._caches[kind][key] = _Cache(cache)
        self._caches_changed(kind)

    def set_caches(self, kind, caches):
        """Every cache of one kind, {key: CacheResource} from a fresh LIST."""
        self._caches[kind] = {key: _Cache(cache) for key, cache in caches.items()}
        self._caches_changed(kind)

    def _caches_changed(self, kind):
        if kind == CLUSTER_CACHE_KIND:
            self._cluster_by_name = {name: cache for (_namespace, name), cache in self._caches[kind].items()}

    def apply_pvc_event(self, event_type, obj):
        """A managed PVC's event: serving PVCs, and node slot PVCs marked extracted (not being deleted)."""
        key = _key(obj)
        self._serving.pop(key, None)
        self._forget_held(key)
        if event_type == "DELETED":
            return
        if is_serving(obj):
            labels = obj["metadata"].get("labels") or {}
            self._serving[key] = (labels.get(CACHE_LABEL), labels.get(CACHE_NAMESPACE_LABEL, ""),
                                  labels.get(DIGEST_LABEL))
            return
        record = pvc_record(obj)
        if record is not None and record.node and record.extracted and not obj["metadata"].get("deletionTimestamp"):
            held = (key[0], record.cache, record.cache_namespace, record.digest)
            self._held.setdefault(held, set()).add(record.node)
            self._held_by_pvc[key] = (held, record.node)

    def _forget_held(self, key):
        held, node = self._held_by_pvc.pop(key, (None, None))
        if held is not None:
            _discard(self._held, held, node)

    def replace_pvcs(self, items):
        self._serving, self._held, self._held_by_pvc = {}, {}, {}
        for obj in items:
            self.apply_pvc_event("ADDED", obj)

    def apply_node_event(self, event_type, obj):
        name = _key(obj)[1]
        self._forget_node(name)
        if event_type == "DELETED":
            return
        labels = dict((obj.get("metadata") or {}).get("labels") or {})
        self._nodes[name] = {"metadata": {"name": name, "labels": labels}}
        self._node_by_label[label_value(name)] = name
        for key, value in labels.items():
            if key.startswith(READINESS_LABEL_PREFIX):
                self._ready.setdefault(key, {}).setdefault(value, set()).add(name)
        gpu = _gpu_key(labels)
        if gpu is not None:
            self._by_gpu.setdefault(gpu, set()).add(name)

    def replace_nodes(self, items):
        self._nodes, self._node_by_label, self._ready, self._by_gpu = {}, {}, {}, {}
        for obj in items:
            self.apply_node_event("ADDED", obj)

    def _forget_node(self, name):
        node = self._nodes.pop(name, None)
        if node is None:
            return
        self._node_by_label.pop(label_value(name), None)
        labels = node["metadata"]["labels"]
        for key, value in labels.items():
            if key.startswith(READINESS_LABEL_PREFIX):
                _discard(self._ready[key], value, name)
                if not self._ready[key]:
                    del self._ready[key]
        gpu = _gpu_key(labels)
        if gpu is not None:
            _discard(self._by_gpu, gpu, name)

    # -- asking ----------------------------------------------------------------------------

    def resolve(self, namespace, name):
        """The CacheTarget `name` names in namespace (a GKMCache there shadows a ClusterGKMCache), or None."""
        cache = self._caches[CACHE_KIND].get((namespace, name))
        scope, cache_namespace = "namespaced", namespace
        if cache is None:
            cache = self._cluster_by_name.get(name)
            if cache is None or namespace not in cache.workload_namespaces:
                return None
            scope, cache_namespace = "cluster", ""
        serving = self._serving.get((namespace, name))
        serving_digest = serving[2] if serving and serving[:2] == (name, cache_namespace) else None
        current = short_digest(cache.digest) if cache.digest else None
        alias = None
        if serving_digest is not None and current and serving_digest != current:
            named = serving_alias_name(name, current)
            alias = named if self._serving.get((namespace, named)) == (name, cache_namespace, current) else None
        return CacheTarget(name, namespace, scope, cache, serving_digest, alias)

    def node(self, name):
        return self._nodes.get(name)

    def node_count(self):
        return len(self._nodes)

    def ready_nodes(self, readiness_key, digest=None):
        """Names of the nodes labelled ready for the cache: at that short digest, or at any."""
        by_digest = self._ready.get(readiness_key, {})
        if digest is not None:
            return set(by_digest.get(digest, ()))
        return set().union(*by_digest.values()) if by_digest else set()

    def holding_nodes(self, target, digest):
        """Names of the nodes whose slot of the cache in the target's namespace is extracted at that short digest,
        labelled or not (the planner keeps an old digest's slots while pods on the node read them through the serving
        PVC, or until every node has the new digest)."""
        cache_namespace = target.namespace if target.scope == "namespaced" else ""
        labels = self._held.get((target.namespace, target.name, cache_namespace, digest), ())
        return {self._node_by_label[value] for value in labels if value in self._node_by_label}

    def hostname(self, name):
        """The node's kubernetes.io/hostname label, None when it has none."""
        return self._nodes[name]["metadata"]["labels"].get(HOSTNAME_LABEL)

    def gpu_nodes(self, targets):
        """Names of the nodes whose GPU labels fit one of the (normalized) targets."""
        names = set()
        for target in targets:
            names |= self._by_gpu.get(tuple(sorted(target.items())), set())
        return names

    def all_nodes(self):
        return set(self._nodes)
