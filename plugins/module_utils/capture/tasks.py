# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cache_capture module's work: the stages in order (policy, read, check, current, merge, package, publish,
record), each in its own file; this is the only one that knows the order."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import tempfile
import time

from ansible_collections.gkm.cluster.plugins.module_utils.capture import current, merge, package, policy, read, sign
from ansible_collections.gkm.cluster.plugins.module_utils.capture.check import check_kernel
from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError
from ansible_collections.gkm.cluster.plugins.module_utils.capture.publish import publish
from ansible_collections.gkm.cluster.plugins.module_utils.capture.record import record_image
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import read_cache
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import pinned_reference
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.resource import resource_path
from ansible_collections.gkm.cluster.plugins.module_utils.oci.args import registry_options
from ansible_collections.gkm.cluster.plugins.module_utils.oci.key_text import read_pem
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import OCIError, RegistryClient, parse_reference


def _checked(kernels, where):
    files, facts = {}, {}
    for hash_dir, found in kernels.items():
        try:
            files[hash_dir], facts[hash_dir] = check_kernel(hash_dir, found)
        except CaptureError as error:
            raise CaptureError("%s: %s" % (where, error)) from error
    return files, facts


def _describe(kernels, facts, hash_dirs):
    return [{"hash_dir": h, "name": facts[h]["name"], "hash": facts[h]["hash"], "files": len(kernels[h])}
            for h in hash_dirs]


def _read_pod(kube, api_client, pod, cache, dest):
    """(the kernel directories the pod compiled, unpacked into dest; where they were read): a running pod's through
    pods/exec, a finished one's capture frame through its sidecar's pods/log."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    if read.finished(pod):
        container = read.log_source(pod, cache)
        compiled = read.unpack_frame(read.log_frame(kube, namespace, name, container), dest)
        return compiled, {"container": container, "directory": "pods/log", "overlaid": True, "finished": True}
    container, directory, overlaid = read.pod_source(pod, cache)
    compiled = read.unpack(read.exec_tar(api_client, namespace, name, container, directory), dest, overlaid)
    return compiled, {"container": container, "directory": directory, "overlaid": overlaid, "finished": False}


def capture(kube, api_client, params, check_mode, workdir):
    """The module's result; raises CaptureError (or the client's errors) before any push when refused."""
    seconds = {}
    started = time.monotonic()
    kind, cache_name = params["cache_kind"], params["cache"]
    cache_namespace = (params["cache_namespace"] or params["namespace"]) if kind == "GKMCache" else None
    signing_key = sign.load_private_key(read_pem(params["signing_key"], "signing_key", CaptureError),
                                        params["signing_key_password"])
    pod = kube.get("Pod", params["pod"], params["namespace"])
    if pod is None:
        raise CaptureError("pod %s/%s not found" % (params["namespace"], params["pod"]))
    policy.check_allowed(pod, kind, cache_name, cache_namespace, params["allowed_caches"],
                         params["allowed_namespaces"])
    status, found = kube.request("GET", resource_path(kind, cache_name, cache_namespace),
                                 what="%s %s" % (kind, cache_name))
    cache = read_cache(found or {}, kind=kind)
    if status == 404 or cache.image is None:
        ref = policy.cache_ref(kind, cache_name, cache_namespace)
        raise CaptureError("%s %s not found or has no spec.image" % (kind, ref))
    compiled, source = _read_pod(kube, api_client, pod, cache_name, os.path.join(workdir, "pod"))
    captured, facts = _checked(read.load_kernels(os.path.join(workdir, "pod"), compiled), "captured kernel")
    seconds["read"] = round(time.monotonic() - started, 3)
    options = registry_options(params)
    before_digest, held = current.current_kernels(cache.image, os.path.join(workdir, "current"), options)
    held, held_facts = _checked(held, "the cache's image")
    merged, added = merge.merge(held, captured)
    facts.update(held_facts)
    result = {"changed": False, "pod": dict(source, namespace=params["namespace"], name=params["pod"]),
              "captured": _describe(captured, facts, sorted(captured)), "added": _describe(merged, facts, added),
              "previous_image": cache.image, "previous_digest": before_digest, "kernels": len(merged),
              "image": cache.image, "digest": before_digest}
    if not added:
        result["msg"] = "the cache's image holds every kernel the pod compiled (%d): nothing to push" % len(captured)
        result["seconds"] = dict(seconds, total=round(time.monotonic() - started, 3))
        return result
    built = package.image(merged, facts)
    reference = pinned_reference(params["repository"], built["digest"])
    result.update(changed=True, image=reference, digest=built["digest"], labels=built["labels"], diff={
        "before": {"image": cache.image, "kernels": len(held)},
        "after": {"image": reference, "kernels": len(merged),
                  "added": [k["hash_dir"] for k in result["added"]]}})
    seconds["package"] = round(time.monotonic() - started - sum(seconds.values()), 3)
    if check_mode:
        result["msg"] = "would push %s with %d kernels (%d added) and record it" % (reference, len(merged), len(added))
    else:
        container_ref = parse_reference(params["repository"])
        client = RegistryClient(container_ref.registry, **options)
        publish(client, container_ref, params["repository"], built, signing_key, params["tag"])
        seconds["push"] = round(time.monotonic() - started - sum(seconds.values()), 3)
        record_image(kube, kind, cache_name, cache_namespace, reference)
        result["msg"] = "pushed %s with %d kernels (%d added) and recorded it as the cache's image" % (
            reference, len(merged), len(added))
    result["seconds"] = dict(seconds, total=round(time.monotonic() - started, 3))
    return result


def cache_capture(call):
    workdir = tempfile.mkdtemp(prefix="gkm-capture-")
    try:
        api_client = call.api_client()
        return capture(Kube(api_client, dry_run=call.check_mode), api_client, call.params, call.check_mode, workdir)
    except OCIError as error:
        raise CaptureError("registry: %s" % error) from error
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
