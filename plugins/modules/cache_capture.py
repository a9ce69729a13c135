#!/usr/bin/python
# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cache_capture
short_description: Make the Triton kernels a pod compiled the next image of its kernel cache
version_added: "0.1.0"
description:
  - Reads the Triton kernels a pod compiled itself, merges them with the cache's current image, checks them,
    packages the union as an image in MCV's Triton format, signs it with the admin's key (cosign v2), pushes it to
    the admin's repository and records it by digest as the cache's C(spec.image). The cache's reconcile
    (M(gkm.cluster.cache_reconcile) or the operator) then rolls it out with its upgrade policy.
  - The pod opts in with the annotation C(gkm.io/capture) naming the cache (O(cache)). The annotation never widens
    what O(allowed_caches) and O(allowed_namespaces), the admin's setting, allow; a GKMCache takes kernels only from
    pods of its own namespace.
  - What is read, through the API's C(pods/exec) (C(tar) in the container) - the pod's kernel overlay of the cache
    (the kernels it compiled, its misses, by the overlay's C(.gkm-overlay.json)) or, for a pod given no cache, every
    kernel of its C(TRITON_CACHE_DIR) when that lies in an emptyDir.
  - A finished pod (Succeeded, Failed, or its containers ended) is read through C(pods/log) instead - the capture frame
    its kernel-use sidecar wrote when stopped (the webhook has the sidecar of a pod given the cache's overlay and
    annotated for it write the kernels the pod compiled as one line, at most 4 MiB gzipped); the frame's sha256 and
    size are checked, and its entries meet the same rules.
  - The captured content is trusted only as far as it is checked - the extractor's entry rules (names, sizes, no
    links or devices), Triton's layout (a group file listing plain names, every file it lists and nothing else,
    metadata naming the hash of its directory). A kernel the current image holds with other bytes is refused, naming
    both digests.
  - The tenant never sees the registry credentials or the signing key, which only this module's caller holds.
  - Check mode reads and merges, and reports in the diff what would be pushed and patched; nothing is pushed.
  - The cache's current image is read from the registry it names; registry credentials go only to
    O(registry_host).
author:
  - gkm.cluster contributors (@gkm-cluster)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gkm.cluster.registry
options:
  pod:
    description:
      - The pod whose compiled kernels are captured - running, or finished with a capture frame in its sidecar's log.
    type: str
    required: true
  namespace:
    description: The pod's namespace.
    type: str
    required: true
  cache:
    description: The cache the kernels go to; the pod's C(gkm.io/capture) annotation must name it.
    type: str
    required: true
  cache_kind:
    description: The kind of O(cache).
    type: str
    choices: [GKMCache, ClusterGKMCache]
    default: GKMCache
  cache_namespace:
    description: Namespace of a GKMCache; the pod's namespace when omitted (it must be the same).
    type: str
  repository:
    description:
      - Where the new image is pushed, C(host[:port]/path) without a tag; the cache's C(spec.image) becomes
        C(repository@digest).
    type: str
    required: true
  tag:
    description: Also tag the pushed image with this tag. The cache is recorded by digest in any case.
    type: str
  signing_key:
    description:
      - The admin's PEM private key (ECDSA P-256, RSA or Ed25519; PEM text or a file path). The signature is stored
        as cosign v2 stores it, where the collection's verification (C(verify=cosign)) and cosign find it.
      - cosign's own encrypted key file is not read; give the key as PEM.
    type: str
    required: true
  signing_key_password:
    description: Password of an encrypted O(signing_key).
    type: str
  allowed_caches:
    description:
      - The caches captures may go into, the admin's setting - C(namespace/name) for a GKMCache, C(name) for a
        ClusterGKMCache. Any other cache is refused.
    type: list
    elements: str
    required: true
  allowed_namespaces:
    description: The namespaces whose pods may be captured, the admin's setting.
    type: list
    elements: str
    required: true
seealso:
  - module: gkm.cluster.cache_reconcile
"""

EXAMPLES = r"""
- name: Capture what a tenant's warm-up compiled into its cache
  gkm.cluster.cache_capture:
    pod: llama-warmup-0
    namespace: team-a
    cache: llama-kernels
    repository: registry.example.com/caches/llama-kernels
    signing_key: /etc/gkm/cosign-signing.pem
    allowed_caches: [team-a/llama-kernels]
    allowed_namespaces: [team-a]
    registry_host: registry.example.com
    registry_username: gkm-pusher
    registry_password: "{{ vault_registry_password }}"
  register: captured

- name: Roll it out
  gkm.cluster.cache_reconcile:
    kind: GKMCache
    name: llama-kernels
    namespace: team-a
  when: captured is changed
"""

RETURN = r"""
image:
  description: The cache's image after the run, C(repository@digest) when one was pushed.
  returned: always
  type: str
digest:
  description: Its manifest digest.
  returned: always
  type: str
previous_image:
  description: The cache's C(spec.image) before the run.
  returned: always
  type: str
previous_digest:
  description: The digest it resolved to.
  returned: always
  type: str
kernels:
  description: The number of kernels of the image after the run.
  returned: always
  type: int
captured:
  description: The kernels read from the pod (C(hash_dir), C(name), C(hash), C(files)).
  returned: always
  type: list
  elements: dict
added:
  description: Those of them the cache's image did not hold, in the same shape.
  returned: always
  type: list
  elements: dict
pod:
  description: The pod read - C(namespace), C(name), C(container), C(directory) (C(pods/log) for a finished pod),
    C(overlaid) (whether it was the cache's kernel overlay), C(finished) (read from its sidecar's log).
  returned: always
  type: dict
labels:
  description: The pushed image's config labels.
  returned: when changed
  type: dict
seconds:
  description: Seconds of the run - C(read) (the pod's kernels), C(package) (the current image pulled, merged,
    packaged), C(push), C(total).
  returned: always
  type: dict
"""

from ansible_collections.gkm.cluster.plugins.module_utils.capture.tasks import cache_capture  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.common.module import run_module  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.oci.args import (  # noqa: E402
    REGISTRY_ARG_SPEC,
    REGISTRY_MUTUALLY_EXCLUSIVE,
    REGISTRY_REQUIRED_BY,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import ORAS_IMPORT_ERROR  # noqa: E402

ARGUMENT_SPEC = dict(
    REGISTRY_ARG_SPEC,
    pod=dict(type="str", required=True),
    namespace=dict(type="str", required=True),
    cache=dict(type="str", required=True),
    cache_kind=dict(type="str", choices=["GKMCache", "ClusterGKMCache"], default="GKMCache"),
    cache_namespace=dict(type="str"),
    repository=dict(type="str", required=True),
    tag=dict(type="str"),
    signing_key=dict(type="str", required=True, no_log=True),
    signing_key_password=dict(type="str", no_log=True),
    allowed_caches=dict(type="list", elements="str", required=True),
    allowed_namespaces=dict(type="list", elements="str", required=True),
)


def main():
    run_module(ARGUMENT_SPEC, cache_capture, libraries=[("oras", ORAS_IMPORT_ERROR)],
               mutually_exclusive=REGISTRY_MUTUALLY_EXCLUSIVE, required_by=REGISTRY_REQUIRED_BY)


if __name__ == "__main__":
    main()
