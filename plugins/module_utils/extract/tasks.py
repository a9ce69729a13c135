# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The work of the cache_extract module: its options to extract/pull.py's, and the node labels through Kube."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.extract import pull
from ansible_collections.gkm.cluster.plugins.module_utils.oci.args import REGISTRY_OPTIONS


def cache_extract(call):
    params = call.params
    options = {name: params[name] for name in pull.DEFAULTS if name in params}
    options.update({target: params[source] for source, target in REGISTRY_OPTIONS.items()})
    options.update(image=params["image"], dest=params["dest"])
    return pull.ensure_cache(options, check_mode=call.check_mode, node_labels_reader=pull.node_labels_reader(call.kube))
