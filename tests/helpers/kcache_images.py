"""Build real GPU-kernel-cache images (MCV "compat" format) and push them to a registry.

The images follow design-notes section 1: one gzip tar layer holding `io.<kind>.cache/...` and
`io.<kind>.manifest/manifest.json`, with the cache summary in the image *config* labels.
Pushing uses plain HTTP calls to the registry's v2 API, independent of oras, so tests of the
oras-based code do not check oras against itself.

Two builders fill the layer. `CacheSpec(compiled=True)` takes real kernels compiled by the pinned Triton for the
spec's target (tools/triton_kernels/store.py keeps them by input hash, so a target compiles once per machine), with
the labels and manifest.json derived from their metadata (tools/triton_kernels/image.py): the images that stand for
a real cache. The synthetic builder (`triton_cache_files`) makes files shaped like Triton's, of any count and size,
for the hostile, broken, large and edge cases.

Broken and hostile variants are built on purpose (see HOSTILE_VARIANTS) to test the extractor's
refusals. Signatures in cosign's v2 and v3 layouts are made by `sign_cosign_v2` / `sign_cosign_v3`,
an independent implementation of the formats, or by the real cosign CLI through `cosign_cli_sign`.
"""

import base64
import gzip
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field

import requests

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
COSIGN_SIMPLESIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGSTORE_BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
IN_TOTO = "application/vnd.in-toto+json"

BUILD_HOST_CACHE = "/home/builder/.triton/cache"
_BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


# ---------------------------------------------------------------- layer content


@dataclass
class Entry:
    """One tar member. `type` is a tarfile type constant; `size` overrides the header size."""

    name: str
    data: bytes = b""
    type: bytes = tarfile.REGTYPE
    linkname: str = ""
    mode: int = 0o644
    size: int = None


def kernel_hash(rng):
    """A Triton kernel directory name: unpadded base32 of a 32-byte hash (52 chars A-Z2-7)."""
    return "".join(rng.choice(_BASE32) for _position in range(52))


def _ir_text(rng, dialect, size):
    """Compressible IR-looking text of about `size` bytes."""
    ops = {
        "ttir": ["tt.load", "tt.store", "arith.addf", "tt.make_range", "tt.splat", "tt.addptr"],
        "ttgir": ["ttg.convert_layout", "tt.load", "ttg.local_alloc", "arith.mulf", "tt.dot"],
        "llir": ["load float, ptr addrspace(1)", "fadd float", "store float", "getelementptr", "br label"],
        "ptx": ["ld.global.v4.b32", "add.f32", "st.global.v4.b32", "mov.u32", "setp.lt.s32"],
        "amdgcn": ["global_load_dwordx4", "v_add_f32_e32", "global_store_dwordx4", "s_waitcnt", "v_mov_b32"],
    }[dialect]
    lines = []
    total = 0
    i = 0
    while total < size:
        line = "  %%%d = %s %%arg%d, %%%d : tensor<%dxf32> loc(#loc%d)\n" % (
            i, rng.choice(ops), rng.randrange(8), rng.randrange(max(i, 1)), rng.choice((64, 128, 256, 1024)), i
        )
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines).encode()[:size]


