# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A cache's upgradePolicy, validated, pure: how nodes move to a new image digest (upgrade_waves.py plans it).

Fields (the CRD's names; every one optional):
- maxUnavailable: nodes upgrading at once, a count >= 1 or a percentage "N%" of the nodes in the rollout
  (rounded down, at least 1); default 25%.
- paused: true holds the rollout (no node starts; nodes already upgrading finish); default false.
- order: "name" (node name) or a node label key whose value sorts the nodes (nodes without it go last, then by
  name); default name.
- failureThreshold: failed nodes tolerated, a count >= 0 or a percentage; one more stops the rollout and the failed
  nodes are rolled back to the previous digest; default 0 (the first failure stops it).
- restart: the workloads whose pods are restarted onto a node's new cache once it is Extracted there, a list of
  {kind, name, namespace}: kind one of RESTART_KINDS, namespace optional (default: any namespace of the cache);
  default none (running pods keep the previous digest until they restart for their own reasons).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError

ORDER_BY_NAME = "name"
DEFAULTS = {"maxUnavailable": "25%", "paused": False, "order": ORDER_BY_NAME, "failureThreshold": 0, "restart": ()}
RESTART_KINDS = ("DaemonSet", "Deployment", "StatefulSet", "ReplicaSet")
_RESTART_FIELDS = ("kind", "name", "namespace")
_PERCENT = re.compile(r"^([0-9]{1,3})%$")
# A label key: an optional DNS subdomain prefix and '/', then a name of up to 63 characters.
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")


class UpgradePolicyError(GkmError, ValueError):
    """An upgradePolicy field is invalid; the message names it and the fix."""

    reason = "InvalidSpec"


class Scale:
    """A count, or a percentage of a total (IntOrString, as a Deployment's maxUnavailable)."""

    __slots__ = ("percent", "value")

    def __init__(self, value, percent):
        self.value = value
        self.percent = percent

    def of(self, total, at_least=0):
        """The count for `total` nodes: a percentage rounds down; never below at_least."""
        count = total * self.value // 100 if self.percent else self.value
        return max(count, at_least)

    def __repr__(self):
        return "%d%%" % self.value if self.percent else str(self.value)


class Workload:
    """A workload named in restart: its pods on an upgraded node are evicted (namespace None: any of the cache's)."""

    __slots__ = ("kind", "name", "namespace")

    def __init__(self, kind, name, namespace=None):
        self.kind = kind
        self.name = name
        self.namespace = namespace

    def to_dict(self):
        return {key: getattr(self, key) for key in _RESTART_FIELDS if getattr(self, key) is not None}


class UpgradePolicy:
    __slots__ = ("failure_threshold", "max_unavailable", "order", "paused", "restart")

    def __init__(self, max_unavailable, paused, order, failure_threshold, restart=()):
        self.max_unavailable = max_unavailable
        self.paused = paused
        self.order = order
        self.failure_threshold = failure_threshold
        self.restart = list(restart)

    def unavailable_budget(self, total):
        """Nodes that may be upgrading at once out of `total` (at least 1: a rollout always moves unless paused)."""
        return self.max_unavailable.of(total, at_least=1)

    def failure_budget(self, total):
        """Failed nodes tolerated out of `total`; one more stops the rollout."""
        return self.failure_threshold.of(total)

    def to_dict(self):
        return {"maxUnavailable": repr(self.max_unavailable), "paused": self.paused, "order": self.order,
                "failureThreshold": repr(self.failure_threshold),
                "restart": [workload.to_dict() for workload in self.restart]}


def _scale(value, field, minimum):
    if isinstance(value, bool):
        value = None  # YAML's yes/no are no counts
    if isinstance(value, int) and value >= minimum:
        return Scale(value, False)
    match = _PERCENT.match(value) if isinstance(value, str) else None
    if match and minimum <= int(match.group(1)) <= 100:
        return Scale(int(match.group(1)), True)
    raise UpgradePolicyError("%s must be a whole number >= %d or a percentage like \"25%%\" (%d%% to 100%%), got %r"
                             % (field, minimum, minimum, value))


def _order(value, field):
    if value == ORDER_BY_NAME:
        return value
    if isinstance(value, str) and value.count("/") <= 1:
        prefix, _slash, name = value.rpartition("/")
        if _LABEL_NAME.match(name) and (not prefix or _LABEL_PREFIX.match(prefix)):
            return value
    raise UpgradePolicyError("%s must be \"name\" or a node label key such as topology.kubernetes.io/zone, got %r"
                             % (field, value))


def _restart(value, field):
    if not isinstance(value, (list, tuple)):
        raise UpgradePolicyError("%s must be a list of workloads like {kind: DaemonSet, name: server}, got %r"
                                 % (field, value))
    workloads = []
    for index, item in enumerate(value):
        where = "%s[%d]" % (field, index)
        if not isinstance(item, dict) or set(item) - set(_RESTART_FIELDS):
            raise UpgradePolicyError("%s must be a mapping with kind, name and optionally namespace, got %r"
                                     % (where, item))
        if item.get("kind") not in RESTART_KINDS:
            raise UpgradePolicyError("%s.kind must be one of %s, got %r" % (where, ", ".join(RESTART_KINDS),
                                                                            item.get("kind")))
        for key, required in (("name", True), ("namespace", False)):
            text = item.get(key)
            if (required or text is not None) and not (isinstance(text, str) and _LABEL_PREFIX.match(text)):
                raise UpgradePolicyError("%s.%s must be the workload's %s (a DNS name), got %r"
                                         % (where, key, key, text))
        workloads.append(Workload(item["kind"], item["name"], item.get("namespace")))
    return workloads


def parse_upgrade_policy(value, field="spec.upgradePolicy"):
    """An UpgradePolicy from the resource's upgradePolicy (None: the defaults); field names it in errors."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise UpgradePolicyError("%s must be a mapping with %s, got %r" % (field, ", ".join(DEFAULTS), value))
    unknown = sorted(set(value) - set(DEFAULTS))
    if unknown:
        raise UpgradePolicyError("%s has unknown field(s) %s; it takes %s" % (field, ", ".join(unknown),
                                                                              ", ".join(DEFAULTS)))
    fields = dict(DEFAULTS, **{key: item for key, item in value.items() if item is not None})
    if not isinstance(fields["paused"], bool):
        raise UpgradePolicyError("%s.paused must be true or false, got %r" % (field, fields["paused"]))
    max_unavailable = fields["maxUnavailable"]
    if not isinstance(max_unavailable, bool) and max_unavailable in (0, "0%"):
        raise UpgradePolicyError("%s.maxUnavailable 0 would never upgrade a node: give at least 1 (or 1%%), and set "
                                 "%s.paused: true to hold the rollout" % (field, field))
    return UpgradePolicy(_scale(max_unavailable, field + ".maxUnavailable", 1), fields["paused"],
                         _order(fields["order"], field + ".order"),
                         _scale(fields["failureThreshold"], field + ".failureThreshold", 0),
                         _restart(fields["restart"], field + ".restart"))
