"""Triton in a pod on a real node, given a cache by the collection in each way an annotated pod is given one: the
serving PVC of a PVC-mode GKMCache extracted onto the real AMD node, and an image volume (mountMode imageVolume). The
caches hold real Triton kernels (hip); the pods run the workload image (Triton 3.9.0 and the kernel set's warm-up,
`python3 -m tools.triton_kernels warmup`), whose hit or miss per kernel is Triton's own verdict:

- no cache (an emptyDir): every kernel compiled, the cold figure; this pod also pulls the image onto the node while
  the caches are extracted;

and in each mode:
- the full cache through the webhook's overlay (a bare pod annotated gkm.io/cache): every kernel a hit, none compiled;
- the same cache mounted the way pods had it before the overlay (gkm.io/cache-overlay: disabled, TRITON_CACHE_DIR
  pointed at the read-only mount): no hit; Triton fails to write each recompile (docs/kernels.md);
- a cache lacking one kernel, overlaid: one miss, compiled into the pod's writable overlay.

and a cache of the same kernels compiled by the previous Triton release (an image volume): nothing hit, every kernel
compiled and reported as another Triton version than the image's, not as a bare miss;

and a pod mounting the PVC-mode cache itself by claim (gkm.io/pvc-mutation, its node's per-node PVC): the same overlay
for its own mount, every kernel a hit (one miss for the cache lacking one).

The tenant (tests/helpers/tenant.py: `edit` in the namespace, through its ServiceAccount's token) creates the GKMCaches
and the pods and reads their logs; the admin runs the reconcile, as the playbooks do. Each pod prints its warm-up
lines, then `inspect` of its TRITON_CACHE_DIR (each kernel's group state); the times from pod creation to its end and
the compile seconds are printed (docs/kernels.md, "Measured")."""

import json
import os
import time
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import kernel_use_container
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.kernel_use import last_report
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.image import LABEL_TRITON_VERSION
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.paths import ROOT
from tests.helpers.real_nodes import AMD_NODE, delete_namespace, real_pod_template
from tests.helpers.tenant import REAL_NODES_TOKEN_SECONDS, tenant_namespace
from tests.helpers.warmup_pods import cache_pod, cold_pod, finished_run, overlay_container, overlay_written, warmup_pod
from tests.helpers.webhook import metric_value, wait_until
from tests.integration.webhook.test_steering_apiserver import GROUP, VERSION, reconcile
from tools.triton_kernels import layout
from tools.triton_kernels.venv import PREVIOUS_HINT, previous_triton_python

pytestmark = [pytest.mark.cluster, pytest.mark.real_nodes]

TARGET = "hip:gfx90a"
KERNELS = 6
MODES = ("PVC", "imageVolume")
MOUNT = "/kernels"


def _pod(name, image, **extra):
    """A bare pod running the warm-up on the real AMD node (where the caches are)."""
    return warmup_pod(name, image, AMD_NODE, TARGET, **extra)


def _cache_pod(name, image, cache, **extra):
    return cache_pod(name, image, AMD_NODE, TARGET, cache, MOUNT, **extra)


class Cluster:
    """The module's namespace: its caches, and its pods run one at a time, as the tenant creates and reads them."""

    def __init__(self, tenant, image, webhook):
        self.namespace, self.image = tenant.namespace, image
        self.core, self.caches = tenant.core, tenant.caches
        self.webhook = webhook  # (the local server, its CA)
        self.created = {}

    def create(self, body):
        def created():
            try:
                return self.core.create_namespaced_pod(self.namespace, body)
            except ApiException as error:  # the webhook's view may not hold an image volume's resolved digest yet
                assert "has no resolved image digest yet" in json.loads(error.body)["message"], error.body
                return None

        self.created[body["metadata"]["name"]] = time.monotonic()
        return wait_until("pod %s admitted" % body["metadata"]["name"], created, timeout=30, interval=0.5)

    def finished(self, name, timeout=120):
        """(pod, warm-up lines, summary, inspect's report); prints the seconds from its creation to its end."""
        run = finished_run(self.core, self.namespace, name, timeout)
        observed = time.monotonic() - self.created[name]
        assert run.pod.spec.node_name == AMD_NODE, (run.pod.spec.node_name, run.logs)
        # The API's times (1 s resolution): the cold pod ends while the module's caches are still being reconciled.
        print("%s: pod created -> finished %.0f s (API), seen finished after %.1f s; %s; per kernel %s; groups %s" % (
            name, run.created_to_finished(), observed, json.dumps(run.summary, sort_keys=True),
            ["%s %s" % (k["result"], k["seconds"]) for k in run.kernels], run.report["states"]))
        return run.pod, run.kernels, run.summary, run.report


