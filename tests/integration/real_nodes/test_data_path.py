"""The data path on the simulated cluster's real nodes (kubelet + containerd + runc on this machine).

Extraction Jobs really pull the cache image with the tools image and write the hostPath PV; a workload really
reads its node's copy through the in-cluster webhook; refusals come back from the real container; the
extractor running as root is what lets the Job write; faults (a kubelet killed mid-extraction, the registry stopped,
the API server restarted) end in a rerun that converges with nothing lost or duplicated.
"""

import concurrent.futures
import os
import subprocess
import sys
import time
import uuid

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.real_nodes import (
    BASELINE,
    delete_namespace,
    labelled_namespace,
    layer_files,
    node_disk_files,
    pod_logs,
    real_pod_template,
    run_daemonset,
    running_pods,
)
from tests.helpers.sim import SIM_SCRIPT, sim_control
from tests.helpers.webhook import install, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.real_nodes]

AMD_NODE = "gkm-real-amd-1"
NVIDIA_NODE = "gkm-real-nvidia-1"
SYSTEM_NAMESPACE = "gkm-system"


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:6])


@pytest.fixture(scope="module")
def image(registry, real_nodes):
    spec = kcache_images.CacheSpec(backend="hip", kernels=3, seed=11, compiled=True)
    return kcache_images.build_image(registry.host, "real/vector-add", "v1", spec), spec


@pytest.fixture
def job_namespace(kube):
    """A namespace enforcing Pod Security baseline, the level the extraction Jobs' root extractor needs."""
    core = client.CoreV1Api(kube)
    name = labelled_namespace(core, unique("t-real"), BASELINE)
    yield name
    delete_namespace(core, name)


def distribute(sim, tools_image, **args):
    args.setdefault("registry_plain_http", True)
    args.setdefault("extract_image", tools_image)
    args.setdefault("host_path_root", NODE_DISK)
    args.setdefault("pod_template", real_pod_template())
    args.setdefault("wait", True)
    args.setdefault("wait_timeout", 180)
    args.setdefault("node_details", True)  # entry() reads the per-node entries
    return run_module("cache_distribute", sim.kubeconfig, **args)


def remove(sim, tools_image, **args):
    keep = {k: v for k, v in args.items() if k in ("name", "namespace", "scope")}
    result = distribute(sim, tools_image, state="absent", force=True, **keep)
    assert not result.get("failed"), result
    return result


def entry(result, node, namespace=None):
    return next(e for e in result["status"]["entries"] if e["node"] == node
                and (namespace is None or e["namespace"] == namespace))


def store_dir(cache, digest, cache_namespace=None):
    """The node's store of a digest, which one Job in the system namespace fills and every workload namespace's slot
    PV points at (system_namespace_jobs, the default)."""
    return os.path.join(NODE_DISK, cache_namespace or "_cluster", cache, "_store", digest.split(":")[1])


def live_jobs(batch, cache):
    """The cache's extraction Jobs in the system namespace not being deleted: none once the run that waited marked
    the slots extracted."""
    return [job for job in batch.list_namespaced_job(SYSTEM_NAMESPACE, label_selector="gkm.io/cache=%s" % cache).items
            if not job.metadata.deletion_timestamp]


def _containing(text, wanted):
    """The text when it contains `wanted`, else None (a wait_until condition)."""
    return text if wanted in text else None


def files_under(path):
    return [name for name in node_disk_files(path) if os.path.isfile(name)]


# ---------------------------------------------------------------- extraction and read-back


