# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: mirror_image
short_description: Point an image reference at a registry mirror
version_added: 0.1.0
description:
  - Replaces the registry part of an image reference with a mirror prefix, for restricted networks where
    images are copied to an internal registry with the same repository paths.
  - An empty mirror returns the reference unchanged.
positional: mirror
options:
  _input:
    description: Image reference, by tag or digest.
    type: str
    required: true
  mirror:
    description: Registry host (and optional path prefix) of the mirror, such as C(mirror.example.com/quay).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Tools image from the mirror
  ansible.builtin.debug:
    msg: "{{ 'quay.io/gkm-cluster/tools:0.1.0' | gkm.cluster.mirror_image('mirror.example.com/quay') }}"
  # -> mirror.example.com/quay/gkm-cluster/tools:0.1.0
"""

RETURN = r"""
_value:
  description: The image reference on the mirror.
  type: str
"""


def _split_registry(reference):
    """(registry, rest); the first path component is a registry when it has a dot, a colon or is localhost."""
    first, _sep, rest = reference.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return "docker.io", reference if "/" in reference else "library/" + reference


def mirror_image(reference, mirror):
    if not mirror:
        return reference
    return "%s/%s" % (mirror.rstrip("/"), _split_registry(reference)[1])


class FilterModule(object):
    def filters(self):
        return {"mirror_image": mirror_image}
