# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rendering, pure: the PV, PVC, Job and Namespace objects of one cache slot, each carrying the hash of
the spec it was rendered from (the registry Secret is registry_secret.py's).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import functools
import hashlib
import json

from ansible_collections.gkm.cluster.plugins.module_utils.contract.marks import extracted_mark
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    HOSTNAME_LABEL,
    IMAGE_ANNOTATION,
    SLOT_ACCESS_LABEL,
    SPEC_HASH_ANNOTATION,
    SYSTEM_NAMESPACE,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import registry_secret, verification
from ansible_collections.gkm.cluster.plugins.module_utils.oci.gpu_compat import gpus_from_node_labels

# The PVC is mounted at /gkm and the cache goes one level down: the extractor swaps a finished tree
# into place with a rename, which a volume's mount point itself cannot take part in.
CACHE_MOUNT_PATH = "/gkm"
EXTRACT_DEST = "/gkm/cache"
EXTRACT_CONTAINER = "extract"
# The tools image's unprivileged user. fsGroup makes volumes of most storage classes writable for it, but
# not hostPath ones, whose directories the kubelet makes root's: there the extractor runs as uid 0 with every
# capability dropped (_extract_container), so the published tree is root's and no other uid may change it.
EXTRACT_UID = 1000
EXTRACT_CLI_MODULE = "ansible_collections.gkm.cluster.plugins.module_utils.extract.job_main"
TERMINATION_LOG = "/dev/termination-log"
# job_main's exit codes for a refusal, bad arguments, an unwritable volume and a signature that does not verify:
# a retry cannot help, so the Job fails at once (code 3, registry unreachable, is retried up to backoff_limit).
FAIL_JOB_EXIT_CODES = (1, 2, 4, 5)
API_VERSIONS = {"Namespace": "v1", "PersistentVolume": "v1", "PersistentVolumeClaim": "v1", "Job": "batch/v1"}


# ---------------------------------------------------------------- rendering


def spec_hash(spec_body):
    encoded = json.dumps(spec_body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()[:16]


def _object(kind, name, namespace, labels, annotations, spec_body, hashed=None, content_hash=None):
    """hashed: what the spec hash covers when more than the spec decides the object's content; content_hash: that
    hash already computed."""
    metadata = {"name": name, "labels": labels, "annotations": dict(annotations)}
    if namespace:
        metadata["namespace"] = namespace
    metadata["annotations"][SPEC_HASH_ANNOTATION] = content_hash or spec_hash(spec_body if hashed is None else hashed)
    return {"apiVersion": API_VERSIONS[kind], "kind": kind, "metadata": metadata, "spec": spec_body}


def _hostname(node):
    return (node["metadata"].get("labels") or {}).get(HOSTNAME_LABEL)


def _node_name_term(node_name):
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}


def render_pv(spec, slot, node, storage_class_name, access=False):
    """A hostPath PV pre-bound to the slot's PVC; per-node PVs carry node affinity for the scheduler.

    access: the PV of the slot's directory the extraction Job's PVC in the system namespace binds (render_access).
    """
    claim = (spec.system_namespace, slot.access_name()) if access else (slot.namespace, slot.pvc_name())
    body = {
        "capacity": {"storage": spec.size},
        "accessModes": list(spec.access_modes),
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": storage_class_name,
        "hostPath": {"path": slot.host_path(spec.host_path_root), "type": "DirectoryOrCreate"},
        "claimRef": {"namespace": claim[0], "name": claim[1]},
    }
    if node is not None:
        hostname = _hostname(node)
        term = ({"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [hostname]}]}
                if hostname else _node_name_term(node["metadata"]["name"]))
        body["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    if access:
        return _object("PersistentVolume", slot.access_name(), None, _access_labels(slot),
                       {IMAGE_ANNOTATION: spec.image}, body)
    return _object("PersistentVolume", slot.pv_name(), None, slot.labels(), {IMAGE_ANNOTATION: spec.image}, body)


def _access_labels(slot):
    return dict(slot.system_labels(), **{SLOT_ACCESS_LABEL: "true"})


def render_access(spec, slot, node, storage_class_name):
    """(PVC, PV) through which the slot's extraction Job, in the system namespace, writes the slot's directory.

    The PV is written after the PVC, its claimRef then given the PVC's uid (scrub.bind_to_claim, apply/writes.py),
    so it binds that claim alone. Neither is ever scrubbed (scrub.is_slot_pv): the slot's own PV owns the directory.
    """
    pvc = _object("PersistentVolumeClaim", slot.access_name(), spec.system_namespace, _access_labels(slot),
                  {IMAGE_ANNOTATION: spec.image}, _claim_body(tuple(spec.access_modes), spec.size, storage_class_name),
                  content_hash=_claim_hash(tuple(spec.access_modes), spec.size, storage_class_name,
                                           spec.verification))
    return pvc, render_pv(spec, slot, node, storage_class_name, access=True)


def render_pvc(spec, slot, storage_class_name, extracted):
    """The slot's PVC. Our PVs name it in claimRef, which binds them; the PVC itself leaves volumeName
    empty, so with a WaitForFirstConsumer class the scheduler binds it while placing the Job's pod
    (a PVC naming a volume not yet bound would count as an unbound immediate claim and stall the pod).

    Its hash covers the signature check too: data extracted unchecked, or checked with another key or format,
    is not what is asked for, so the slot is extracted again (kept while pods mount it, like an old digest).
    """
    body = _claim_body(tuple(spec.access_modes), spec.size, storage_class_name)
    annotations = {IMAGE_ANNOTATION: spec.image}
    if extracted:
        annotations.update(extracted_mark(spec.digest))
    return _object("PersistentVolumeClaim", slot.pvc_name(), slot.namespace, slot.labels(), annotations, body,
                   content_hash=_claim_hash(tuple(spec.access_modes), spec.size, storage_class_name,
                                            spec.verification))


def _claim_body(access_modes, size, storage_class_name):
    body = {"accessModes": list(access_modes), "resources": {"requests": {"storage": size}}}
    if storage_class_name is not None:
        body["storageClassName"] = storage_class_name
    return body


@functools.lru_cache(maxsize=16)
def _claim_hash(access_modes, size, storage_class_name, job_verification):
    """The spec hash of a cache's PVCs: the same for all of them, so computed once per run, not once per slot."""
    body = _claim_body(access_modes, size, storage_class_name)
    checked = verification.identity(job_verification)
    return spec_hash(dict(body, signatureCheck=checked) if checked else body)


def extraction_command(spec, node):
    """The container command: the tools image runs the collection's cache_extract CLI into the PVC.

    A pinned Job also names its node's GPUs (the planner read its labels), so the extractor re-checks
    compatibility on its own without API access.
    """
    command = ["python3", "-m", EXTRACT_CLI_MODULE, "--image", spec.image, "--dest", EXTRACT_DEST,
               "--termination-log", TERMINATION_LOG, *spec.extract_args,
               *registry_secret.extractor_args(spec.registry_files)]
    if node is not None and spec.compatibility != "ignore":
        gpus = gpus_from_node_labels(node["metadata"].get("labels"))
        for gpu in gpus:
            command += ["--gpu", "%s/%s/%s" % (gpu["backend"], gpu["arch"], gpu["warp_size"])]
        if gpus:
            command += ["--compatibility", "fail"]
    return command


def _pinned_scheduling(spec, node):
    """nodeSelector and affinity of the Job's pod: the user's, with the node pin merged in, never replaced."""
    node_selector = dict(spec.pod_spec("nodeSelector") or {})
    affinity = spec.pod_spec("affinity")
    if node is None:
        return node_selector, affinity
    hostname = _hostname(node)
    if hostname:
        node_selector[HOSTNAME_LABEL] = hostname
        return node_selector, affinity
    # Without a hostname label, pin by node name the way the DaemonSet controller does.
    affinity = copy.deepcopy(affinity) or {}
    required = affinity.setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    pin = _node_name_term(node["metadata"]["name"])["matchFields"]
    required["nodeSelectorTerms"] = [dict(term, matchFields=(term.get("matchFields") or []) + pin) for term in terms]
    return node_selector, affinity


def _extract_container(spec, node, as_root):
    """The extractor: under the restricted Pod Security profile, or with `as_root` (set_volume_owner) as uid 0 with
    every capability dropped, which baseline allows. Root without capabilities writes only what root owns (the
    directory the kubelet made), never over another uid's modes, and owns every file it writes: the tree it
    publishes (files 0444, directories 0555) is changed by no other uid, a tenant's pod running as uid 1000 included
    (issue 31, class 1)."""
    context = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    if as_root:
        context.update(runAsUser=0, runAsGroup=0, runAsNonRoot=False)
    mounts = [{"name": "cache", "mountPath": CACHE_MOUNT_PATH}, {"name": "tmp", "mountPath": "/tmp"}]
    if spec.registry_files:
        mounts.append({"name": registry_secret.VOLUME_NAME, "mountPath": registry_secret.MOUNT_PATH,
                       "readOnly": True})
    return {
        "name": EXTRACT_CONTAINER,
        "image": spec.extract_image,
        "imagePullPolicy": "IfNotPresent",
        "command": extraction_command(spec, node),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": context,
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        "volumeMounts": mounts,
    }


def in_system_namespace(spec, make_pvs):
    """Whether a cache's extraction Jobs run in the system namespace: when they write hostPath slots (through
    render_access) and the admin asks it, so the registry Secret and key they mount are in no tenant's reach; a
    provisioned volume can only be mounted through the slot's own PVC, in the slot's namespace."""
    return bool(make_pvs and spec.system_namespace_jobs)


def registry_secrets_namespace(options):
    """The one namespace every Jobs' registry Secret lives in when the distribution options put every extraction Job
    in the system namespace: system_namespace_jobs, and create_pvs `always`, so no slot is a provisioned volume whose
    Job stays in the slot's namespace (in_system_namespace). None: Secrets in the caches' namespaces. The controller
    watches Secrets there only, and the in-cluster operator's RBAC grants Secrets there only (docs/security.md,
    class 12)."""
    if options.get("system_namespace_jobs") and options.get("create_pvs") == "always":
        return options.get("system_namespace") or SYSTEM_NAMESPACE
    return None


def job_namespace(spec, slot, in_system):
    return spec.system_namespace if in_system else slot.namespace


def render_job(spec, slot, node, set_volume_owner=False, in_system=False):
    """The extraction Job, with bounded retries and lifetime; `set_volume_owner` runs the extractor as root without
    capabilities (_extract_container).

    Without it the pod meets Pod Security `restricted`, with it `baseline`. `in_system` (in_system_namespace): it runs
    in the system namespace and mounts the slot's access PVC there.
    """
    namespace = job_namespace(spec, slot, in_system)
    node_selector, affinity = _pinned_scheduling(spec, node)
    labels = slot.system_labels() if in_system else slot.labels()
    pod_labels = spec.pod_metadata("labels")
    pod_labels.update(labels)
    volumes = [
        {"name": "cache", "persistentVolumeClaim": {"claimName": slot.access_name() if in_system else slot.pvc_name()}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if spec.registry_files:
        # 0440 and fsGroup: the extractor reads it through its group, nobody else can.
        volumes.append({"name": registry_secret.VOLUME_NAME, "secret": {
            "secretName": registry_secret.secret_name(spec.name, spec.cache_namespace, namespace),
            "defaultMode": 0o440}})
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": EXTRACT_UID,
            "runAsGroup": EXTRACT_UID,
            "fsGroup": EXTRACT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_extract_container(spec, node, set_volume_owner)],
        "volumes": volumes,
    }
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if affinity:
        pod_spec["affinity"] = affinity
    if spec.pod_spec("tolerations"):
        pod_spec["tolerations"] = spec.pod_spec("tolerations")
    template_metadata = {"labels": pod_labels}
    body = {
        "backoffLimit": spec.job_limits["backoff_limit"],
        "activeDeadlineSeconds": spec.job_limits["active_deadline_seconds"],
        "ttlSecondsAfterFinished": spec.job_limits["ttl_seconds_after_finished"],
        "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": list(FAIL_JOB_EXIT_CODES)}},
            # An evicted or preempted pod is not the extraction's failure: it does not use up a retry.
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]},
        "template": {"metadata": template_metadata, "spec": pod_spec},
    }
    return _object("Job", slot.job_name(), namespace, labels, {IMAGE_ANNOTATION: spec.image}, body)


def render_namespace(name):
    """Unlabelled: workloads move into it, so it is never ours to delete (undeploy leaves namespaces alone)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
