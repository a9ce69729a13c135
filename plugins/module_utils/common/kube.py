# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes access for the distribution: label-selected LISTs and concurrent server-side apply.

The client is configured exactly as kubernetes.core configures its own (same auth options and
K8S_AUTH_* environment variables, through its `get_api_client`), but requests go out raw: JSON in,
JSON out, no model classes, so thousands of objects cost little client CPU. Writes are server-side
apply with the field manager `gkm.cluster`, sent from a bounded thread pool and retried with
backoff on conflicts, throttling and transient server errors. Every request and every write is
counted, so callers and tests can prove that a no-change run wrote nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import random
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

try:
    from kubernetes.client import ApiClient

    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException

    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

FIELD_MANAGER = "gkm.cluster"
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
RETRY_STATUS = (409, 429, 500, 502, 503, 504)
MAX_ATTEMPTS = 6
DEFAULT_WORKERS = 16

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
    "MutatingWebhookConfiguration": ("/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations",
                                     False),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "Issuer": ("/apis/cert-manager.io/v1", "issuers", True),
    "Certificate": ("/apis/cert-manager.io/v1", "certificates", True),
}


class KubeError(Exception):
    """An API request failed for good; the message names the object and the server's reason."""

    def __init__(self, message, status=None):
        super(KubeError, self).__init__(message)
        self.status = status


def resource_path(kind, namespace=None, name=None):
    prefix, plural, namespaced = RESOURCES[kind]
    parts = [prefix]
    if namespaced and namespace:
        parts.append("namespaces/%s" % namespace)
    parts.append(plural)
    if name:
        parts.append(name)
    return "/".join(parts)


def api_client_from_auth(auth_params, workers=DEFAULT_WORKERS):
    """An ApiClient from kubernetes.core's auth options, with a connection pool as wide as our workers."""
    try:
        k8s = get_api_client(**{key: value for key, value in auth_params.items() if value is not None})
    except CoreException as error:
        raise KubeError("cannot create the Kubernetes client: %s" % error) from error
    configuration = copy.copy(k8s.configuration)
    configuration.connection_pool_maxsize = max(workers, 4)
    client = ApiClient(configuration)
    # Impersonation headers that kubernetes.core set on its own client.
    for header, value in k8s.client.client.default_headers.items():
        if header.startswith("Impersonate-"):
            client.set_default_header(header, value)
    return client


class Kube:
    """Raw JSON requests through a configured ApiClient; dry_run makes every write a server-side dry run."""

    def __init__(self, api_client, dry_run=False, workers=DEFAULT_WORKERS):
        self.api = api_client
        self.dry_run = dry_run
        self.workers = workers
        self.requests = 0
        self.writes = 0
        self._lock = threading.Lock()

    def _count(self, write):
        with self._lock:
            self.requests += 1
            if write:
                self.writes += 1

    def request(self, method, path, query=None, body=None, content_type="application/json", what=None):
        """(status, decoded JSON or None); retries 409/429/5xx with backoff, raises KubeError otherwise."""
        write = method in ("POST", "PUT", "PATCH", "DELETE")
        query = list(query or [])
        if write and self.dry_run:
            query.append(("dryRun", "All"))
        headers = {"Accept": "application/json", "Content-Type": content_type}
        for attempt in range(MAX_ATTEMPTS):
            serialized = self.api.param_serialize(
                method=method, resource_path=path, query_params=query, header_params=dict(headers), body=body,
                auth_settings=["BearerToken"])
            response = self.api.call_api(serialized[0], serialized[1], header_params=serialized[2],
                                         body=serialized[3])
            data = response.read()
            # Dry runs change nothing, so they do not count as writes.
            self._count(write and not self.dry_run and response.status < 300)
            if response.status < 300:
                return response.status, json.loads(data) if data else None
            if response.status == 404:
                return 404, None
            final = response.status not in RETRY_STATUS or attempt == MAX_ATTEMPTS - 1
            if final or (response.status == 409 and not write):
                message = "%s %s failed: HTTP %s %s" % (method, what or path, response.status, _server_message(data))
                raise KubeError(message, response.status)
            time.sleep(_backoff(attempt, response.getheader("Retry-After")))
        raise AssertionError("unreachable")

    # ------------------------------------------------------------ reads

    def list(self, kind, namespace=None, label_selector=None, field_selector=None):
        query = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        status, data = self.request("GET", resource_path(kind, namespace), query, what="list %s" % kind)
        if status == 404:
            return []
        items = data.get("items") or []
        for item in items:
            item["kind"] = kind
        return items

    def get(self, kind, name, namespace=None):
        status, data = self.request("GET", resource_path(kind, namespace, name), what="%s %s" % (kind, name))
        return None if status == 404 else data

    # ------------------------------------------------------------ writes

    def apply(self, obj):
        """Server-side apply with our field manager; force takes over fields another manager set on our objects."""
        metadata = obj["metadata"]
        path = resource_path(obj["kind"], metadata.get("namespace"), metadata["name"])
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        return self.request("PATCH", path, query, obj, APPLY_CONTENT_TYPE,
                            what=_describe(obj["kind"], metadata.get("namespace"), metadata["name"]))[1]

    def delete(self, kind, name, namespace=None):
        """Delete in the background (a Job's pods go with it); a missing object is already deleted."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if self.dry_run:
            # A DELETE's body replaces its query options: without dryRun here the object really goes.
            body["dryRun"] = ["All"]
        status = self.request("DELETE", resource_path(kind, namespace, name), body=body,
                              what=_describe(kind, namespace, name))[0]
        return status != 404

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
        """function over items in the bounded pool; results in order, exceptions returned, not raised."""
        def guarded(item):
            try:
                return function(item)
            except Exception as error:  # every failure is reported with its object, not raised mid-batch
                return error

        items = list(items)
        if len(items) <= 1:
            return [guarded(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(items))) as pool:
            return list(pool.map(guarded, items))


def _describe(kind, namespace, name):
    return "%s %s/%s" % (kind, namespace, name) if namespace else "%s %s" % (kind, name)


def _server_message(data):
    try:
        return json.loads(data).get("message", "")
    except (TypeError, ValueError, AttributeError):
        return (data or b"")[:300].decode("utf-8", "replace")


def _backoff(attempt, retry_after):
    if retry_after:
        try:
            return min(float(retry_after), 10.0)
        except ValueError:
            pass
    return min(0.1 * (2 ** attempt), 3.0) * (0.5 + random.random())
