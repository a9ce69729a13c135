"""Writes only while this replica leads: the local deadline of its Lease (docs/controller-design.md, section 7).

The Lease itself (coordination.k8s.io/v1 `gkm-cluster-operator`, taken, renewed and honoured as recorded) is not
here yet; what is here is the check every write makes. A leader that fails to renew stops writing the moment its
deadline passes, before any follower may take over (the follower waits for the whole recorded duration), so two
replicas never write at once. The deadline is kept on the monotonic clock, never on the wall clock.
"""

import threading
import time

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError

from .deletion import WRITE_METHODS


class NotLeading(KubeError):
    """A write refused because this replica does not hold the Lease (any more)."""


class LeaseDeadline:
    """The moment (monotonic seconds) until which this replica may write; none before the first renewal.

    renewed(at, duration): the Lease was renewed at monotonic time `at` (taken before the renewal request was sent)
    for `duration` seconds; margin: seconds given up at the end, so a write in flight when the deadline passes has
    reached the API server before another replica may lead. lost(): leadership gone now.
    """

    def __init__(self, margin=1.0, clock=time.monotonic):
        self.margin, self.clock = margin, clock
        self._deadline = None
        self._lock = threading.Lock()

    def renewed(self, at, duration):
        with self._lock:
            self._deadline = at + duration - self.margin

    def lost(self):
        with self._lock:
            self._deadline = None

    def leading(self):
        with self._lock:
            return self._deadline is not None and self.clock() < self._deadline

    def check(self, method, what):
        """Raise NotLeading for a write (POST, PUT, PATCH, DELETE) past the deadline; reads always pass."""
        if method in WRITE_METHODS and not self.leading():
            raise NotLeading("this replica does not hold the Lease: refused %s %s" % (method, what))
