# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reconcile one GKMCache or ClusterGKMCache: distribute it as its spec says, write what came of it to its status."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import JSON_PATCH, MERGE_PATCH
from ansible_collections.gkm.cluster.plugins.module_utils.common.merge_patch import merge_patch
from ansible_collections.gkm.cluster.plugins.module_utils.common.timings import Timings
from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import resource_terms
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_FINALIZER,
    IMAGE_VOLUME,
    KERNEL_USE_STATUS,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import (
    DistributeError,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import image_signature, verification
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import resource as cache_cr
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.pipeline import Settled, distribute, run
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.ownership import resource_owner
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import outcome, signature_check
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.kernel_use import read_kernel_use
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.resource_status import (
    COUNT_NAMES,
    carry_transition_times,
    status_differs,
    summary_status,
)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _absent_params(kind, name, namespace, options):
    params = dict(options, name=name, image=None, state="absent")
    if kind == "GKMCache":
        params.update(scope="namespaced", namespace=namespace, workload_namespaces=None)
    else:
        params.update(scope="cluster", namespace=None, workload_namespaces=None)
    return params


def _being_deleted(status_code, resource):
    return status_code != 404 and bool(((resource or {}).get("metadata") or {}).get("deletionTimestamp"))


def _release_finalizer(kube, kind, name, path, resource):
    """Take the operator's finalizer off a resource being deleted whose objects are removed, so the deletion completes
    without the operator (a playbook run, or an operator that is gone). The test op keeps another controller's
    finalizer from being taken if the list changed meanwhile. True when one was taken."""
    finalizers = resource["metadata"].get("finalizers") or []
    if CACHE_FINALIZER not in finalizers:
        return False
    pointer = "/metadata/finalizers/%d" % finalizers.index(CACHE_FINALIZER)
    status, _released = kube.request("PATCH", path, body=[{"op": "test", "path": pointer, "value": CACHE_FINALIZER},
                                                          {"op": "remove", "path": pointer}],
                                     content_type=JSON_PATCH, what="the finalizer of %s %s" % (kind, name))
    return status != 404


def _check_definition(definition, kind, name, namespace):
    metadata = definition.get("metadata") or {}
    stated = (definition.get("kind"), metadata.get("name"), metadata.get("namespace") if namespace else None)
    if stated != (kind, name, namespace):
        raise cache_cr.ResourceError(
            "definition is %s %s%s but kind, name and namespace say %s %s%s: pass the manifest of the resource "
            "being reconciled" % (stated[0], "%s/" % stated[2] if stated[2] else "", stated[1],
                                  kind, "%s/" % namespace if namespace else "", name))


def _write_status(kube, kind, name, path, current, desired):
    """Patch the status when it says something new; True when it did."""
    if not status_differs(current, desired):
        return False
    # The patch of what changed: lists are replaced whole and fields the status no longer has (the per-slot
    # lists of earlier versions) are removed, so nothing of the last run lingers.
    kube.request("PATCH", path + "/status", body={"status": merge_patch(current or {}, desired)},
                 content_type=MERGE_PATCH, what="%s %s status" % (kind, name))
    return True


def _refused(kube, error, kind, name, namespace, path, current, found):
    """The error to raise for a refused reconcile, after its Error status replaced the resource's last one.

    The message names the resource's own fields.
    """
    message = resource_terms(str(error))
    desired = outcome.error_status(outcome.failure_reason(error), message, _now(),
                                   [crd_name for _name, crd_name in COUNT_NAMES])
    if isinstance(error, image_signature.SignatureRefused):
        desired = signature_check.refused_status(desired, current, error.kept_digest, _now())
    desired = carry_transition_times(current, desired)
    result = dict(error.result, changed=False)
    if found:
        try:
            result["status_changed"] = _write_status(kube, kind, name, path, current, desired)
        except GkmError as status_error:
            message += " (the Error status could not be written: %s)" % status_error
    result["resource"] = {"kind": kind, "name": name, "namespace": namespace, "found": found, "status": desired}
    refusal = GkmError(message, result)
    refusal.reason = outcome.failure_reason(error)
    return refusal


def reconcile(kube, kind, name, namespace, options, check_mode=False, want_diff=False, definition=None,
              source=None, live=None):
    """Distribute the resource (or, with options state=absent, remove its objects) and update its status.

    options are the distribution options a resource cannot set (cache_args.DISTRIBUTION_ARG_SPEC).
    definition, when given, is the declared manifest: its spec is distributed instead of the live one,
    so a check-mode run plans what is declared before it is applied. The status is written only to a
    resource that exists. A refusal (any GkmError while distributing) is written to the status as phase
    Error and raised again as a GkmError whose result carries the partial result and that status.
    source: where the pipeline reads its facts (facts/source.py; default LISTs through kube). live: the resource as
    the caller already holds it (a controller's watch event), read instead of a GET.
    """
    if definition is not None:
        _check_definition(definition, kind, name, namespace)
    path = cache_cr.resource_path(kind, name, namespace)
    timings = Timings()
    with timings.phase("resource"):
        status_code, resource = (200, live) if live is not None else kube.request("GET", path, what="%s %s" % (
            kind, name))
    # Deletion is final: a resource being deleted is never distributed again (its namespace may be terminating, where
    # nothing can be created); it is removed, as its finalizer would. (A removal asked for, as the operator's
    # finalizer asks it, leaves the finalizer to its caller.)
    deleting = options.get("state") != "absent" and _being_deleted(status_code, resource)
    if options.get("state") == "absent" or deleting:
        result = distribute(kube, _absent_params(kind, name, namespace, options), check_mode, want_diff, timings,
                            source)
        result["resource"] = {"kind": kind, "name": name, "namespace": namespace, "found": status_code != 404}
        if deleting:
            result["resource"]["deleting"] = True
            if not check_mode and _release_finalizer(kube, kind, name, path, resource):
                result["changed"] = True
                result["resource"]["finalizer_released"] = True
        return result
    if status_code == 404 and definition is None:
        raise cache_cr.ResourceError("%s %s not found%s: create it first (or distribute with "
                                     "gkm.cluster.cache_distribute)" % (
                                         kind, name, " in namespace %s" % namespace if namespace else ""))
    declared = definition if definition is not None else resource
    params = cache_cr.distribute_params(declared, options)
    params[verification.LABEL_PARAM] = verification.format_label(declared)
    # The live resource's uid and creation time (none before it is applied): owner references, conflict order.
    params["owner"] = resource_owner(resource if status_code != 404 else declared)
    found = status_code != 404
    current = (resource.get("status") or {}) if found else {}
    # The digest pods mount now: an imageVolume cache whose new digest's signature is refused keeps it if it verifies.
    params[image_signature.RECORDED_DIGEST_PARAM] = current.get("resolvedDigest") or None
    try:
        distribution = run(kube, params, check_mode, want_diff, timings, source)
    except Settled as settled:
        # Nothing it would read changed since a run at this digest found nothing to do: the status stands.
        return {"changed": False, "settled": True, "cache": {"name": name, "digest": settled.digest},
                "timings": timings.result(), "resource": {"kind": kind, "name": name, "namespace": namespace,
                                                          "found": found, "status": current}}
    except GkmError as error:
        raise _refused(kube, error, kind, name, namespace, path, current, found) from error
    spec, result = distribution.spec, distribution.result
    status = summary_status(distribution, _now())
    signature = signature_check.signature_condition(
        declared, _now(), distribution.status["entries"], spec.verification is not None,
        spec.digest if spec.mount_mode == IMAGE_VOLUME else None, bool(params.get(verification.REQUIRED_PARAM)))
    if signature:
        status["conditions"].append(signature)
        if signature["status"] == "False":
            result.setdefault("warnings", []).append("%s %s: %s" % (kind, name, signature["message"]))
    if spec.overlay_variable and found:
        # What the pods given the kernel overlay found in the cache and compiled (their sidecars' last lines).
        with timings.phase("kernel_use"):
            try:
                status[KERNEL_USE_STATUS] = read_kernel_use(kube, spec, distribution.source)
            except GkmError as error:
                # A report, never a reason to fail the reconcile: the last one read is kept.
                result.setdefault("warnings", []).append("%s %s: the kernel use of its pods was not read: %s" % (
                    kind, name, error))
                if current.get(KERNEL_USE_STATUS):
                    status[KERNEL_USE_STATUS] = current[KERNEL_USE_STATUS]
    desired = carry_transition_times(current, status)
    with timings.phase("resource_status"):
        result["status_changed"] = _write_status(kube, kind, name, path, current, desired) if found else (
            status_differs(current, desired))
    result["timings"] = timings.result()
    result["changed"] = result["changed"] or result["status_changed"]
    result["resource"] = {"kind": kind, "name": name, "namespace": namespace, "found": found,
                          "status": desired}
    return result


__all__ = ["DistributeError", "reconcile"]
