# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A cache's per-slot status entries read back from its per-node objects (node_objects.py), pure.

The entries have status.py's shape (namespace, node, digest, pvc, job, pv, phase, reason, message), so what
reads a cache's status (cache_info, the status playbook's per-node lines) reads the per-node objects the
same way. GKM's condition types become our phases (Downloading is Extracting, Running is Extracted in use);
a GPU node that does not get the cache is one entry with phase Excluded or Incompatible and the reason.
A ReadOnlyMany cache's shared PVC, listed on every node, is one entry with no node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    EXTRACTED,
    EXTRACTING,
    RUNNING,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_status import DOWNLOADING

_PHASES = {DOWNLOADING: EXTRACTING, RUNNING: EXTRACTED}
SHARED_PVC_OWNER = "Operator"


def _short(digest):
    return short_digest(digest) if digest.startswith("sha256:") else digest


def cache_entries(objects, cache):
    """The status entries of `cache` from the per-node objects of its kind (and namespace), sorted."""
    entries, shared = [], set()
    for obj in objects:
        status = obj.get("status") or {}
        node = status.get("nodeName") or obj["metadata"]["name"]
        for digest, state in sorted(((status.get("caches") or {}).get(cache) or {}).items()):
            if state.get("reason"):
                entries.append({"namespace": "", "node": node, "digest": _short(digest), "phase": state["state"],
                                "reason": state["reason"], "message": state.get("message") or ""})
            for namespace, pvc in sorted((state.get("pvcStatus") or {}).items()):
                on_node = pvc.get("pvcOwner") != SHARED_PVC_OWNER
                if not on_node and (namespace, pvc.get("pvcName"), digest) in shared:
                    continue
                shared.add((namespace, pvc.get("pvcName"), digest))
                condition = (pvc.get("conditions") or [{}])[0]
                kind = condition.get("type") or "Pending"
                entry = {"namespace": namespace, "node": node if on_node else "", "digest": _short(digest),
                         "pvc": pvc.get("pvcName") or "", "job": pvc.get("jobName") or "",
                         "phase": _PHASES.get(kind, kind)}
                for key, value in (("pv", pvc.get("pvName")), ("reason", condition.get("reason")),
                                   ("message", condition.get("message"))):
                    if value and not (key == "reason" and value == kind):
                        entry[key] = value
                # The node's running pods at this digest, of this namespace: the ones mounting this slot's PVC.
                users = ["%s/%s" % (p["podNamespace"], p["podName"]) for p in state.get("pods") or []
                         if on_node and p.get("podNamespace") == namespace]
                if users:
                    entry["mounted_by"] = users
                entries.append(entry)
    entries.sort(key=lambda e: (e["namespace"], e["node"], e["digest"]))
    return entries
