"""Writes only while this replica leads: its Lease (docs/controller-design.md, section 7).

LeaseElector decides, without sending anything, what a replica does with the coordination.k8s.io/v1 Lease
`gkm-cluster-operator` each time it has read it: create it, renew it, take it (released, or its holder's record
unchanged for the whole recorded duration), or wait. The caller sends the write (an update carries the read's
resourceVersion, so two candidates taking at once conflict and one fails) and reports the outcome; the loop that
reads and writes every 2 s is not here yet.

LeaseDeadline is the check every write makes. A leader that fails to renew stops writing the moment its deadline
passes, before any follower may take over (the follower waits for the whole recorded duration, measured on its own
clock from when it saw the record last change), so two replicas never write at once. Both keep time on the monotonic
clock; the wall clock only fills the Lease's acquireTime and renewTime, which no replica compares with its own.
"""

import threading
import time
from datetime import datetime, timezone

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


LEASE_NAME = "gkm-cluster-operator"  # today's engine's --leader-election-id: the old and new engines share one Lease
LEASE_DURATION = 8  # seconds, written as leaseDurationSeconds
RENEW_PERIOD = 2  # seconds between a leader's renewals
RETRY_PERIOD = 2  # seconds between a follower's looks at the Lease


def micro_time(moment):
    """A MicroTime as the API server writes it (RFC 3339, microseconds, UTC)."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record(lease):
    """What says a holder is alive: any change of it restarts a follower's count."""
    spec = (lease or {}).get("spec") or {}
    return tuple(spec.get(field) for field in (
        "holderIdentity", "renewTime", "acquireTime", "leaseDurationSeconds", "leaseTransitions"))


class Step:
    """One decision: action is "create", "renew", "take" or "wait"; body the Lease to send (None for wait); at the
    monotonic time taken before sending (what LeaseDeadline.renewed is given); reason for the log."""

    __slots__ = ("action", "at", "body", "reason")

    def __init__(self, action, body, at, reason):
        self.action, self.body, self.at, self.reason = action, body, at, reason

    def __repr__(self):
        return "Step(%s: %s)" % (self.action, self.reason)


class LeaseElector:
    """The Lease's decisions for the replica `identity` (its pod name) in `namespace`.

    decide(lease) with the Lease as read (None when there is none) returns a Step; after sending its body, written(step,
    lease) with the Lease the API server returned, or refused(step) when the write failed (a conflict included).
    `leading` is this replica's belief; the writes themselves are gated by `deadline` (a LeaseDeadline), which
    written() renews and a lost Lease clears. A leader that sees another holder has lost: it must stop (section 7:
    it exits and the Deployment restarts it as a follower).
    """

    def __init__(self, identity, namespace, deadline=None, duration=LEASE_DURATION, clock=time.monotonic,
                 wall=lambda: datetime.now(timezone.utc)):
        self.identity, self.namespace, self.duration = identity, namespace, duration
        self.deadline = deadline if deadline is not None else LeaseDeadline(clock=clock)
        self.clock, self.wall = clock, wall
        self.leading = False
        self.lost = False
        self._observed, self._observed_at = None, None

    def _body(self, lease, acquire):
        now = micro_time(self.wall())
        spec = dict((lease or {}).get("spec") or {})
        transitions = spec.get("leaseTransitions") or 0
        if acquire:
            spec["acquireTime"] = now
            if lease is not None and spec.get("holderIdentity") != self.identity:
                transitions += 1
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=self.duration, renewTime=now,
                    leaseTransitions=transitions)
        metadata = {"name": LEASE_NAME, "namespace": self.namespace}
        resource_version = ((lease or {}).get("metadata") or {}).get("resourceVersion")
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    def decide(self, lease):
        at = self.clock()
        if lease is None:
            return Step("create", self._body(None, acquire=True), at, "no Lease yet")
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        if holder == self.identity:
            # Ours (a restarted container of this pod holds it too: the process that wrote it is gone).
            return Step("renew", self._body(lease, acquire=not self.leading), at, "held by this replica")
        if self.leading:
            self.leading, self.lost = False, True
            self.deadline.lost()
            return Step("wait", None, at, "lost: %s holds the Lease" % holder)
        if not holder:
            return Step("take", self._body(lease, acquire=True), at, "released")
        record = _record(lease)
        if record != self._observed:
            self._observed, self._observed_at = record, at
            return Step("wait", None, at, "%s renewed (or first seen)" % holder)
        recorded = spec.get("leaseDurationSeconds") or self.duration
        if at - self._observed_at < recorded:
            return Step("wait", None, at, "%s holds it for %.1f s more at most" % (
                holder, recorded - (at - self._observed_at)))
        return Step("take", self._body(lease, acquire=True), at,
                    "%s has not renewed for its recorded %s s" % (holder, recorded))

    def written(self, step, lease):
        """The step's write succeeded; `lease` is what the API server returned."""
        spec = (lease or {}).get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            raise ValueError("the Lease written is held by %r, not %r" % (spec.get("holderIdentity"), self.identity))
        self.leading = True
        self.deadline.renewed(step.at, spec.get("leaseDurationSeconds") or self.duration)
        self._observed, self._observed_at = _record(lease), step.at

    def refused(self, step):
        """The step's write failed. A take or create that failed leaves this replica a follower; a failed renewal
        changes nothing here: the deadline of the last good renewal still ends the writes, and the next try may
        renew in time."""
        if step.action in ("create", "take"):
            self.leading = False

    def period(self):
        """Seconds until the next read of the Lease."""
        return RENEW_PERIOD if self.leading else RETRY_PERIOD
