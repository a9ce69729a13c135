#!/usr/bin/python
# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cache_extract
short_description: Pull, verify and safely extract a GPU kernel-cache image into a directory
description:
  - Resolves a kernel-cache OCI image (MCV compat format, Triton or vLLM), checks that it fits the
    given GPUs from its C(cache.*.image/summary) label, optionally verifies its cosign signature
    with a public key, and extracts C(io.*.cache/) and C(io.*.manifest/) from its one gzip layer
    into O(dest).
  - The layer is streamed (download, digest check, gunzip, untar in one pass) into a temporary
    directory beside O(dest) that replaces O(dest) atomically; on any failure O(dest) is left exactly
    as it was.
  - Unsafe layers are refused with an error naming the problem and nothing is written - absolute
    paths, C(..) components, symlinks or hardlinks leaving the tree, device nodes, FIFOs, layers over
    O(max_bytes) or O(max_files), or expanding more than O(max_expansion_ratio) times. setuid, setgid and
    sticky bits are dropped.
  - Triton C(__grp__*.json) child paths are rewritten to the extracted location so Triton finds the files.
  - A marker file C(.gkm-cache.json) in O(dest) records the image, digest and written tree; a re-run with
    the same digest and an intact tree changes nothing and downloads no layer.
  - The same code runs as a command inside the extraction Job's container,
    C(python -m ansible_collections.gkm.cluster.plugins.module_utils.extract.job_main).
version_added: "0.1.0"
author:
  - gkm.cluster contributors (@gkm-cluster)
options:
  image:
    description:
      - Image reference with its registry host, by tag (C(host/repo:tag)) or digest (C(host/repo@sha256:...)).
      - Required when O(state=present).
    type: str
  dest:
    description:
      - Absolute directory to extract into. It is replaced as a whole, so it must be empty, absent or
        written by this module, and must not be a volume's mount point (use a subdirectory of it).
    type: path
    required: true
  state:
    description:
      - V(present) extracts the image; V(absent) removes O(dest) if this module wrote it.
    type: str
    choices: [present, absent]
    default: present
  gpus:
    description:
      - GPUs the cache must fit. A GPU fits when backend, arch (C(sm_) prefix ignored for cuda) and warp
        size equal those of one of the image's summary targets.
      - Mutually exclusive with O(gpus_from_node_labels). Without both, no compatibility check is made.
    type: list
    elements: dict
    suboptions:
      backend:
        description: C(cuda) or C(hip).
        type: str
        required: true
      arch:
        description: GPU architecture, for example C(90) or C(sm_90) (cuda), C(gfx90a) (hip).
        type: str
        required: true
      warp_size:
        description: Warp (wavefront) size, 32 for NVIDIA, 64 for AMD CDNA.
        type: int
        required: true
  gpus_from_node_labels:
    description:
      - Name of a Kubernetes node whose C(gkm.io/gpu-backend), C(gkm.io/gpu-arch) and C(gkm.io/gpu-warp-size)
        labels describe its GPU. Read with the Kubernetes auth options.
    type: str
  compatibility:
    description:
      - What to do when no given GPU fits the cache. V(fail) fails, V(skip) leaves O(dest) untouched and
        returns RV(skipped=true), V(ignore) extracts anyway.
    type: str
    choices: [fail, skip, ignore]
    default: fail
  verify:
    description: V(cosign) requires a cosign signature of the image digest that verifies with O(public_key).
    type: str
    choices: [none, cosign]
    default: none
  public_key:
    description: Cosign public key, PEM text or a path to a PEM file. Required when O(verify=cosign).
    type: str
  signature_format:
    description:
      - V(v2) - signature in the C(sha256-<digest>.sig) tag; V(v3) - sigstore bundle referrer; V(auto) accepts either.
    type: str
    choices: [auto, v2, v3]
    default: auto
  max_bytes:
    description: Largest total size of the extracted files, in bytes.
    type: int
    default: 8589934592
  max_files:
    description: Largest number of extracted files.
    type: int
    default: 100000
  max_expansion_ratio:
    description: Largest ratio of uncompressed to compressed layer size; more is refused as a decompression bomb.
    type: int
    default: 250
  timeout:
    description: Seconds to wait for each registry response.
    type: int
    default: 60
  whole_layer:
    description: Extract every path of the layer, not only C(io.*.cache/) and C(io.*.manifest/).
    type: bool
    default: false
  rewrite_group_paths:
    description: Point the child paths of Triton C(__grp__*.json) files at the extracted files.
    type: bool
    default: true
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gkm.cluster.registry
  - gkm.cluster.cluster_access
attributes:
  check_mode:
    description: Reads the registry and reports what would change; writes nothing.
    support: full
  diff_mode:
    description: Shows the digest in O(dest) before and after.
    support: full
