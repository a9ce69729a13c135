# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What `--diff` shows of a plan, pure: each action's object before and after (identity, labels, annotations, spec;
a Secret's data redacted)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.trimmed import job_facts
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import registry_secret


def _trim(obj):
    """What a diff shows of an object: identity, labels, annotations and spec (a Secret's data, redacted after)."""
    if not obj:
        return {}
    metadata = obj.get("metadata") or {}
    trimmed = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
               "metadata": {key: metadata[key] for key in ("name", "namespace", "labels", "annotations")
                            if key in metadata}}
    for field in ("spec", "data"):
        if field in obj:
            trimmed[field] = obj[field]
    return trimmed


def _after(action, before):
    """A Job that replaces a live one is shown as the facts hold Jobs (trimmed.job_facts: its containers' names and
    images), as its live template is not read: what changed shows in its labels and spec-hash annotation."""
    after = _trim(action.body)
    if action.kind == "Job" and before:
        after["spec"] = job_facts({"spec": action.body.get("spec")})["spec"]
    return after


def plan_diff(plan, facts):
    live = {}
    for kind, objects in facts.objects.items():
        for obj in objects:
            live[(kind, obj["metadata"].get("namespace") or "", obj["metadata"]["name"])] = dict(obj, kind=kind)
    diffs = []
    for action in plan.ordered_actions():
        ref = (action.kind, action.namespace, action.name)
        before = _trim(live.get(ref)) if action.verb != "create" else {}
        after = {} if action.verb == "delete" else _after(action, before)
        if action.kind == "Secret":
            before = registry_secret.redacted(before, live.get(ref)) if before else before
            after = registry_secret.redacted(after, live.get(ref)) if after else after
        header = "%s %s (%s)" % (action.kind, "/".join(filter(None, ref[1:])), action.verb)
        diffs.append({"before": before, "after": after, "before_header": header, "after_header": header})
    return diffs
