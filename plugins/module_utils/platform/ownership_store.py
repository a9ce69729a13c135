# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a platform component's presence and ownership record from the cluster, and record or forget it.

The steps behind gkm.cluster.component_ownership: detection (a CRD that only the component defines, and
its Deployment for the version), the record in the ownership ConfigMap, and the plan from
ownership.plan. Writes are server-side apply through kube.Kube, made only when the record changes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

from ansible_collections.gkm.cluster.plugins.module_utils.platform import ownership

VERSION_LABEL = "app.kubernetes.io/version"


def detect(kube, detect_crd, detect_deployment, install_namespace):
    """(found, version, namespace_exists): found when the component's CRD (or Deployment) exists."""
    crd = kube.get("CustomResourceDefinition", detect_crd) if detect_crd else None
    deployment = (kube.get("Deployment", detect_deployment, install_namespace)
                  if detect_deployment and install_namespace else None)
    namespace_exists = bool(install_namespace) and kube.get("Namespace", install_namespace) is not None
    return crd is not None or deployment is not None, deployment_version(deployment), namespace_exists


def deployment_version(deployment):
    """The version a Deployment runs: its app.kubernetes.io/version label, else its first image's tag."""
    if not deployment:
        return None
    labels = deployment["metadata"].get("labels") or {}
    if labels.get(VERSION_LABEL):
        return labels[VERSION_LABEL]
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    image = containers[0].get("image", "") if containers else ""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[1] if ":" in name else None


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(params, check_mode, make_kube):
    """Query, record or forget; returns (module result, diff).

    make_kube() returns the Kube to use, a dry-running one in check mode.
    """
    kube = make_kube()
    component = params["component"]
    cm_name, cm_namespace = params["ownership_configmap"], params["ownership_namespace"]
    configmap = kube.get("ConfigMap", cm_name, cm_namespace)
    record = ownership.parse_record(configmap, component)
    result = {"changed": False, "component": component, "record": record, "owned": record is not None}

    if params["state"] == "query":
        found, version, namespace_exists = detect(
            kube, params.get("detect_crd"), params.get("detect_deployment"), params.get("install_namespace"))
        result.update(found=found, found_version=version, namespace_exists=namespace_exists,
                      plan=ownership.plan(params["wanted"], found, version, record, params.get("version")))
        return result, {}

    if params["state"] == "present":
        wanted = ownership.new_record(params.get("version"), params.get("method"), params.get("source"),
                                      params.get("install_namespace"), params.get("namespace_created"), _now())
        if ownership.same_record(record, wanted):
            return result, {}
        new = wanted
    else:
        if record is None:
            return result, {}
        new = None

    diff = {"before": {component: record} if record else {}, "after": {component: new} if new else {}}
    result.update(changed=True, record=new, owned=new is not None)
    remaining = ownership.configmap_with(configmap, cm_name, cm_namespace, component, new)
    if not remaining["data"]:
        if not check_mode:  # kube.Kube's DELETE is not reliably a dry run, so check mode does not send it
            kube.delete("ConfigMap", cm_name, cm_namespace)
        return result, diff
    if kube.get("Namespace", cm_namespace) is None:
        kube.apply({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": cm_namespace, "labels": dict(ownership.MANAGED_BY)}})
        if check_mode:
            # A dry-run namespace does not exist for the next dry run; the ConfigMap would be created in it.
            return result, diff
    kube.apply(remaining)
    return result, diff
