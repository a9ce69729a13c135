# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bring a kernel-cache image's contents to a directory: the steps the module and the CLI share.

resolve the tag -> compare with the marker in dest (no download when nothing changed) -> read the
config labels -> check GPU compatibility -> verify the signature -> stream-extract the layer.
Every check runs before anything is written; check mode stops right before the extraction.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.extract import archive, rules, tree
from ansible_collections.gkm.cluster.plugins.module_utils.oci import gpu_compat, signature
from ansible_collections.gkm.cluster.plugins.module_utils.oci import metadata as cache_metadata
from ansible_collections.gkm.cluster.plugins.module_utils.oci import registry as oci
from ansible_collections.gkm.cluster.plugins.module_utils.oci.key_text import key_id, read_pem

ACCEPTED_LAYER_TYPES = (
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
)
COMPATIBILITY_MODES = ("fail", "skip", "ignore")
VERIFY_MODES = ("none", "cosign")

DEFAULTS = {
    "state": "present",
    "username": None,
    "password": None,
    "docker_config": None,
    "ca_file": None,
    "validate_certs": True,
    "plain_http": False,
    "gpus": None,
    "gpus_from_node_labels": None,
    "compatibility": "fail",
    "verify": "none",
    "public_key": None,
    "signature_format": "auto",
    "max_bytes": 8 * 1024 ** 3,
    "max_files": 100000,
    "max_expansion_ratio": 250,
    "timeout": 60,
    "whole_layer": False,
    "rewrite_group_paths": True,
}


class CachePullError(GkmError):
    """A user-facing failure: the message names the field or the problem and the fix."""


def normalize_options(options):
    """Options with defaults filled in and every field checked before anything is touched."""
    opts = dict(DEFAULTS)
    opts.update({key: value for key, value in options.items() if value is not None})
    dest = opts.get("dest")
    if not dest or not os.path.isabs(dest):
        raise CachePullError("dest must be an absolute directory path, got %r" % (dest,))
    opts["dest"] = os.path.normpath(dest)
    if opts["dest"] == "/":
        raise CachePullError("dest must not be /")
    if opts["state"] not in ("present", "absent"):
        raise CachePullError("state must be present or absent")
    if opts["state"] == "absent":
        return opts
    if not opts.get("image"):
        raise CachePullError("image is required when state=present")
    if opts["compatibility"] not in COMPATIBILITY_MODES:
        raise CachePullError("compatibility must be one of %s" % ", ".join(COMPATIBILITY_MODES))
    if opts["verify"] not in VERIFY_MODES:
        raise CachePullError("verify must be one of %s" % ", ".join(VERIFY_MODES))
    if opts["verify"] == "cosign":
        if not opts["public_key"]:
            raise CachePullError("verify=cosign needs public_key (PEM text or a file path)")
        opts["public_key"] = read_pem(opts["public_key"], "public_key", CachePullError)
    if opts["signature_format"] not in signature.FORMATS:
        raise CachePullError("signature_format must be one of %s" % ", ".join(signature.FORMATS))
    for field in ("max_bytes", "max_files", "max_expansion_ratio", "timeout"):
        if not isinstance(opts[field], int) or opts[field] <= 0:
            raise CachePullError("%s must be a positive whole number, got %r" % (field, opts[field]))
    if opts["gpus"] is not None and opts["gpus_from_node_labels"]:
        raise CachePullError("give either gpus or gpus_from_node_labels, not both")
    if opts["gpus"] is not None:
        try:
            opts["gpus"] = [gpu_compat.normalize_gpu(gpu) for gpu in opts["gpus"]]
        except gpu_compat.GPUSpecError as exc:
            raise CachePullError("gpus: %s" % exc) from exc
    if opts["username"] and opts["docker_config"]:
        raise CachePullError("give either username/password or docker_config, not both")
    return opts


