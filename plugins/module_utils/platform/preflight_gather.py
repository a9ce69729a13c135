# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gather the preflight facts of a cluster, measure ReadOnlyMany binding, and optionally label GPU nodes.

The steps behind gkm.cluster.hardware_preflight; the judgement is in preflight.py. GKM says the access
modes of a storage class cannot be queried, so the probe measures instead: a 1Mi ReadOnlyMany PVC per
probed class, watched until it binds or the timeout passes, then deleted.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible.module_utils.six.moves.urllib.parse import urlsplit

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    MANAGED_BY_LABEL,
    MANAGER,
    PROBE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.platform import preflight

PROBE_PREFIX = "gkm-rox-probe-"
POLL_SECONDS = 0.5
# A deleted PVC goes once the pvc-protection controller drops its finalizer; on a busy control plane that
# takes seconds, independent of the probe's binding timeout.
DELETE_WAIT_SECONDS = 60


def _probe_name(storage_class):
    return (PROBE_PREFIX + storage_class)[:63].rstrip("-.")


def _latest_event(kube, namespace, name):
    _status, data = kube.request("GET", "/api/v1/namespaces/%s/events" % namespace,
                                 [("fieldSelector", "involvedObject.name=%s" % name)], what="events of %s" % name)
    events = (data or {}).get("items") or []
    if not events:
        return None
    latest = max(events, key=lambda event: event.get("lastTimestamp") or event.get("eventTime") or "")
    return "%s: %s" % (latest.get("reason"), (latest.get("message") or "").strip())


def rox_probe(kube, storage_class, namespace, timeout):
    """{'result': bound | unbound | undetermined, 'detail': ...} for one class; the probe PVC is removed."""
    name = _probe_name(storage_class["name"])
    kube.delete("PersistentVolumeClaim", name, namespace)
    kube.wait_gone([("PersistentVolumeClaim", namespace, name)], DELETE_WAIT_SECONDS)
    kube.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {MANAGED_BY_LABEL: MANAGER, PROBE_LABEL: "rox"}},
                "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": storage_class["name"],
                         "resources": {"requests": {"storage": "1Mi"}}}})
    started = time.monotonic()
    try:
        while True:
            claim = kube.get("PersistentVolumeClaim", name, namespace) or {}
            if (claim.get("status") or {}).get("phase") == "Bound":
                return {"result": "bound", "detail": "bound in %.1fs" % (time.monotonic() - started)}
            if time.monotonic() - started > timeout:
                break
            time.sleep(POLL_SECONDS)
        event = _latest_event(kube, namespace, name)
        if storage_class["binding_mode"] == "WaitForFirstConsumer" and not event:
            return {"result": "undetermined",
                    "detail": "WaitForFirstConsumer: the class binds only for a pod, none was started"}
        return {"result": "unbound", "detail": event or "still Pending after %ss" % timeout}
    finally:
        kube.delete("PersistentVolumeClaim", name, namespace)
        kube.wait_gone([("PersistentVolumeClaim", namespace, name)], DELETE_WAIT_SECONDS)


def _api_groups(kube):
    _status, data = kube.request("GET", "/apis", what="API groups")
    return [group["name"] for group in (data or {}).get("groups") or []]


def gather(kube, params, check_mode, environ=None):
    """The facts (see preflight.py), with the probe and the labels done as params ask."""
    _status, version = kube.request("GET", "/version", what="server version")
    groups = _api_groups(kube)
    _status, drivers = kube.request("GET", "/apis/storage.k8s.io/v1/csidrivers", what="CSI drivers")
    classes = preflight.storage_classes(kube.list("StorageClass"),
                                        [item["metadata"]["name"] for item in (drivers or {}).get("items") or []])
    nodes = kube.list("Node")
    gpus = preflight.gpu_nodes(nodes)
    tolerations = params.get("tolerations") or []
    taints = preflight.blocking_taints(gpus, tolerations)
    apiserver_pods = kube.list("Pod", "kube-system", label_selector="component=kube-apiserver")
    api_host = urlsplit(kube.api.configuration.host).hostname or ""

    probes = {}
    wanted = params.get("rox_probe_storage_classes") or [row["name"] for row in classes if row["default"]]
    for row in classes:
        if row["name"] not in wanted or not params.get("rox_probe", True):
            continue
        if check_mode:
            probes[row["name"]] = {"result": "not probed", "detail": "check mode creates no probe PVC"}
        elif not row["dynamic"]:
            probes[row["name"]] = {"result": "unbound", "detail": "no provisioner: only PVs made by hand bind"}
        else:
            probes[row["name"]] = rox_probe(kube, row, params.get("rox_probe_namespace") or "default",
                                            params.get("rox_probe_timeout", 20))
    unknown = sorted(set(params.get("rox_probe_storage_classes") or []) - set(row["name"] for row in classes))
    for name in unknown:
        probes[name] = {"result": "not probed", "detail": "no such storage class"}

    facts = {
        "kubernetes_version": (version or {}).get("gitVersion", "unknown"),
        "openshift_groups": preflight.openshift_groups(groups),
        "storage_classes": classes,
        "rox_probe": probes,
        "gpu_nodes": gpus,
        "gpu_summary": preflight.gpu_summary(gpus),
        "taints": taints,
        "pod_template": preflight.pod_template(taints, tolerations),
        "proxy": {"apiserver": preflight.apiserver_proxy(apiserver_pods),
                  "client": preflight.client_proxy(os.environ if environ is None else environ, api_host)},
    }
    facts["openshift"] = bool(facts["openshift_groups"])
    labelled = []
    if params.get("apply_gpu_labels"):
        for gpu in gpus:
            if gpu["labels_to_apply"]:
                # A merge patch, not server-side apply: the labels join whatever set the node's other labels,
                # and no field manager's earlier apply (e.g. sim_nodes' own) is narrowed to these three.
                kube.request("PATCH", "/api/v1/nodes/%s" % gpu["name"],
                             body={"metadata": {"labels": gpu["labels_to_apply"]}},
                             content_type="application/merge-patch+json", what="labels of Node %s" % gpu["name"])
                labelled.append(gpu["name"])
                gpu["gkm_labels"] = dict(gpu["derived_labels"])
                gpu["labels_to_apply"] = {}
    facts["labelled"] = labelled
    facts["findings"] = preflight.findings(facts)
    facts["report"] = preflight.report(facts)
    return facts


def run(params, check_mode, make_kube):
    """Gather (and in apply mode label); make_kube() returns the Kube to use, a dry-running one in check mode."""
    kube = make_kube()
    facts = gather(kube, params, check_mode)
    return dict(facts, changed=bool(facts["labelled"]))
