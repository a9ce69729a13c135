# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one way to reach the Kubernetes API: raw JSON requests by path.

Requests go through the kubernetes client's public `DynamicClient.request`, whose contract (method,
path, query, headers, body; a raw response back, ApiException subclasses on errors) is the same in
every client version the collection supports, unlike the generated ApiClient's internals, which the
37.x client rewrote. No model classes are built, so thousands of objects cost little client CPU.
Writes are server-side apply with the field manager `gkm.cluster`, sent from a bounded thread pool
and retried with backoff on conflicts, throttling and transient server errors. Every request and
every write is counted, so callers and tests can prove that a no-change run wrote nothing.
How the ApiClient is configured (Ansible auth options, a kubeconfig, in-cluster) is common/client.py's job.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import logging
import random
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError

try:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient

    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

LOG = logging.getLogger("gkm.kube")

FIELD_MANAGER = "gkm.cluster"
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
RETRY_STATUS = (409, 429, 500, 502, 503, 504)
MAX_ATTEMPTS = 6
DEFAULT_WORKERS = 16
LIST_PAGE_SIZE = 500
# Names, labels and annotations only (PartialObjectMetadataList); a server without it answers with full objects.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
# Seconds (connect, read) for a watch: the read outlasts the server's own timeoutSeconds.
WATCH_REQUEST_TIMEOUT = (10, 360)

# kind -> (API prefix, plural, namespaced): every kind the collection reads or writes.
RESOURCES = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "PersistentVolume": ("/api/v1", "persistentvolumes", False),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "Pod": ("/api/v1", "pods", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Secret": ("/api/v1", "secrets", True),
    "Service": ("/api/v1", "services", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Job": ("/apis/batch/v1", "jobs", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "StorageClass": ("/apis/storage.k8s.io/v1", "storageclasses", False),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "MutatingWebhookConfiguration": ("/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations",
                                     False),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "Issuer": ("/apis/cert-manager.io/v1", "issuers", True),
    "Certificate": ("/apis/cert-manager.io/v1", "certificates", True),
}


class KubeError(GkmError):
    """An API request failed for good; the message names the object and the server's reason."""

    def __init__(self, message, status=None):
        super(KubeError, self).__init__(message)
        self.status = status


class WriteRefused(KubeError):
    """A write its caller's own guard refused before sending it (the controller's deletion guard): the end of the
    whole run, never one object's failure among a batch's (Kube.map raises it)."""


def resource_path(kind, namespace=None, name=None):
    prefix, plural, namespaced = RESOURCES[kind]
    parts = [prefix]
    if namespaced and namespace:
        parts.append("namespaces/%s" % namespace)
    parts.append(plural)
    if name:
        parts.append(name)
    return "/".join(parts)


class _NoDiscovery:
    """DynamicClient's discoverer slot: every request here names its path, so nothing is discovered
    (the default discoverer would cost three requests and a cache file per client)."""

    def __init__(self, client, cache_file):
        self.client = client


