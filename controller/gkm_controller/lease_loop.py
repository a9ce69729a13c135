"""The Lease loop (docs/controller-design.md, section 7): lease.LeaseElector's decisions sent to the API server.

Every period (2 s) the loop reads the Lease gkm-cluster-operator in the controller's namespace, asks the elector
what to do, and sends it: a POST to create it, a PUT (carrying the resourceVersion read, never retried on a
conflict: another replica wrote first) to renew or take it. on_leading is called once, at the first successful
write: the entry point starts kopf then, not before. on_lost is called when another replica holds the Lease this one
held, or when this one's renewals failed past its deadline (its writes are refused from then on): the entry point
exits, and the Deployment restarts it as a follower.
"""

import logging
import threading

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError

from .lease import LEASE_NAME

LOG = logging.getLogger(__name__)

LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/%s/leases"


class LeaseLoop:
    """kube: a plain common/kube.py Kube (the Lease is not a cache's object: no deletion guard, and the deadline
    gates the reconciles' writes, not the renewal that extends it). elector: a lease.LeaseElector."""

    def __init__(self, kube, elector, on_leading, on_lost):
        self.kube, self.elector = kube, elector
        self.on_leading, self.on_lost = on_leading, on_lost
        self.path = LEASES_PATH % elector.namespace
        self._told = False

    def once(self):
        """One look at the Lease and what came of it: the elector's Step."""
        status, lease = self.kube.request("GET", "%s/%s" % (self.path, LEASE_NAME), what="Lease %s" % LEASE_NAME)
        step = self.elector.decide(None if status == 404 else lease)
        if step.action == "wait":
            LOG.debug("Lease: %s", step.reason)
            if self.elector.lost:
                self.on_lost(step.reason)
            return step
        try:
            if step.action == "create":
                _status, written = self.kube.request("POST", self.path, body=step.body, retry_conflicts=False,
                                                     what="Lease %s" % LEASE_NAME)
            else:
                _status, written = self.kube.request("PUT", "%s/%s" % (self.path, LEASE_NAME), body=step.body,
                                                     retry_conflicts=False, what="Lease %s" % LEASE_NAME)
        except KubeError as error:
            self.elector.refused(step)
            LOG.info("Lease: %s refused (%s)", step.action, error)
            return step
        self.elector.written(step, written)
        if not self._told:
            self._told = True
            LOG.info("leading: %s the Lease %s/%s (%s)", step.action, self.elector.namespace, LEASE_NAME,
                     step.reason)
            self.on_leading()
        return step

    def check_deadline(self):
        """on_lost when this replica led and its deadline passed without a renewal (writes are refused now)."""
        if self.elector.leading and not self.elector.deadline.leading():
            self.elector.leading, self.elector.lost = False, True
            self.on_lost("the Lease was not renewed before its deadline")

    def release(self):
        """At a clean stop: empty the holder of a Lease this replica holds, so a follower takes it at its next look
        instead of after the whole duration; True when released. The deadline ends this replica's writes first."""
        self.elector.deadline.lost()
        self.elector.leading = False
        status, lease = self.kube.request("GET", "%s/%s" % (self.path, LEASE_NAME), what="Lease %s" % LEASE_NAME)
        if status == 404 or ((lease or {}).get("spec") or {}).get("holderIdentity") != self.elector.identity:
            return False
        lease["spec"]["holderIdentity"] = ""
        try:
            self.kube.request("PUT", "%s/%s" % (self.path, LEASE_NAME), body=lease, retry_conflicts=False,
                              what="Lease %s" % LEASE_NAME)
        except KubeError as error:
            LOG.info("Lease: not released (%s)", error)
            return False
        LOG.info("released the Lease %s/%s", self.elector.namespace, LEASE_NAME)
        return True

    def run(self, stop=None):
        """Look every elector.period() seconds until stop (a threading.Event) is set or the Lease is lost."""
        stop = stop or threading.Event()
        while not stop.is_set() and not self.elector.lost:
            try:
                self.once()
            except KubeError as error:  # the read failed: the next look may succeed, the deadline still holds
                LOG.warning("Lease: %s", error)
            self.check_deadline()
            stop.wait(self.elector.period())
