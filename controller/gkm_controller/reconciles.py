"""One cache's reconcile in the controller: the modules' own reconcile (distribute/reconcile.py), reading the resource
from kopf's body and its facts from the index (IndexSource: no LIST, and its waits woken by watch events), and writing
through a GuardedKube (no write for a cache being deleted, except the finalizer's), one at a time per cache.

The cache handlers, the node reconciles and the resync of one cache take its lock, so a node event's reconcile
never runs beside, or after, that cache's finalizer in this process (docs/controller-design.md, section 5).
"""

import collections
import logging
import threading
import time

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import EXTRACTING, PENDING
from ansible_collections.gkm.cluster.plugins.module_utils.distribute import reconcile as cache_reconcile
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import IndexSource
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.resource import resource_path

from .deletion import DeletionGuard, GuardedKube, deletion_requested

LOG = logging.getLogger(__name__)
# A reconcile that ends before its cache settled is run again after RECHECK_SECONDS, doubling per attempt up to
# RECHECK_MAX_SECONDS: a finished extraction Job starts no reconcile, and a cache that stays Pending (no node can run
# its Jobs) costs one reconcile per RECHECK_MAX_SECONDS, the earlier engine's reconcile period.
RECHECK_SECONDS = 5
RECHECK_MAX_SECONDS = 300
UNDER_WAY_PHASES = (PENDING, EXTRACTING)
# What a resync that wrote nothing and left its cache settled read: the index's version, the image's digest and the
# cache's resourceVersion (Reconciler, docs/controller-design.md section 6).
SettledRead = collections.namedtuple("SettledRead", ("index_version", "digest", "resource_version"))


def under_way(result):
    """True when a reconcile ended before its cache settled: a rolling upgrade still moving (its wait's deadline came
    first), or extractions still under way (the status it wrote says Pending or Extracting)."""
    result = result or {}
    if (result.get("rollout") or {}).get("moving"):
        return True
    return ((result.get("resource") or {}).get("status") or {}).get("phase") in UNDER_WAY_PHASES


def recheck_delay(attempt):
    """Seconds until the next reconcile of a cache still under way after `attempt` earlier ones (0 for the first)."""
    return min(RECHECK_SECONDS * 2 ** attempt, RECHECK_MAX_SECONDS)


class CacheLocks:
    """One lock per cache (kind, namespace, name), made on first use and kept (a few hundred bytes a cache)."""

    def __init__(self):
        self._locks = {}
        self._lock = threading.Lock()

    def of(self, kind, namespace, name):
        key = (kind, namespace or "", name)
        with self._lock:
            return self._locks.setdefault(key, threading.Lock())


def cache_reference(metadata):
    """namespace/name of a GKMCache, name of a ClusterGKMCache: how the controller's log names a cache."""
    return "/".join(filter(None, (metadata.get("namespace"), metadata["name"])))


def _definition(body):
    """The resource as kopf delivered it, as plain dicts (kopf's Body is a read-only view)."""
    return {key: value for key, value in dict(body).items()}