def triton_cache_files(
    backend="cuda", arch=None, warp_size=None, kernels=3, kernel_bytes=80_000, seed=0,
    cache_prefix="io.triton.cache", build_root=BUILD_HOST_CACHE,
):
    """Return ({relative path: bytes}, manifest entries) for a realistic Triton cache.

    Each kernel directory holds <k>.json, __grp__<k>.json (child paths on the build host),
    .ttir/.ttgir/.llir plus .ptx+.cubin (cuda) or .amdgcn+.hsaco (hip); two launcher-stub
    directories follow. `kernel_bytes` sets the size of one kernel directory (about a third is
    incompressible binary, the rest is IR text).
    """
    arch = arch or ("90" if backend == "cuda" else "gfx90a")
    warp_size = warp_size or (32 if backend == "cuda" else 64)
    rng = random.Random(seed)
    files = {}
    manifest = []
    binary_ext, asm_ext = (("cubin", "ptx") if backend == "cuda" else ("hsaco", "amdgcn"))
    for n in range(kernels):
        k = kernel_hash(rng)
        name = "kernel_%d" % n
        target = {"backend": backend, "arch": int(arch) if arch.isdigit() else arch, "warp_size": warp_size}
        meta = {
            "hash": k, "target": target, "num_warps": rng.choice((4, 8)), "num_stages": rng.choice((2, 3, 4)),
            "num_ctas": 1, "name": name, "shared": rng.randrange(0, 65536), "debug": False,
        }
        if backend == "cuda":
            meta["ptx_version"] = 84
        parts = {
            "ttir": int(kernel_bytes * 0.08), "ttgir": int(kernel_bytes * 0.12), "llir": int(kernel_bytes * 0.22),
            asm_ext: int(kernel_bytes * 0.25),
        }
        kdir = "%s/%s" % (cache_prefix, k)
        children = {}
        for ext, size in parts.items():
            fname = "%s.%s" % (name, ext)
            files["%s/%s" % (kdir, fname)] = _ir_text(rng, ext, size)
            children[fname] = "%s/%s/%s" % (build_root, k, fname)
        binary_name = "%s.%s" % (name, binary_ext)
        files["%s/%s" % (kdir, binary_name)] = rng.randbytes(int(kernel_bytes * 0.33))
        children[binary_name] = "%s/%s/%s" % (build_root, k, binary_name)
        files["%s/%s.json" % (kdir, name)] = json.dumps(meta, indent=2).encode()
        children["%s.json" % name] = "%s/%s/%s.json" % (build_root, k, name)
        files["%s/__grp__%s.json" % (kdir, name)] = json.dumps({"child_paths": children}).encode()
        manifest.append({
            "hash": k, "dummy_key": hashlib.sha256(k.encode()).hexdigest(), "num_stages": meta["num_stages"],
            "num_warps": meta["num_warps"], "backend": backend, "arch": target["arch"], "warp_size": warp_size,
            **({"ptx_version": 84} if backend == "cuda" else {}),
        })
    utils = "cuda_utils.so" if backend == "cuda" else "hip_utils.so"
    for stub in ("__triton_launcher.so", utils):
        files["%s/%s/%s" % (cache_prefix, kernel_hash(rng), stub)] = rng.randbytes(16_000)
    return files, manifest


@dataclass
class CacheSpec:
    """What to put in an image. kind is 'triton' or 'vllm' (vLLM's Triton-format layout).

    compiled: real kernels of the spec's target from the kernel set `kernel_set` (tools/triton_kernels; at most its
    size, six for the small set, 56 for warm-start; `seed` chooses which, and `kernel_bytes` does not apply), by the
    pinned Triton or the one `triton_python` runs; otherwise synthetic ones.
    """

    kind: str = "triton"
    backend: str = "cuda"
    arch: str = None
    warp_size: int = None
    kernels: int = 3
    kernel_bytes: int = 20_000
    seed: int = 0
    extra_entries: list = field(default_factory=list)
    compiled: bool = False
    kernel_set: str = "small"
    triton_python: str = None

    def targets(self):
        arch = self.arch or ("90" if self.backend == "cuda" else "gfx90a")
        warp = self.warp_size or (32 if self.backend == "cuda" else 64)
        return [{"backend": self.backend, "arch": arch, "warp_size": warp}]


def compiled_cache_files(spec):
    """({path in the layer: bytes}, manifest entries, labels) of real kernels compiled for `spec`'s target."""
    from tools.triton_kernels import image, store

    target = spec.targets()[0]
    directory, info = store.compiled_cache("%s:%s:%d" % (target["backend"], target["arch"], target["warp_size"]),
                                           python=spec.triton_python, kernel_set=spec.kernel_set)
    files, facts, debug = image.cache_content(os.path.join(directory, "cache"), spec.kernels, spec.seed)
    if len(facts) != spec.kernels:
        raise ValueError("the compiled kernel set has %d kernels for %s, the spec asks for %d"
                         % (len(facts), target, spec.kernels))
    files = {"io.%s.cache/%s" % (spec.kind, path): data for path, data in files.items()}
    return files, image.manifest_entries(facts, debug), image.labels(spec.kind, facts, 0, info["build"])


