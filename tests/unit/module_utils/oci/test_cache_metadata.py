import json

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.oci import metadata as cache_metadata
from tests.helpers import kcache_images


def _config(labels):
    return {"config": {"Labels": labels}}


def test_builder_labels_parse_to_targets_and_counts():
    entries, labels = kcache_images.cache_entries(kcache_images.CacheSpec(backend="hip", kernels=4))
    facts = cache_metadata.parse_cache_metadata(_config(labels))
    assert facts["kind"] == "triton"
    assert facts["targets"] == [{"backend": "hip", "arch": "gfx90a", "warp_size": 64}]
    assert facts["entry_count"] == 4
    assert facts["size_bytes"] == sum(len(e.data) for e in entries)
    assert facts["labels"] == labels  # the kernel overlay's plan reads them (kernels/plan.py)


def test_vllm_labels_give_the_vllm_kind_and_format():
    _entries, labels = kcache_images.cache_entries(kcache_images.CacheSpec(kind="vllm"))
    facts = cache_metadata.parse_cache_metadata(_config(labels))
    assert (facts["kind"], facts["format"]) == ("vllm", "triton")


def test_plain_image_is_not_a_cache():
    with pytest.raises(cache_metadata.CacheMetadataError, match="not a kernel-cache image"):
        cache_metadata.parse_cache_metadata(_config({"maintainer": "x"}))


@pytest.mark.parametrize(("summary", "fragment"), [
    (None, "missing"),
    ("{targets: [", "not valid JSON"),
    (json.dumps({"targets": []}), "must be"),
    (json.dumps({"targets": [{"backend": "cuda", "arch": "90"}]}), "needs backend, arch and warp_size"),
    (json.dumps({"targets": [{"backend": "cuda", "arch": "90", "warp_size": "many"}]}), "must be a number"),
])
def test_bad_summary_is_refused_with_the_reason(summary, fragment):
    labels = {"cache.triton.image/entry-count": "1"}
    if summary is not None:
        labels["cache.triton.image/summary"] = summary
    with pytest.raises(cache_metadata.CacheMetadataError, match=fragment):
        cache_metadata.parse_cache_metadata(_config(labels))


def test_non_numeric_count_label_names_the_label():
    target = {"backend": "hip", "arch": "gfx90a", "warp_size": 64}
    labels = {"cache.triton.image/summary": json.dumps({"targets": [target]}),
              "cache.triton.image/entry-count": "lots"}
    with pytest.raises(cache_metadata.CacheMetadataError, match="entry-count"):
        cache_metadata.parse_cache_metadata(_config(labels))


def test_manifest_json_entries_for_triton_and_vllm():
    for kind in ("triton", "vllm"):
        entries, _labels = kcache_images.cache_entries(kcache_images.CacheSpec(kind=kind, kernels=2))
        manifest = next(e.data for e in entries if e.name == "io.%s.manifest/manifest.json" % kind)
        parsed = cache_metadata.parse_manifest_json(manifest, kind)
        assert len(parsed) == 2 and all(len(entry["hash"]) == 52 for entry in parsed)


def test_manifest_json_without_hash_is_refused():
    with pytest.raises(cache_metadata.CacheMetadataError, match="without a hash"):
        cache_metadata.parse_manifest_json(b'{"triton": [{"backend": "hip"}]}')


def test_the_triton_version_and_compile_seconds_labels_are_read_leniently():
    labels = {"cache.triton.image/summary": '{"targets": [{"backend": "hip", "arch": "gfx90a", "warp_size": 64}]}',
              "cache.triton.image/entry-count": "4", "io.gkm.cache/triton-version": "3.9.0",
              "io.gkm.cache/compile-seconds": "2.000"}
    facts = cache_metadata.parse_cache_metadata(_config(labels))
    assert (facts["triton_version"], facts["compile_seconds_per_kernel"]) == ("3.9.0", 0.5)
    # Only explanations and estimates hang on them: a bad value is ignored, never a refusal.
    for version, seconds in (("3.9.0; rm -rf", "lots"), ("x" * 41, "-1"), (None, "nan")):
        bad = dict(labels, **{"io.gkm.cache/triton-version": version, "io.gkm.cache/compile-seconds": seconds})
        assert cache_metadata.framework_facts(bad, 4) == (None, None)
    assert cache_metadata.framework_facts(labels, None) == ("3.9.0", None)