def _caches(mode):
    """The names of the mode's two caches: all six kernels, and five."""
    suffix = "pvc" if mode == "PVC" else "iv"
    return "full-" + suffix, "lacking-" + suffix


@pytest.fixture(scope="module")
def cluster(sim, kube, crds, registry, real_nodes, tools_image, workload_image, overlay_webhook):
    """In each mode, a GKMCache of the hip kernels and one lacking a kernel (PVC: extracted onto the AMD node); the cold
    pod started first, so that the node pulls the workload image while they are extracted."""
    core = client.CoreV1Api(kube)
    tenant = tenant_namespace(kube, "t-real-overlay-%s" % uuid.uuid4().hex[:6], "baseline", REAL_NODES_TOKEN_SECONDS)
    namespace = tenant.namespace
    made = Cluster(tenant, workload_image, overlay_webhook)
    try:
        made.create(cold_pod("cold", workload_image, AMD_NODE, TARGET))
        for mode in MODES:
            for name, count in zip(_caches(mode), (KERNELS, KERNELS - 1)):
                pushed = kcache_images.build_image(registry.host, "real-overlay/" + name, "v1", kcache_images.CacheSpec(
                    backend="hip", kernels=count, compiled=True))
                spec = {"image": pushed.ref, "podTemplate": real_pod_template(), "mountMode": mode}
                made.caches.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
                    "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
                    "metadata": {"name": name, "namespace": namespace}, "spec": spec})
                reconciled = reconcile(sim, name, namespace, extract_image=tools_image, wait=True, wait_timeout=240)
                assert not reconciled.get("failed"), reconciled.get("msg")
                assert reconciled["resource"]["status"]["kernelOverlay"] == {"variable": "TRITON_CACHE_DIR"}
        yield made
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        # The scrub Jobs remove the node's copies: they run the tools image on the real nodes.
        for name in _caches("PVC"):
            removed = run_module("cache_distribute", sim.kubeconfig, name=name, namespace=namespace, state="absent",
                                 force=True, extract_image=tools_image, registry_plain_http=True,
                                 host_path_root=NODE_DISK, pod_template=real_pod_template(), wait=True)
            assert not removed.get("failed"), removed.get("msg")
        delete_namespace(core, namespace)


def _given(admitted, mode, cache):
    """The pod was given the cache in the mode's way: the serving PVC (named as the cache) or an image volume."""
    [volume] = [v for v in admitted.spec.volumes if v.name == "gkm-cache-" + cache]
    if mode == "PVC":
        assert volume.persistent_volume_claim.claim_name == cache, volume
    else:
        assert volume.image.reference.split("@")[0].endswith("/real-overlay/" + cache), volume


def test_without_a_cache_the_warm_up_compiles_every_kernel(cluster):
    pod, kernels, summary, report = cluster.finished("cold", timeout=300)
    assert pod.status.phase == "Succeeded", (pod.status, kernels)
    assert (summary["hits"], summary["misses"], summary["errors"]) == (0, KERNELS, 0), summary
    assert report["states"] == {layout.RESOLVES: KERNELS}, report["states"]
    pulled = [e.message for e in cluster.core.list_namespaced_event(
        cluster.namespace, field_selector="involvedObject.name=cold").items if e.reason == "Pulled"]
    print("cold: %s" % pulled)


