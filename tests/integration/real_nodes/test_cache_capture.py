"""Capture (gkm.cluster.cache_capture, docs/kernels.md): the kernels a pod on one real node compiled become the
cache's next image, which the reconcile distributes, and a pod on the other real node then hits every kernel.

A GKMCache starts with an image of three of the six hip kernels, signed with a key the test makes; the Jobs verify
every image with it. A pod on the NVIDIA node (standing for a second node of the AMD kind: Triton compiles ahead of
time, no GPU used), given no cache and opted in with gkm.io/capture, compiles the three others cold and stays running.
cache_capture reads them through pods/exec, merges them with the cache's image, signs the union, pushes it to the
cluster's registry and records it as spec.image; cache_reconcile extracts it onto the AMD node; a pod there given the
cache hits all six. Capture to distributed is printed (docs/kernels.md, capture)."""

import json
import uuid

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import GROUP, VERSION
from tests.helpers import kcache_images
from tests.helpers.capture_flow import (
    CACHE,
    HELD,
    KERNELS,
    MOUNT,
    TARGET,
    capturable_pod,
    capture,
    capture_and_distribute,
    lacking_labels,
    signing_key,
    warmed_up,
)
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.real_nodes import AMD_NODE, delete_namespace, real_pod_template
from tests.helpers.tenant import REAL_NODES_TOKEN_SECONDS, tenant_namespace
from tests.helpers.warmup_pods import cache_pod, distribute_cache, finished_run, start_with_overlay

pytestmark = [pytest.mark.cluster, pytest.mark.real_nodes]

COLD_NODE = "gkm-real-nvidia-1"


@pytest.fixture(scope="module")
def captured(sim, kube, crds, registry, real_nodes, tools_image, workload_image, overlay_webhook):
    """The namespace, its signed cache of three kernels distributed, the cold pod's compile of the others done. The
    tenant (`edit` there, through its ServiceAccount's token) creates the GKMCache and the pods; the admin reconciles
    and captures, as the playbooks do."""
    tenant = tenant_namespace(kube, "t-capture-%s" % uuid.uuid4().hex[:6], "baseline", REAL_NODES_TOKEN_SECONDS)
    namespace = tenant.namespace
    core = tenant.core
    private, private_pem, public_pem = signing_key()
    others = lacking_labels(TARGET, HELD)
    try:
        core.create_namespaced_pod(namespace, capturable_pod("cold", workload_image, COLD_NODE, TARGET, CACHE, others))
        first = kcache_images.build_image(registry.host, "capture/%s" % namespace, "v1", kcache_images.CacheSpec(
            backend="hip", kernels=HELD, compiled=True))
        kcache_images.sign_cosign_v2(first, private)
        distribute_cache(sim.kubeconfig, tenant.caches, namespace, CACHE, first.ref, tools_image,
                         signature_public_key=public_pem, signature_required=True)
        lines = warmed_up(core, namespace, "cold", timeout=300)
        [summary] = [line for line in lines if line.get("summary")]
        assert (summary["hits"], summary["misses"], summary["errors"]) == (0, KERNELS - HELD, 0), summary
        yield {"core": core, "namespace": namespace, "private_pem": private_pem, "public_pem": public_pem,
               "compiled": sorted(line["hash"] for line in lines if line.get("result") == "miss"),
               "repository": "%s/capture/%s" % (registry.host, namespace), "first": first,
               "workload_image": workload_image}
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        removed = run_module("cache_distribute", sim.kubeconfig, name=CACHE, namespace=namespace, state="absent",
                             force=True, extract_image=tools_image, registry_plain_http=True,
                             host_path_root=NODE_DISK, pod_template=real_pod_template(), wait=True)
        delete_namespace(client.CoreV1Api(kube), namespace)
        assert not removed.get("failed"), removed.get("msg")


def _capture(sim, captured, check=False, **overrides):
    return capture(sim.kubeconfig, captured["namespace"], "cold", CACHE, captured["repository"],
                   captured["private_pem"], check=check, **overrides)


def test_a_cache_the_admin_did_not_allow_is_refused(sim, captured):
    refused = _capture(sim, captured, allowed_caches=["%s/other" % captured["namespace"]])
    assert refused.get("failed") and "not in allowed_caches" in refused["msg"], refused


def test_check_mode_says_what_would_be_pushed_and_changes_nothing(sim, crds, captured):
    would = _capture(sim, captured, check=True)
    assert not would.get("failed"), would.get("msg")
    assert would["changed"] and len(would["added"]) == KERNELS - HELD, would
    assert would["diff"]["before"] == {"image": captured["first"].ref, "kernels": HELD}, would["diff"]
    assert would["diff"]["after"]["kernels"] == KERNELS, would["diff"]
    cache = crds.get_namespaced_custom_object(GROUP, VERSION, captured["namespace"], "gkmcaches", CACHE)
    assert cache["spec"]["image"] == captured["first"].ref


def test_the_captured_kernels_distributed_are_hit_in_full_on_the_other_node(sim, crds, captured, tools_image):
    core, namespace = captured["core"], captured["namespace"]
    result, reconciled, capture_s, distributed_s = capture_and_distribute(
        sim.kubeconfig, namespace, "cold", CACHE, captured["repository"], captured["private_pem"],
        captured["public_pem"], tools_image)
    assert result["changed"] and result["pod"]["overlaid"] is False, result
    assert sorted(k["hash"] for k in result["added"]) == captured["compiled"], result["added"]
    assert result["kernels"] == KERNELS, result
    cache = crds.get_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", CACHE)
    assert cache["spec"]["image"] == "%s@%s" % (captured["repository"], result["digest"]), cache["spec"]
    # The reconcile's Jobs verified the captured image's signature with the key's public half before extracting it.
    assert reconciled["resource"]["status"]["resolvedDigest"] == result["digest"], reconciled["resource"]["status"]
    print("capture %.1f s (the module's own: %s), capture -> distributed %.1f s" % (
        capture_s, json.dumps(result["seconds"], sort_keys=True), distributed_s))
    warm = cache_pod("warm", captured["workload_image"], AMD_NODE, TARGET, CACHE, MOUNT)
    start_with_overlay(core, namespace, warm, CACHE)
    run = finished_run(core, namespace, "warm", timeout=120)
    assert run.pod.spec.node_name == AMD_NODE
    assert (run.summary["hits"], run.summary["misses"], run.summary["errors"]) == (KERNELS, 0, 0), run.summary
    print("warm on %s: %s" % (AMD_NODE, json.dumps(run.summary, sort_keys=True)))
    # Captured again: the cache holds every kernel the pod compiled, so nothing is pushed or patched.
    again = _capture(sim, captured)
    assert not again.get("failed") and not again["changed"] and again["added"] == [], again
