import pytest

from ansible_collections.gkm.cluster.plugins.filter.mirror_image import mirror_image


@pytest.mark.parametrize("reference, mirror, expected", [
    ("quay.io/gkm/tools:0.1.0", "mirror.example.com", "mirror.example.com/gkm/tools:0.1.0"),
    ("quay.io/gkm/tools@sha256:" + "a" * 64, "m.local/quay/", "m.local/quay/gkm/tools@sha256:" + "a" * 64),
    ("127.0.0.1:5000/caches/x:1", "m.local", "m.local/caches/x:1"),
    ("busybox:1", "m.local", "m.local/library/busybox:1"),
    ("team/app:1", "m.local", "m.local/team/app:1"),
    ("quay.io/gkm/tools:0.1.0", "", "quay.io/gkm/tools:0.1.0"),
])
def test_mirror_image(reference, mirror, expected):
    assert mirror_image(reference, mirror) == expected
