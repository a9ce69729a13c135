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
  registry_username:
    description: Registry user name.
    type: str
  registry_password:
    description: Registry password or token.
    type: str
  registry_docker_config:
    description: Docker C(config.json) holding registry credentials (instead of O(registry_username)).
    type: path
  registry_ca_file:
    description: CA bundle to verify the registry's TLS certificate.
    type: path
  registry_validate_certs:
    description: Verify the registry's TLS certificate.
    type: bool
    default: true
  registry_plain_http:
    description: Talk plain HTTP to the registry. Only for loopback or test registries.
    type: bool
    default: false
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
  - kubernetes (for O(gpus_from_node_labels))
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

import traceback  # noqa: E402

from ansible.module_utils.basic import AnsibleModule, missing_required_lib  # noqa: E402

from ansible_collections.gkm.cluster.plugins.module_utils.extract import pull as cache_pull  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import HAS_ORAS, ORAS_IMPORT_ERROR  # noqa: E402
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC  # noqa: E402

REGISTRY_OPTIONS = {
    "registry_username": "username",
    "registry_password": "password",
    "registry_docker_config": "docker_config",
    "registry_ca_file": "ca_file",
    "registry_validate_certs": "validate_certs",
    "registry_plain_http": "plain_http",
}


def argument_spec():
    spec = dict(
        image=dict(type="str"),
        dest=dict(type="path", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        registry_username=dict(type="str"),
        registry_password=dict(type="str", no_log=True),
        registry_docker_config=dict(type="path"),
        registry_ca_file=dict(type="path"),
        registry_validate_certs=dict(type="bool", default=True),
        registry_plain_http=dict(type="bool", default=False),
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
    spec.update(AUTH_ARG_SPEC)
    return spec


def node_labels_reader(module):
    """Reads a node's labels with the kubernetes.core auth options of this task."""
    def read(name):
        from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client

        auth = {key: module.params.get(key) for key in AUTH_ARG_SPEC}
        client = get_api_client(**auth)
        node = client.get(client.resource("Node", "v1"), name=name)
        return dict(node.metadata.labels or {})

    return read


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
        required_if=[("state", "present", ["image"]), ("verify", "cosign", ["public_key"])],
        mutually_exclusive=[("gpus", "gpus_from_node_labels"), ("registry_username", "registry_docker_config")],
    )
    if not HAS_ORAS:
        module.fail_json(msg=missing_required_lib("oras"), exception=ORAS_IMPORT_ERROR)
    options = {name: module.params[name] for name in cache_pull.DEFAULTS if name in module.params}
    options.update({target: module.params[source] for source, target in REGISTRY_OPTIONS.items()})
    options.update(image=module.params["image"], dest=module.params["dest"])
    try:
        result = cache_pull.ensure_cache(options, check_mode=module.check_mode,
                                         node_labels_reader=node_labels_reader(module))
    except cache_pull.CachePullError as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # an API or filesystem error the checks did not foresee: report it whole
        module.fail_json(msg="cache_extract failed: %s" % exc, exception=traceback.format_exc())
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
