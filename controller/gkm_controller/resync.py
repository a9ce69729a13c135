"""The periodic resync (docs/controller-design.md, section 6): on the leader, every `period` seconds, each cache the
index holds (none being deleted) reconciled as a cache change is, from the index's copy: facts from the index (no
LIST), its image's tag resolved again (a registry request, so a tag moved to a new digest is seen here), plan,
status and per-node objects compared, and a write only for what differs. With nothing changed a resync sends no
request to the API server at all; drift a user made by hand (a per-node object edited, a PVC deleted while no watch
event reached the index) is repaired at the next one. A cache whose last resync wrote nothing and left it settled
stops after the resolve when neither the index, nor the cache, nor the digest moved since (reconciles.Reconciler):
it would read, plan and compare the same objects again.

Every request of a resync's reconciles is counted (RequestCount, one more guard of the reconcile's GuardedKube: the
controller's client, not the API server's audit log) and logged in one line per resync, the figure
`resync_list_requests` and `resync_writes` of bench/controller.py and the integration test read.
"""

import logging
import threading
import time

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CACHE_KINDS

from .deletion import WRITE_METHODS, deletion_requested, guard_refusal
from .reconciles import cache_reference

LOG = logging.getLogger(__name__)
# Today's reconcilePeriod of the cache resources (the ansible-operator's watches.yaml had it).
DEFAULT_PERIOD_SECONDS = 300


# How many of a cache's writes its resync line names: what drifted, without a line of thousands.
NAMED_WRITES = 5


class RequestCount:
    """A guard (deletion.GuardedKube) that refuses nothing and counts what it is shown: LISTs (the collection's
    paged reads, `what` "list ..."), other reads, writes (dry runs go through a Kube of their own, unguarded, and
    happen only for a planned write); the first NAMED_WRITES writes by method and object (`named`)."""

    def __init__(self):
        self.lists = self.reads = self.writes = 0
        self.named = []
        self._lock = threading.Lock()

    def check(self, method, what):
        with self._lock:
            if method in WRITE_METHODS:
                self.writes += 1
                if len(self.named) < NAMED_WRITES:
                    self.named.append("%s %s" % (method, what))
            elif str(what).startswith("list "):
                self.lists += 1
            else:
                self.reads += 1

    def writes_named(self):
        """" (PATCH x; POST y, ...)": the writes `named`, "" when there were none."""
        if not self.named:
            return ""
        return " (%s%s)" % ("; ".join(self.named), ", ..." if self.writes > len(self.named) else "")

    def figures(self):
        return {"list_requests": self.lists, "other_reads": self.reads, "writes": self.writes}

    def add(self, other):
        with self._lock:
            self.lists, self.reads, self.writes = (
                self.lists + other.lists, self.reads + other.reads, self.writes + other.writes)


class Resync:
    """once(): every cache reconciled through reconcile(kind, resource, finalizing, count=) and each result handed to
    follow(kind, resource, result) (the coalescer's: a cache not settled is run again); run(): once() every `period`
    seconds after `ready` is set, until stop(). One cache at a time: a resync is a background check, not a burst."""

    def __init__(self, index, reconcile, period=DEFAULT_PERIOD_SECONDS, ready=None, follow=None):
        self.index, self.reconcile, self.period, self.follow = index, reconcile, period, follow
        self.ready = ready or threading.Event()
        self.resyncs = 0
        self._stop = threading.Event()

    def caches(self):
        """The cache resources as the index holds them (kind set), none being deleted: only its finalizer writes."""
        return [resource for kind in sorted(CACHE_KINDS) for resource in self.index.select(kind)
                if not deletion_requested(resource)]

    def once(self):
        """One resync; its figures: caches, changed, failed, seconds and the request counts. A cache that sent a
        request, changed, failed or was stopped (deleted during its run, the deletion guard refused its write: the
        finalizer's turn) gets a line of its own: which cache drifted, and what a test on a shared cluster checks of
        its own cache alone."""
        started, count = time.monotonic(), RequestCount()
        caches = self.caches()
        number, changed, failed = self.resyncs + 1, 0, 0
        for resource in caches:
            kind, sent, outcome = resource["kind"], RequestCount(), "unchanged"
            try:
                result = self.reconcile(kind, resource, False, count=sent, cause="resync %d" % number, resync=True)
            except Exception as error:  # one cache's failure must not end the resync of the others
                if guard_refusal(error):  # deleted during the run: the finalizer's turn, not a failure
                    outcome = "stopped"
                else:
                    failed, outcome = failed + 1, "failed"
                    LOG.warning("resync: %s %s failed: %s", kind, resource["metadata"]["name"], error)
            else:
                if (result or {}).get("changed"):
                    changed, outcome = changed + 1, "changed"
                if self.follow:
                    self.follow(kind, resource, result)
            count.add(sent)
            if outcome != "unchanged" or any(sent.figures().values()):
                LOG.info("resync %d: %s %s %s; %d LIST requests, %d other reads, %d writes%s", number, kind,
                         cache_reference(resource["metadata"]), outcome, sent.lists, sent.reads, sent.writes,
                         sent.writes_named())
        self.resyncs = number
        figures = dict(caches=len(caches), changed=changed, failed=failed,
                       seconds=round(time.monotonic() - started, 3), **count.figures())
        LOG.info("resync %d: %d caches in %.1f s, %d changed, %d failed; %d LIST requests, %d other reads, %d writes",
                 number, len(caches), figures["seconds"], changed, failed, count.lists, count.reads, count.writes)
        return figures

    def run(self):
        self.ready.wait()
        while not self._stop.wait(self.period):
            try:
                self.once()
            except Exception as error:  # the next period tries again; a resync thread that ended would never
                LOG.warning("resync failed: %s", error)

    def start(self):
        threading.Thread(target=self.run, name="gkm-resync", daemon=True).start()

    def stop(self):
        self._stop.set()
