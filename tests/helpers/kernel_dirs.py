"""Kernel directories shaped as Triton writes them, for the capture's unit tests (standard library only)."""

import base64
import hashlib
import json


def hash_dir(kernel_hash):
    return base64.b32encode(bytes.fromhex(kernel_hash)).decode().rstrip("=")


def kernel(seed, name="vector_add", built_at="/var/run/gkm/kernels", binary=None, backend="hip", arch="gfx90a"):
    """(hash dir, {file name: bytes}) of one kernel: metadata, IR, binary and the group naming them at built_at."""
    kernel_hash = hashlib.sha256(b"kernel %d" % seed).hexdigest()
    directory = hash_dir(kernel_hash)
    metadata = {"hash": kernel_hash, "name": name, "num_warps": 4, "num_stages": 2, "debug": False,
                "triton_version": "3.9.0", "target": {"backend": backend, "arch": arch, "warp_size": 64}}
    files = {name + ".json": json.dumps(metadata).encode(), name + ".llir": b"; llir %d" % seed,
             name + ".hsaco": binary if binary is not None else b"\x7fELF %d" % seed}
    group = {"child_paths": {f: "%s/%s/%s" % (built_at, directory, f) for f in sorted(files)}}
    files["__grp__%s.json" % name] = json.dumps(group).encode()
    return directory, files
