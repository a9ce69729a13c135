# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API server validates a cache's whole plan (server-side dry run) before its first real write.

Only the objects the plan creates or recreates are sent, so a rerun that changes nothing costs no request, and of a
node's slot objects (its PV, PVC and Job) one per kind, namespace and digest: the same renderer makes them from the same
spec and only the node differs, so validating all 15,000 of 5,000 nodes would double a cold run's requests. An
admission rule that refuses only some nodes' objects is caught at their write instead. An object the server refuses
fails the cache with the field named as the user wrote it; nothing is written.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube, KubeError, resource_path
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    DIGEST_LABEL,
    NODE_LABEL,
)

INVALID = "Invalid"
# An object replaced under its own name still exists: its stand-in gets a server-made name, so the server
# validates it as new (an apply onto the live object would report its immutable fields instead).
_GENERATED_SUFFIX = 5
_MAX_NAME = 63
# Where the user's pod template lands in a Job, and the option it came from.
# (The server names a template's metadata fields without "metadata": spec.template.labels.)
_JOB_FIELDS = (
    ("spec.template.spec.", "pod_template.spec."),
    ("spec.template.metadata.", "pod_template.metadata."),
    ("spec.template.labels", "pod_template.metadata.labels"),
)


def user_fields(kind, message):
    """The server's message with the Job's paths of the user's pod template given as the option paths."""
    if kind != "Job":
        return message
    for rendered, option in _JOB_FIELDS:
        message = re.sub(r"(?<![\w.])%s" % re.escape(rendered), option, message)
    return message


def dry_run_actions(plan, new_namespaces):
    """The actions to validate: the objects created or recreated, one node's slot object standing for the others
    of its kind, namespace and digest, except what lives in a namespace the plan creates (the server cannot
    dry-run into a namespace that does not exist yet). An update only changes our own labels and annotations (or
    a registry Secret's rendered data) on an object the server already accepted, so recording finished
    extractions costs no dry run."""
    chosen, shapes = [], set()
    for action in plan.ordered_actions():
        if action.verb not in ("create", "replace") or action.kind == "Namespace" or action.namespace in new_namespaces:
            continue
        labels = action.body["metadata"].get("labels") or {}
        if NODE_LABEL in labels:
            shape = (action.kind, action.namespace, action.verb, labels.get(DIGEST_LABEL))
            if shape in shapes:
                continue
            shapes.add(shape)
        chosen.append(action)
    return chosen


def _stand_in(body):
    body = copy.deepcopy(body)
    name = body["metadata"].pop("name")
    body["metadata"]["generateName"] = name[:_MAX_NAME - _GENERATED_SUFFIX]
    return body


def _dry_run(checker, action):
    if action.verb != "replace":
        return checker.apply(action.body)
    body = _stand_in(action.body)
    return checker.request("POST", resource_path(action.kind, action.namespace), body=body,
                           what="%s %s (validation of its replacement)" % (action.kind, action.name))


def validate_plan(kube, plan):
    """Dry-run every object the plan writes; returns (request count, refusals).

    A refusal is {"kind", "namespace", "name", "error"}, the error in the user's field names. Only an
    invalid object (HTTP 422) or one an admission step forbids is a refusal; any other failure is raised.
    """
    new_namespaces = {a.name for a in plan.actions if a.kind == "Namespace" and a.verb == "create"}
    actions = dry_run_actions(plan, new_namespaces)
    if not actions:
        return 0, []
    checker = Kube(kube.api, dry_run=True, workers=kube.workers)
    results = checker.map(lambda action: _dry_run(checker, action), actions)
    refusals = []
    for action, result in zip(actions, results):
        if isinstance(result, KubeError) and result.status in (400, 403, 422):
            # The server's own words, without the request line KubeError puts before them.
            words = str(result).split("HTTP %s " % result.status, 1)[-1]
            refusals.append({"kind": action.kind, "namespace": action.namespace, "name": action.name,
                             "error": user_fields(action.kind, words)})
        elif isinstance(result, Exception):
            raise result
    return checker.requests, refusals


def refusal_message(refusals, planned):
    """One message for every refused object (planned: how many writes the plan held)."""
    details = "; ".join("%s %s: %s" % (r["kind"], "/".join(filter(None, (r["namespace"], r["name"]))), r["error"])
                        for r in refusals)
    return "the API server refuses %d of the %d objects this cache would write, so nothing was written: %s" % (
        len(refusals), planned, details)
