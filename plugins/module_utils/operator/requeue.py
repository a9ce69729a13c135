# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The operator's early requeue of a cache whose rolling upgrade still moves, pure: the period checked as the engine
will parse it.

ansible-operator (v1.42.2, internal/ansible/controller/reconcile.go) reconciles a resource again after the `period`
of a successful task whose action is written `requeue_after` (or operator_sdk.util.requeue_after) instead of the
watch's reconcilePeriod, for that one reconcile only; it stops reading the run's events there, so the task is the
run's last. The engine parses the period with Go's time.ParseDuration and fails the reconcile on anything else, and a
zero period would end the periodic reconciles altogether: both are refused here, naming the variable.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError

# Go's duration units in seconds ("us" and "µs" are both microseconds).
_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|\u00b5s|ms|s|m|h)")
VARIABLE = "operator_events_rollout_requeue"


class RequeueError(GkmError):
    """A period the engine would refuse or that would stop the reconciles."""


def requeue_period(period):
    """The period unchanged when Go's time.ParseDuration reads it as more than zero (e.g. 15s, 1m30s)."""
    text = str(period or "")
    parts = _PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise RequeueError("%s %r is not a duration ansible-operator reads: give a number and a unit, such as 15s or "
                           "1m30s (units h, m, s, ms)" % (VARIABLE, period))
    if sum(float(number) * _UNITS[unit] for number, unit in parts) <= 0:
        raise RequeueError("%s %r would end the cache's periodic reconciles: give a positive duration, such as 15s"
                           % (VARIABLE, period))
    return text