def test_rwo_cache_is_extracted_on_the_real_node_and_a_daemonset_reads_it(
        sim, kube, tools_image, image, job_namespace):
    pushed, spec = image
    name = unique("va")
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    webhook = dict(name=unique("wh"), namespace=unique("gkm-wh"), endpoint="service", tls_mode="self_signed",
                   image=tools_image, replicas=1, node_selector={"gkm.io/real-node": "true"},
                   tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                   failure_policy="Fail", wait_timeout=180)
    try:
        install(sim.kubeconfig, **webhook)
        started = time.monotonic()
        result = distribute(sim, tools_image, name=name, namespace=job_namespace, image=pushed.ref)
        assert not result.get("failed"), result
        extracted_after = time.monotonic() - started
        assert entry(result, AMD_NODE)["phase"] == "Extracted", result["status"]
        assert entry(result, NVIDIA_NODE)["phase"] == "Incompatible"
        assert "cuda/90/32 does not match" in entry(result, NVIDIA_NODE)["message"]

        # On the node's disk: every file readable by any uid, writable by none, owned by root (the extractor runs as
        # uid 0 without capabilities on hostPath volumes).
        cache_dir = os.path.join(store_dir(name, pushed.digest, job_namespace), "cache")
        on_disk = files_under(cache_dir)
        assert len(on_disk) == len(kcache_images.cache_entries(spec)[0]) + 1  # + .gkm-cache.json
        for path in [*on_disk, cache_dir]:
            mode = os.stat(path).st_mode
            assert mode & 0o444 == 0o444 and not mode & 0o222, (path, oct(mode))
            assert os.stat(path).st_uid == 0

        entries = kcache_images.cache_entries(spec)[0]
        kernel = next(e.name for e in entries if e.name.endswith(".llir"))
        manifest = "io.triton.manifest/manifest.json"
        expected = layer_files(sim.registry, "real/vector-add", pushed.digest, {kernel, manifest})
        script = "sha256sum /kernels/%s /kernels/%s && head -n 3 /kernels/%s && sleep 3600" % (
            manifest, kernel, kernel)
        run_daemonset(apps, job_namespace, "reader", tools_image, script, labels={"gkm.io/pvc-mutation": "true"},
                      volumes=[{"name": "kernels", "persistentVolumeClaim": {"claimName": name}}],
                      mounts=[{"name": "kernels", "mountPath": "/kernels", "subPath": "cache", "readOnly": True}])
        apps.patch_namespaced_daemon_set("reader", job_namespace, {"spec": {"template": {"spec": {
            "nodeSelector": {"kubernetes.io/hostname": AMD_NODE}}}}})
        pod = wait_until("the reader pod running on %s" % AMD_NODE,
                         lambda: running_pods(core, job_namespace, "app=reader"), timeout=120)[0]

        def printed_checksums():
            log = pod_logs(core, job_namespace, pod.metadata.name)
            return log if manifest in log else None

        read = wait_until("the reader's checksums", printed_checksums, timeout=60)
        readable_after = time.monotonic() - started
        sums = {line.split()[1].replace("/kernels/", ""): line.split()[0]
                for line in read.splitlines() if line.startswith(tuple("0123456789abcdef")) and "  /kernels/" in line}
        assert sums == expected, read
        claim = pod.spec.volumes[0].persistent_volume_claim.claim_name
        assert claim == entry(result, AMD_NODE)["pvc"]
        print("cache applied -> Extracted %.1fs, -> read in the workload pod %.1fs" % (
            extracted_after, readable_after))
    finally:
        apps.delete_collection_namespaced_daemon_set(job_namespace)
        install(sim.kubeconfig, name=webhook["name"], namespace=webhook["namespace"], endpoint="service",
                state="absent")
        removed = remove(sim, tools_image, name=name, namespace=job_namespace)
    assert not os.path.exists(store_dir(name, pushed.digest, job_namespace)), removed.get("scrub")


