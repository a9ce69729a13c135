# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scrubbing, pure: which slot directories a PV deletion leaves on which node's disk, and the objects of
the node-pinned Job that removes them.

Deleting a hostPath PV (reclaim policy Retain) leaves its directory on the node. Before the collection
deletes slot PVs, one scrub Job per (node, cache root) removes their directories: the Job mounts a PV of
its own whose hostPath is the cache root, pinned to that node and bound to a PVC, so the pod needs no
hostPath volume. It runs extract/scrub_main.py as uid 0 with every capability dropped but DAC_OVERRIDE
(the slot's files belong to the extraction uid 1000, their parents to root), which Pod Security admits at
the baseline level, not restricted.

That PV reaches every cache on the node, so nothing of the scrub is where a tenant can reach it: the PVC and
the Job live in the collection's own namespace (system_namespace), under a name with a random part, and the
PV names the PVC's uid in its claimRef (a claimRef without one binds any claim of that namespace and name).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import STORE_DIRECTORY, label_value
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    DIGEST_LABEL,
    HOSTNAME_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    NODE_LABEL,
    POD_SECURITY_LABEL,
    SCRUB_LABEL,
    SERVING_LABEL,
    SLOT_ACCESS_LABEL,
)

SCRUB_MOUNT_PATH = "/gkm-root"
SCRUB_CONTAINER = "scrub"
SCRUB_CLI_MODULE = "ansible_collections.gkm.cluster.plugins.module_utils.extract.scrub_main"
# naming.Slot.host_path: <root>/<cache namespace or _cluster>/<cache>/<namespace or _store>/<digest>.
SLOT_DEPTH = 4
# A hostPath PV's capacity is a label, not a limit; the PVC only has to fit in it.
SCRUB_CAPACITY = "1Mi"
# A finished scrub Job is deleted by the run; if the run dies first, the Job controller removes it.
SCRUB_TTL_SECONDS = 3600
SCRUB_NAME_PREFIX = "gkm-scrub-"
# The scrub's pod runs as uid 0 with DAC_OVERRIDE: the system namespace, when the run creates it, admits it.
SCRUB_POD_SECURITY = "baseline"


class ScrubTarget:
    """The slot directories one Job removes: on `node`, under `root`; `pvs` are the PVs they belong to."""

    __slots__ = ("node", "paths", "pinned", "pvs", "root")

    def __init__(self, node, root):
        self.node = node
        self.root = root
        self.paths = []
        self.pvs = set()
        # False while every PV here lacks node affinity: the node is only one where the directory may be.
        self.pinned = False

    def add(self, relative, pv_name, pinned):
        if relative not in self.paths:
            self.paths.append(relative)
        self.pvs.add(pv_name)
        self.pinned = self.pinned or pinned

    def to_dict(self):
        return {"node": self.node, "root": self.root, "paths": sorted(self.paths)}


def is_slot_pv(pv):
    """A cache slot's hostPath PV (not a scrub Job's own, nor a serving or an extraction Job's access PV, which only
    point into the slots)."""
    labels = pv["metadata"].get("labels") or {}
    return (labels.get(MANAGED_BY_LABEL) == MANAGER and CACHE_LABEL in labels and SCRUB_LABEL not in labels
            and SERVING_LABEL not in labels and SLOT_ACCESS_LABEL not in labels
            and bool(host_path(pv)))


def host_path(pv):
    """The directory a hostPath PV points at ('' for any other PV)."""
    return ((pv.get("spec") or {}).get("hostPath") or {}).get("path") or ""


def directory(pv):
    """(host path, node affinity) of a hostPath PV: the directory on the nodes it names. A slot's path holds no node,
    so two PVs share a directory only when their affinity names the same nodes too (the planner renders one node's PVs
    alike)."""
    return host_path(pv), json.dumps((pv.get("spec") or {}).get("nodeAffinity"), sort_keys=True)


def slot_location(pv):
    """(cache root, slot path relative to it) of a slot PV, or None when its path is not laid out as the slot
    its labels name (then the root cannot be told, and nothing is removed)."""
    path = host_path(pv).rstrip("/")
    parts = path.split("/")
    if not path.startswith("/") or len(parts) < SLOT_DEPTH + 2 or any(p in ("", ".", "..") for p in parts[1:]):
        return None
    labels = pv["metadata"].get("labels") or {}
    namespace = ((pv.get("spec") or {}).get("claimRef") or {}).get("namespace")
    # A node's store directory stands where a namespace's would (naming.Slot.host_path).
    if parts[-2] == STORE_DIRECTORY:
        namespace = STORE_DIRECTORY
    expected = [labels.get(CACHE_NAMESPACE_LABEL) or "_cluster", labels.get(CACHE_LABEL), namespace]
    if parts[-SLOT_DEPTH:-1] != expected or not parts[-1].startswith(labels.get(DIGEST_LABEL) or "-"):
        return None
    return "/".join(parts[:-SLOT_DEPTH]), "/".join(parts[-SLOT_DEPTH:])


