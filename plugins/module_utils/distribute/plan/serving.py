# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving PVC of a ReadWriteOnce cache, pure: one PVC per namespace named exactly as the cache, bound to a hostPath
PV without node affinity, so any pod (Deployment, StatefulSet, Job, bare Pod) that names the cache in claimName
mounts its own node's copy.

It works because every node's slot has the same directory: naming.Slot.host_path leaves the node out, and the extraction
Job publishes the finished tree at `<slot path>/cache` with an atomic swap (extract/tree.py). The serving PV points at
that directory with hostPath type Directory: on a node where the cache is not extracted the kubelet refuses the mount
(and retries) instead of handing the pod an empty directory.

The PV's path holds the digest, so a new digest needs a new PV and the PVC (bound, immutable) is replaced: at once while
no pod mounts it, otherwise it is kept, reported Outdated, and replaced by the first run that finds it unused.
Meanwhile, once every node of the namespace has the new digest, a second serving PVC at the new digest, `<cache>-<short
digest>` (the alias), serves new pods: the webhook rewrites their claim of the cache to it
(webhook/admission/steering.py), so they read the new digest while the running pods keep the old one. The alias stays
while pods mount it. A pod reading a node's slot through any serving PVC counts as a user of that slot, so the slot's
directory is never scrubbed under it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.marks import (
    is_serving,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    MAX_NAME,
    Slot,
    label_value,
    serving_alias_name,
    short_digest,
    stable_hash,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    DIGEST_LABEL,
    IMAGE_ANNOTATION,
    NODE_LABEL,
    SERVING_LABEL,
    SPEC_HASH_ANNOTATION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.render import (
    CACHE_MOUNT_PATH,
    EXTRACT_DEST,
    spec_hash,
)

# The SlotState outcome of a serving PVC at the current digest (status.py counts its pods as running).
SERVING = "serving"
# Where the Job's atomic swap publishes the tree, relative to the slot's directory.
PUBLISHED_DIRECTORY = EXTRACT_DEST[len(CACHE_MOUNT_PATH):].strip("/")
ACCESS_MODES = ["ReadOnlyMany"]


def wanted(spec, make_pvs):
    """A serving PVC exists for a present per-node cache whose slots are our hostPath PVs (a provisioner's
    volumes have no common path) unless serving_pvc is off; the planner also wants an eligible node."""
    return spec.state == "present" and spec.per_node and spec.serving_pvc and make_pvs


def published_path(spec, namespace, shared):
    """The directory every node's extraction publishes for (cache, namespace, digest), or with `shared` for (cache,
    digest) in the node's store: the same on every node."""
    return "%s/%s" % (Slot(spec.name, spec.cache_namespace, namespace, "", spec.digest, shared).host_path(
        spec.host_path_root), PUBLISHED_DIRECTORY)


def pv_name(spec, namespace, alias=False):
    """`gkm-<cache>-serving-<hash>`; the hash covers cache, namespaces and digest (PVs are cluster-scoped), and
    for the alias that it is one."""
    parts = ("serving-pv", spec.name, spec.cache_namespace, namespace, spec.digest) + (("alias",) if alias else ())
    suffix = "-serving-" + stable_hash(*parts)
    return "gkm-" + spec.name[:MAX_NAME - len(suffix) - 4].rstrip("-") + suffix


def _labels(spec, namespace):
    labels = Slot(spec.name, spec.cache_namespace, namespace, "", spec.digest).labels()
    labels[SERVING_LABEL] = "true"
    return labels


def _object(api_version, kind, name, namespace, spec, body, hashed=None):
    """hashed: what the spec hash covers, when not the body itself."""
    metadata = {"name": name, "labels": _labels(spec, namespace),
                "annotations": {IMAGE_ANNOTATION: spec.image, SPEC_HASH_ANNOTATION: spec_hash(hashed or body)}}
    if kind == "PersistentVolumeClaim":
        metadata["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": body}


def render(spec, namespace, shared, alias=False):
    """(PV, PVC) serving the cache in `namespace`, the PVC named as the cache or, with alias, alias_name; `shared`: the
    nodes' slots are their shared store (naming.Slot.shared). The PV names
    the PVC in its claimRef and both use no storage class (""), so they bind at once and no provisioner or default
    class takes part. The PVC leaves volumeName empty, as the slots' do: with it, the PV controller's volume and claim
    workers both write the PV's phase while binding, and the one that loses the race leaves the PVC Pending until the
    controller's resync, 15 s later. Its spec hash still covers the PV's name, as when the PVC named it, so serving
    PVCs made before are not replaced; with `shared` it covers the PV's path too, so one made before the store is
    replaced as for a new digest (kept while pods mount it): its bound PV, at the old path, cannot be replaced under
    it."""
    name = pv_name(spec, namespace, alias)
    claim = serving_alias_name(spec.name, short_digest(spec.digest)) if alias else spec.name
    path = published_path(spec, namespace, shared)
    pv = _object("v1", "PersistentVolume", name, None, spec, {
        "capacity": {"storage": spec.size},
        "accessModes": list(ACCESS_MODES),
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "hostPath": {"path": path, "type": "Directory"},
        "claimRef": {"namespace": namespace, "name": claim},
    })
    body = {"accessModes": list(ACCESS_MODES), "resources": {"requests": {"storage": spec.size}},
            "storageClassName": ""}
    hashed = dict(body, volumeName=name, **({"path": path} if shared else {}))
    pvc = _object("v1", "PersistentVolumeClaim", claim, namespace, spec, body, hashed=hashed)
    return pv, pvc


def as_update(desired, live):
    """The object an update applies over the live one: a serving PVC of an earlier version named its PV in volumeName
    (ours, immutable once bound), which an apply without it would try to remove."""
    volume = (live.get("spec") or {}).get("volumeName")
    if desired["kind"] != "PersistentVolumeClaim" or not volume:
        return desired
    return dict(desired, spec=dict(desired["spec"], volumeName=volume))


def users_by_slot(live_objects, mounts):
    """{(namespace, node label value, short digest): pods} of the pods that read a node's slot through a live
    serving PVC; mounts is plan.pod_mounts' index."""
    users = {}
    for obj in live_objects:
        if obj.get("kind") != "PersistentVolumeClaim" or not is_serving(obj):
            continue
        metadata = obj["metadata"]
        digest = (metadata.get("labels") or {}).get(DIGEST_LABEL, "")
        for user in mounts.get((metadata.get("namespace") or "", metadata["name"]), []):
            if user.get("node"):
                users.setdefault((metadata.get("namespace") or "", label_value(user["node"]), digest), []).append(user)
    return users


def slot_key(pvc):
    """The users_by_slot key of a per-node slot PVC, None for any other PVC."""
    labels = pvc["metadata"].get("labels") or {}
    if not labels.get(NODE_LABEL) or is_serving(pvc):
        return None
    return pvc["metadata"].get("namespace") or "", labels[NODE_LABEL], labels.get(DIGEST_LABEL, "")
