# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kernel-cache image metadata: the MCV config labels and the manifest.json inside the layer.

An image is a Triton cache when its config carries `cache.triton.image/*` labels and a vLLM cache
when it carries `cache.vllm.image/*`; the summary label lists the GPU targets it was built for.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gkm.cluster.plugins.module_utils.kernels.image import (
    LABEL_COMPILE_SECONDS,
    LABEL_TRITON_VERSION,
)

CACHE_KINDS = ("triton", "vllm")


class CacheMetadataError(ValueError):
    """The image's cache labels or manifest.json are missing or malformed."""


# Triton's version as it writes it (3.9.0, 3.2.0+git1a2b): anything else in the label is ignored.
_VERSION = re.compile(r"^[0-9A-Za-z.+_-]{1,40}$")


def framework_facts(labels, entry_count):
    """(Triton version or None, estimated cold compile seconds per kernel or None) from the image's labels. A label
    that does not parse is ignored: these only explain a pod's misses and estimate its savings."""
    version = labels.get(LABEL_TRITON_VERSION)
    version = version if isinstance(version, str) and _VERSION.fullmatch(version) else None
    try:
        total = float(labels.get(LABEL_COMPILE_SECONDS))
    except (TypeError, ValueError):
        total = None
    per_kernel = round(total / entry_count, 4) if total and total > 0 and total < 1e7 and entry_count else None
    return version, per_kernel


def image_labels(config):
    """Labels of an image config document (OCI or Docker), {} when it has none."""
    inner = (config or {}).get("config") or {}
    return inner.get("Labels") or {}


def cache_kind(labels):
    """'triton' or 'vllm', from which label family is present; None for a plain image."""
    for kind in CACHE_KINDS:
        if any(key.startswith("cache.%s.image/" % kind) for key in labels):
            return kind
    return None


def _label_int(labels, key):
    value = labels.get(key)
    if value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        raise CacheMetadataError("label %s must be a whole number, got %r" % (key, value)) from None
    if number < 0:
        raise CacheMetadataError("label %s must not be negative, got %r" % (key, value))
    return number


def parse_targets(summary, label="summary"):
    """Targets of a summary label value: a list of {backend, arch, warp_size}."""
    try:
        document = json.loads(summary)
    except (TypeError, ValueError) as exc:
        raise CacheMetadataError("label %s is not valid JSON (%s): %r" % (label, exc, summary)) from exc
    targets = document.get("targets") if isinstance(document, dict) else None
    if not isinstance(targets, list) or not targets:
        raise CacheMetadataError('label %s must be {"targets": [{"backend", "arch", "warp_size"}, ...]}, got %r'
                                 % (label, summary))
    parsed = []
    for index, target in enumerate(targets):
        required = ("backend", "arch", "warp_size")
        if not isinstance(target, dict) or any(target.get(key) in (None, "") for key in required):
            raise CacheMetadataError("label %s: target %d needs backend, arch and warp_size, got %r"
                                     % (label, index, target))
        try:
            warp_size = int(target["warp_size"])
        except (TypeError, ValueError):
            raise CacheMetadataError("label %s: target %d warp_size must be a number, got %r"
                                     % (label, index, target["warp_size"])) from None
        parsed.append({"backend": str(target["backend"]).lower(), "arch": str(target["arch"]), "warp_size": warp_size})
    return parsed


def parse_cache_metadata(config):
    """Cache facts from an image config: kind, targets, entry_count, size_bytes, title, labels.

    Raises CacheMetadataError when the image is not a kernel cache or its summary is unusable:
    without targets nobody can tell which GPUs the cache is for.
    """
    labels = image_labels(config)
    kind = cache_kind(labels)
    if kind is None:
        raise CacheMetadataError(
            "the image config has no cache.triton.image/* or cache.vllm.image/* labels: not a kernel-cache image")
    summary_key = "cache.%s.image/summary" % kind
    if summary_key not in labels:
        raise CacheMetadataError("label %s is missing: the image does not say which GPUs it targets" % summary_key)
    entry_count = _label_int(labels, "cache.%s.image/entry-count" % kind)
    triton_version, compile_seconds = framework_facts(labels, entry_count)
    return {
        "kind": kind,
        "targets": parse_targets(labels[summary_key], summary_key),
        "entry_count": entry_count,
        "triton_version": triton_version,
        "compile_seconds_per_kernel": compile_seconds,
        "size_bytes": _label_int(labels, "cache.%s.image/cache-size-bytes" % kind),
        "format": labels.get("cache.%s.image/format" % kind),
        "title": labels.get("org.opencontainers.image.title"),
        "labels": labels,
    }


def parse_manifest_json(data, kind="triton"):
    """Kernel entries of an io.<kind>.manifest/manifest.json document (bytes, str or dict).

    Triton: {"triton": [entry, ...]}; vLLM: {"vllm": [{"triton": [entry, ...], ...}, ...]}.
    """
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise CacheMetadataError("manifest.json is not valid JSON: %s" % exc) from exc
    if not isinstance(data, dict):
        raise CacheMetadataError("manifest.json must be a JSON object")
    if kind == "vllm":
        groups = data.get("vllm")
        if not isinstance(groups, list):
            raise CacheMetadataError('vLLM manifest.json needs a "vllm" list')
        entries = []
        for group in groups:
            entries.extend((group or {}).get("triton") or [])
    else:
        entries = data.get("triton")
        if not isinstance(entries, list):
            raise CacheMetadataError('Triton manifest.json needs a "triton" list')
    for entry in entries:
        if not isinstance(entry, dict) or not entry.get("hash"):
            raise CacheMetadataError("manifest.json entry without a hash: %r" % (entry,))
    return entries
