"""Node events coalesced: the caches a burst of node events calls to reconcile run once each, off kopf's threads.

Fifty nodes joining send fifty or more Node events within a second, each naming the same cache. Reconciling on every
one would queue fifty whole-cache runs behind the cache's lock. The Coalescer keeps the caches submitted within
`delay` seconds (the newest copy of each), then hands each to the executor once. A cache submitted again while its
run is on the executor (waiting for the cache's lock or running) runs once more after it, as the index then holds
it, however many times it was submitted meanwhile, so no change is missed and runs do not pile up: at 2,000 nodes
the label events of a 10-minute cold run queued one whole-cache run per window behind its lock, each then 10 s of
work. The run handed over plans from the index's copy once it holds the lock (reconciles.Reconciler), not from the
copy submitted before it waited.

It is also the controller's one retry path: a reconcile that ended before its cache settled (reconciles.under_way),
whoever started it (kopf's handlers, the node path, the resync), is followed (`follow`) by the cache submitted again,
as the index then holds it, after reconciles.recheck_delay: a finished extraction Job starts no reconcile. Not kopf's
TemporaryError: kopf keeps a retried handler's progress in the cache's annotations (a PATCH per retry and one to
clear it) and retries with the body of the change it handled; this timer writes nothing, runs the index's newest
copy, and shares the window with the node events of the same cache.
"""

import logging
import threading

from .deletion import guard_refusal
from .reconciles import recheck_delay, under_way

LOG = logging.getLogger(__name__)

DELAY = 0.5
# What a run from the queue says started it (its log line, reconciles.Reconciler).
QUEUED = "queued: node events, a recheck or a released claim"


def _key(kind, resource):
    metadata = resource["metadata"]
    return kind, metadata.get("namespace") or "", metadata["name"]


def _timer(delay, function):
    timer = threading.Timer(delay, function)
    timer.daemon = True
    timer.start()
    return timer


class Coalescer:
    """submit(kind, resource), node_reconciles' submit: run(kind, resource, False) once per cache and window.

    run: the cache reconcile (reconciles.Reconciler). executor: where the runs go (a ThreadPoolExecutor of the
    entry point's). schedule(delay, function): calls function after delay seconds (a daemon threading.Timer; tests
    pass their own clock). held(kind, resource): the cache as the index holds it now, or None when it is gone or being
    deleted (None: no run again).
    """

    def __init__(self, run, executor, delay=DELAY, schedule=_timer, held=None):
        self.run, self.executor, self.delay, self.schedule, self.held = run, executor, delay, schedule, held
        self._attempts = {}
        self._pending = {}
        self._scheduled = False
        self._stopped = False
        self._on_executor = set()  # caches handed to the executor whose run has not ended
        self._meanwhile = {}  # of those, the ones submitted since: the newest copy of each
        self._lock = threading.Lock()

    def submit(self, kind, resource):
        key = _key(kind, resource)
        with self._lock:
            if self._stopped:
                return
            self._pending[key] = resource
            if self._scheduled:
                return
            self._scheduled = True
        self.schedule(self.delay, self.flush)

    def flush(self):
        """Hand every cache submitted since the last flush to the executor, once each."""
        with self._lock:
            pending, self._pending, self._scheduled = ({} if self._stopped else self._pending), {}, False
            handed = {key: resource for key, resource in pending.items() if key not in self._on_executor}
            self._meanwhile.update((key, resource) for key, resource in pending.items() if key not in handed)
            self._on_executor.update(handed)
        for (kind, _namespace, _name), resource in handed.items():
            self.executor.submit(self._run, kind, resource)
        return len(handed)

    def stop(self):
        """Submit nothing more (kopf's cleanup: the controller is stopping). A timer still due then finds nothing to
        hand over, where it would have met an executor that refuses work at interpreter shutdown; runs under way go
        on to their end."""
        with self._lock:
            self._stopped = True
            self._pending = {}

    def _run(self, kind, resource):
        try:
            result = self.run(kind, resource, False, cause=QUEUED)
        except Exception as error:  # a failed run must not end the executor's thread
            refusal = guard_refusal(error)
            if refusal:
                # The deletion arrived during the run and the guard stopped it before a write: the finalizer's
                # alone now, nothing to run again (nor would `held` hand the cache back).
                LOG.info("%s %s: queued reconcile stopped, the finalizer's turn: %s", kind,
                         resource["metadata"]["name"], refusal)
                return None
            LOG.warning("%s %s: queued reconcile failed: %s", kind, resource["metadata"]["name"], error)
            # Run again, backing off: no event may come (a serving PVC that bound after the wait gave up sends none
            # the controller watches for), and the resync is minutes away.
            self.follow(kind, resource, None, failed=True)
            return None
        finally:
            self._ended(kind, resource)
        self.follow(kind, resource, result)
        return result

    def _ended(self, kind, resource):
        """The run of a cache left the executor: submit it once more if it was submitted meanwhile, as the index
        holds it now (the copies submitted meanwhile may predate the run's own writes)."""
        key = _key(kind, resource)
        with self._lock:
            self._on_executor.discard(key)
            again = self._meanwhile.pop(key, None)
        if again is not None:
            current = again if self.held is None else self.held(kind, again)
            if current is not None:
                self.submit(kind, current)

    def follow(self, kind, resource, result, failed=False):
        """After any reconcile of the cache (kopf's handlers, the node path, the resync): when it ended before the
        cache settled (reconciles.under_way), submit the cache again, as the index then holds it, after
        reconciles.recheck_delay of the attempts since it last settled or moved on; a reconcile that raised
        (`failed`) likewise. The one retry path of the controller. True when a recheck was scheduled."""
        key = _key(kind, resource)
        with self._lock:
            attempt = self._attempts.pop(key, 0)
            if self._stopped or self.held is None or not (failed or under_way(result)):
                return False
            # A reconcile that wrote something moved the cache on (a rollout's next wave): the back-off is for a
            # cache that waits without moving, or a long rollout's later waves would wait minutes each.
            if (result or {}).get("changed"):
                attempt = 0
            self._attempts[key] = attempt + 1
        delay = recheck_delay(attempt)
        LOG.info("%s %s: %s, reconciled again in %s s", kind, resource["metadata"]["name"],
                 "its reconcile failed" if failed else "not settled yet (extractions or a rollout under way)", delay)
        self.schedule(delay, lambda: self._again(kind, resource))
        return True

    def _again(self, kind, resource):
        current = self.held(kind, resource)
        if current is not None:
            self.submit(kind, current)