def test_one_job_in_the_system_namespace_fills_the_node_s_store_for_every_namespace(
        sim, kube, tools_image, image, job_namespace):
    """Issue 31, classes 1, 3 and 4: a cluster cache over two namespaces. One Job in the system namespace, with the
    Secret there, extracts the digest once into the node's store through a PVC there and a PV bound to its uid; both
    namespaces' slot PVs point at that one directory. Once the slots are marked extracted (in the run that waited), the
    Job and that pair go; a namespace dropped from the cache leaves the directory to the other, and the removal of the
    cache scrubs it. (system_namespace_jobs, the default.)"""
    pushed, spec = image
    name = unique("sys")
    batch, core = client.BatchV1Api(kube), client.CoreV1Api(kube)
    second = labelled_namespace(core, unique("t-real-b"), BASELINE)
    selector = "gkm.io/cache=%s,gkm.io/cache-namespace=" % name
    store = store_dir(name, pushed.digest)
    args = dict(name=name, scope="cluster", image=pushed.ref,
                registry_username="admin", registry_password="unused", registry_host=pushed.ref.split("/", 1)[0])
    try:
        result = distribute(sim, tools_image, workload_namespaces=[job_namespace, second], **args)
        assert not result.get("failed"), result
        assert {entry(result, AMD_NODE, ns)["phase"] for ns in (job_namespace, second)} == {"Extracted"}
        assert [(a["action"], a["namespace"]) for a in result["plan"]["actions"] if a["kind"] == "Job"] == [
            ("create", SYSTEM_NAMESPACE)], result["plan"]["summary"]
        assert len(files_under(os.path.join(store, "cache"))) == len(kcache_images.cache_entries(spec)[0]) + 1
        assert not os.path.exists(os.path.join(NODE_DISK, "_cluster", name, job_namespace))
        for namespace in (job_namespace, second):
            assert batch.list_namespaced_job(namespace, label_selector=selector).items == []
            assert core.list_namespaced_secret(namespace, label_selector=selector).items == []
        assert [sorted(s.data) for s in core.list_namespaced_secret("gkm-system", label_selector=selector).items] == [
            ["config.json"]]
        served = {(pv.metadata.labels.get("gkm.io/serving"), pv.spec.host_path.path)
                  for pv in core.list_persistent_volume(label_selector=selector).items
                  if pv.spec.claim_ref.namespace in (job_namespace, second)}
        assert served == {(None, store), ("true", os.path.join(store, "cache"))}
        # The slots were marked extracted in that run: the Job went, and with its pod (which PVC protection counts while
        # it exists) the PVC and PV it wrote through.
        assert live_jobs(batch, name) == []
        access = selector + ",gkm.io/slot-access=true"
        wait_until("the access PVC and PV gone", lambda: not core.list_namespaced_persistent_volume_claim(
            "gkm-system", label_selector=access).items and not core.list_persistent_volume(label_selector=access).items,
            timeout=60)
        again = distribute(sim, tools_image, workload_namespaces=[job_namespace, second], **args)
        assert again["changed"] is False and again["api_writes"] == 0, again["plan"]
        narrowed = distribute(sim, tools_image, workload_namespaces=[job_namespace], **args)
        assert not narrowed.get("failed"), narrowed
        # Its slot's and its serving PV and PVC; the directory stays for the first namespace.
        assert narrowed["plan"]["summary"] == {"delete": {"PersistentVolume": 2, "PersistentVolumeClaim": 2}}
        assert not narrowed.get("scrub", {}).get("nodes"), narrowed.get("scrub")
        assert files_under(os.path.join(store, "cache"))
    finally:
        removed = remove(sim, tools_image, name=name, scope="cluster")
        delete_namespace(core, second)
    assert not os.path.exists(store), removed.get("scrub")
    assert batch.list_namespaced_job("gkm-system", label_selector=selector).items == []
    assert core.list_namespaced_secret("gkm-system", label_selector=selector).items == []


def test_rox_and_cluster_caches_over_two_namespaces_land_on_the_real_node(sim, kube, tools_image, image,
                                                                          job_namespace):
    pushed, _spec = image
    core = client.CoreV1Api(kube)
    second = labelled_namespace(core, unique("t-real-b"), BASELINE)
    rox, cluster = unique("rox"), unique("cl")
    try:
        shared = distribute(sim, tools_image, name=rox, namespace=job_namespace, image=pushed.ref,
                            access_modes=["ReadOnlyMany"], host_path_read_only_many=True)
        assert shared["status"]["phase"] == "Extracted", shared["status"]
        assert files_under(os.path.join(store_dir(rox, pushed.digest, job_namespace), "cache"))

        both = distribute(sim, tools_image, name=cluster, scope="cluster", workload_namespaces=[job_namespace, second],
                          image=pushed.ref)
        assert both["status"]["phase"] == "Extracted", both["status"]
        for namespace in (job_namespace, second):
            assert entry(both, AMD_NODE, namespace)["phase"] == "Extracted"
        assert files_under(os.path.join(store_dir(cluster, pushed.digest), "cache"))
        again = distribute(sim, tools_image, name=cluster, scope="cluster", workload_namespaces=[job_namespace, second],
                           image=pushed.ref)
        assert again["changed"] is False and again["api_writes"] == 0
    finally:
        remove(sim, tools_image, name=rox, namespace=job_namespace)
        remove(sim, tools_image, name=cluster, scope="cluster")
        delete_namespace(core, second)
    for path in (store_dir(rox, pushed.digest, job_namespace), store_dir(cluster, pushed.digest)):
        assert not os.path.exists(path)


