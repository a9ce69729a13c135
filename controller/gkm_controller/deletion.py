"""Deletion is final: no write for a cache resource that has a deletion timestamp, except by its finalizer.

kopf runs no create, update or resume handler for an object being deleted, but a reconcile may have started before
the deletion arrived, and node events and the resync start reconciles from other objects. So every write of a
reconcile goes through a GuardedKube, which asks the cache's DeletionGuard first: the body the handler was given,
and the index's copy of the cache (kept current by the watch), each say whether the cache is going or gone. A refused
write raises CacheDeleting, which ends that reconcile before its next write.
"""

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube, WriteRefused

WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def deletion_requested(body):
    """True when the object carries a deletion timestamp."""
    return bool(((body or {}).get("metadata") or {}).get("deletionTimestamp"))


class CacheDeleting(WriteRefused):
    """A write refused because the cache it was for is being deleted (or is gone)."""


def guard_refusal(error):
    """The CacheDeleting that ended a run, found along the exception's causes (the pipeline reports a KubeError as
    a DistributeError raised from it), or None."""
    while error is not None:
        if isinstance(error, CacheDeleting):
            return error
        error = error.__cause__
    return None


class DeletionGuard:
    """Whether a reconcile of one cache (kind, name, namespace) may still write.

    body: the cache resource as the handler got it (its uid ties the guard to that object, not to a new one of the
    same name). index: the ClusterIndex holding the cache kinds, or None. finalizing: the finalizer's own reconcile,
    the only one that writes for a cache being deleted. A cache the index held at an earlier check and holds no more
    (or holds with another uid) is gone: nothing more is written for it either. read: the cache as the API server
    has it now (None: not found), asked when the index holds no such cache at the first check: a new cache the
    watch has not brought yet may be written for, a run queued behind its cache's finalizer may not (seen at 2,000
    nodes: such a run wrote PVs for 5 minutes after the finalizer had removed the cache).
    """

    def __init__(self, kind, name, namespace=None, body=None, index=None, finalizing=False, read=None):
        self.kind, self.name, self.namespace = kind, name, namespace or None
        self.body, self.index, self.finalizing, self.read = body, index, finalizing, read
        self.uid = ((body or {}).get("metadata") or {}).get("uid")
        self._seen = False

    def _held(self):
        return self.index.get(self.kind, self.name, self.namespace)

    def _why_not_live(self, live):
        """Why the cache as it is (the index's copy, or the API server's) takes no write, or None."""
        if live is None:
            return "it is gone"
        if self.uid and (live.get("metadata") or {}).get("uid") not in (None, self.uid):
            return "it is gone (a new %s of that name has another uid)" % self.kind
        if deletion_requested(live):
            return "it has a deletion timestamp"
        return None

    def why_not(self):
        """None when the reconcile may write, else why not."""
        if self.finalizing:
            return None
        if deletion_requested(self.body):
            return "it has a deletion timestamp"
        if self.index is None:
            return None
        held = self._held()
        if held is None and not self._seen:
            return None if self.read is None else self._why_not_live(self.read())
        self._seen = True
        return self._why_not_live(held)

    def check(self, method, what):
        """Raise CacheDeleting for a write (POST, PUT, PATCH, DELETE) the cache's state forbids."""
        if method not in WRITE_METHODS:
            return
        reason = self.why_not()
        if reason:
            raise CacheDeleting("%s %s%s: %s, so only its finalizer writes; refused %s %s" % (
                self.kind, "%s/" % self.namespace if self.namespace else "", self.name, reason, method, what))


class GuardedKube(Kube):
    """common/kube.py's Kube whose every request is first shown to its guards (the cache's DeletionGuard, then any
    other: lease.LeaseDeadline); a guard raises to refuse a write, and reads pass as they are."""

    def __init__(self, api_client, guard, *others, **kwargs):
        super().__init__(api_client, **kwargs)
        self.guard = guard
        self.guards = (guard, *others)

    def request(self, method, path, *args, **kwargs):
        for guard in self.guards:
            guard.check(method, kwargs.get("what") or path)
        return super().request(method, path, *args, **kwargs)
