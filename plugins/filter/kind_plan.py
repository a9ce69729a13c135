# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kind_plan filter: the kind config, node layout and commands of a kind cluster with simulated GPUs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import kind_cluster


def kind_plan(groups, cluster, config_path, kubeconfig, kind="kind", engine="docker", node_image=None,
              registry=None, wait="120s"):
    try:
        return kind_cluster.plan(cluster, groups, config_path, kubeconfig, kind, engine, node_image or None,
                                 registry, wait)
    except kind_cluster.KindPlanError as error:
        raise AnsibleFilterError("gpu_sim (kind): %s" % error) from error


class FilterModule(object):
    def filters(self):
        return {"kind_plan": kind_plan}