def test_a_deployment_naming_the_cache_in_claim_name_reads_the_kernels_on_both_real_nodes(
        sim, kube, tools_image, image, job_namespace):
    """The serving PVC: two replicas of a plain Deployment, kept to ready nodes by the readiness label."""
    pushed, spec = image
    name = unique("serve")
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    entries = kcache_images.cache_entries(spec)[0]
    kernel = next(e.name for e in entries if e.name.endswith(".llir"))
    manifest = "io.triton.manifest/manifest.json"
    expected = layer_files(sim.registry, "real/vector-add", pushed.digest, {kernel, manifest})
    ready = {"cache.gkm.io/%s.%s" % (job_namespace, name): pushed.digest.split(":")[1][:12]}
    try:
        # compatibility ignore: the hip cache goes to the NVIDIA node too, so both real nodes hold it.
        result = distribute(sim, tools_image, name=name, namespace=job_namespace, image=pushed.ref,
                            compatibility="ignore")
        assert not result.get("failed"), result.get("msg")
        assert {entry(result, node)["phase"] for node in (AMD_NODE, NVIDIA_NODE)} == {"Extracted"}
        script = "sha256sum /kernels/%s /kernels/%s && sleep 3600" % (manifest, kernel)
        apps.create_namespaced_deployment(job_namespace, {
            "metadata": {"name": "serving-reader"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "serving-reader"}}, "template": {
                "metadata": {"labels": {"app": "serving-reader"}},
                "spec": {
                    "nodeSelector": ready,
                    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": dict(real_pod_template()["spec"]["affinity"], podAntiAffinity={
                        "requiredDuringSchedulingIgnoredDuringExecution": [{
                            "labelSelector": {"matchLabels": {"app": "serving-reader"}},
                            "topologyKey": "kubernetes.io/hostname"}]}),
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 4321, "runAsGroup": 4321,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "app", "image": tools_image, "command": ["sh", "-c", script],
                                    "securityContext": {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["ALL"]}},
                                    "volumeMounts": [{"name": "kernels", "mountPath": "/kernels", "readOnly": True}]}],
                    "volumes": [{"name": "kernels", "persistentVolumeClaim": {"claimName": name}}]}}}})

        def both_running():
            found = running_pods(core, job_namespace, "app=serving-reader")
            return found if len(found) == 2 else None

        pods = wait_until("both replicas running", both_running, timeout=180)
        assert sorted(pod.spec.node_name for pod in pods) == sorted([AMD_NODE, NVIDIA_NODE])
        for pod in pods:
            log = wait_until("%s's checksums" % pod.metadata.name, lambda pod=pod: _containing(
                pod_logs(core, job_namespace, pod.metadata.name), manifest), timeout=60)
            sums = {line.split()[1].replace("/kernels/", ""): line.split()[0] for line in log.splitlines()
                    if "  /kernels/" in line}
            assert sums == expected, log
        counts = distribute(sim, tools_image, name=name, namespace=job_namespace, image=pushed.ref,
                            compatibility="ignore")["status"]["counts"]
        assert counts["pod_running"] == 2 and counts["node_in_use"] == 2
    finally:
        apps.delete_collection_namespaced_deployment(job_namespace)
        core.delete_collection_namespaced_pod(job_namespace, label_selector="app=serving-reader",
                                              grace_period_seconds=0)
        wait_until("the readers gone", lambda: not core.list_namespaced_pod(
            job_namespace, label_selector="app=serving-reader").items, timeout=120)
        remove(sim, tools_image, name=name, namespace=job_namespace)
    assert not os.path.exists(store_dir(name, pushed.digest, job_namespace))


# ---------------------------------------------------------------- refusals and the extractor's user


def test_a_hostile_image_is_refused_in_the_real_job_and_the_destination_stays_untouched(sim, registry, tools_image,
                                                                                        job_namespace):
    # The hostile images target cuda/90: the NVIDIA real node is the one that extracts them.
    hostile, expected = kcache_images.push_hostile(registry.host, "real/hostile", "path_traversal")
    name = unique("bad")
    try:
        result = distribute(sim, tools_image, name=name, namespace=job_namespace, image=hostile.ref, wait_timeout=120)
        failed = entry(result, NVIDIA_NODE)
        assert failed["phase"] == "Error", result["status"]
        assert failed["reason"] == "ExtractionRefused", failed
        assert expected in failed["message"], failed["message"]
        store = store_dir(name, hostile.digest, job_namespace)
        assert not os.path.exists(os.path.join(store, "cache")), node_disk_files(store)
        assert not [path for path in node_disk_files(NODE_DISK) if "gkm-evil" in path]
    finally:
        remove(sim, tools_image, name=name, namespace=job_namespace)


