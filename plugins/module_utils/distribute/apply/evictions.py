# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Restarting a rolling upgrade's pods onto their node's new cache (workload_restarts.py says which): one
policy/v1 Eviction per pod, so the API server applies the pods' PodDisruptionBudgets; never a plain delete.

A 429 is a budget's "not now": the pod stays, its node stays upgrading (it keeps its place in maxUnavailable),
and the next poll asks again.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError

TOO_MANY_REQUESTS = 429


def _eviction(pod):
    return {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace}}


class Evictions:
    """The evictions of one run: evicted (pods the server accepted), refused ({pod: the budget's last message})."""

    def __init__(self, kube):
        self.kube = kube
        self.evicted = []
        self.refused = {}

    def _evict(self, pod):
        """(evicted, the budget's refusal or None); a pod already gone is neither."""
        path = "/api/v1/namespaces/%s/pods/%s/eviction" % (pod.namespace, pod.name)
        try:
            status, _body = self.kube.request("POST", path, body=_eviction(pod), what="eviction of pod %r" % pod,
                                              retry_busy=False)
        except KubeError as error:
            if error.status != TOO_MANY_REQUESTS:
                raise
            return False, str(error)
        return status != 404, None

    def evict(self, pods):
        """Ask for each pod's eviction; raises the first failure that is not a budget's refusal."""
        for pod, outcome in zip(pods, self.kube.map(self._evict, pods)):
            if isinstance(outcome, Exception):
                raise outcome
            evicted, refusal = outcome
            if refusal:
                self.refused[repr(pod)] = refusal
                continue
            self.refused.pop(repr(pod), None)
            if evicted:
                self.evicted.append(repr(pod))

    def report(self):
        return {"evicted": list(self.evicted),
                "eviction_refused": [{"pod": pod, "message": message} for pod, message in sorted(self.refused.items())]}
