# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: quotas_pending
short_description: The ResourceQuotas the API server does not enforce yet for one resource
version_added: 0.1.0
description:
  - Of a list of ResourceQuota objects (as C(kubernetes.core.k8s_info) returns them), those whose status does not
    count O(resource) as their spec sets it yet, by namespace and name. Until the quota controller has counted it,
    the API server refuses every object of that resource in the quota's namespace ("status unknown for quota").
  - A quota counts the resource when its C(status.hard) holds the value of its C(spec.hard) and its C(status.used)
    holds the resource.
positional: resource
options:
  _input:
    description: ResourceQuota objects.
    type: list
    elements: dict
    required: true
  resource:
    description: The quota resource, such as C(count/gkmcaches.gkm.io).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Say which GKMCache quotas are not counted yet
  ansible.builtin.debug:
    msg: "{{ quotas.resources | gkm.cluster.quotas_pending('count/gkmcaches.gkm.io') }}"
  # -> ['team-a/gkm-caches'] while team-a's quota is not counted yet
"""

RETURN = r"""
_value:
  description: C(namespace/name) of each quota not enforced as set yet, in the input's order.
  type: list
  elements: str
"""


def _enforced(quota, resource):
    status = quota.get("status") or {}
    wanted = ((quota.get("spec") or {}).get("hard") or {}).get(resource)
    return (status.get("hard") or {}).get(resource) == wanted and resource in (status.get("used") or {})


def quotas_pending(quotas, resource):
    return ["%s/%s" % (quota["metadata"].get("namespace"), quota["metadata"]["name"])
            for quota in quotas or [] if not _enforced(quota, resource)]


class FilterModule(object):
    def filters(self):
        return {"quotas_pending": quotas_pending}
