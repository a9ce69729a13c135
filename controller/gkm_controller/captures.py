"""Capture in the controller: each finished pod opted in with gkm.io/capture, captured once into the cache it names,
when the admin allows that cache (docs/kernels.md, capture).

The admin's setting (--capture, env GKM_CAPTURE, a JSON object; capture_settings) names the caches pods may be
captured into, each with the repository its captured images are pushed to, the namespaces whose pods may be
captured, and the file of the signing key (in cluster, a Secret of the controller's namespace mounted read-only); the
key's password comes from env GKM_CAPTURE_KEY_PASSWORD. The registry credentials are the distribution options' own.
A pod's annotation only picks among the caches the admin allows (capture/policy.py), and a tenant sees neither the key
nor the credentials: it sees its cache's spec.image change.

The capture is the module's (capture/tasks.py): the finished pod's kernels read from its kernel-use sidecar's log,
checked by the extractor's rules, merged with the cache's image, signed, pushed and recorded as the cache's spec.image,
which the controller's update handler then distributes. Its one write goes through the cache's DeletionGuard and the
Lease. A pod is captured once per process; after a restart, a pod captured before adds nothing (its kernels are in
the cache's image) and nothing is pushed.
"""

import json
import logging
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gkm.cluster.plugins.module_utils.capture import tasks
from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError
from ansible_collections.gkm.cluster.plugins.module_utils.capture.policy import cache_ref, opted_in_cache
from ansible_collections.gkm.cluster.plugins.module_utils.capture.sign import load_private_key
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CAPTURE_ANNOTATION
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.pod_use import finished
from ansible_collections.gkm.cluster.plugins.module_utils.oci.args import REGISTRY_ARG_SPEC
from ansible_collections.gkm.cluster.plugins.module_utils.oci.key_text import read_pem
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import OCIError

from .deletion import DeletionGuard, GuardedKube

LOG = logging.getLogger(__name__)
SETTINGS = ("repositories", "allowed_namespaces", "signing_key_file", "tag")


def capture_settings(text, password=None):
    """The --capture JSON as a dict (tag None when unset), or None when empty; ValueError naming the setting. The
    signing key is read and decrypted here: a key that cannot be used stops the controller at start."""
    if not text:
        return None
    given = json.loads(text)
    if not isinstance(given, dict):
        raise ValueError("a JSON object of %s" % ", ".join(SETTINGS))
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise ValueError("unknown setting %s (known: %s)" % (", ".join(unknown), ", ".join(SETTINGS)))
    repositories = given.get("repositories")
    if not isinstance(repositories, dict) or not repositories or not all(
            isinstance(ref, str) and ref and isinstance(repository, str) and repository
            for ref, repository in repositories.items()):
        raise ValueError("repositories: an object of each cache pods may be captured into (namespace/name of a "
                         "GKMCache, the name of a ClusterGKMCache) to the repository its images are pushed to")
    namespaces = given.get("allowed_namespaces")
    if not isinstance(namespaces, list) or not all(isinstance(namespace, str) for namespace in namespaces):
        raise ValueError("allowed_namespaces: a list of the namespaces whose pods may be captured")
    if not isinstance(given.get("signing_key_file"), str):
        raise ValueError("signing_key_file: the path of the signing key's PEM file")
    if not isinstance(given.get("tag"), (str, type(None))):
        raise ValueError("tag: the tag pushed with each captured image, a string")
    try:
        load_private_key(read_pem(given["signing_key_file"], "signing_key_file", CaptureError), password)
    except CaptureError as error:
        raise ValueError(str(error)) from None
    return dict(given, tag=given.get("tag"))


class Captures:
    """pod_changed(pod) for the Pod watch: a finished pod opted in to a cache the admin allows, not seen before by
    this process, is captured on the capture thread (one capture at a time).

    api_client: the controller's; index: the ClusterIndex (the cache's DeletionGuard reads it); settings:
    capture_settings'; options: the distribution options (their registry_* go to the capture); password: the signing
    key's, or None; lease: the LeaseDeadline the write is also checked against, or None.
    """

    def __init__(self, api_client, index, settings, options, password=None, lease=None):
        self.api_client, self.index, self.lease = api_client, index, lease
        self.settings, self.password = settings, password
        self.registry = {name: options[name] for name in REGISTRY_ARG_SPEC if name in options}
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="gkm-capture")
        self._seen = set()
        self._lock = threading.Lock()

    def pod_changed(self, pod):
        """The capture's Future, or None when there is nothing (more) to capture from this pod."""
        metadata = pod.get("metadata") or {}
        if CAPTURE_ANNOTATION not in (metadata.get("annotations") or {}) or not finished(pod):
            return None
        with self._lock:
            if metadata.get("uid") in self._seen:
                return None
            self._seen.add(metadata.get("uid"))
        target = opted_in_cache(pod, self.settings["repositories"])
        if target is None:
            LOG.warning("pod %s/%s opted in to capture into %r, a cache capture.repositories does not name: not "
                        "captured", metadata.get("namespace"), metadata.get("name"),
                        metadata["annotations"][CAPTURE_ANNOTATION])
            return None
        return self.executor.submit(self.capture, metadata["namespace"], metadata["name"], target)

    def capture(self, namespace, pod, target):
        """The capture module's result, or None when refused or failed (logged)."""
        kind, name, cache_namespace = target
        reference = cache_ref(kind, name, cache_namespace)
        params = dict(self.registry, cache_kind=kind, cache=name, cache_namespace=cache_namespace,
                      namespace=namespace, pod=pod, repository=self.settings["repositories"][reference],
                      tag=self.settings["tag"], signing_key=self.settings["signing_key_file"],
                      signing_key_password=self.password, allowed_caches=sorted(self.settings["repositories"]),
                      allowed_namespaces=self.settings["allowed_namespaces"])
        guard = DeletionGuard(kind, name, cache_namespace, index=self.index)
        kube = GuardedKube(self.api_client, guard, *([self.lease] if self.lease else []))
        workdir = tempfile.mkdtemp(prefix="gkm-capture-")
        try:
            result = tasks.capture(kube, self.api_client, params, False, workdir)
        except (CaptureError, OCIError, KubeError) as error:
            LOG.warning("capture of pod %s/%s into %s %s: %s", namespace, pod, kind, reference, error)
            return None
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        LOG.info("captured pod %s/%s into %s %s in %.1f s: %s", namespace, pod, kind, reference,
                 result["seconds"]["total"], result["msg"])
        return result

    def stop(self):
        self.executor.shutdown(wait=True)