def test_without_the_permission_step_the_job_cannot_write_the_pv(sim, tools_image, image, job_namespace):
    pushed, _spec = image
    name = unique("noowner")
    try:
        result = distribute(sim, tools_image, name=name, namespace=job_namespace, image=pushed.ref,
                            set_volume_owner="never", wait_timeout=120)
        failed = entry(result, AMD_NODE)
        assert failed["phase"] == "Error", result["status"]
        assert failed["reason"] == "VolumeNotWritable", failed
        assert "uid 1000" in failed["message"] and "set_volume_owner" in failed["message"]
        assert not os.path.exists(os.path.join(store_dir(name, pushed.digest, job_namespace), "cache"))
    finally:
        remove(sim, tools_image, name=name, namespace=job_namespace)


def test_an_image_the_nodes_cannot_pull_is_an_error_at_once_naming_the_image(sim, tools_image, image, job_namespace):
    pushed, _spec = image
    absent = "%s/gkm-cluster/tools:absent-%s" % (sim.registry, uuid.uuid4().hex[:6])
    name = unique("nopull")
    started = time.monotonic()
    try:
        result = distribute(sim, absent, name=name, namespace=job_namespace, image=pushed.ref, wait_timeout=300)
        failed = entry(result, AMD_NODE)
        assert failed["phase"] == "Error" and failed["reason"] == "ToolsImageNotPullable", failed
        assert absent in failed["message"] and "make images REGISTRY=" in failed["message"]
        assert "extract_image (gkm_tools_image)" in failed["fix"]
        assert time.monotonic() - started < 120
    finally:
        remove(sim, tools_image, name=name, namespace=job_namespace)


def _reconcile(sim, tools_image, kind, name, namespace=None, **args):
    return run_module("cache_reconcile", sim.kubeconfig, kind=kind, name=name, namespace=namespace,
                      registry_plain_http=True, extract_image=tools_image, host_path_root=NODE_DISK, wait=True,
                      wait_timeout=180, **args)


def _cache_resource(kind, name, namespace, image_ref, signature_format):
    metadata = {"name": name, "labels": {"gkm.io/signature-format": signature_format}}
    spec = {"image": image_ref, "podTemplate": real_pod_template()}
    if kind == "GKMCache":
        metadata["namespace"] = namespace
    else:
        spec["workloadNamespaces"] = [namespace]
    return {"apiVersion": "gkm.io/v1alpha1", "kind": kind, "metadata": metadata, "spec": spec}


