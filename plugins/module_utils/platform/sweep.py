# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Undeploy's last step: remove whatever is still labelled managed-by=gkm.cluster in the kinds the server serves.

Ownership records of components still installed are kept (deleting them would strand the components),
and so are the namespaces holding them; other namespaces are deleted when asked, else only unlabelled.
Before cache slot PVs are deleted, scrub Jobs remove their directories from the nodes' disks
(distribute/scrub_runner.py); a PV whose scrub failed is kept, so a rerun tries again.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.apply.scrub_runner import NodeDiskScrub
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.scrub import job_image

MANAGED_BY = "app.kubernetes.io/managed-by"
SELECTOR = MANAGED_BY + "=gkm.cluster"
MERGE_PATCH = "application/merge-patch+json"


def is_ownership_record(kind, item):
    """An ownership ConfigMap (gkm.cluster.component_ownership) that still records a component."""
    data = item.get("data") or {}
    if kind != "ConfigMap" or not data:
        return False
    try:
        return all("version" in json.loads(value) for value in data.values())
    except (TypeError, ValueError):
        return False


def served(kube, kinds):
    """[(kind, collection path, namespaced)] of the kinds the server serves, and the names of the others."""
    wanted = {}
    for entry in kinds:
        wanted.setdefault(entry["api_version"], set()).add(entry["kind"])
    versions = sorted(wanted)
    prefixes = ["/api/v1" if version == "v1" else "/apis/" + version for version in versions]
    listings = kube.map(lambda prefix: kube.request("GET", prefix, what="API %s" % prefix), prefixes)
    found, skipped = [], []
    for version, prefix, listing in zip(versions, prefixes, listings):
        if isinstance(listing, Exception) or listing[0] == 404:
            skipped.extend(sorted(wanted[version]))
            continue
        resources = {resource["kind"]: resource for resource in listing[1].get("resources", [])
                     if "/" not in resource["name"]}
        for kind in sorted(wanted[version]):
            if kind in resources:
                found.append((kind, "%s/%s" % (prefix, resources[kind]["name"]), resources[kind]["namespaced"]))
            else:
                skipped.append(kind)
    return found, skipped


def object_path(collection, namespaced, metadata):
    prefix, plural = collection.rsplit("/", 1)
    if namespaced:
        return "%s/namespaces/%s/%s/%s" % (prefix, metadata["namespace"], plural, metadata["name"])
    return "%s/%s" % (collection, metadata["name"])


def describe(kind, metadata):
    if metadata.get("namespace"):
        return "%s %s/%s" % (kind, metadata["namespace"], metadata["name"])
    return "%s %s" % (kind, metadata["name"])


def sweep(kube, kinds, delete_namespaces, check_mode, system_namespace, scrub_image=None, scrub_timeout=300):
    """Delete or unlabel what is ours; returns the module result (without "diff")."""
    for entry in kinds:
        if not entry.get("api_version") or not entry.get("kind"):
            raise GkmError("every entry of kinds needs api_version and kind, got %r" % (entry,))
    found, skipped = served(kube, kinds)
    listings = kube.map(lambda entry: kube.request("GET", entry[1], [("labelSelector", SELECTOR)],
                                                   what="list %s" % entry[0]), found)
    objects = []
    for (kind, collection, namespaced), listing in zip(found, listings):
        if isinstance(listing, Exception):
            raise listing
        for item in (listing[1] or {}).get("items") or []:
            objects.append((kind, collection, namespaced, item))

    # Ownership records of components still installed: deleting them would strand the components.
    records = [entry[3] for entry in objects if is_ownership_record(entry[0], entry[3])]
    keep_namespaces = {item["metadata"]["namespace"] for item in records}
    result = {"deleted": [], "unlabelled": [], "skipped_kinds": skipped,
              "kept": ["%s: records an installed component" % describe("ConfigMap", item["metadata"])
                       for item in records]}
    deletes, unlabels = [], []
    for kind, collection, namespaced, item in objects:
        metadata = item["metadata"]
        if metadata.get("deletionTimestamp") or is_ownership_record(kind, item):
            continue
        if kind == "Namespace":
            if metadata["name"] in keep_namespaces:
                result["kept"].append("%s: holds an ownership record" % describe(kind, metadata))
            elif metadata["name"] in delete_namespaces:
                deletes.append((kind, object_path(collection, namespaced, metadata), metadata))
            else:
                unlabels.append((object_path(collection, namespaced, metadata), metadata))
            continue
        deletes.append((kind, object_path(collection, namespaced, metadata), metadata))
    scrub = NodeDiskScrub(kube, system_namespace, scrub_image, scrub_timeout, skip_mounted=True)
    held = scrub.clear([item for kind, _c, _n, item in objects if kind == "PersistentVolume"],
                       [job_image(item) for kind, _c, _n, item in objects if kind == "Job"])
    deletes = [entry for entry in deletes if not (entry[0] == "PersistentVolume" and entry[2]["name"] in held)]
    result.update(scrub=scrub.report(), warnings=scrub.warnings)
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    if check_mode:
        # A DELETE's body replaces its query options: the dry run must be in the body too.
        body["dryRun"] = ["All"]

    def delete(entry):
        return kube.request("DELETE", entry[1], body=body, what=describe(entry[0], entry[2]))

    # Namespaces last, once what was in them is on its way.
    ordered = [entry for entry in deletes if entry[0] != "Namespace"]
    ordered_namespaces = [entry for entry in deletes if entry[0] == "Namespace"]
    outcomes = kube.map(delete, ordered) + kube.map(delete, ordered_namespaces)
    for entry, outcome in zip(ordered + ordered_namespaces, outcomes):
        if isinstance(outcome, Exception):
            raise outcome
        if outcome[0] != 404:
            result["deleted"].append(describe(entry[0], entry[2]))
    patch = {"metadata": {"labels": {MANAGED_BY: None}}}
    outcomes = kube.map(lambda entry: kube.request("PATCH", entry[0], body=patch, content_type=MERGE_PATCH,
                                                   what=describe("Namespace", entry[1])), unlabels)
    for entry, outcome in zip(unlabels, outcomes):
        if isinstance(outcome, Exception):
            raise outcome
        if outcome[0] != 404:
            result["unlabelled"].append(entry[1]["name"])
    result["changed"] = bool(result["deleted"] or result["unlabelled"] or result["scrub"]["nodes"])
    failures = [entry for entry in result["scrub"]["nodes"] if entry.get("error")]
    if failures:
        result["kept"].extend("PersistentVolume %s: its directory on node %s is not removed yet" % (pv, entry["node"])
                              for entry in failures for pv in entry["pvs"])
        raise GkmError("scrubbing the nodes' disks failed on %s; their PVs are kept for a rerun: %s" % (
            ", ".join(entry["node"] for entry in failures), failures[0]["error"]), result)
    return result