def has_node_affinity(pv):
    return bool((((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms"))


def pv_nodes(pv, nodes):
    """(names of the nodes whose disk may hold the PV's directory, pins that match no node).

    A PV pinned by node affinity lives on its node; one without (ReadOnlyMany) may be on every node.
    """
    if not has_node_affinity(pv):
        return sorted(node["metadata"]["name"] for node in nodes), []
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    by_hostname = {(n["metadata"].get("labels") or {}).get(HOSTNAME_LABEL): n["metadata"]["name"] for n in nodes}
    names = {n["metadata"]["name"] for n in nodes}
    found, missing = set(), []
    for term in terms:
        pins = [(by_hostname, value) for rule in term.get("matchExpressions") or [] if rule.get("key") == HOSTNAME_LABEL
                for value in rule.get("values") or []]
        pins += [({name: name for name in names}, value) for rule in term.get("matchFields") or []
                 if rule.get("key") == "metadata.name" for value in rule.get("values") or []]
        for table, value in pins:
            if value in table:
                found.add(table[value])
            else:
                missing.append(value)
    return sorted(found), missing


def plan_scrub(pvs, nodes):
    """(ScrubTargets sorted by (node, root), warnings naming what stays: paths on nodes that are gone, paths not
    laid out as a slot)."""
    targets, left = {}, []
    for pv in pvs:
        name = pv["metadata"]["name"]
        location = slot_location(pv)
        if location is None:
            left.append("%s (PV %s) is not laid out as the cache slot its labels name: left alone" % (
                host_path(pv), name))
            continue
        root, relative = location
        present, missing = pv_nodes(pv, nodes)
        pinned = has_node_affinity(pv)
        for node in present:
            targets.setdefault((node, root), ScrubTarget(node, root)).add(relative, name, pinned)
        left.extend("node %s is gone: %s/%s (PV %s) stays on its disk" % (node, root, relative, name)
                    for node in missing)
    return [targets[key] for key in sorted(targets)], left


def scrub_name(random_part):
    """The name of one scrub's PVC, PV and Job: the random part (the caller's) keeps it from being predicted."""
    return SCRUB_NAME_PREFIX + random_part


def system_namespace(name):
    """The collection's namespace as a scrub creates it when it is missing: labelled ours, at the Pod Security level
    the scrub's pod needs."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {
        MANAGED_BY_LABEL: MANAGER, POD_SECURITY_LABEL: SCRUB_POD_SECURITY}}}


def job_image(job):
    """The image of a Job's first container: the tools image a cache's extraction Jobs ran."""
    containers = ((((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or [{}]
    return containers[0].get("image")


def _labels(node):
    return {MANAGED_BY_LABEL: MANAGER, SCRUB_LABEL: "true", NODE_LABEL: label_value(node)}


def _node_term(node):
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}


def render_scrub(target, namespace, name, image, deadline_seconds):
    """[PVC, PV, Job] of one scrub: the claim in `namespace`, the root of the node's disk, and the Job. The PV's
    claimRef has no uid yet: bind_to_claim adds the created claim's."""
    labels = _labels(target.node)
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": {
               "accessModes": ["ReadWriteOnce"],
               "resources": {"requests": {"storage": SCRUB_CAPACITY}},
               "storageClassName": "",
               "volumeName": name,
           }}
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": labels}, "spec": {
        "capacity": {"storage": SCRUB_CAPACITY},
        "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        # A node that never had the root (a ReadOnlyMany slot is scrubbed on every node) gets it empty: with
        # type Directory the pod would wait for it forever. The root itself always stays.
        "hostPath": {"path": target.root, "type": "DirectoryOrCreate"},
        "claimRef": {"namespace": namespace, "name": name},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [_node_term(target.node)]}},
    }}
    pod_spec = {
        # Bound to the node directly: no scheduler, and no taint or cordon keeps the scrub off it.
        "nodeName": target.node,
        "tolerations": [{"operator": "Exists"}],
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": SCRUB_CONTAINER,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-m", SCRUB_CLI_MODULE, "--root", SCRUB_MOUNT_PATH, *sorted(target.paths)],
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]},
            },
            # The program's JSON report (or its error) becomes the termination message the run reports.
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
            "volumeMounts": [{"name": "root", "mountPath": SCRUB_MOUNT_PATH}],
        }],
        "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": name}}],
    }
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": {
               "backoffLimit": 1,
               "activeDeadlineSeconds": deadline_seconds,
               "ttlSecondsAfterFinished": SCRUB_TTL_SECONDS,
               "template": {"metadata": {"labels": labels}, "spec": pod_spec},
           }}
    return [pvc, pv, job]


def bind_to_claim(pv, claim):
    """A PV bound to the created claim alone, its uid in the claimRef: the scrub's, and a slot's access PV."""
    metadata = claim["metadata"]
    claim_ref = {"namespace": metadata["namespace"], "name": metadata["name"], "uid": metadata["uid"]}
    return dict(pv, spec=dict(pv["spec"], claimRef=claim_ref))


def pod_refusals(events):
    """The Job controller's FailedCreate events: admission (Pod Security, quotas) refusing the Job's pod."""
    return ["pod refused: %s" % event.get("message") for event in events if event.get("reason") == "FailedCreate"][-1:]


def failure_message(job, pods, events=()):
    """Why a scrub Job failed: its containers' termination messages, else why its pod was refused, else the
    Job's own condition."""
    messages = []
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated") or {}
            if terminated.get("exitCode"):
                messages.append("exit %s: %s" % (terminated["exitCode"],
                                                 (terminated.get("message") or terminated.get("reason") or "").strip()))
    messages = messages or pod_refusals(events)
    if messages:
        return "; ".join(messages)
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return "%s: %s" % (condition.get("reason"), condition.get("message"))
    return "unknown"


def waiting_reason(pods, events=()):
    """What a scrub pod that has not finished waits for (image pull, admission), for a timeout message."""
    reasons = pod_refusals(events) if not pods else []
    for pod in pods:
        status = pod.get("status") or {}
        for container in status.get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting")
            if waiting:
                reasons.append("%s %s" % (waiting.get("reason"), waiting.get("message") or ""))
        if not reasons:
            reasons.append("pod %s" % status.get("phase"))
    return "; ".join(reason.strip() for reason in reasons) or "no pod yet"
