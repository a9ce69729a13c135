"""Validation of cache_distribute's options before anything is planned or written."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import spec as cache_spec

BASE = {"name": "vector-add", "namespace": "team-a", "extract_image": "tools:1"}


def spec_of(**overrides):
    params = dict(BASE, **overrides)
    return cache_spec.cache_spec_from_params({k: v for k, v in params.items() if v is not None})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": "Vector_Add"}, "name 'Vector_Add' is not a valid DNS-1123 label"),
        ({"name": "x" * 64}, "name 'x"),
        ({"access_modes": ["ReadOnce"]}, "access_modes: unknown mode(s) ['ReadOnce']"),
        ({"workload_namespaces": ["b"]}, "workload_namespaces is only for scope: cluster"),
        ({"scope": "cluster", "namespace": None}, "workload_namespaces is required with scope: cluster"),
        ({"scope": "cluster", "workload_namespaces": ["b"]}, "namespace is only for a namespaced cache"),
        ({"namespace": None}, "namespace is required for a namespaced cache"),
        ({"scope": "cluster", "namespace": None, "workload_namespaces": ["ok", "Not_OK"]},
         "workload_namespaces[1] 'Not_OK'"),
        ({"pod_template": {"spec": {"containers": []}}}, "pod_template.spec has unknown keys ['containers']"),
        ({"pod_template": {"metadata": {"name": "x"}}}, "pod_template.metadata has unknown keys ['name']"),
        ({"pod_template": {"spec": {"nodeSelector": ["a"]}}}, "pod_template.spec.nodeSelector must be a mapping"),
        ({"pod_template": {"spec": {"priorityClassName": "system-node-critical"}}},
         "pod_template.spec.priorityClassName is refused: the extraction Jobs may run in the system namespace"),
        ({"pod_template": {"metadata": {"labels": {"a": "b"}, "annotations": {"sidecar.istio.io/inject": "true"}}}},
         "pod_template.metadata.annotations is refused: the extraction Jobs may run in the system namespace"),
        ({"compatibility": "maybe"}, "compatibility must be one of skip, fail, ignore"),
        ({"job_limits": {"backoff_limit": -1}}, "job_limits.backoff_limit must be a whole number"),
        ({"extract_limits": {"max_files": 0}}, "extract_limits.max_files must be a positive whole number"),
        ({"extract_limits": {"max_bytes": True}}, "extract_limits.max_bytes must be a positive whole number"),
        ({"extract_image": None}, "extract_image is required"),
        ({"storage_class_name": "Bad_Class"}, "storage_class_name 'Bad_Class' is not a valid storage class"),
    ],
)
def test_bad_input_names_the_field(overrides, message):
    with pytest.raises(cache_spec.SpecError) as error:
        spec_of(**overrides)
    assert message in str(error.value)


def test_defaults_and_scopes():
    spec = spec_of()
    assert (spec.scope, spec.cache_namespace, spec.namespaces, spec.per_node) == (
        "namespaced", "team-a", ["team-a"], True)
    assert spec.job_limits == cache_spec.DEFAULT_JOB_LIMITS
    cluster = spec_of(namespace=None, scope="cluster", workload_namespaces=["b", "c", "b"],
                      access_modes=["ReadWriteOnce", "ReadOnlyMany"], job_limits={"backoff_limit": 5})
    assert (cluster.cache_namespace, cluster.namespaces, cluster.per_node) == ("", ["b", "c"], False)
    assert cluster.job_limits["backoff_limit"] == 5
    absent = spec_of(namespace=None, scope="cluster", state="absent", extract_image=None)
    assert absent.namespaces == []


def test_size_comes_from_the_image_label_with_headroom():
    assert cache_spec.default_size(80_000) == "33Mi"
    assert cache_spec.default_size(2 * 1024**3) == "3104Mi"
    assert cache_spec.default_size(int((1024 - 32) * 1024**2 / 1.5)) == "1Gi"
    spec = cache_spec.pin_image(spec_of(), "r/c@sha256:" + "a" * 64, "sha256:" + "a" * 64, {"size_bytes": 10})
    assert spec.size == "33Mi"
    explicit = cache_spec.pin_image(spec_of(size="5Gi"), "r/c@d", "sha256:" + "a" * 64, {"size_bytes": 10})
    assert explicit.size == "5Gi"
    with pytest.raises(cache_spec.SpecError, match="size is required"):
        cache_spec.pin_image(spec_of(), "r/c@d", "sha256:" + "a" * 64, {"targets": []})


def test_the_image_s_triton_version_and_compile_seconds_reach_the_spec():
    metadata = {"size_bytes": 10, "triton_version": "3.9.0", "compile_seconds_per_kernel": 0.25}
    spec = cache_spec.pin_image(spec_of(), "r/c@d", "sha256:" + "a" * 64, metadata)
    assert (spec.triton_version, spec.compile_seconds_per_kernel) == ("3.9.0", 0.25)
    bare = cache_spec.pin_image(spec_of(), "r/c@d", "sha256:" + "a" * 64, {"size_bytes": 10})
    assert (bare.triton_version, bare.compile_seconds_per_kernel) == (None, None)


def test_the_admin_s_extract_limits_reach_the_extractor_and_refuse_an_image_declared_larger():
    assert spec_of().extract_limits == {}
    limited = spec_of(extract_limits={"max_bytes": 1000, "max_files": 50, "max_expansion_ratio": None})
    assert limited.extract_limits == {"max_bytes": 1000, "max_files": 50}
    assert cache_spec.extract_limit_args(limited.extract_limits) == ["--max-bytes", "1000", "--max-files", "50"]
    assert cache_spec.pin_image(limited, "r/c@d", "sha256:" + "a" * 64, {"size_bytes": 1000}).size == "33Mi"
    with pytest.raises(cache_spec.SpecError) as error:
        cache_spec.pin_image(spec_of(extract_limits={"max_bytes": 1000}), "r/c@d", "sha256:" + "a" * 64,
                             {"size_bytes": 1001})
    assert "r/c@d declares 1001 bytes unpacked" in str(error.value)
    assert "over the 1000 bytes a cache may hold (extract_limits.max_bytes" in str(error.value)


@pytest.mark.parametrize("labels, variable, reason", [
    ({"cache.triton.image/summary": "{}"}, "TRITON_CACHE_DIR", None),
    ({"cache.triton.image/summary": "{}", "io.kserve.km/cache-root-env": "MY_DIR=/x"}, "MY_DIR", None),
    ({"cache.vllm.image/summary": "{}"}, None, "a vLLM cache"),
    (None, None, "no cache.triton.image"),
])
def test_the_pinned_image_s_labels_say_whether_its_pods_get_the_kernel_overlay(labels, variable, reason):
    spec = cache_spec.pin_image(spec_of(size="1Gi"), "r/c@d", "sha256:" + "a" * 64, {"labels": labels})
    assert spec.overlay_variable == variable
    assert (spec.overlay_reason is None) if reason is None else (reason in spec.overlay_reason)
