"""Capture on the real nodes (gkm.cluster.cache_capture, docs/kernels.md): a pod compiling the kernels a cache lacks
on one node, opted in with gkm.io/capture and kept running so that it can be read; the capture and the reconcile that
distributes its image, timed. The real-node capture test, the warm-start benchmark (--capture-only) and the demo use
them.

The cache's first image holds the first `held` kernels of the set by hash (kcache_images' CacheSpec with seed 0, from
the store's compile); the pod compiles the others. It must not compile the held ones: the store and the pod compile
from other paths, which Triton's IR records, and capture refuses the same kernel with other bytes.
"""

import json
import time

from cryptography.hazmat.primitives import serialization
from kubernetes.client.rest import ApiException

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CAPTURE_ANNOTATION
from tests.helpers.kcache_images import key_pair
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.warmup_pods import COLD_DIR, warmup_pod
from tests.helpers.webhook import wait_until
from tools.triton_kernels import image, store
from tools.triton_kernels.targets import DEFAULT_SET

# The real-node capture tests' cache (by the module, by the controller): its first image holds HELD of the KERNELS
# kernels of TARGET, and its pods mount it at MOUNT.
TARGET = "hip:gfx90a"
CACHE = "captured"
MOUNT = "/kernels"
HELD, KERNELS = 3, 6


def lacking_labels(target, held, kernel_set=DEFAULT_SET):
    """The labels of the set's kernels a first image of `held` kernels lacks."""
    _directory, info = store.compiled_cache(target, kernel_set=kernel_set)
    kernels = [{"facts": {"hash": k["hash"]}, "label": k["label"]} for k in info["build"]["kernels"]]
    kept = {k["label"] for k in image.select_kernels(kernels, held)}
    return sorted(k["label"] for k in kernels if k["label"] not in kept)


def capturable_pod(name, workload_image, node, target, cache, only, kernel_set=DEFAULT_SET):
    """Given no cache, opted in to capture into `cache`: compiles `only` into its emptyDir, then stays running."""
    body = warmup_pod(name, workload_image, node, target, kernel_set, annotations={CAPTURE_ANNOTATION: cache},
                      env=[{"name": "TRITON_CACHE_DIR", "value": COLD_DIR}],
                      volumes=[{"name": "cold", "emptyDir": {}}], mounts=[{"name": "cold", "mountPath": COLD_DIR}])
    warmup = "python3 -m tools.triton_kernels warmup %s" % " ".join("--only %s" % label for label in only)
    body["spec"]["containers"][0]["command"] = ["sh", "-c", warmup + "; sleep 1800"]
    return body


def warmed_up(core, namespace, name, timeout=600):
    """The warm-up's JSON lines (per kernel, then the summary), once its summary is printed."""
    def lines():
        try:
            logs = core.read_namespaced_pod_log(name, namespace, container="app")
        except ApiException as error:
            if error.status == 400:  # the container is not started yet (the image pulled onto the node)
                return None
            raise
        found = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
        return found if any(line.get("summary") for line in found) else None

    return wait_until("the warm-up of pod %s" % name, lines, timeout=timeout, interval=1)


def signing_key():
    """(the admin's private key, the same as PEM, its public key as PEM): a key made for the run."""
    private, public = key_pair()
    return private, private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()).decode(), public


def capture(kubeconfig, namespace, pod, cache, repository, private_pem, check=False, **overrides):
    """cache_capture of `pod` into the GKMCache `cache` of its namespace, allowed by the admin's setting."""
    args = dict(pod=pod, namespace=namespace, cache=cache, repository=repository, signing_key=private_pem,
                allowed_caches=["%s/%s" % (namespace, cache)], allowed_namespaces=[namespace],
                registry_plain_http=True)
    return run_module("cache_capture", kubeconfig, check=check, diff=check, **dict(args, **overrides))


def capture_and_distribute(kubeconfig, namespace, pod, cache, repository, private_pem, public_pem, tools_image):
    """The capture, then cache_reconcile until the nodes hold the new image, its signature verified by the Jobs with
    `public_pem`; (capture's result, the reconcile's, the capture's seconds, capture to distributed seconds). Raises
    RuntimeError when either fails."""
    started = time.monotonic()
    captured = capture(kubeconfig, namespace, pod, cache, repository, private_pem)
    captured_s = time.monotonic() - started
    if captured.get("failed"):
        raise RuntimeError("cache_capture failed: %s" % captured.get("msg"))
    reconciled = run_module("cache_reconcile", kubeconfig, kind="GKMCache", name=cache, namespace=namespace,
                            registry_plain_http=True, host_path_root=NODE_DISK, extract_image=tools_image, wait=True,
                            wait_timeout=300, signature_public_key=public_pem, signature_required=True)
    distributed_s = time.monotonic() - started
    if reconciled.get("failed"):
        raise RuntimeError("cache_reconcile of %s failed: %s" % (cache, reconciled.get("msg")))
    return captured, reconciled, round(captured_s, 3), round(distributed_s, 3)