requirements:
  - oras (oras-py)
  - cryptography (for O(verify=cosign))
  - isal (optional, faster decompression)
"""

EXAMPLES = r"""
- name: Extract a Triton cache for the node's GPU, verified with cosign
  gkm.cluster.cache_extract:
    image: quay.io/gkm/cache-examples:vector-add-cache-rocm
    dest: /var/lib/gkm/caches/vector-add
    gpus_from_node_labels: "{{ inventory_hostname }}"
    verify: cosign
    public_key: "{{ lookup('file', 'cosign.pub') }}"

- name: Extract from a loopback registry for explicit GPUs
  gkm.cluster.cache_extract:
    image: 127.0.0.1:5000/caches/flash-attention@sha256:7f5c0a0fd5d2f7a8c7d2d7c1f1a5b3e9c4e0b9f4f0a1d2c3b4a5968778695a4b
    dest: /tmp/caches/flash-attention
    registry_plain_http: true
    gpus:
      - {backend: cuda, arch: sm_90, warp_size: 32}

- name: Remove an extracted cache
  gkm.cluster.cache_extract:
    dest: /var/lib/gkm/caches/vector-add
    state: absent
"""

RETURN = r"""
dest:
  description: The extraction directory.
  returned: always
  type: str
image:
  description: The image reference as given.
  returned: always
  type: str
digest:
  description: Manifest digest the image resolved to.
  returned: always
  type: str
  sample: sha256:3c1d1b6f0e3e5e1a5c2e9d1f0b2a7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b
previous_digest:
  description: Digest recorded in O(dest) before this run, null when there was none.
  returned: always
  type: str
kind:
  description: Cache kind from the image labels, C(triton) or C(vllm).
  returned: when state=present
  type: str
targets:
  description: GPU targets from the summary label.
  returned: when state=present
  type: list
  elements: dict
  sample: [{"backend": "hip", "arch": "gfx90a", "warp_size": 64}]
entry_count:
  description: Kernel count from the entry-count label.
  returned: when state=present
  type: int
files:
  description: Files in O(dest) (extracted now, or recorded by the run that extracted them).
  returned: when state=present
  type: int
bytes:
  description: Bytes of those files.
  returned: when state=present
  type: int
compatible_gpus:
  description: Given GPUs that fit the cache (normalized).
  returned: when state=present
  type: list
  elements: dict
incompatible_gpus:
  description: Given GPUs that do not fit the cache.
  returned: when state=present
  type: list
  elements: dict
signature_verified:
  description: Whether a cosign signature was verified for this digest.
  returned: when state=present
  type: bool
signature_format:
  description: C(v2) or C(v3) when a signature was verified.
  returned: when state=present
  type: str
skipped:
  description: True when O(compatibility=skip) and no GPU fits, so nothing was extracted.
  returned: always
  type: bool
"""

from ansible_collections.gkm.cluster.plugins.module_utils.common.module import run_module  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.extract.tasks import cache_extract  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.oci.args import (  # noqa: E402
    REGISTRY_ARG_SPEC,
    REGISTRY_MUTUALLY_EXCLUSIVE,
    REGISTRY_REQUIRED_BY,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import ORAS_IMPORT_ERROR  # noqa: E402

ARGUMENT_SPEC = dict(
    REGISTRY_ARG_SPEC,
    image=dict(type="str"),
    dest=dict(type="path", required=True),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    gpus=dict(type="list", elements="dict", options=dict(
        backend=dict(type="str", required=True),
        arch=dict(type="str", required=True),
        warp_size=dict(type="int", required=True),
    )),
    gpus_from_node_labels=dict(type="str"),
    compatibility=dict(type="str", choices=["fail", "skip", "ignore"], default="fail"),
    verify=dict(type="str", choices=["none", "cosign"], default="none"),
    public_key=dict(type="str"),
    signature_format=dict(type="str", choices=["auto", "v2", "v3"], default="auto"),
    max_bytes=dict(type="int", default=8589934592),
    max_files=dict(type="int", default=100000),
    max_expansion_ratio=dict(type="int", default=250),
    timeout=dict(type="int", default=60),
    whole_layer=dict(type="bool", default=False),
    rewrite_group_paths=dict(type="bool", default=True),
)


def main():
    run_module(
        ARGUMENT_SPEC, cache_extract, libraries=[("oras", ORAS_IMPORT_ERROR)], always_needs_cluster=False,
        required_if=[("state", "present", ["image"]), ("verify", "cosign", ["public_key"])],
        mutually_exclusive=[("gpus", "gpus_from_node_labels"), *REGISTRY_MUTUALLY_EXCLUSIVE],
        required_by=REGISTRY_REQUIRED_BY,
    )


if __name__ == "__main__":
    main()