def _registry_options(opts):
    options = {key: opts[key] for key in ("username", "password", "docker_config", "ca_file", "validate_certs",
                                          "plain_http", "timeout")}
    options.update({key: opts[key] for key in ("credentials_host", "auth_hosts") if opts.get(key)})
    return options


def select_layer(manifest):
    """The one gzip tar layer of a kernel-cache image; a clear error for any other shape."""
    layers = manifest.get("layers") or []
    if len(layers) != 1:
        raise CachePullError("a kernel-cache image has exactly one layer; this one has %d" % len(layers))
    layer = layers[0]
    if layer.get("mediaType") not in ACCEPTED_LAYER_TYPES:
        raise CachePullError("layer media type %r is not supported; expected one of %s" % (
            layer.get("mediaType"), ", ".join(ACCEPTED_LAYER_TYPES)))
    if not isinstance(layer.get("size"), int) or layer["size"] < 0:
        raise CachePullError("layer descriptor has no valid size")
    return layer


def _gpus(opts, node_labels_reader):
    """The GPUs to check, or None when the caller asked for no check."""
    if opts["gpus"] is not None:
        return opts["gpus"]
    node = opts["gpus_from_node_labels"]
    if not node:
        return None
    if node_labels_reader is None:
        raise CachePullError("gpus_from_node_labels needs access to the Kubernetes API")
    try:
        return gpu_compat.gpus_from_node_labels(node_labels_reader(node))
    except gpu_compat.GPUSpecError as exc:
        raise CachePullError("node %s: %s" % (node, exc)) from exc


def _compatibility(opts, targets, gpus):
    """(compatible, incompatible, skip reason or None); raises when compatibility=fail and none fits."""
    if gpus is None:
        return [], [], None
    compatible, incompatible = gpu_compat.gpus_compatible(targets, gpus)
    if compatible or opts["compatibility"] == "ignore":
        return compatible, incompatible, None
    where = " on node %s" % opts["gpus_from_node_labels"] if opts["gpus_from_node_labels"] else ""
    reason = "no GPU%s matches the cache targets %s (GPUs: %s)" % (
        where, _describe(targets), _describe(gpus) if gpus else "none advertised")
    if opts["compatibility"] == "skip":
        return compatible, incompatible, reason
    raise CachePullError(reason + "; set compatibility=skip or ignore to proceed anyway")


def _describe(gpus):
    return ", ".join("%s/%s/%s" % (g["backend"], g["arch"], g["warp_size"]) for g in gpus) or "none"


def _result(opts, digest, facts, changed, previous, **extra):
    result = {
        "changed": changed,
        "dest": opts["dest"],
        "image": opts["image"],
        "digest": digest,
        "previous_digest": previous,
        "kind": facts.get("kind"),
        "targets": facts.get("targets") or [],
        "entry_count": facts.get("entry_count"),
        "files": facts.get("files"),
        "bytes": facts.get("bytes"),
        "signature_verified": bool(facts.get("signature")),
        "signature_format": (facts.get("signature") or {}).get("format"),
        "skipped": False,
        "diff": {"before": "digest: %s\n" % previous, "after": "digest: %s\n" % digest},
    }
    result.update(extra)
    return result


def _marker_current(marker, opts, digest):
    if not marker or marker.get("digest") != digest or marker.get("dest") != opts["dest"]:
        return False
    if marker.get("whole_layer") != opts["whole_layer"] or marker.get("rewrite_groups") != opts["rewrite_group_paths"]:
        return False
    if opts["verify"] == "cosign" and (marker.get("signature") or {}).get("key") != key_id(opts["public_key"]):
        return False
    return tree.tree_intact(opts["dest"], marker)


def node_labels_reader(make_kube):
    """A node_labels_reader for ensure_cache: the node's labels through a Kube made on first use."""
    def read(name):
        node = make_kube().get("Node", name)
        if node is None:
            raise CachePullError("gpus_from_node_labels: node %s does not exist; name a node of this cluster" % name)
        return dict((node.get("metadata") or {}).get("labels") or {})

    return read