@pytest.mark.parametrize("mode", MODES)
def test_through_the_overlay_every_kernel_is_a_hit_and_none_is_compiled(cluster, mode):
    full = _caches(mode)[0]
    admitted = cluster.create(_cache_pod("overlaid-" + full, cluster.image, full))
    _given(admitted, mode, full)
    assert [c.name for c in admitted.spec.init_containers or []] == [
        overlay_container(full), kernel_use_container(full)]
    pod, kernels, summary, report = cluster.finished("overlaid-" + full)
    assert pod.status.phase == "Succeeded", (pod.status, kernels)
    assert [k["result"] for k in kernels] == ["hit"] * KERNELS, kernels
    assert (summary["hits"], summary["misses"], summary["errors"]) == (KERNELS, 0, 0), summary
    # Every group of the overlay reads the mounted cache's files; no kernel directory holds a compile of the pod.
    assert report["states"] == {layout.FOREIGN: KERNELS}, report["states"]
    written = overlay_written(cluster.core, cluster.namespace, "overlaid-" + full, full)
    assert (written["kernels"], written["groups"], written["skipped"]) == (KERNELS, KERNELS, []), written
    init = pod.status.init_container_statuses[0]
    print("overlay init container: %s, ran %.0f s (API timestamps, 1 s resolution)" % (
        json.dumps(written, sort_keys=True),
        (init.state.terminated.finished_at - init.state.terminated.started_at).total_seconds()))


@pytest.mark.parametrize("mode", MODES)
def test_the_cache_mounted_read_only_without_the_overlay_is_never_hit(cluster, mode):
    full = _caches(mode)[0]
    admitted = cluster.create(_cache_pod("plain-" + full, cluster.image, full,
                                         annotations={"gkm.io/cache-overlay": "disabled"},
                                         env=[{"name": "TRITON_CACHE_DIR", "value": MOUNT + "/io.triton.cache"}]))
    _given(admitted, mode, full)
    assert not admitted.spec.init_containers
    pod, kernels, summary, report = cluster.finished("plain-" + full)
    # The groups name the node's extraction path or the image's recorded root, which the pod does not see: Triton
    # compiles each kernel again and fails to store the result on the read-only mount.
    assert report["states"] == {layout.DANGLING: KERNELS}, report["states"]
    assert summary["hits"] == 0 and summary["errors"] == KERNELS, summary
    assert all("Read-only file system" in k["error"] for k in kernels), kernels
    assert pod.status.phase == "Failed"


@pytest.mark.parametrize("mode", MODES)
def test_a_kernel_the_cache_lacks_is_one_miss_compiled_into_the_overlay(cluster, mode):
    lacking = _caches(mode)[1]
    _given(cluster.create(_cache_pod("overlaid-" + lacking, cluster.image, lacking)), mode, lacking)
    pod, kernels, summary, report = cluster.finished("overlaid-" + lacking)
    assert pod.status.phase == "Succeeded", (pod.status, kernels)
    assert (summary["hits"], summary["misses"], summary["errors"]) == (KERNELS - 1, 1, 0), summary
    [missed] = [k for k in kernels if k["result"] == "miss"]
    # Its directory in the overlay holds the pod's own compile (its group resolves inside it); the other five read the
    # mount.
    assert report["states"] == {layout.FOREIGN: KERNELS - 1, layout.RESOLVES: 1}, report["states"]
    [compiled] = [k for k in report["kernels"] if k["state"] == layout.RESOLVES]
    assert compiled["hash_dir"] == layout.hash_directory_name(missed["hash"]), (compiled, missed)