def cache_entries(spec):
    """Tar entries and config labels for a cache described by `spec`."""
    kind = spec.kind
    target = spec.targets()[0]
    if spec.compiled:
        files, manifest, labels = compiled_cache_files(spec)
    else:
        files, manifest = triton_cache_files(
            backend=target["backend"], arch=target["arch"], warp_size=target["warp_size"], kernels=spec.kernels,
            kernel_bytes=spec.kernel_bytes, seed=spec.seed, cache_prefix="io.%s.cache" % kind,
        )
        labels = {"cache.%s.image/summary" % kind: json.dumps({"targets": spec.targets()})}
    if kind == "vllm":
        # vLLM's torch.compile cache keeps its Triton kernels below a per-model hash directory.
        files = {p.replace("io.vllm.cache/", "io.vllm.cache/torch_compile_cache/8c1f0a2b/rank_0_0/triton/", 1): d
                 for p, d in files.items()}
        files["io.vllm.cache/torch_compile_cache/8c1f0a2b/rank_0_0/backbone/cache_key_factors.json"] = b"{}"
        manifest_doc = {"vllm": [{"vllm_hash": "8c1f0a2b", "triton": manifest}]}
    else:
        manifest_doc = {"triton": manifest}
    entries = [Entry(name, data) for name, data in sorted(files.items())]
    entries.append(Entry("io.%s.manifest/manifest.json" % kind, json.dumps(manifest_doc, indent=2).encode()))
    entries.extend(spec.extra_entries)
    size = sum(len(e.data) for e in entries if e.type == tarfile.REGTYPE)
    labels.update({
        "cache.%s.image/entry-count" % kind: str(len(manifest)),
        "cache.%s.image/cache-size-bytes" % kind: str(size),
        "org.opencontainers.image.title": "%s-kernel-cache" % kind,
    })
    if kind == "vllm":
        labels["cache.vllm.image/format"] = "triton"
    return entries, labels


def _tarinfo(entry):
    info = tarfile.TarInfo(entry.name)
    info.type = entry.type
    info.mode = entry.mode
    info.mtime = 1_700_000_000
    info.uname = info.gname = "builder"
    info.uid = info.gid = 1000
    info.linkname = entry.linkname
    info.size = len(entry.data) if entry.type == tarfile.REGTYPE else 0
    if entry.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    return info