def test_the_jobs_verify_a_labelled_cache_s_signature_with_the_key(sim, crds, registry, tools_image, job_namespace):
    """A ClusterGKMCache (which Kyverno never sees) signed with the key is extracted and verified; a GKMCache signed
    with another key is refused in the real Job, extracts nothing, and its status carries the Job's message."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    trusted, other = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    public_key = trusted.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    pushed = kcache_images.build_image(registry.host, "real/signed", unique("v"),
                                       kcache_images.CacheSpec(backend="hip", kernels=2, seed=17, compiled=True))
    kcache_images.sign_cosign_v3(pushed, trusted)
    kcache_images.sign_cosign_v2(pushed, other)
    signed, refused = unique("signed"), unique("refused")
    crds.create_cluster_custom_object("gkm.io", "v1alpha1", "clustergkmcaches", _cache_resource(
        "ClusterGKMCache", signed, job_namespace, pushed.ref, "cosign-v3"))
    crds.create_namespaced_custom_object("gkm.io", "v1alpha1", job_namespace, "gkmcaches", _cache_resource(
        "GKMCache", refused, job_namespace, pushed.ref, "cosign-v2"))
    caches = (("ClusterGKMCache", signed, None), ("GKMCache", refused, job_namespace))
    # The two caches' Jobs (and later their scrubs) run side by side: the waits are the test's time.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        try:
            results = list(pool.map(lambda cache: _reconcile(sim, tools_image, *cache, signature_public_key=public_key),
                                    caches))
            assert not results[0].get("failed"), results[0].get("msg")
            status = results[0]["resource"]["status"]
            assert status["phase"] == "Extracted", status
            condition = next(c for c in status["conditions"] if c["type"] == "SignatureVerified")
            assert (condition["status"], condition["reason"]) == ("True", "VerifiedByExtraction"), condition
            assert files_under(os.path.join(store_dir(signed, pushed.digest), "cache"))

            status = crds.get_namespaced_custom_object_status("gkm.io", "v1alpha1", job_namespace, "gkmcaches",
                                                              refused)["status"]
            # The node's state of the cache lives in its GKMCacheNode (the cache's own status holds the counts).
            node_state = crds.get_namespaced_custom_object("gkm.io", "v1alpha1", job_namespace, "gkmcachenodes",
                                                           AMD_NODE)["status"]["caches"][refused][pushed.digest]
            node = node_state["pvcStatus"][job_namespace]["conditions"][0]
            assert (status["phase"], node_state["state"], node["reason"]) == (
                "Error", "Error", "SignatureNotVerified"), (status, node_state)
            refusal = "none verifies with the given public key for digest %s" % pushed.digest
            assert refusal in node["message"], node
            condition = next(c for c in status["conditions"] if c["type"] == "SignatureVerified")
            assert (condition["status"], condition["reason"]) == ("False", "VerificationFailed"), condition
            assert refusal in condition["message"], condition
            assert not os.path.exists(os.path.join(store_dir(refused, pushed.digest, job_namespace), "cache"))
        finally:
            removals = list(pool.map(lambda cache: _reconcile(sim, tools_image, *cache, state="absent", force=True),
                                     caches))
            assert not any(removal.get("failed") for removal in removals), removals
            crds.delete_cluster_custom_object("gkm.io", "v1alpha1", "clustergkmcaches", signed)
            crds.delete_namespaced_custom_object("gkm.io", "v1alpha1", job_namespace, "gkmcaches", refused)


# ---------------------------------------------------------------- faults, each followed by a converging rerun


def _sim(*args):
    subprocess.run([sys.executable, SIM_SCRIPT, *args], check=True, capture_output=True)


def _kill_process(process_name):
    record = sim_control.load_state()["processes"]["%s-%s" % (process_name, AMD_NODE)]
    os.kill(record["pid"], 9)


def _start_extraction(sim, tools_image, batch, args):
    """Apply the cache without waiting and return once its extraction Job's pod runs: the moment to break things."""
    first = distribute(sim, tools_image, wait=False, **args)
    assert not first.get("failed"), first
    wait_until("the extraction Job's pod to start", lambda: [
        job for job in live_jobs(batch, args["name"]) if job.status.active], timeout=60, interval=0.1)


def slot_claims(kube, args):
    """The cache's per-node PVCs in its namespace, not being deleted."""
    return [pvc for pvc in client.CoreV1Api(kube).list_namespaced_persistent_volume_claim(
        args["namespace"], label_selector="gkm.io/cache=%s,gkm.io/node" % args["name"]).items
        if not pvc.metadata.deletion_timestamp]


def _converges(sim, tools_image, args, digest):
    rerun = distribute(sim, tools_image, **args)
    assert not rerun.get("failed"), rerun
    assert entry(rerun, AMD_NODE)["phase"] == "Extracted", rerun["status"]
    third = distribute(sim, tools_image, **args)
    assert third["changed"] is False and third["api_writes"] == 0, third["plan"]
    cache_dir = os.path.join(store_dir(args["name"], digest, args["namespace"]), "cache")
    return files_under(cache_dir)


@pytest.mark.parametrize("fault", ["kubelet", "containerd"])
def test_a_node_agent_killed_mid_extraction_then_a_rerun_converges(
        sim, kube, tools_image, registry, job_namespace, fault):
    spec = kcache_images.CacheSpec(backend="hip", kernels=40, kernel_bytes=200_000, seed=23)
    pushed = kcache_images.build_image(registry.host, "real/big-%s" % fault, "v1", spec)
    args = dict(name=unique("kill"), namespace=job_namespace, image=pushed.ref)
    batch = client.BatchV1Api(kube)
    try:
        _start_extraction(sim, tools_image, batch, args)
        _kill_process(fault)
        _sim("up")  # restarts the killed agent, as a node's service manager would
        files = _converges(sim, tools_image, args, pushed.digest)
        assert len(files) == len(kcache_images.cache_entries(spec)[0]) + 1
    finally:
        _sim("up")
        remove(sim, tools_image, **args)