@pytest.mark.parametrize("lacking", [False, True], ids=["full", "lacking a kernel"])
def test_a_pod_given_its_node_s_pvc_by_claim_gets_the_overlay_for_its_own_mount(cluster, lacking):
    # The per-node PVC: a pod labelled gkm.io/pvc-mutation naming the cache as its claim gets its node's PVC from the
    # webhook and, in the same patch, the overlay for its own mount (the slot's `cache` at MOUNT, as the data-path
    # tests mount it), its TRITON_CACHE_DIR left to the webhook.
    name = _caches("PVC")[lacking]
    body = _pod("per-node-" + name, cluster.image,
                volumes=[{"name": "kernels", "persistentVolumeClaim": {"claimName": name}}],
                mounts=[{"name": "kernels", "mountPath": MOUNT, "subPath": "cache", "readOnly": True}])
    body["metadata"]["labels"] = {"gkm.io/pvc-mutation": "true"}
    body["spec"]["nodeName"] = AMD_NODE  # the webhook picks the node's PVC only for a pod whose node is known
    admitted = cluster.create(body)
    [volume] = [v for v in admitted.spec.volumes if v.name == "kernels"]
    init, _use = admitted.spec.init_containers
    assert volume.persistent_volume_claim.claim_name != name and init.name == overlay_container(name), admitted.spec
    cache_mount = init.volume_mounts[0]
    assert (cache_mount.name, cache_mount.mount_path, cache_mount.sub_path) == ("kernels", MOUNT, "cache")
    pod, kernels, summary, report = cluster.finished("per-node-" + name)
    assert pod.status.phase == "Succeeded", (pod.status, kernels)
    hits = KERNELS - 1 if lacking else KERNELS
    assert (summary["hits"], summary["misses"], summary["errors"]) == (hits, KERNELS - hits, 0), summary
    assert report["states"] == dict({layout.FOREIGN: hits}, **({layout.RESOLVES: 1} if lacking else {})), \
        report["states"]


def _ran(cluster, cache):
    """The overlaid pod of `cache` once its warm-up ended (the tests above ran it; run here when selected alone)."""
    name = "overlaid-" + cache
    if name not in cluster.created:
        cluster.create(_cache_pod(name, cluster.image, cache))
    return finished_run(cluster.core, cluster.namespace, name)


def _exported(page, labels, expected):
    """The metrics page once it shows the expected (hits, misses) for those labels, else None."""
    shown = tuple(metric_value(page, "%s{%s}" % (name, labels))
                  for name in ("gkm_cache_kernel_hits", "gkm_cache_kernel_misses"))
    return page if shown == expected else None


def test_each_pod_s_hits_and_misses_are_in_the_cache_s_status_cache_info_and_metrics(cluster, sim, tools_image):
    """The kernel-use sidecar beside the overlay reports what Triton found and compiled; the reconcile reads it
    through pods/log into status.kernelUse, cache_info returns it and the webhook server's /metrics exports it."""
    server, ca = cluster.webhook
    for cache, lacks in zip(_caches("PVC"), (False, True)):
        run = _ran(cluster, cache)
        pod = "overlaid-" + cache
        sidecar = next(s for s in run.pod.status.init_container_statuses if s.name == kernel_use_container(cache))
        # Stopped once the warm-up ended; its last line is its look after that.
        assert sidecar.state.terminated is not None, sidecar
        report = last_report(cluster.core.read_namespaced_pod_log(pod, cluster.namespace, container=sidecar.name))
        assert (report["overlaid"], report["hits"], report["misses"]) == (
            KERNELS - lacks, KERNELS - lacks, int(lacks)), report
        # What the sidecar costs the pod: when each container ran (API timestamps, 1 s resolution).
        ran = {s.name: "%s..%s" % (s.state.terminated.started_at.time(), s.state.terminated.finished_at.time())
               for s in run.pod.status.init_container_statuses + run.pod.status.container_statuses}
        print("%s: sidecar %s; containers ran %s; created %s" % (
            pod, json.dumps(report, sort_keys=True), ran, run.pod.metadata.creation_timestamp.time()))
        reconciled = reconcile(sim, cache, cluster.namespace, extract_image=tools_image)
        use = reconciled["resource"]["status"]["kernelUse"]
        [entry] = [p for p in use["pods"] if p["name"] == pod]
        assert (entry["node"], entry["hits"], entry["misses"]) == (AMD_NODE, KERNELS - lacks, int(lacks)), use
        # Estimated from the image's recorded cold compile seconds, which its builder wrote.
        assert entry["compileSecondsSaved"] > 0, entry
        if lacks:
            [missed] = [k for k in run.kernels if k["result"] == "miss"]
            [compiled] = report["compiled"]
            assert compiled["hash_dir"] == layout.hash_directory_name(missed["hash"]), (compiled, missed)
            assert compiled["name"] in ("vector_add", "row_softmax", "matmul"), compiled
            # Another matmul configuration is cached under another key; a vector_add or row_softmax is not cached.
            assert entry["missed"] == [{"kernel": compiled["name"],
                                        "reason": "cachedName" if compiled["cached_name"] else "notCached"}], entry
        else:
            assert entry["missed"] == [] and "reason" not in entry, entry
        info = run_module("cache_info", sim.kubeconfig, name=cache, namespace=cluster.namespace)
        assert not info.get("failed"), info.get("msg")
        [listed] = info["caches"]
        assert listed["status"]["kernel_use"] == use
        [row] = [r for r in use["nodes"] if (r["node"], r["namespace"]) == (AMD_NODE, cluster.namespace)]
        labels = 'kind="GKMCache",cache="%s",cache_namespace="%s",namespace="%s",node="%s"' % (
            cache, cluster.namespace, cluster.namespace, AMD_NODE)
        exported = wait_until("%s's kernel use on /metrics" % cache, lambda labels=labels, row=row: _exported(
            server.get("/metrics", ca)[1], labels, (row["hits"], row["misses"])), timeout=30, interval=0.5)
        assert metric_value(exported, "gkm_cache_compile_seconds_saved{%s}" % labels) == pytest.approx(
            row["compileSecondsSaved"])