def ensure_cache(options, check_mode=False, node_labels_reader=None):
    """Make dest hold the image's cache; returns the result dict (see the module's RETURN)."""
    opts = normalize_options(options)
    if opts["state"] == "absent":
        return remove_cache(opts, check_mode)
    gpus = _gpus(opts, node_labels_reader)
    try:
        tree.check_dest(opts["dest"])
        client, container = oci.RegistryClient.for_reference(opts["image"], **_registry_options(opts))
        digest = container.digest or client.head_digest(container)
        marker = tree.read_marker(opts["dest"])
        previous = (marker or {}).get("digest")
        if _marker_current(marker, opts, digest):
            compatible, incompatible, reason = _compatibility(opts, marker.get("targets") or [], gpus)
            return _result(opts, digest, marker, False, previous, compatible_gpus=compatible,
                           incompatible_gpus=incompatible, skipped=bool(reason), msg=reason or "up to date")
        digest, manifest = client.resolve_image_manifest(container)
        facts = cache_metadata.parse_cache_metadata(client.fetch_config(container, manifest))
        layer = select_layer(manifest)
        compatible, incompatible, reason = _compatibility(opts, facts["targets"], gpus)
        if reason:
            return _result(opts, digest, facts, False, previous, compatible_gpus=compatible,
                           incompatible_gpus=incompatible, skipped=True, msg=reason)
        if opts["verify"] == "cosign":
            fmt = signature.verify_image_signature(client, container, digest, opts["public_key"],
                                                   opts["signature_format"])
            facts["signature"] = {"format": fmt, "key": key_id(opts["public_key"])}
        if check_mode:
            return _result(opts, digest, facts, True, previous, compatible_gpus=compatible,
                           incompatible_gpus=incompatible, msg="would extract %s" % digest)
        facts.update(image=opts["image"], digest=digest, dest=opts["dest"])
        limits = rules.Limits(opts["max_bytes"], opts["max_files"], opts["max_expansion_ratio"])
        with client.open_blob(container, layer["digest"]) as response:
            stats = archive.extract_layer(
                lambda n: response.raw.read(n, decode_content=False), layer["digest"], layer["size"], opts["dest"],
                limits=limits, whole_layer=opts["whole_layer"], rewrite_groups=opts["rewrite_group_paths"],
                marker=facts, declared_bytes=facts.get("size_bytes"))
        facts.update(files=stats["files"], bytes=stats["bytes"])
        return _result(opts, digest, facts, True, previous, compatible_gpus=compatible,
                       incompatible_gpus=incompatible, layer_bytes=stats["layer_bytes"],
                       setid_bits_stripped=stats["setid_bits_stripped"],
                       group_files_rewritten=stats["group_files_rewritten"], seconds=stats["seconds"],
                       msg="extracted %s" % digest)
    except (oci.OCIError, cache_metadata.CacheMetadataError, rules.ExtractError, signature.SignatureError) as exc:
        raise CachePullError("%s: %s" % (opts["image"], exc)) from exc


def remove_cache(opts, check_mode=False):
    """state=absent: remove dest when it holds an extracted cache (ours), refuse anything else."""
    dest = opts["dest"]
    base = {"dest": dest, "image": opts.get("image"), "digest": None, "skipped": False}
    if not os.path.lexists(dest):
        return dict(base, changed=False, previous_digest=None, msg="absent")
    marker = tree.read_marker(dest)
    if marker is None and not (os.path.isdir(dest) and not os.path.islink(dest) and not os.listdir(dest)):
        raise CachePullError("dest %s was not written by this module (no %s); refusing to remove it"
                             % (dest, tree.MARKER_NAME))
    previous = (marker or {}).get("digest")
    result = dict(base, changed=True, previous_digest=previous,
                  diff={"before": "digest: %s\n" % previous, "after": "absent\n"}, msg="removed")
    if not check_mode:
        with tree.DestLock(dest):
            tree.remove_tree(dest)
    return result
