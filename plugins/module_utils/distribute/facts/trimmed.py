# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the facts keep of the objects they read (pure), whichever source read them: the kinds of a cache's own
objects, a Node cut down to what the planner reads, no server-side field ownership, and which pods count as
unfinished. A source (facts/source.py, facts/index.py) applies these as it reads, so a large cluster's objects are
trimmed page by page, or event by event, never held whole."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The kinds of a cache's own objects, each read by the cache's labels.
OBJECT_KINDS = ("PersistentVolumeClaim", "PersistentVolume", "Job", "Secret")

# After a converge, finished pods are most of a namespace's pods (one per extraction Job), so the server leaves them
# out of the pods a reconcile reads: the unfinished ones (who mounts what, why an extraction is stuck), and the
# finished ones that are not ours. A finished pod reads nothing, but it still holds every claim it names: the API
# server removes a deleted PVC only once no scheduled pod names it, whatever its phase (pvc-protection).
# Field selectors match phases by equality only, so each side names the other's phases.
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
FINISHED_PHASES = ("Succeeded", "Failed")
UNFINISHED_PODS = ",".join("status.phase!=%s" % phase for phase in FINISHED_PHASES)
FINISHED_PODS = ",".join("status.phase!=%s" % phase for phase in POD_PHASES if phase not in FINISHED_PHASES)


def without_managed_fields(obj):
    """The object without metadata.managedFields (edited in place, returned): the server's record of which manager
    set each field is a large part of a small object, and nothing here reads it."""
    obj["metadata"].pop("managedFields", None)
    return obj


def object_facts(kind, obj):
    """What a reconcile reads of an object of any kind but Node and Namespace (edited in place, returned): the object
    without managedFields, a Job as job_facts keeps it."""
    without_managed_fields(obj)
    return job_facts(obj) if kind == "Job" else obj


def job_facts(job):
    """What a reconcile reads of a Job (edited in place, returned): its metadata, its status and its containers'
    images (a scrub runs the tools image the extraction Jobs ran). The rest of its spec is the rendered pod
    template and the server's defaults, two thirds of a Job's size, which nothing reads: the planner tells a Job
    to replace by its digest label and spec-hash annotation."""
    template = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    job["spec"] = {"template": {"spec": {"containers": [
        {key: container[key] for key in ("name", "image") if key in container}
        for container in template.get("containers") or []]}}}
    return job


def has_pulled(node, reference):
    """True when the node's kubelet reports the image among those it pulled: one of status.images[].names (the
    kubelet lists at most nodeStatusMaxImages images, the largest first, and refreshes the list every 30 s)."""
    return any(reference in (image.get("names") or []) for image in (node.get("status") or {}).get("images") or [])


def node_facts(node, pulled_image=None):
    """What a reconcile reads of a Node: name, labels, taints, cordon and capacity (its GPU count). A Node's
    images, conditions and addresses are most of its size, so a large cluster's Nodes are kept without them;
    pulled_image (an imageVolume cache's pinned reference) keeps the one image entry saying the node pulled it."""
    metadata, spec = node["metadata"], node.get("spec") or {}
    status = {"capacity": (node.get("status") or {}).get("capacity") or {}}
    if pulled_image and has_pulled(node, pulled_image):
        status["images"] = [{"names": [pulled_image]}]
    return {"metadata": {"name": metadata["name"], "labels": metadata.get("labels") or {}},
            "spec": {key: spec[key] for key in ("taints", "unschedulable") if key in spec},
            "status": status}
