# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""status.kernelUse: what the pods given a cache's kernel overlay found in it (hits) and compiled (misses), and why
a kernel was compiled when that can be known.

Each such pod runs the kernel-use sidecar the webhook adds (kernels/usage_main.py), which prints its look at the
pod's overlay directory as a JSON line. `read_kernel_use` (I/O) takes the pods of the cache's namespaces that have
the sidecar and reads each one's last line through pods/log; the rest is pure. A pod is a tenant's: everything it
prints is counted for that pod alone (its namespace, name and node come from the API, never from the line), each
figure is clamped, a kernel name or version is kept only when it has the shape Triton gives it, and every reason is
the collection's own words, chosen by comparing the pod's figures with the cache's image (its targets, its Triton
version).

Bounds: the newest MAX_PODS pods are read per reconcile (one pods/log request each), the status keeps MAX_LISTED_PODS
of them, MAX_NODES rows of per-node figures and MAX_MISSES kernels per pod.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import MAX_KERNEL_USE_ROWS
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import kernel_use_container
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.usage import REPORT_KEY

MAX_PODS = 20
MAX_LISTED_PODS = 10
MAX_NODES = MAX_KERNEL_USE_ROWS
MAX_MISSES = 10
# Above any real kernel set; a larger figure is a pod's invention.
MAX_COUNT = 100000
LOG_BYTES = 16384

# Why a kernel was compiled, in the order they are tried: the first that holds is given.
TRITON_VERSION = "tritonVersion"
TARGET = "target"
LEFT_OUT = "leftOut"
CACHED_NAME = "cachedName"
NOT_CACHED = "notCached"
REASONS = {
    TRITON_VERSION: "compiled by another Triton version than the cache's kernels",
    TARGET: "compiled for a target the cache lacks",
    LEFT_OUT: "the cache's copy was left out of the overlay (a file it lists is missing, or it is not Triton's)",
    CACHED_NAME: "the cache holds a kernel of this name under another key (other constexprs or options, another "
                 "source, or another Triton build)",
    NOT_CACHED: "not in the cache",
}
# A pod that hit nothing and compiled only kernels the cache has by name: the likeliest cause is the pod's Triton.
ANOTHER_BUILD = ("no kernel was found and each one compiled is in the cache under another key: the pod's Triton "
                 "build (the image's io.gkm.cache/triton-key) or its compile options differ from the cache's")

_KERNEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_VERSION = re.compile(r"^[0-9A-Za-z.+_-]{1,40}$")
_TARGET = re.compile(r"^[a-z]{1,16}:[0-9A-Za-z_]{1,16}$")


def _count(value, limit=MAX_COUNT):
    return min(value, limit) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _shaped(value, pattern):
    return value if isinstance(value, str) and pattern.fullmatch(value) else None


def last_report(log_text):
    """The last kernel-use line of a sidecar's log, as a dict, or None."""
    for line in reversed((log_text or "").splitlines()):
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict) and document.get(REPORT_KEY) == 1:
            return document
    return None


def _cache_targets(targets):
    return {"%s:%s" % (t.get("backend"), t.get("arch")) for t in targets or () if isinstance(t, dict)}


def _miss(item, triton_version, targets):
    """{kernel, reason[, tritonVersion | target]} of one compiled kernel a pod described."""
    item = item if isinstance(item, dict) else {}
    miss = {"kernel": _shaped(item.get("name"), _KERNEL_NAME) or "?"}
    version, target = _shaped(item.get("triton_version"), _VERSION), _shaped(item.get("target"), _TARGET)
    if version and triton_version and version != triton_version:
        miss.update(reason=TRITON_VERSION, tritonVersion=version)
    elif target and targets and target not in targets:
        miss.update(reason=TARGET, target=target)
    elif item.get("left_out") is True:
        miss["reason"] = LEFT_OUT
    elif item.get("cached_name") is True:
        miss["reason"] = CACHED_NAME
    else:
        miss["reason"] = NOT_CACHED
    return miss


def pod_entry(pod, report, spec):
    """A pod's status entry from its sidecar's report (None without one), judged against the cache (spec)."""
    metadata = pod.get("metadata") or {}
    overlaid = _count(report.get("overlaid"))
    hits, misses = _count(report.get("hits"), overlaid), _count(report.get("misses"))
    described = report.get("compiled") if isinstance(report.get("compiled"), list) else []
    listed = [_miss(item, spec.triton_version, _cache_targets(spec.targets)) for item in described[:MAX_MISSES]]
    entry = {"namespace": metadata.get("namespace") or "", "name": metadata.get("name") or "",
             "node": (pod.get("spec") or {}).get("nodeName") or "", "hits": hits, "misses": misses, "missed": listed}
    if spec.compile_seconds_per_kernel:
        entry["compileSecondsSaved"] = round(hits * spec.compile_seconds_per_kernel, 3)
    if misses and not hits and listed and all(m["reason"] == CACHED_NAME for m in listed):
        entry["reason"] = ANOTHER_BUILD
    return entry


def summary(entries, estimated):
    """status.kernelUse from the pods' entries, newest first: totals, per (node, namespace) figures, the newest
    pods. estimated: whether the image records compile seconds (compileSecondsSaved is then given)."""
    rows = {}
    for entry in entries:
        row = rows.setdefault((entry["node"], entry["namespace"]), {
            "node": entry["node"], "namespace": entry["namespace"], "podCnt": 0, "hits": 0, "misses": 0})
        row["podCnt"] += 1
        row["hits"] += entry["hits"]
        row["misses"] += entry["misses"]
        if estimated:
            row["compileSecondsSaved"] = round(row.get("compileSecondsSaved", 0) + entry["compileSecondsSaved"], 3)
    status = {"podCnt": len(entries), "hits": sum(e["hits"] for e in entries),
              "misses": sum(e["misses"] for e in entries),
              "nodes": [rows[key] for key in sorted(rows)][:MAX_NODES], "pods": list(entries[:MAX_LISTED_PODS])}
    if estimated:
        status["compileSecondsSaved"] = round(sum(e["compileSecondsSaved"] for e in entries), 3)
    return status


def _has_sidecar(pod, container):
    return any(isinstance(c, dict) and c.get("name") == container
               for c in (pod.get("spec") or {}).get("initContainers") or ())


def read_kernel_use(kube, spec, source):
    """status.kernelUse of the cache `spec` describes, read from its pods' sidecars: the pods from `source` (the
    facts' source: a LIST per namespace, or the controller's index) and one pods/log request per pod read. A log
    that cannot be read (the sidecar not started yet, no permission) leaves that pod out; it never fails the
    reconcile."""
    container = kernel_use_container(spec.name)
    pods = [pod for namespace in spec.namespaces for pod in source.pods(namespace) if _has_sidecar(pod, container)]
    pods.sort(key=lambda pod: (pod["metadata"].get("creationTimestamp") or "", pod["metadata"].get("name")),
              reverse=True)
    entries = []
    for pod in pods[:MAX_PODS]:
        metadata = pod["metadata"]
        try:
            _status, text = kube.request(
                "GET", "/api/v1/namespaces/%s/pods/%s/log" % (metadata["namespace"], metadata["name"]),
                query=[("container", container), ("tailLines", "1"), ("limitBytes", str(LOG_BYTES))],
                what="the kernel use of pod %s/%s" % (metadata["namespace"], metadata["name"]), accept="*/*",
                text=True)
        except GkmError:
            continue
        report = last_report(text)
        if report is not None:
            entries.append(pod_entry(pod, report, spec))
    return summary(entries, bool(spec.compile_seconds_per_kernel))
