# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: requeue_after
short_description: Have ansible-operator reconcile the run's resource again after a period
version_added: "0.1.0"
description:
  - Returns O(period) as C(period), the result ansible-operator reads to reconcile the watched resource of the run
    again after that period instead of the watch's C(reconcilePeriod), for this one reconcile (docs/operator.md).
  - The engine recognises the task only when its action is written C(requeue_after) (without the collection's name)
    or C(operator_sdk.util.requeue_after); it stops reading the run's events at its result, so the task must be the
    run's last. Outside ansible-operator it only returns the period.
  - Runs on the controller (an action plugin); nothing is executed on the host.
author:
  - gkm.cluster contributors (@gkm-cluster)
options:
  period:
    description:
      - A positive duration as Go's C(time.ParseDuration) reads it, such as C(15s) or C(1m30s).
    type: str
    required: true
notes:
  - Supports check mode; it changes nothing.
"""

EXAMPLES = r"""
- name: Reconcile this resource again in 15 seconds (the last task of an ansible-operator run)
  requeue_after:  # noqa: fqcn[action]
    period: 15s
"""

RETURN = r"""
period:
  description: The period, as given.
  returned: success
  type: str
  sample: 15s
"""
