# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reconcile one GKMCache or ClusterGKMCache: distribute it as its spec says, write what came of it to its status."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

from ansible_collections.gkm.cluster.plugins.module_utils import cache_cr
from ansible_collections.gkm.cluster.plugins.module_utils.distribute import DistributeError, distribute

MERGE_PATCH = "application/merge-patch+json"


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _absent_params(kind, name, namespace, options):
    params = dict(options, name=name, image=None, state="absent")
    if kind == "GKMCache":
        params.update(scope="namespaced", namespace=namespace, workload_namespaces=None)
    else:
        params.update(scope="cluster", namespace=None, workload_namespaces=None)
    return params


def reconcile(kube, kind, name, namespace, options, check_mode=False, want_diff=False):
    """Distribute the resource (or, with options state=absent, remove its objects) and update its status.

    options are the distribution options a resource cannot set (cache_args.DISTRIBUTION_ARG_SPEC).
    Raises cache_cr.ResourceError or DistributeError; a DistributeError carries the partial result.
    """
    path = cache_cr.resource_path(kind, name, namespace)
    status_code, resource = kube.request("GET", path, what="%s %s" % (kind, name))
    if options.get("state") == "absent":
        result = distribute(kube, _absent_params(kind, name, namespace, options), check_mode, want_diff)
        result["resource"] = {"kind": kind, "name": name, "namespace": namespace, "found": status_code != 404}
        return result
    if status_code == 404:
        raise cache_cr.ResourceError("%s %s not found%s: create it first (or distribute with "
                                     "gkm.cluster.cache_distribute)" % (
                                         kind, name, " in namespace %s" % namespace if namespace else ""))
    result = distribute(kube, cache_cr.distribute_params(resource, options), check_mode, want_diff)
    current = resource.get("status") or {}
    desired = cache_cr.carry_transition_times(current, cache_cr.resource_status(result, _now()))
    result["status_changed"] = cache_cr.status_differs(current, desired)
    if result["status_changed"]:
        # A merge patch replaces lists whole, so per-node entries of the last run never linger.
        kube.request("PATCH", path + "/status", body={"status": desired}, content_type=MERGE_PATCH,
                     what="%s %s status" % (kind, name))
    result["changed"] = result["changed"] or result["status_changed"]
    result["resource"] = {"kind": kind, "name": name, "namespace": namespace, "found": True,
                          "status": desired}
    return result


__all__ = ["DistributeError", "reconcile"]