class Reconciler:
    """reconcile(kind, body, finalizing) for handlers.Controller.

    api_client: the controller's configured ApiClient; index: the ClusterIndex; options: the distribution options a
    resource cannot set (the modules' DISTRIBUTION_ARG_SPEC: extraction image, host path root, wait, ...), as today's
    operator passes them. lease: a lease.LeaseDeadline every write is also checked against (None: no check, for
    tests and a single replica). run: the reconcile to call (distribute/reconcile.py's by default).

    The writes of a cache's run that the index did not show when it ended are kept for that cache's next run, whose
    first read waits for them: that run starts as soon as the lock is free, and would plan from an index still
    taking the last run's events (docs/controller-design.md, section 10).

    A resync's run that wrote nothing and left its cache settled is recorded (the index's version it read, the cache's
    resourceVersion, the digest): the next resync of that cache stops once the image is resolved when none of the
    three moved, as it would read, plan and compare the same things again (docs/controller-design.md, section 6).
    """

    def __init__(self, api_client, index, options, locks=None, lease=None, run=cache_reconcile.reconcile):
        self.api_client, self.index, self.options = api_client, index, dict(options)
        self.locks = locks or CacheLocks()
        self.lease = lease
        self.run = run
        self._unshown = {}
        self._settled = {}

    def _live(self, kind, name, namespace):
        """The cache resource as the API server has it now, or None when it is not found."""
        return Kube(self.api_client).request("GET", resource_path(kind, name, namespace), what="%s %s" % (
            kind, name))[1]

    def __call__(self, kind, body, finalizing, count=None, cause="an event of the cache", resync=False):
        """count: one more guard shown every request (resync.RequestCount), or None. cause: what started the run, for
        its log line (a resync's number, kopf's reason, the coalescer's queue). resync: the run is a resync's, which
        may stop early when its cache is settled (see the class).

        A run other than the finalizer's plans from the index's copy of the cache once it holds the cache's lock: the
        copy it was handed may have waited behind a long run (a node event's, during a 10-minute cold run), and the
        index's is never older (kopf indexes an event before its handlers run, and holds the cache's next events
        until they return). A cache the index shows being deleted is left to its finalizer.
        """
        metadata = body["metadata"]
        name, namespace = metadata["name"], metadata.get("namespace")
        what = "%s %s" % (kind, cache_reference(metadata))
        key = (kind, namespace or "", name)
        with self.locks.of(kind, namespace, name):
            if not finalizing:
                body = self.index.get(kind, name, namespace) or body
                if deletion_requested(body):
                    LOG.info("%s is being deleted: nothing but its finalizer runs", what)
                    return None
            guard = DeletionGuard(kind, name, namespace, body=body, index=self.index, finalizing=finalizing,
                                  read=lambda: self._live(kind, name, namespace))
            kube = GuardedKube(self.api_client, guard, *[other for other in (self.lease, count) if other])
            options = dict(self.options, state="absent" if finalizing else "present")
            resource = _definition(body)
            # One line per run, the count the integration test reads (heartbeats start none).
            LOG.info("reconcile %s (%s; %s)", what, options["state"], cause)
            started = time.monotonic()
            earlier = self._unshown.pop(key, ())
            resource_version = body["metadata"].get("resourceVersion")
            settled = self._settled.pop(key, None) if resync else None
            if settled and settled.resource_version != resource_version:
                settled = None
            source = IndexSource(self.index, kube.written, earlier,
                                 settled_at=settled and (settled.index_version, settled.digest))
            result = None
            try:
                # kopf's body is the live resource (its uid, creation time and status): no GET (row 1 of the reads).
                result = self.run(kube, kind, name, namespace, options, definition=None if finalizing else resource,
                                  source=source, live=resource)
            finally:
                unshown = self.index.unshown(list(earlier) + kube.written)
                if unshown:
                    self._unshown[key] = unshown
            digest = ((result or {}).get("cache") or {}).get("digest")
            quiet = digest and not result.get("changed") and not kube.writes and not unshown
            if resync and quiet and not under_way(result):
                read = settled.index_version if result.get("settled") else source.read_version
                self._settled[key] = SettledRead(read, digest, resource_version)
            # The phases (common/timings.py) say where a slow reconcile's time went: writes, the wait, the status.
            # labels: readiness labels set and removed; unshown: of its writes, those the watches had not brought
            # back when it ended (the next run waits for them).
            labels = [change["value"] is None for change in (result or {}).get("node_labels") or []]
            LOG.info("reconciled %s in %.1f s: changed %s; %s; labels set=%d removed=%d; unshown=%d%s", what,
                     time.monotonic() - started, bool((result or {}).get("changed")), " ".join(
                         "%s=%.1f" % phase for phase in sorted(((result or {}).get("timings") or {}).items())),
                     labels.count(False), labels.count(True), len(unshown),
                     "; settled: nothing it reads changed since its last resync" if (result or {}).get(
                         "settled") else "")
            return result
