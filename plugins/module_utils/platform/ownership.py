# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ownership records: which platform components (cert-manager, Kyverno, NFD...) this collection installed.

GKM's Makefile cannot tell whether it installed cert-manager itself, so its undeploy either strands it or
removes someone else's. We record every install in one ConfigMap (default ``gkm-cluster-ownership`` in
``gkm-system``), one data key per component holding a small JSON document, and decide from that record:

- present: install (or upgrade) when the component is missing or ours; leave it alone when someone else
  installed it;
- absent: remove it only when the record says we installed it.

Pure functions; the module gkm.cluster.component_ownership does the reads and writes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import SYSTEM_NAMESPACE

DEFAULT_CONFIGMAP = "gkm-cluster-ownership"
DEFAULT_NAMESPACE = SYSTEM_NAMESPACE
MANAGED_BY = {"app.kubernetes.io/managed-by": "gkm.cluster"}
# Fields of a record that say what was installed; anything else (timestamps) is bookkeeping.
RECORD_FIELDS = ("version", "method", "source", "namespace", "namespace_created")
METHODS = ("helm", "manifest")


class OwnershipError(GkmError, ValueError):
    """A record or a request is unusable; the message names the field and the fix."""


def parse_record(configmap, component):
    """The record of component from the live ConfigMap (a dict), or None when there is none."""
    if not configmap:
        return None
    text = (configmap.get("data") or {}).get(component)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except ValueError as error:
        raise OwnershipError(
            "ownership record %r in ConfigMap %s/%s is not JSON; fix or delete that key"
            % (component, configmap["metadata"].get("namespace"), configmap["metadata"]["name"])) from error
    if not isinstance(record, dict) or "version" not in record:
        raise OwnershipError("ownership record %r has no 'version'; fix or delete that key" % component)
    return record


def new_record(version, method, source, namespace, namespace_created, recorded_at):
    """A record for an install we just did."""
    if not version:
        raise OwnershipError("version is required to record an install: the pinned version that was installed")
    if method not in METHODS:
        raise OwnershipError("method must be one of %s, got %r" % (", ".join(METHODS), method))
    return {
        "version": version,
        "method": method,
        "source": source or "",
        "namespace": namespace,
        "namespace_created": bool(namespace_created),
        "recorded_at": recorded_at,
    }


def same_record(left, right):
    """True when two records say the same thing (recorded_at aside), so re-recording changes nothing."""
    if left is None or right is None:
        return left is right
    return all(left.get(field) == right.get(field) for field in RECORD_FIELDS)


def configmap_with(configmap, name, namespace, component, record):
    """The ConfigMap to write: the live data with component's key set (record) or removed (None)."""
    data = dict((configmap or {}).get("data") or {})
    if record is None:
        data.pop(component, None)
    else:
        data[component] = json.dumps(record, sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "data": data,
    }


def plan(wanted, found, found_version, record, desired_version):
    """What to do with a component: a dict with action, owned and reason (for humans and the report).

    actions: ``install`` (missing: install it), ``upgrade`` (ours, other version), ``apply`` (ours, same
    version: re-apply, which repairs drift and changes nothing otherwise), ``skip`` (someone else's: leave it),
    ``remove`` (ours: uninstall), ``keep`` (someone else's: leave it), ``none`` (absent and not ours).
    """
    owned = record is not None
    found_text = "found (version %s)" % (found_version or "unknown") if found else "not found"
    if wanted == "present":
        if not found:
            action = "install"
            reason = "not installed; installing %s" % desired_version
            if owned:
                reason = "recorded as ours (version %s) but %s; installing %s again" % (
                    record["version"], found_text, desired_version)
        elif not owned:
            action = "skip"
            reason = ("%s and not installed by gkm.cluster: leaving it as it is (it will not be upgraded "
                      "or removed by this collection)" % found_text)
        elif record["version"] != desired_version:
            action = "upgrade"
            reason = "installed by gkm.cluster at %s; upgrading to %s" % (record["version"], desired_version)
        else:
            action = "apply"
            reason = "installed by gkm.cluster at %s; re-applying the same version" % desired_version
    elif wanted == "absent":
        if owned:
            action = "remove"
            reason = "installed by gkm.cluster (version %s); removing it" % record["version"]
        elif found:
            action = "keep"
            reason = "%s but not installed by gkm.cluster: leaving it in place" % found_text
        else:
            action = "none"
            reason = "not installed and not recorded: nothing to remove"
    else:
        raise OwnershipError("wanted must be present or absent, got %r" % wanted)
    return {"action": action, "owned": owned, "reason": reason}
