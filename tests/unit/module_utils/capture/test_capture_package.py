"""capture/package.py: the merged kernels as an image in MCV's Triton format, the same bytes for the same kernels,
read back by the collection's own extractor and label parser."""

import hashlib
import io
import json
import os

from ansible_collections.gkm.cluster.plugins.module_utils.capture import package
from ansible_collections.gkm.cluster.plugins.module_utils.capture.check import check_kernel
from ansible_collections.gkm.cluster.plugins.module_utils.extract import archive
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.image import GROUP_ROOT, LABEL_GROUP_ROOT
from ansible_collections.gkm.cluster.plugins.module_utils.oci import metadata
from tests.helpers.kernel_dirs import kernel


def _kernels(*seeds):
    files, facts = {}, {}
    for seed in seeds:
        directory, found = kernel(seed, name="k%d" % seed)
        files[directory], facts[directory] = check_kernel(directory, found)
    return files, facts


def test_the_same_kernels_make_the_same_image():
    first, second = package.image(*_kernels(1, 2)), package.image(*_kernels(2, 1))
    assert first == second
    assert first["digest"] == "sha256:" + hashlib.sha256(first["manifest"]).hexdigest()
    assert package.image(*_kernels(1, 2, 3))["digest"] != first["digest"]


def test_labels_and_manifest_are_mcv_s_read_by_the_collection(tmp_path):
    kernels, facts = _kernels(1, 2, 3)
    built = package.image(kernels, facts)
    config = json.loads(built["config"])
    read = metadata.parse_cache_metadata(config)
    assert (read["kind"], read["entry_count"]) == ("triton", 3)
    assert read["targets"] == [{"backend": "hip", "arch": "gfx90a", "warp_size": 64}]
    assert config["config"]["Labels"][LABEL_GROUP_ROOT] == GROUP_ROOT
    manifest = json.loads(built["manifest"])
    [layer] = manifest["layers"]
    dest = str(tmp_path / "cache")
    archive.extract_layer(io.BytesIO(built["layer"]).read, layer["digest"], layer["size"], dest,
                          rewrite_groups=False)
    with open(os.path.join(dest, "io.triton.manifest", "manifest.json")) as handle:
        entries = json.load(handle)["triton"]
    assert sorted(e["hash"] for e in entries) == sorted(f["hash"] for f in facts.values())
    assert entries[0]["arch"] == "gfx90a" and entries[0]["ptx_version"] == 0 and entries[0]["debug"] is False
    for directory, files in kernels.items():
        for name, data in files.items():
            with open(os.path.join(dest, "io.triton.cache", directory, name), "rb") as handle:
                assert handle.read() == data
    size = sum(os.path.getsize(os.path.join(root, name)) for root, _dirs, names in os.walk(dest) for name in names
               if not name.startswith(".gkm"))
    assert read["size_bytes"] == size