def write_layer(entries, fileobj, compresslevel=6):
    """Write `entries` as a gzip tar to `fileobj`; return the uncompressed tar's sha256 digest."""
    class _Hashing(io.RawIOBase):
        def __init__(self, out):
            self.out, self.sha = out, hashlib.sha256()

        def writable(self):
            return True

        def write(self, b):
            self.sha.update(b)
            return self.out.write(b)

    with gzip.GzipFile(fileobj=fileobj, mode="wb", compresslevel=compresslevel, mtime=0) as gz:
        hashing = _Hashing(gz)
        with tarfile.open(fileobj=hashing, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for entry in entries:
                info = _tarinfo(entry)
                if entry.size is not None:
                    info.size = entry.size
                tar.addfile(info, io.BytesIO(entry.data) if info.size else None)
    return "sha256:" + hashing.sha.hexdigest()


def layer_bytes(entries, compresslevel=6):
    buf = io.BytesIO()
    diff_id = write_layer(entries, buf, compresslevel)
    return buf.getvalue(), diff_id


# ---------------------------------------------------------------- registry push


def sha256_digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class PushedImage:
    registry: str  # host:port
    repository: str
    tag: str
    digest: str  # manifest digest
    layer_digest: str
    layer_size: int
    manifest: dict
    config: dict

    @property
    def ref(self):
        return "%s/%s:%s" % (self.registry, self.repository, self.tag)

    @property
    def digest_ref(self):
        return "%s/%s@%s" % (self.registry, self.repository, self.digest)


def _base(registry):
    return registry if registry.startswith("http") else "http://" + registry


def _host(registry):
    return registry.split("://", 1)[-1]


def push_blob(registry, repository, data, session=None):
    """Upload `data` (bytes or a file path) monolithically; return its digest and size."""
    session = session or requests
    if isinstance(data, (bytes, bytearray)):
        digest, size, body = sha256_digest(data), len(data), data
    else:
        sha = hashlib.sha256()
        with open(data, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                sha.update(chunk)
        digest, size, body = "sha256:" + sha.hexdigest(), os.path.getsize(data), None
    base = _base(registry)
    head = session.head("%s/v2/%s/blobs/%s" % (base, repository, digest), timeout=30)
    if head.status_code == 200:
        return digest, size
    start = session.post("%s/v2/%s/blobs/uploads/" % (base, repository), timeout=30)
    start.raise_for_status()
    location = start.headers["Location"]
    if location.startswith("/"):
        location = base + location
    sep = "&" if "?" in location else "?"
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
    if body is None:
        with open(data, "rb") as f:
            put = session.put(location + sep + "digest=" + digest, data=f, headers=headers, timeout=600)
    else:
        put = session.put(location + sep + "digest=" + digest, data=body, headers=headers, timeout=60)
    put.raise_for_status()
    return digest, size


def push_manifest(registry, repository, reference, manifest, media_type=None):
    """PUT a manifest (dict or raw bytes) under a tag or digest; return its digest."""
    body = manifest if isinstance(manifest, bytes) else json.dumps(manifest, indent=2).encode()
    media_type = media_type or json.loads(body).get("mediaType", OCI_MANIFEST)
    resp = requests.put(
        "%s/v2/%s/manifests/%s" % (_base(registry), repository, reference),
        data=body, headers={"Content-Type": media_type}, timeout=30,
    )
    if resp.status_code >= 300:
        raise RuntimeError("manifest push failed (%s): %s" % (resp.status_code, resp.text))
    return sha256_digest(body)


def push_image(registry, repository, tag, layer, labels, diff_id=None, manifest_format="oci",
               layer_media_type=None, layer_descriptor_overrides=None):
    """Push config + one layer (bytes or a file path) + manifest; return a PushedImage."""
    docker = manifest_format == "docker"
    layer_digest, layer_size = push_blob(registry, repository, layer)
    config = {
        "architecture": "amd64", "os": "linux", "created": "2026-01-01T00:00:00Z",
        "config": {"Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": [diff_id or layer_digest]},
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_digest, config_size = push_blob(registry, repository, config_bytes)
    layer_desc = {
        "mediaType": layer_media_type or (DOCKER_LAYER_GZIP if docker else OCI_LAYER_GZIP),
        "digest": layer_digest, "size": layer_size,
    }
    layer_desc.update(layer_descriptor_overrides or {})
    manifest = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST if docker else OCI_MANIFEST,
        "config": {"mediaType": DOCKER_CONFIG if docker else OCI_CONFIG, "digest": config_digest,
                   "size": config_size},
        "layers": [layer_desc],
    }
    digest = push_manifest(registry, repository, tag, manifest)
    return PushedImage(_host(registry), repository, tag, digest, layer_digest, layer_size, manifest, config)


def build_image(registry, repository, tag="v1", spec=None, manifest_format="oci", compresslevel=6, **push_options):
    """Build the cache described by `spec` (default: small Triton CUDA cache) and push it."""
    spec = spec or CacheSpec()
    entries, labels = cache_entries(spec)
    blob, diff_id = layer_bytes(entries, compresslevel)
    return push_image(registry, repository, tag, blob, labels, diff_id, manifest_format, **push_options)


def build_large_image(registry, repository, tag, workdir, total_bytes=200_000_000, files=5_000, seed=1,
                      compresslevel=6):
    """Push a benchmark-sized Triton cache (about `total_bytes` in about `files` files) via a blob on disk.

    Returns (PushedImage, path of the layer blob on disk, exact uncompressed bytes, exact file count).
    """
    kernels = max(1, (files - 3) // 7)
    spec = CacheSpec(kernels=kernels, kernel_bytes=int(total_bytes / kernels), seed=seed)
    entries, labels = cache_entries(spec)
    path = os.path.join(workdir, "layer.tar.gz")
    with open(path, "wb") as f:
        diff_id = write_layer(entries, f, compresslevel)
    image = push_image(registry, repository, tag, path, labels, diff_id)
    regular = [e for e in entries if e.type == tarfile.REGTYPE]
    return image, path, sum(len(e.data) for e in regular), len(regular)


def tamper_blob(storage_root, digest, data):
    """Replace a blob's bytes in a filesystem-backed registry so it no longer matches its digest."""
    hexd = digest.split(":", 1)[1]
    path = os.path.join(storage_root, "docker/registry/v2/blobs/sha256", hexd[:2], hexd, "data")
    with open(path, "wb") as f:
        f.write(data)


def delete_manifest(registry, repository, digest):
    requests.delete("%s/v2/%s/manifests/%s" % (_base(registry), repository, digest), timeout=30)


# ---------------------------------------------------------------- hostile and broken variants

K = "io.triton.cache/" + "A" * 52


def _gz(entries):
    return layer_bytes(entries)[0]


def _zeros_gz(size):
    """A gzip tar with one file of `size` zero bytes, built without holding it in memory."""
    class _Zeros(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, b):
            b[:] = bytes(len(b))
            return len(b)

    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w|") as tar:
        info = tarfile.TarInfo(K + "/bomb.cubin")
        info.size = size
        tar.addfile(info, io.BufferedReader(_Zeros(), 1 << 20))
    return buf.getvalue()


def _variant_entries(extra):
    spec = CacheSpec(kernels=1, kernel_bytes=4_000)
    entries, labels = cache_entries(spec)
    return entries + extra, labels


def hostile_layer(name):
    """Return (layer bytes, labels, push options, expected error fragment) for a named bad image."""
    opts = {}
    labels_patch = None
    if name == "path_traversal":
        entries, labels = _variant_entries([Entry("io.triton.cache/../../../tmp/gkm-evil", b"x")])
        expect = "'..'"
    elif name == "absolute_path":
        entries, labels = _variant_entries([Entry("/tmp/gkm-evil", b"x")])
        expect = "absolute"
    elif name == "symlink_escape":
        entries, labels = _variant_entries([Entry(K + "/link", type=tarfile.SYMTYPE, linkname="../../../../etc")])
        expect = "symlink"
    elif name == "symlink_absolute":
        entries, labels = _variant_entries([Entry(K + "/link", type=tarfile.SYMTYPE, linkname="/etc/passwd")])
        expect = "symlink"
    elif name == "symlink_chain":
        # Each link alone resolves inside; followed by the kernel, the second one leaves the tree.
        entries, labels = _variant_entries([
            Entry("io.triton.cache/x/y/z", b"z"),
            Entry("io.triton.cache/hop", type=tarfile.SYMTYPE, linkname="x/y"),
            Entry("io.triton.cache/out", type=tarfile.SYMTYPE, linkname="hop/../../../.."),
        ])
        expect = "symlink"
    elif name == "hardlink_escape":
        entries, labels = _variant_entries([Entry(K + "/hl", type=tarfile.LNKTYPE, linkname="../../etc/passwd")])
        expect = "hardlink"
    elif name == "hardlink_outside_extracted":
        entries, labels = _variant_entries([Entry(K + "/hl", type=tarfile.LNKTYPE, linkname="etc/passwd")])
        expect = "hardlink"
    elif name == "device":
        entries, labels = _variant_entries([Entry(K + "/dev", type=tarfile.CHRTYPE)])
        expect = "device"
    elif name == "fifo":
        entries, labels = _variant_entries([Entry(K + "/pipe", type=tarfile.FIFOTYPE)])
        expect = "FIFO"
    elif name == "too_many_files":
        entries, labels = _variant_entries([Entry(K + "/f%03d" % i, b"x") for i in range(60)])
        expect = "max_files"
    elif name == "oversized_entry":
        entries, labels = _variant_entries([Entry(K + "/big.cubin", random.Random(3).randbytes(300_000))])
        expect = "max_bytes"
    elif name == "zip_bomb":
        labels = _variant_entries([])[1]
        return _zeros_gz(300_000_000), labels, opts, "expands"
    elif name == "truncated_blob":
        entries, labels = _variant_entries([])
        blob = _gz(entries)
        return blob[: len(blob) // 2], labels, opts, "truncated"
    elif name == "not_gzip":
        entries, labels = _variant_entries([])
        return b"this is not a gzip stream" * 10, labels, opts, "gzip"
    elif name == "size_mismatch":
        entries, labels = _variant_entries([])
        blob = _gz(entries)
        opts = {"layer_descriptor_overrides": {"size": len(blob) - 100}}
        return blob, labels, opts, "descriptor"
    elif name == "missing_summary":
        entries, labels = _variant_entries([])
        labels_patch = {"cache.triton.image/summary": None}
        expect = "summary"
    elif name == "malformed_summary":
        entries, labels = _variant_entries([])
        labels_patch = {"cache.triton.image/summary": "{targets: [hip"}
        expect = "summary"
    elif name == "summary_without_targets":
        entries, labels = _variant_entries([])
        labels_patch = {"cache.triton.image/summary": json.dumps({"targets": [{"backend": "cuda"}]})}
        expect = "summary"
    elif name == "wrong_layer_media_type":
        entries, labels = _variant_entries([])
        opts = {"layer_media_type": "application/vnd.oci.image.layer.v1.tar+zstd"}
        expect = "media type"
    elif name == "malformed_group_file":
        entries, labels = _variant_entries([Entry(K + "/__grp__broken.json", b"{not json")])
        expect = "__grp__"
    else:
        raise KeyError(name)
    if labels_patch:
        labels = dict(labels)
        for key, value in labels_patch.items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
    return _gz(entries), labels, opts, expect


HOSTILE_VARIANTS = (
    "path_traversal", "absolute_path", "symlink_escape", "symlink_absolute", "symlink_chain",
    "hardlink_escape", "hardlink_outside_extracted", "device", "fifo", "too_many_files", "oversized_entry",
    "zip_bomb", "truncated_blob", "not_gzip", "size_mismatch", "missing_summary", "malformed_summary",
    "summary_without_targets", "wrong_layer_media_type", "malformed_group_file",
)


def push_hostile(registry, repository, name, tag="bad"):
    """Push the named broken image; return (PushedImage, expected error fragment)."""
    blob, labels, opts, expect = hostile_layer(name)
    return push_image(registry, repository, tag, blob, labels, **opts), expect


# ---------------------------------------------------------------- signatures


def _sign(private_key, data):
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    return private_key.sign(data, ec.ECDSA(hashes.SHA256()))


def sign_cosign_v2(image, private_key):
    """Store a cosign v2 signature for `image`: simple-signing payload in tag sha256-<hex>.sig."""
    payload = json.dumps({
        "critical": {
            "identity": {"docker-reference": "%s/%s" % (image.registry, image.repository)},
            "image": {"docker-manifest-digest": image.digest},
            "type": "cosign container image signature",
        },
        "optional": None,
    }).encode()
    signature = base64.b64encode(_sign(private_key, payload)).decode()
    payload_digest, payload_size = push_blob(image.registry, image.repository, payload)
    config = json.dumps({"architecture": "", "os": "", "config": {}, "rootfs": {"type": "layers",
                         "diff_ids": [payload_digest]}}).encode()
    config_digest, config_size = push_blob(image.registry, image.repository, config)
    manifest = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": COSIGN_SIMPLESIGNING, "digest": payload_digest, "size": payload_size,
                    "annotations": {"dev.cosignproject.cosign/signature": signature}}],
    }
    tag = image.digest.replace(":", "-") + ".sig"
    return push_manifest(image.registry, image.repository, tag, manifest)


def _pae(payload_type, payload):
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def key_pair():
    """(private key, its public key as PEM text): an admin's cosign key for the signing helpers here."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = ec.generate_private_key(ec.SECP256R1())
    return private, private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def sign_cosign_v3(image, private_key):
    """Attach a sigstore bundle (DSSE in-toto statement) to `image` as an OCI 1.1 referrer.

    The registry here has no referrers API, so the referrer is also listed in the fallback
    index tagged sha256-<hex>, as the OCI 1.1 distribution spec describes.
    """
    statement = json.dumps({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "%s/%s" % (image.registry, image.repository),
                     "digest": {"sha256": image.digest.split(":", 1)[1]}}],
        "predicateType": "https://sigstore.dev/cosign/sign/v1",
        "predicate": {},
    }).encode()
    signature = _sign(private_key, _pae(IN_TOTO, statement))
    bundle = json.dumps({
        "mediaType": SIGSTORE_BUNDLE,
        "verificationMaterial": {"publicKey": {"hint": ""}},
        "dsseEnvelope": {"payload": base64.b64encode(statement).decode(), "payloadType": IN_TOTO,
                         "signatures": [{"sig": base64.b64encode(signature).decode(), "keyid": ""}]},
    }).encode()
    bundle_digest, bundle_size = push_blob(image.registry, image.repository, bundle)
    empty_digest, empty_size = push_blob(image.registry, image.repository, b"{}")
    manifest = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": SIGSTORE_BUNDLE,
        "config": {"mediaType": OCI_EMPTY, "digest": empty_digest, "size": empty_size},
        "layers": [{"mediaType": SIGSTORE_BUNDLE, "digest": bundle_digest, "size": bundle_size}],
        "subject": {"mediaType": image.manifest["mediaType"], "digest": image.digest,
                    "size": len(json.dumps(image.manifest, indent=2).encode())},
        "annotations": {"dev.sigstore.bundle.predicateType": "https://sigstore.dev/cosign/sign/v1"},
    }
    body = json.dumps(manifest, indent=2).encode()
    referrer_digest = push_manifest(image.registry, image.repository, sha256_digest(body), body)
    index_tag = image.digest.replace(":", "-")
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": referrer_digest, "size": len(body), "artifactType": SIGSTORE_BUNDLE,
         "annotations": manifest["annotations"]},
    ]}
    push_manifest(image.registry, image.repository, index_tag, index)
    return referrer_digest


def _manifest_bytes(image, reference):
    """The stored manifest (or index) at reference, as bytes; None when there is none."""
    resp = requests.get("%s/v2/%s/manifests/%s" % (_base(image.registry), image.repository, reference),
                        headers={"Accept": ", ".join((OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST))}, timeout=30)
    if resp.status_code == 404:
        return None
    resp.raise_for_status()
    return resp.content


def transplant_signatures(source, target):
    """Store the signatures made for `source` where those of `target` (same repository) are looked up.

    They stay signatures of source's digest: a v2 `.sig` manifest copied as it is, a v3 referrer re-pointed at
    target (its bundle still names source). Verifiers that check what was signed refuse them.
    """
    source_tag, target_tag = source.digest.replace(":", "-"), target.digest.replace(":", "-")
    v2 = _manifest_bytes(source, source_tag + ".sig")
    if v2 is not None:
        push_manifest(target.registry, target.repository, target_tag + ".sig", v2)
    index = _manifest_bytes(source, source_tag)
    if index is None:
        return
    target_body = _manifest_bytes(target, target.digest)
    subject = {"mediaType": json.loads(target_body)["mediaType"], "digest": target.digest, "size": len(target_body)}
    index = json.loads(index)
    for entry in index["manifests"]:
        referrer = json.loads(_manifest_bytes(source, entry["digest"]))
        referrer["subject"] = subject
        body = json.dumps(referrer, indent=2).encode()
        entry.update(digest=push_manifest(target.registry, target.repository, sha256_digest(body), body),
                     size=len(body))
    push_manifest(target.registry, target.repository, target_tag, index)


def cosign_binary(name="cosign"):
    """Path of a cosign CLI built by tools/bench-tools.sh, or None."""
    path = os.path.join(os.path.expanduser("~/.cache/gkm-cluster/tools/bin"), name)
    return path if os.access(path, os.X_OK) else shutil.which(name)


def cosign_cli_generate_key(binary, workdir, password="test"):
    """Create cosign.key/cosign.pub in workdir with the real CLI; return the public key path."""
    env = dict(os.environ, COSIGN_PASSWORD=password)
    subprocess.run([binary, "generate-key-pair"], cwd=workdir, env=env, check=True, capture_output=True, timeout=60)
    return os.path.join(workdir, "cosign.pub")


def cosign_cli_sign(binary, image, workdir, v3=False, password="test"):
    """Sign `image` by digest with the real cosign CLI and the key in workdir, without a transparency log.

    cosign v3 refuses --tlog-upload=false; it takes a signing config without services instead, and
    then stores a sigstore bundle as an OCI 1.1 referrer.
    """
    env = dict(os.environ, COSIGN_PASSWORD=password, COSIGN_YES="true", HOME=workdir)
    if v3:
        config = os.path.join(workdir, "signing-config.json")
        if not os.path.exists(config):
            subprocess.run([binary, "signing-config", "create", "--out", config], cwd=workdir, env=env, check=True,
                           capture_output=True, timeout=60)
        no_tlog = ["--signing-config", config]
    else:
        no_tlog = ["--tlog-upload=false"]
    cmd = [binary, "sign", "--key", os.path.join(workdir, "cosign.key"), *no_tlog, "--allow-insecure-registry",
           "--allow-http-registry", image.digest_ref]
    return subprocess.run(cmd, cwd=workdir, env=env, check=True, capture_output=True, text=True, timeout=180)
