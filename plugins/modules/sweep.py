#!/usr/bin/python
# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sweep
short_description: Remove whatever is still labelled app.kubernetes.io/managed-by=gkm.cluster
version_added: "0.1.0"
description:
  - The last step of C(playbooks/undeploy.yml) (the gkm role's C(tasks/sweep.yml)). It removes what is left of this
    collection once the caches, the GKM core and the platform components are removed, such as the PVCs, PVs and
    Jobs of a cache whose resource was deleted first, or what an interrupted run or an earlier version left.
  - Lists, in every namespace and at cluster scope, the objects of O(kinds) labelled
    C(app.kubernetes.io/managed-by=gkm.cluster), in one module run with parallel requests, and deletes them in the
    background (a Job's pods go with it). Kinds the API server does not serve are skipped.
  - Kept are ownership ConfigMaps that still hold a record (a platform component this collection installed and
    that is still there; see M(gkm.cluster.component_ownership)), and the namespaces they are in.
  - Namespaces labelled as ours are deleted only when named in O(delete_namespaces); any other only loses the
    label, because workloads live there.
  - Objects already being deleted are left to finish.
  - Check mode sends every write as a server-side dry run.
author:
  - gkm.cluster contributors (@gkm-cluster)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
requirements:
  - kubernetes >= 24.2.0
options:
  kinds:
    description: The kinds to search, each a dict with C(api_version) and C(kind).
    type: list
    elements: dict
    required: true
  delete_namespaces:
    description: Namespaces to delete when they are labelled as ours (the collection's own namespace).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Remove whatever is still labelled as ours
  gkm.cluster.sweep:
    kinds:
      - {api_version: v1, kind: PersistentVolumeClaim}
      - {api_version: v1, kind: Namespace}
    delete_namespaces: [gkm-system]
"""

RETURN = r"""
deleted:
  description: The objects deleted (or, in check mode, that would be), as C(Kind namespace/name) or C(Kind name).
  returned: always
  type: list
  elements: str
unlabelled:
  description: Namespaces that lost the label and stay.
  returned: always
  type: list
  elements: str
kept:
  description: Objects labelled as ours that stay, with the reason.
  returned: always
  type: list
  elements: str
skipped_kinds:
  description: Kinds of O(kinds) the API server does not serve.
  returned: always
  type: list
  elements: str
"""

import json  # noqa: E402

from ansible.module_utils.basic import AnsibleModule, missing_required_lib  # noqa: E402

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import (  # noqa: E402
    HAS_KUBERNETES,
    KUBERNETES_IMPORT_ERROR,
    Kube,
    KubeError,
    api_client_from_auth,
)
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC  # noqa: E402

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


def sweep(kube, kinds, delete_namespaces, check_mode):
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
    result["changed"] = bool(result["deleted"] or result["unlabelled"])
    return result


def main():
    argument_spec = dict(AUTH_ARG_SPEC)
    argument_spec.update(
        kinds=dict(type="list", elements="dict", required=True),
        delete_namespaces=dict(type="list", elements="str", default=[]),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    for entry in module.params["kinds"]:
        if not entry.get("api_version") or not entry.get("kind"):
            module.fail_json(msg="every entry of kinds needs api_version and kind, got %r" % (entry,))
    auth = {key: module.params.get(key) for key in AUTH_ARG_SPEC}
    try:
        kube = Kube(api_client_from_auth(auth), dry_run=module.check_mode)
        result = sweep(kube, module.params["kinds"], module.params["delete_namespaces"], module.check_mode)
    except KubeError as error:
        module.fail_json(msg=str(error))
    if module._diff:
        labelled = result["deleted"] + ["Namespace %s" % name for name in result["unlabelled"]]
        result["diff"] = {"before": {"labelled": sorted(labelled)}, "after": {"labelled": []}}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
