# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a pod's mount of a cache image gets the group overlay, and which variable names it, from the image's
labels, pure.

An image of Triton's format (MCV's `cache.triton.image/*` labels) is overlaid and the workload gets the overlay as
`TRITON_CACHE_DIR`, unless the image names another variable in KServe's `io.kserve.km/cache-root-env` label
(`NAME=/path`, as MCV stamps it; MCV's own serving plan has none for a bare Triton image). An image in vLLM's layout
(`cache.vllm.image/*`) is not: vLLM keeps Triton's groups below its own hash and rank directories
(`torch_compile_cache/<hash>/rank_0_0/triton/`), which the overlay does not know yet, so it keeps the plain mount.
The reconcile, which reads the labels, is to record the plan for the webhook, which writes the pod.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

TRITON_CACHE_ENV = "TRITON_CACHE_DIR"
ROOT_ENV_LABEL = "io.kserve.km/cache-root-env"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

NOT_A_CACHE = "the image has no cache.triton.image/* or cache.vllm.image/* labels"
VLLM_LAYOUT = ("a vLLM cache: its Triton groups lie below vLLM's own directories, which the overlay does not follow "
               "yet; it is mounted as it is")


def _has_family(labels, kind):
    prefix = "cache.%s.image/" % kind
    return any(isinstance(key, str) and key.startswith(prefix) for key in labels)


def root_env_name(labels):
    """The variable named by `io.kserve.km/cache-root-env` (`NAME=VALUE`), or None when absent or not a name."""
    value = labels.get(ROOT_ENV_LABEL)
    if not isinstance(value, str) or "=" not in value:
        return None
    name = value.split("=", 1)[0].strip()
    return name if _ENV_NAME.match(name) else None


def overlay_plan(labels):
    """(variable, None) when a pod's mount of the image is overlaid and the overlay is given as `variable`;
    (None, why) when it is mounted as it is."""
    labels = labels if isinstance(labels, dict) else {}
    if _has_family(labels, "vllm"):
        return None, VLLM_LAYOUT
    if not _has_family(labels, "triton"):
        return None, NOT_A_CACHE
    return root_env_name(labels) or TRITON_CACHE_ENV, None
