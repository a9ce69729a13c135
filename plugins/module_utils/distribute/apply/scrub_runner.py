# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scrub the nodes' disks under the slot PVs a run is about to delete (I/O; the objects are scrub.py's).

One scrub Job per (node, cache root) runs at once on every node; the PVs of a node whose Job failed
or timed out are held back (not deleted), so a later run scrubs them again. Nodes that are gone
cannot be scrubbed: their paths are reported as warnings and their PVs go. The scrub's own PVC, PV
and Job, in the collection's namespace, are removed when it ends. In check mode nothing is created: the
report says what would go.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import secrets
import time

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError, WriteRefused
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    SCRUB_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (
    job_condition,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.trimmed import UNFINISHED_PODS
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.job_pods import (
    IMAGE_NOT_PULLABLE,
    pods_problem,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import pod_mounts
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.scrub import (
    bind_to_claim,
    directory,
    failure_message,
    host_path,
    is_slot_pv,
    job_image,
    plan_scrub,
    pod_refusals,
    render_scrub,
    scrub_name,
    system_namespace,
    waiting_reason,
)

POLL_SECONDS = 1.0
CLEANUP_SECONDS = 30
# Random bytes in a scrub's name (hex: twice as many characters).
NAME_BYTES = 5


class NodeDiskScrub:
    """Scrubs before deleting; `report()` is what the module returns under "scrub", `warnings` its warnings.

    namespace: the collection's own (system_namespace), where the scrub's PVC and Job run; created when
    missing. image: the tools image (the extraction Jobs' image); None falls back to the image of an
    extraction Job being deleted in the same run. skip_mounted: leave the directories of PVCs that running
    pods still mount (undeploy's sweep, which deletes such PVCs to let them go when the pods end).
    """

    def __init__(self, kube, namespace, image, timeout, skip_mounted=False):
        self.kube = kube
        self.namespace = namespace
        self.image = image
        self.timeout = timeout
        self.skip_mounted = skip_mounted
        self.nodes = []
        self.warnings = []

    def report(self):
        return {"nodes": self.nodes}

    def clear_removals(self, actions, errors, kept_directories=frozenset()):
        """The distribute runner's hook: scrub under the PVs the actions delete, but not a directory of
        kept_directories (one a PV the run leaves in place points at); returns the actions that may go ahead (a held
        PV's delete is dropped and an error recorded in the runner's shape)."""
        pvs = [a.body for a in actions if a.verb == "delete" and a.kind == "PersistentVolume"]
        images = [job_image(a.body) for a in actions if a.verb == "delete" and a.kind == "Job"]
        earlier = len(self.nodes)
        held = self.clear(pvs, images, kept_directories)
        for target in self.nodes[earlier:]:
            if target.get("error"):
                errors.append({"action": "scrub", "kind": "PersistentVolume", "namespace": "",
                               "name": ", ".join(sorted(target["pvs"])), "error": target["error"]})
        return [a for a in actions if not (a.kind == "PersistentVolume" and a.name in held)]

    def clear(self, pvs, images=(), kept_directories=frozenset()):
        """Scrub the disks under the slot PVs among `pvs`, except kept_directories (scrub.directory), which PVs that
        stay point at (a node's store, shared by the namespaces' slots); returns the names of the PVs that must
        stay."""
        pvs = [pv for pv in pvs if is_slot_pv(pv)]
        if self.skip_mounted:
            pvs, mounted = self._unmounted(pvs)
            kept_directories = kept_directories | {directory(pv) for pv in mounted}
        pvs = [pv for pv in pvs if directory(pv) not in kept_directories]
        if not pvs:
            return set()
        targets, left = plan_scrub(pvs, self.kube.list("Node", metadata_only=True))
        self.warnings.extend(left)
        image = self.image or next((image for image in images if image), None)
        if targets and not image:
            self.warnings.extend("no tools image to scrub with (set extract_image): %s/%s stays on node %s" % (
                t.root, path, t.node) for t in targets for path in sorted(t.paths))
            return set()
        if self.kube.dry_run:
            self.nodes.extend(dict(t.to_dict(), result="would remove") for t in targets)
            return set()
        if not targets:
            return set()
        self._run(targets, image)
        return {pv for target in self.nodes if target.get("error") for pv in target["pvs"]}

    # ------------------------------------------------------------ internals

    def _unmounted(self, pvs):
        """(the PVs no unfinished pod reads through its claim, the others). A finished pod still holds its claim
        (pvc-protection) but reads nothing more, so its directory may go."""
        namespaces = sorted({((pv["spec"].get("claimRef") or {}).get("namespace")) or "" for pv in pvs} - {""})
        listings = self.kube.map(lambda ns: self.kube.list("Pod", namespace=ns, field_selector=UNFINISHED_PODS),
                                 namespaces)
        mounts = pod_mounts([pod for pods in listings if not isinstance(pods, Exception) for pod in pods])
        failed = {ns for ns, pods in zip(namespaces, listings) if isinstance(pods, Exception)}
        unmounted, mounted = [], []
        for pv in pvs:
            claim = pv["spec"].get("claimRef") or {}
            users = mounts.get((claim.get("namespace") or "", claim.get("name")), [])
            if users or claim.get("namespace") in failed:
                self.warnings.append("%s (PV %s) stays on the node's disk: PVC %s/%s is mounted by %s" % (
                    host_path(pv), pv["metadata"]["name"], claim.get("namespace"),
                    claim.get("name"), ", ".join(u["name"] for u in users) or "pods that could not be listed"))
                mounted.append(pv)
            else:
                unmounted.append(pv)
        return unmounted, mounted

    def _run(self, targets, image):
        problem = self._namespace_problem()
        runs = []
        for target in targets:
            entry = dict(target.to_dict(), pvs=sorted(target.pvs))
            self.nodes.append(entry)
            if problem:
                entry["error"] = problem
                continue
            name = scrub_name(secrets.token_hex(NAME_BYTES))
            entry["job"] = "%s/%s" % (self.namespace, name)
            runs.append((entry, render_scrub(target, self.namespace, name, image, self.timeout), target.pinned))
        # The PVC, then the PV bound to that claim's uid alone, then the Job that mounts it.
        for position in range(3):
            pending = [run for run in runs if not run[0].get("error")]
            outcomes = self.kube.map(lambda run, at=position: self.kube.apply(run[1][at]), pending)
            for run, outcome in zip(pending, outcomes):
                if isinstance(outcome, Exception):
                    run[0]["error"] = "creating the scrub objects failed: %s" % outcome
                elif position == 0:
                    run[1][1] = bind_to_claim(run[1][1], outcome)
        self._wait([run for run in runs if not run[0].get("error")])
        self._remove_scrub_objects([objects for _entry, objects, _pinned in runs])

    def _namespace_problem(self):
        """Why the scrub cannot run in the collection's namespace (None when it can): created when missing (a
        reconcile may come before the gkm role), refused while it terminates."""
        try:
            found = self.kube.get("Namespace", self.namespace)
            if found is None:
                self.kube.apply(system_namespace(self.namespace))
        except WriteRefused:
            raise
        except KubeError as error:
            return "no namespace to run the scrub Job in: %s" % error
        if found is not None and found["metadata"].get("deletionTimestamp"):
            return "no namespace to run the scrub Job in: %s is terminating" % self.namespace
        return None

    def _wait(self, runs):
        deadline = time.monotonic() + self.timeout
        pending = list(runs)
        first_poll = True
        while pending:
            jobs, pods = self._scrub_jobs_and_pods({run[1][2]["metadata"]["namespace"] for run in pending})
            still = []
            for run in pending:
                entry, metadata, pinned = run[0], run[1][2]["metadata"], run[2]
                key = (metadata["namespace"], metadata["name"])
                job = jobs.get(key)
                if job is None:
                    still.append(run)
                elif job_condition(job, "Complete"):
                    entry["result"] = "removed"
                elif job_condition(job, "Failed"):
                    entry["error"] = "scrub Job %s failed: %s" % (entry["job"], failure_message(
                        job, pods.get(key, []), self._events(metadata)))
                elif not pods.get(key):
                    # A pod normally exists by the second poll: only then are the Job's events worth a read.
                    if first_poll or not self._refused(entry, metadata):
                        still.append(run)
                elif not self._cannot_pull(entry, pods.get(key, []), pinned):
                    still.append(run)
            pending, first_poll = still, False
            if pending and time.monotonic() > deadline:
                for entry, objects, _pinned in pending:
                    metadata = objects[2]["metadata"]
                    job_pods = pods.get((metadata["namespace"], metadata["name"]), [])
                    entry["error"] = "scrub Job %s did not finish in %ss: %s" % (
                        entry["job"], self.timeout, waiting_reason(job_pods, self._events(metadata)))
                return
            if pending:
                time.sleep(POLL_SECONDS)

    def _scrub_jobs_and_pods(self, namespaces):
        """({(namespace, Job name): scrub Job}, {(namespace, Job name): its pods}) as listed now: one LIST of each
        per namespace, where a GET per pending Job and a LIST of its pods made a poll cost two requests per node.
        A namespace whose LIST failed has its Jobs pending until the next poll."""
        selector = "%s=true" % SCRUB_LABEL
        calls = [(kind, namespace) for namespace in sorted(namespaces) for kind in ("Job", "Pod")]
        listings = self.kube.map(lambda call: self.kube.list(call[0], namespace=call[1], label_selector=selector),
                                 calls)
        jobs, pods = {}, {}
        for (kind, namespace), listing in zip(calls, listings):
            if isinstance(listing, Exception):
                continue
            for obj in listing:
                if kind == "Job":
                    jobs[(namespace, obj["metadata"]["name"])] = obj
                else:
                    job_name = (obj["metadata"].get("labels") or {}).get("job-name")
                    pods.setdefault((namespace, job_name), []).append(obj)
        return jobs, pods

    def _cannot_pull(self, entry, pods, pinned):
        """A scrub pod that cannot pull the tools image ends its wait at once. On a node a PV is pinned to, that
        is an error (its directory stays, and so does the PV); on a node an unpinned (ReadOnlyMany) directory only
        may be on, it means no extraction of this image ever ran there, so there is nothing to remove."""
        problem = pods_problem(pods)
        if problem is None or problem.reason != IMAGE_NOT_PULLABLE:
            return False
        if pinned:
            entry["error"] = "scrub Job %s: %s" % (entry["job"], problem.message)
        else:
            entry["result"] = "nothing to remove: the node cannot pull the tools image, so no extraction ran there"
        return True

    def _refused(self, entry, metadata):
        """A Job whose pod admission refuses (Pod Security, a quota) ends its wait at once: the Job controller is
        refused again until someone changes the namespace, and a later run scrubs the PVs it holds back."""
        refusals = pod_refusals(self._events(metadata))
        if refusals:
            entry["error"] = "scrub Job %s: %s" % (entry["job"], refusals[0])
        return bool(refusals)

    def _events(self, metadata):
        query = [("fieldSelector", "involvedObject.kind=Job,involvedObject.name=%s" % metadata["name"])]
        status, data = self.kube.request("GET", "/api/v1/namespaces/%s/events" % metadata["namespace"], query,
                                         what="events of Job %s" % metadata["name"])
        return (data or {}).get("items") or [] if status == 200 else []

    def _remove_scrub_objects(self, rendered):
        refs = [(obj["kind"], obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
                for objects in rendered for obj in reversed(objects)]
        self.kube.map(lambda ref: self.kube.delete(ref[0], ref[2], ref[1] or None), refs)
        stuck = self.kube.wait_gone(refs, CLEANUP_SECONDS)
        self.warnings.extend(
            "scrub object %s %s still there after %ss" % (kind, "/".join(filter(None, (ns, name))), CLEANUP_SECONDS)
            for kind, ns, name in stuck)
