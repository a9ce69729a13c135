"""The cache resource read once: its defaults, its problems, and its field names in both directions."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import (
    SPEC_FIELDS,
    read_cache,
    resource_terms,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KIND,
    CLUSTER_CACHE_KIND,
    IMAGE_VOLUME,
    PVC,
)

IMAGE = "registry.example/caches/llama@sha256:" + "a" * 64
WRITTEN = {
    "image": IMAGE,
    "accessModes": ["ReadOnlyMany"],
    "storageClassName": "fast",
    "podTemplate": {"spec": {"nodeSelector": {"gpu": "yes"}}},
    "upgradePolicy": {"maxUnavailable": 1},
    "mountMode": IMAGE_VOLUME,
    "workloadNamespaces": ["serving"],
}


def cache_object(kind=CLUSTER_CACHE_KIND, **spec):
    metadata = {"name": "llama"} if kind == CLUSTER_CACHE_KIND else {"name": "llama", "namespace": "team-a"}
    return {"kind": kind, "metadata": metadata, "spec": spec}


def test_every_spec_field_is_read_into_the_attribute_the_table_names():
    cache = read_cache(cache_object(**WRITTEN))
    assert cache.problems == []
    assert sorted(field for _attribute, field in SPEC_FIELDS) == sorted(WRITTEN)
    for attribute, field in SPEC_FIELDS:
        assert getattr(cache, attribute) == WRITTEN[field], attribute


@pytest.mark.parametrize("attribute, field", [pair for pair in SPEC_FIELDS if pair[0] != pair[1]])
def test_a_message_about_an_option_names_the_field_the_owner_wrote(attribute, field):
    assert resource_terms("%s is wrong; fix %s.spec" % (attribute, attribute)) == (
        "spec.%s is wrong; fix spec.%s.spec" % (field, field))


def test_option_names_inside_longer_names_are_left_alone():
    message = "spec.template.pod_template_hash and my_access_modes stay; image stays image"
    assert resource_terms(message) == message


@pytest.mark.parametrize("default, expected", [(None, PVC), (PVC, PVC), (IMAGE_VOLUME, IMAGE_VOLUME)])
def test_the_mount_mode_default_is_an_input_and_the_spec_wins(default, expected):
    assert read_cache(cache_object(CACHE_KIND, image=IMAGE), default).mount_mode == expected
    assert read_cache(cache_object(CACHE_KIND, image=IMAGE, mountMode=PVC), default).mount_mode == PVC


def test_malformed_fields_are_problems_naming_the_field_not_exceptions():
    cache = read_cache(cache_object(mountMode="nfs"))
    assert cache.mount_mode == PVC
    assert [problem.split(": ", 1)[1].split(" ")[0] for problem in cache.problems] == [
        "spec.image", "spec.mountMode", "spec.workloadNamespaces"]


@pytest.mark.parametrize("status, expected", [
    ({"kernelOverlay": {"variable": "TRITON_CACHE_DIR"}}, "TRITON_CACHE_DIR"),
    ({}, None),
    ({"kernelOverlay": {}}, None),
    ({"kernelOverlay": "TRITON_CACHE_DIR"}, None),
    ({"kernelOverlay": {"variable": 7}}, None),
])
def test_the_kernel_overlay_variable_is_read_from_the_status_and_absent_when_malformed(status, expected):
    obj = dict(cache_object(CACHE_KIND, image=IMAGE), status=status)
    assert read_cache(obj).overlay_variable == expected
