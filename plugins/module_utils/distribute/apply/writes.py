# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A plan written to the cluster (I/O), in the order the controllers need: namespaces, then deletions (slot PVs once
the scrub cleared their nodes' disks), then, once replaced names are free, every apply kind by kind."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import SLOT_ACCESS_LABEL
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.scrub import bind_to_claim

# A PVC binds at once only if the PV controller already has its PV when it first syncs the claim; otherwise it binds
# at the controller's next resync, up to 15 s later. A PV the controller has synced leaves phase Pending (Available,
# or Bound), so new PVs are waited for that long at most before their PVCs are written: never longer than the resync.
PV_SYNC_TIMEOUT_SECONDS = 15.0
# The PV controller answers in tens of milliseconds.
BIND_POLL_SECONDS = 0.1


def execute(kube, plan, replace_timeout, scrub):
    """Write the plan: namespaces, then deletions (slot PVs once scrub cleared their nodes' disks), then
    (after replaced names are free) every apply."""
    actions = plan.ordered_actions()
    errors = []

    def record(batch, results):
        for index, action in enumerate(batch):
            result = results[index]
            if isinstance(result, Exception):
                errors.append({"action": action.verb, "kind": action.kind, "namespace": action.namespace,
                               "name": action.name, "error": str(result)})

    def apply(action):
        # The reply (the whole object, managedFields too) is not kept: a batch of thousands held every reply
        # until it ended, the largest part of a run's memory when it records extractions.
        kube.apply(action.body)

    namespaces = [a for a in actions if a.kind == "Namespace"]
    record(namespaces, kube.map(apply, namespaces))
    removals = scrub.clear_removals([a for a in actions if a.verb in ("delete", "replace")], errors,
                                    plan.kept_directories)
    record(removals, kube.map(lambda a: kube.delete(a.kind, a.name, a.namespace), removals))
    replaced = [a for a in actions if a.verb == "replace"]
    applies = [a for a in actions if a.verb in ("create", "update") and a.kind != "Namespace"]
    if kube.dry_run:
        # A dry-run delete leaves the object in place, and objects in a namespace that does not exist yet
        # cannot be dry-run: both are shown in the plan without a server round trip.
        new_namespaces = {a.name for a in namespaces}
        applies = [a for a in applies if a.namespace not in new_namespaces]
    elif replaced:
        stuck = kube.wait_gone([(a.kind, a.namespace, a.name) for a in replaced], replace_timeout)
        for kind, namespace, name in stuck:
            errors.append({"action": "replace", "kind": kind, "namespace": namespace, "name": name,
                           "error": "still terminating after %ss (finalizers); re-run later" % replace_timeout})
        stuck_refs = set(stuck)
        applies += [a for a in replaced if (a.kind, a.namespace, a.name) not in stuck_refs]
    # Kind by kind: a PVC binds at once only if the PV controller has seen its PV, and a Job's pod is
    # scheduled at once only if its PVC is bound; otherwise the controllers retry seconds later.
    # A new access PV (render.render_access) waits for its PVC, whose uid binds it to that claim alone.
    bound_later = [a for a in applies if a.kind == "PersistentVolume" and a.verb == "create" and _access(a.body)]
    later = {id(a) for a in bound_later}
    for kind in planner.KIND_ORDER[1:]:
        batch = [a for a in applies if a.kind == kind and id(a) not in later]
        new = [a for a in batch if a.verb != "update"]
        # Updates first: a PVC's mark of a finished extraction lands before the next wave's new PVC, so no reader
        # ever sees two nodes upgrading under maxUnavailable 1.
        for part in ([a for a in batch if a.verb == "update"], new):
            record(part, kube.map(apply, part))
        if kind == "PersistentVolume" and not kube.dry_run:
            _wait_pvs_synced(kube, [a.name for a in new])
        if kind == "PersistentVolumeClaim" and bound_later:
            record(bound_later, kube.map(lambda a: _apply_bound(kube, a), bound_later))
    return errors


def _access(pv):
    return SLOT_ACCESS_LABEL in (pv["metadata"].get("labels") or {})


def _apply_bound(kube, action):
    """The access PV with its claim's uid; in a dry run the claim was not created, so the PV is checked unbound."""
    claim_ref = action.body["spec"]["claimRef"]
    claim = None if kube.dry_run else kube.get("PersistentVolumeClaim", claim_ref["name"], claim_ref["namespace"])
    if claim is None and not kube.dry_run:
        raise KubeError("PVC %s/%s to bind PV %s to is missing" % (claim_ref["namespace"], claim_ref["name"],
                                                                   action.name))
    kube.apply(bind_to_claim(action.body, claim) if claim else action.body)


def _wait_pvs_synced(kube, names):
    """Wait until the PV controller has synced each new PV (its phase is no longer Pending), at most
    PV_SYNC_TIMEOUT_SECONDS: past that its PVCs bind at the controller's resync anyway."""
    deadline = time.monotonic() + PV_SYNC_TIMEOUT_SECONDS
    while names and time.monotonic() < deadline:
        found = kube.map(lambda name: kube.get("PersistentVolume", name), names)
        names = [name for name, pv in zip(names, found) if isinstance(pv, Exception) or (pv and not _synced(pv))]
        if names:
            time.sleep(BIND_POLL_SECONDS)


def _synced(pv):
    return ((pv.get("status") or {}).get("phase") or "Pending") != "Pending"