def test_registry_stopped_while_jobs_pull_then_a_rerun_converges(sim, kube, tools_image, registry, job_namespace):
    spec = kcache_images.CacheSpec(backend="hip", kernels=40, kernel_bytes=200_000, seed=29)
    pushed = kcache_images.build_image(registry.host, "real/registry-down", "v1", spec)
    args = dict(name=unique("regdown"), namespace=job_namespace, image=pushed.ref)
    batch = client.BatchV1Api(kube)
    try:
        _start_extraction(sim, tools_image, batch, args)
        state = sim_control.load_state()
        sim_control.stop_process("registry", state["processes"]["registry"])
        time.sleep(5)
        _sim("registry-up")
        files = _converges(sim, tools_image, args, pushed.digest)
        assert len(files) == len(kcache_images.cache_entries(spec)[0]) + 1
        assert live_jobs(batch, args["name"]) == []  # the Job went once the slot was marked
        assert len(slot_claims(kube, args)) == 1  # nothing duplicated
    finally:
        _sim("registry-up")
        remove(sim, tools_image, **args)


def test_a_real_node_leaving_is_pruned_and_its_disk_named(sim, kube, tools_image, image, job_namespace):
    pushed, _spec = image
    args = dict(name=unique("leave"), namespace=job_namespace, image=pushed.ref)
    core = client.CoreV1Api(kube)
    slot = store_dir(args["name"], pushed.digest, job_namespace)
    try:
        assert entry(distribute(sim, tools_image, **args), AMD_NODE)["phase"] == "Extracted"
        _kill_process("kubelet")
        core.delete_node(AMD_NODE)
        # No node is eligible any more: with wait the run would refuse (nothing to wait for); without, it prunes.
        left = distribute(sim, tools_image, wait=False, **args)
        assert not left.get("failed"), left.get("msg")
        # The slot's PV and PVC, and the serving PV and PVC (no eligible node is left to serve); the Job that filled
        # the store went once the slot was marked.
        assert left["plan"]["summary"].get("delete") == {"PersistentVolume": 2, "PersistentVolumeClaim": 2}
        assert AMD_NODE not in {e["node"] for e in left["status"]["entries"]}
        assert any(AMD_NODE in warning and slot in warning for warning in left["warnings"]), left["warnings"]
        assert os.path.isdir(slot)  # a node that is gone cannot be scrubbed: the warning names what stays
    finally:
        # The kubelet comes back and registers the node again, labelled and tainted as before; sim waits until it
        # is Ready and its not-ready taint is gone (until then the Job's pod cannot land there: not eligible).
        _sim("up")
        back = distribute(sim, tools_image, **args)
        assert not back.get("failed"), back.get("msg")
        assert entry(back, AMD_NODE)["phase"] == "Extracted", back["status"]
        remove(sim, tools_image, **args)
    assert not os.path.exists(slot)


def test_api_server_restarted_during_a_deploy_then_a_rerun_converges(sim, kube, tools_image, registry, job_namespace):
    spec = kcache_images.CacheSpec(backend="hip", kernels=5, seed=31, compiled=True)
    pushed = kcache_images.build_image(registry.host, "real/api-restart", "v1", spec)
    args = dict(name=unique("apirst"), namespace=job_namespace, image=pushed.ref)
    try:
        first = distribute(sim, tools_image, wait=False, **args)
        assert not first.get("failed"), first
        state = sim_control.load_state()
        sim_control.stop_process("kube-apiserver", state["processes"]["kube-apiserver"])
        _sim("up")
        files = _converges(sim, tools_image, args, pushed.digest)
        assert len(files) == len(kcache_images.cache_entries(spec)[0]) + 1
        assert live_jobs(client.BatchV1Api(kube), args["name"]) == []  # the Job went once the slot was marked
        assert len(slot_claims(kube, args)) == 1  # nothing duplicated
    finally:
        remove(sim, tools_image, **args)