class Kube:
    """Raw JSON requests through a configured ApiClient; dry_run makes every write a server-side dry run."""

    def __init__(self, api_client, dry_run=False, workers=DEFAULT_WORKERS):
        self.api = api_client
        self._dynamic = DynamicClient(api_client, discoverer=_NoDiscovery)
        self.dry_run = dry_run
        self.workers = workers
        self.requests = 0
        self.writes = 0
        # (kind, namespace, name, resourceVersion) of each object applied, in order; None for one deleted: what a
        # reader fed by watches must show before it plans again (facts/index.py IndexSource).
        self.written = []
        self._lock = threading.Lock()

    def _count(self, write):
        with self._lock:
            self.requests += 1
            if write:
                self.writes += 1

    def request(self, method, path, query=None, body=None, content_type="application/json", what=None,
                retry_conflicts=True, accept="application/json", retry_busy=True, text=False):
        """(status, decoded JSON or None); retries 409/429/5xx with backoff, raises KubeError otherwise.

        text=True returns the body as text instead (a pod's log).

        retry_conflicts=False raises a 409 at once: a write guarded by a resourceVersion must be planned again.
        retry_busy=False raises a 429 at once: for an eviction it is the answer (a PodDisruptionBudget refuses now).
        """
        write = method in ("POST", "PUT", "PATCH", "DELETE")
        query = list(query or [])
        if write and self.dry_run:
            query.append(("dryRun", "All"))
        for attempt in range(MAX_ATTEMPTS):
            try:
                response = self._send(method, path, query, body, content_type, accept=accept)
            except ApiException as error:
                self._count(False)
                if error.status == 404:
                    return 404, None
                final = error.status not in RETRY_STATUS or attempt == MAX_ATTEMPTS - 1
                if final or (error.status == 409 and not (write and retry_conflicts)) or (
                        error.status == 429 and not retry_busy):
                    message = "%s %s failed: HTTP %s %s" % (
                        method, what or path, error.status, _server_message(error.body))
                    raise KubeError(message, error.status) from error
                time.sleep(_backoff(attempt, (error.headers or {}).get("Retry-After")))
                continue
            data = response.data
            # Dry runs change nothing, so they do not count as writes.
            self._count(write and not self.dry_run)
            if text:
                return response.status, data.decode("utf-8", "replace") if data else ""
            return response.status, json.loads(data) if data else None
        raise AssertionError("unreachable")

    def _send(self, method, path, query, body, content_type, stream=False, accept="application/json"):
        if content_type == APPLY_CONTENT_TYPE:
            # Clients before 37 send a dict body as JSON only for content types they know; with a charset
            # parameter every version sends a ready string as it is, and the API server ignores the parameter.
            body, content_type = json.dumps(body), APPLY_CONTENT_TYPE + "; charset=utf-8"
        return self._dynamic.request(
            method, path, body=body, serialize=False, query_params=list(query),
            header_params={"Accept": accept}, content_type=content_type,
            _request_timeout=WATCH_REQUEST_TIMEOUT if stream else None)

    def watch(self, path, resource_version, label_selector=None, timeout_seconds=300):
        """Yield (event type, object) from a watch of a collection path until the server ends it.

        An ERROR event (410 Gone when resource_version expired) raises KubeError with its code, so
        the caller lists again.
        """
        query = [("watch", "true"), ("resourceVersion", resource_version), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(timeout_seconds))]
        if label_selector:
            query.append(("labelSelector", label_selector))
        try:
            response = self._send("GET", path, query, None, "application/json", stream=True)
        except ApiException as error:
            raise KubeError("watch %s failed: HTTP %s %s" % (path, error.status, _server_message(error.body)),
                            error.status) from error
        try:
            for line in _lines(response):
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise KubeError("watch %s ended: %s" % (path, status.get("message", "")), status.get("code"))
                yield event.get("type"), event.get("object")
        finally:
            response.release_conn()

    # ------------------------------------------------------------ reads

    def list(self, kind, namespace=None, label_selector=None, field_selector=None, metadata_only=False):
        """Every object of a LIST, read a page at a time (see items)."""
        return list(self.items(kind, namespace, label_selector, field_selector, metadata_only))

    def items(self, kind, namespace=None, label_selector=None, field_selector=None, metadata_only=False,
              page_size=LIST_PAGE_SIZE):
        """Yield every object of a LIST, `page_size` at a time, each with its kind: a large list never arrives in
        one response, and a caller that keeps a part of each object never holds the whole list.

        metadata_only asks for names, labels and annotations alone (for callers that read nothing else).
        """
        query = [("labelSelector", label_selector)] if label_selector else []
        if field_selector:
            query.append(("fieldSelector", field_selector))
        accept = METADATA_ONLY if metadata_only else "application/json"
        for item in self._pages(resource_path(kind, namespace), query, page_size, accept):
            item["kind"] = kind
            yield item

    def list_pages(self, path, label_selector=None, page_size=LIST_PAGE_SIZE):
        """Every item of a collection path (any resource, custom ones too), read `page_size` at a time."""
        query = [("labelSelector", label_selector)] if label_selector else []
        return list(self._pages(path, query, page_size, "application/json"))

    def _pages(self, path, query, page_size, accept):
        for page in self.pages(path, query, page_size, accept):
            yield from page.get("items") or []

    def pages(self, path, query=(), page_size=LIST_PAGE_SIZE, accept="application/json"):
        """Each page of a LIST of a collection path as the API server answers it (its metadata.resourceVersion is
        the list's, to watch from), `page_size` objects at a time; nothing at all when the path is not served (404).

        Each request is logged at debug level, so a long-running process's log shows how it lists.
        """
        token, previous = None, None
        while True:
            page = list(query) + [("limit", str(page_size))] + ([("continue", token)] if token else [])
            LOG.debug("GET %s?%s", path, urlencode(page))
            status, data = self.request("GET", path, page, what="list %s" % path, accept=accept)
            if status == 404:
                return
            yield data
            previous, token = token, (data.get("metadata") or {}).get("continue")
            if not token:
                return
            if token == previous:
                # A reader that does not page (a caching proxy) would be asked forever.
                raise KubeError("list %s: the server returned the same continue token twice; it does not page "
                                "lists: reach the API server directly" % path)

    def get(self, kind, name, namespace=None):
        status, data = self.request("GET", resource_path(kind, namespace, name), what="%s %s" % (kind, name))
        return None if status == 404 else data

    # ------------------------------------------------------------ writes

    def apply(self, obj):
        """Server-side apply with our field manager; force takes over fields another manager set on our objects."""
        metadata = obj["metadata"]
        path = resource_path(obj["kind"], metadata.get("namespace"), metadata["name"])
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        reply = self.request("PATCH", path, query, obj, APPLY_CONTENT_TYPE,
                             what=_describe(obj["kind"], metadata.get("namespace"), metadata["name"]))[1]
        resource_version = ((reply or {}).get("metadata") or {}).get("resourceVersion")
        if resource_version:
            self.record_write(obj["kind"], metadata.get("namespace"), metadata["name"], resource_version)
        return reply

    def delete(self, kind, name, namespace=None):
        """Delete in the background (a Job's pods go with it); a missing object is already deleted."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if self.dry_run:
            # A DELETE's body replaces its query options: without dryRun here the object really goes.
            body["dryRun"] = ["All"]
        status = self.request("DELETE", resource_path(kind, namespace, name), body=body,
                              what=_describe(kind, namespace, name))[0]
        self.record_write(kind, namespace, name, None)
        return status != 404

    def record_write(self, kind, namespace, name, resource_version):
        """Add a write made through request() to `written`: the object at the reply's resourceVersion, None when it
        was deleted (apply and delete record their own)."""
        if not self.dry_run:
            with self._lock:
                self.written.append((kind, namespace or "", name, resource_version))

    def wait_gone(self, refs, timeout):
        """Wait until every (kind, namespace, name) is gone (finalizers done); returns the ones still there."""
        deadline = time.monotonic() + timeout
        remaining = list(refs)
        while remaining and time.monotonic() < deadline:
            remaining = self._existing(remaining)
            if remaining:
                time.sleep(0.25)
        return remaining

    def _existing(self, refs):
        """The refs that still exist; a failed GET counts as existing, so the caller keeps waiting."""
        found = self.map(lambda ref: self.get(ref[0], ref[2], ref[1]) is not None, refs)
        return [ref for index, ref in enumerate(refs) if found[index] is not False]

    def map(self, function, items):
        """function over items in the bounded pool; results in order, exceptions returned, not raised (but
        WriteRefused, which ends the run)."""
        def guarded(item):
            try:
                return function(item)
            except WriteRefused:
                raise
            except Exception as error:  # every failure is reported with its object, not raised mid-batch
                return error

        items = list(items)
        if len(items) <= 1:
            return [guarded(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(items))) as pool:
            return list(pool.map(guarded, items))

    def map_all(self, function, items, what, error=KubeError):
        """map, when every call must succeed: the results in order, or `error` raised naming `what`, how many
        failed and the first failure."""
        results = self.map(function, items)
        failures = [result for result in results if isinstance(result, Exception)]
        if failures:
            raise error("%s: %d of %d failed; first: %s" % (what, len(failures), len(results), failures[0]))
        return results


def _describe(kind, namespace, name):
    return "%s %s/%s" % (kind, namespace, name) if namespace else "%s %s" % (kind, name)


def _lines(response):
    """The newline-separated JSON documents of a streaming response, as they arrive."""
    pending = b""
    for chunk in response.stream(65536, decode_content=True):
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def _server_message(body):
    """The API server's message from an error body (bytes or str, depending on the client version)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        return json.loads(body).get("message", "")
    except (TypeError, ValueError, AttributeError):
        return (body or "")[:300]


def _backoff(attempt, retry_after):
    if retry_after:
        try:
            return min(float(retry_after), 10.0)
        except ValueError:
            pass
    return min(0.1 * (2 ** attempt), 3.0) * (0.5 + random.random())
