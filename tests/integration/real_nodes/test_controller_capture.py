"""Capture by the controller (controller/gkm_controller/captures.py, docs/kernels.md): no module runs; the GKMCache is
the controller's from its creation to its deletion.

The controller starts with the admin's capture setting (the cache, its repository, the namespace, a signing key made
for the run; the Jobs verify every image with its public half). The cache's first image holds three of the six hip
kernels. A pod on the AMD node given the cache and opted in with gkm.io/capture hits the three, compiles the three
others and exits; the controller reads the finished pod's kernels from its kernel-use sidecar's log, pushes the signed
union and records it as the cache's spec.image; once the finished pod, which holds the claim of the first digest, is
deleted, the controller distributes the new image; a new pod there hits all six. The cache's deletion is
its finalizer's, with the controller still running. The tenant (`edit` in the namespace, through its ServiceAccount's
token) creates, reads and deletes the GKMCache and the pods; only the controller holds the admin's setting and key."""

import json
import re
import time
import uuid

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CAPTURE_ANNOTATION,
    DIGEST_LABEL,
    EXTRACTED,
    GROUP,
    VERSION,
)
from tests.helpers import kcache_images
from tests.helpers.capture_flow import CACHE, HELD, KERNELS, MOUNT, TARGET, signing_key
from tests.helpers.controller_process import TEST_OPTIONS, Controller
from tests.helpers.modules import NODE_DISK
from tests.helpers.operator_caches import live, poll
from tests.helpers.real_nodes import AMD_NODE, delete_namespace, real_pod_template
from tests.helpers.tenant import REAL_NODES_TOKEN_SECONDS, tenant_namespace
from tests.helpers.warmup_pods import cache_pod, finished_run, start_with_overlay

pytestmark = [pytest.mark.cluster, pytest.mark.real_nodes]

CAPTURED_LINE = r"captured pod %s/finished into GKMCache %s/%s in ([\d.]+) s: pushed"


def _distributed(crds, namespace, digest):
    status = (live(crds, namespace, CACHE) or {}).get("status") or {}
    return status if status.get("resolvedDigest") == digest and status.get("phase") == EXTRACTED else None


def _serving_digest(core, namespace):
    """The short digest of the serving claim new pods of the cache mount, once bound and not being deleted."""
    try:
        claim = core.read_namespaced_persistent_volume_claim(CACHE, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    if claim.metadata.deletion_timestamp or claim.status.phase != "Bound":
        return None
    return claim.metadata.labels.get(DIGEST_LABEL)


def test_the_controller_captures_a_finished_opted_in_pod_and_distributes_what_it_compiled(
        sim, kube, crds, registry, real_nodes, tools_image, workload_image, overlay_webhook, tmp_path):
    tenant = tenant_namespace(kube, "t-ctl-capture-%s" % uuid.uuid4().hex[:6], "baseline", REAL_NODES_TOKEN_SECONDS)
    namespace = tenant.namespace
    # From here on, everything the test does is the tenant's.
    core, caches = tenant.core, tenant.caches
    private, private_pem, public_pem = signing_key()
    key_file = tmp_path / "cosign.key"
    key_file.write_text(private_pem)
    repository = "%s/capture/%s" % (registry.host, namespace)
    first = kcache_images.build_image(registry.host, "capture/%s" % namespace, "v1", kcache_images.CacheSpec(
        backend="hip", kernels=HELD, compiled=True))
    kcache_images.sign_cosign_v2(first, private)
    options = dict(TEST_OPTIONS, host_path_root=NODE_DISK, wait_timeout=300,
                   signature_public_key=public_pem, signature_required=True)
    capture = {"repositories": {"%s/%s" % (namespace, CACHE): repository}, "allowed_namespaces": [namespace],
               "signing_key_file": str(key_file)}
    controller = Controller(sim.kubeconfig, str(tmp_path / "controller.log"), namespace, tools_image, options,
                            capture=capture)
    try:
        controller.become_ready()
        caches.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
            "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
            "metadata": {"name": CACHE, "namespace": namespace},
            "spec": {"image": first.ref, "mountMode": "PVC", "podTemplate": real_pod_template()}})
        poll("the first image distributed by the controller", lambda: _distributed(caches, namespace, first.digest),
             300)
        # Given the cache's three, opted in: it hits them, compiles the three others into its overlay and exits; its
        # kernel-use sidecar, stopped, writes them to its log as a capture frame.
        body = cache_pod("finished", workload_image, AMD_NODE, TARGET, CACHE, MOUNT,
                         annotations={CAPTURE_ANNOTATION: CACHE})
        start_with_overlay(core, namespace, body, CACHE)
        ended = finished_run(core, namespace, "finished", timeout=300)
        finished_at = time.monotonic()
        assert (ended.summary["hits"], ended.summary["misses"], ended.summary["errors"]) == (
            HELD, KERNELS - HELD, 0), ended.summary
        captured = poll("the capture recorded as the cache's image", lambda: live(caches, namespace, CACHE)[
            "spec"]["image"] != first.ref and live(caches, namespace, CACHE)["spec"]["image"], 120)
        recorded_s = time.monotonic() - finished_at
        assert captured.startswith(repository + "@sha256:"), captured
        # The controller logs the capture once the module returns, which is after it recorded the image.
        captured_line = CAPTURED_LINE % (namespace, namespace, CACHE)
        [line] = poll("the capture logged", lambda: controller.lines(captured_line), 30)
        capture_s = re.search(captured_line, line).group(1)
        # The finished pod still names the serving claim at the first digest, which keeps it there (pvc-protection).
        # Its owner deletes it, as a Job's TTL would; its deletion has the controller reconcile the cache again, which
        # verifies the captured image's signature with the key's public half and extracts it.
        core.delete_namespaced_pod("finished", namespace, grace_period_seconds=0)
        digest = captured.split("@")[1]
        poll("the captured image distributed", lambda: _distributed(caches, namespace, digest), 300)
        poll("the serving claim renewed at the captured digest", lambda: _serving_digest(core, namespace) == digest[
            len("sha256:"):][:12], 300)
        distributed_s = time.monotonic() - finished_at
        warm = cache_pod("warm", workload_image, AMD_NODE, TARGET, CACHE, MOUNT)
        start_with_overlay(core, namespace, warm, CACHE)
        run = finished_run(core, namespace, "warm", timeout=120)
        assert (run.summary["hits"], run.summary["misses"], run.summary["errors"]) == (KERNELS, 0, 0), run.summary
        print("controller capture: %s s of capture, pod finished -> recorded %.1f s, -> distributed %.1f s; warm on "
              "%s: %s" % (capture_s, recorded_s, distributed_s, AMD_NODE, json.dumps(run.summary, sort_keys=True)))
        # The warm pod opted in to nothing: one capture in all.
        assert len(controller.lines(r"captured pod ")) == 1, controller.lines(r"capture")
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        # The cache's finalizer is the controller's: it runs while the controller does.
        if live(caches, namespace, CACHE) is not None:
            caches.delete_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", CACHE)
            poll("the cache's finalizer done", lambda: live(caches, namespace, CACHE) is None, 180)
        controller.stop()
        delete_namespace(client.CoreV1Api(kube), namespace)
