"""capture/merge.py: the union of the cache's kernels and the captured ones; the same kernel with other bytes is
refused, both digests named."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError
from ansible_collections.gkm.cluster.plugins.module_utils.capture.merge import kernel_digest, merge
from tests.helpers.kernel_dirs import kernel


def test_the_union_adds_only_what_the_cache_lacks():
    held = dict([kernel(1), kernel(2)])
    captured = dict([kernel(2), kernel(3)])
    merged, added = merge(held, captured)
    assert set(merged) == set(held) | set(captured)
    assert added == [kernel(3)[0]]


def test_nothing_new_adds_nothing():
    held = dict([kernel(1)])
    assert merge(held, dict(held)) == (held, [])


def test_the_same_kernel_with_other_bytes_is_refused_naming_both_digests():
    directory, held = kernel(1)
    tampered = kernel(1, binary=b"\x7fELF another binary")[1]
    with pytest.raises(CaptureError) as refused:
        merge({directory: held}, {directory: tampered})
    message = str(refused.value)
    assert kernel_digest(held) in message and kernel_digest(tampered) in message, message
    assert kernel_digest(held) != kernel_digest(tampered)
