# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""(I/O: the API) The new image recorded as the cache's spec.image, by digest: the reference names exactly what was
signed and pushed (a tag can be moved under it), and the cache's reconcile rolls the change out with its upgrade
policy like any other new image."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import MERGE_PATCH
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.resource import resource_path


def record_image(kube, kind, name, namespace, reference):
    """Patch spec.image (a server-side dry run in check mode, as the Kube is); the patched resource."""
    return kube.request("PATCH", resource_path(kind, name, namespace), body={"spec": {"image": reference}},
                        content_type=MERGE_PATCH, what="%s %s spec.image" % (kind, name))[1]