def _pin(requirements):
    """The Triton version a requirements file pins."""
    with open(os.path.join(ROOT, "requirements", requirements)) as handle:
        [version] = [line.split("==")[1].strip() for line in handle if line.startswith("triton==")]
    return version


def test_a_cache_another_triton_compiled_is_reported_as_another_version_not_as_a_silent_miss(
        cluster, sim, registry, tools_image):
    """A cache of the same six kernels by name, compiled by the previous Triton release (requirements/
    triton-previous.txt), given through the overlay as an image volume: the pod's Triton, the pin, finds none of them
    (triton_key() enters every kernel's key) and compiles all six into its overlay; the status says why for each, the
    pod's Triton version against the image's label, not a bare miss."""
    python = previous_triton_python()
    assert python, PREVIOUS_HINT
    pinned, previous = _pin("triton.txt"), _pin("triton-previous.txt")
    assert pinned != previous
    cache = "previous-triton-iv"
    pushed = kcache_images.build_image(registry.host, "real-overlay/" + cache, "v1", kcache_images.CacheSpec(
        backend="hip", kernels=KERNELS, compiled=True, triton_python=python))
    assert pushed.config["config"]["Labels"][LABEL_TRITON_VERSION] == previous, pushed.config
    cluster.caches.create_namespaced_custom_object(GROUP, VERSION, cluster.namespace, "gkmcaches", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
        "metadata": {"name": cache, "namespace": cluster.namespace},
        "spec": {"image": pushed.ref, "podTemplate": real_pod_template(), "mountMode": "imageVolume"}})
    reconciled = reconcile(sim, cache, cluster.namespace, extract_image=tools_image, wait=True, wait_timeout=240)
    assert not reconciled.get("failed"), reconciled.get("msg")

    pod = "overlaid-" + cache
    _given(cluster.create(_cache_pod(pod, cluster.image, cache)), "imageVolume", cache)
    finished, kernels, summary, _report = cluster.finished(pod)
    assert finished.status.phase == "Succeeded", (finished.status, kernels)
    assert (summary["hits"], summary["misses"], summary["errors"]) == (0, KERNELS, 0), summary

    use = reconcile(sim, cache, cluster.namespace, extract_image=tools_image)["resource"]["status"]["kernelUse"]
    [entry] = [p for p in use["pods"] if p["name"] == pod]
    assert (entry["hits"], entry["misses"]) == (0, KERNELS), entry
    assert {(m["reason"], m["tritonVersion"]) for m in entry["missed"]} == {("tritonVersion", pinned)}, entry
    assert len(entry["missed"]) == KERNELS and "reason" not in entry, entry
    print("%s: the previous Triton's (%s) cache, the pod's Triton %s: %d hits, %d misses, reasons %s" % (
        pod, previous, pinned, entry["hits"], entry["misses"], sorted({m["reason"] for m in entry["missed"]})))
