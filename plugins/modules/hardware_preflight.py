#!/usr/bin/python
# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hardware_preflight
short_description: Preflight facts and a readable report for GPU kernel caches on a real cluster
description:
  - Reads the Kubernetes version, the API groups (OpenShift is detected by its C(*.openshift.io) groups), the
    storage classes and whether each one's provisioner exists (a registered CSIDriver; C(kubernetes.io/no-provisioner)
    provisions nothing), the nodes, and the kube-apiserver pods' proxy settings.
  - Measures ReadOnlyMany support instead of guessing it, since it cannot be queried; a 1Mi ReadOnlyMany PVC per
    probed storage class is watched until it binds or O(rox_probe_timeout) passes, then deleted.
  - Finds GPU nodes from NVIDIA GPU feature discovery labels (C(nvidia.com/gpu.present),
    C(nvidia.com/gpu.compute.major|minor)), AMD labels (C(amd.com/gpu.*), device id to gfx architecture), NFD
    PCI labels, or C(nvidia.com/gpu) / C(amd.com/gpu) capacity, and derives C(gkm.io/gpu-backend|arch|warp-size).
  - Lists the taints of GPU nodes that extraction Jobs must tolerate (given the tolerations they already have)
    and returns the pod_template whose tolerations get them onto every GPU node.
  - Flags webhook pitfalls, a kube-apiserver with a proxy whose C(no_proxy) lacks C(.svc) (admission webhook
    calls then go to the proxy), and a proxy on this host that the API server is not exempt from.
  - With O(apply_gpu_labels), sets the derived C(gkm.io/gpu-*) labels on GPU nodes that lack them (a merge
    patch that leaves other labels alone); that is the only change the module makes (C(changed) reports it).
  - Check mode creates no probe PVC and sends label writes as server-side dry runs.
version_added: "0.1.0"
author:
  - gkm.cluster contributors (@gkm-cluster)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gkm.cluster.cluster_access
options:
  tolerations:
    description: Tolerations the extraction Jobs already carry (the caches' podTemplate), in Kubernetes format.
    type: list
    elements: dict
    default: []
  rox_probe:
    description: Run the ReadOnlyMany probe.
    type: bool
    default: true
  rox_probe_storage_classes:
    description: Storage classes to probe; empty means the default class.
    type: list
    elements: str
    default: []
  rox_probe_namespace:
    description: Namespace of the probe PVCs (C(gkm-rox-probe-<class>)).
    type: str
    default: default
  rox_probe_timeout:
    description: Seconds a probe PVC may take to bind.
    type: int
    default: 20
  apply_gpu_labels:
    description: Label GPU nodes with the C(gkm.io/gpu-*) labels derived from their vendor labels.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Preflight a GPU cluster whose caches tolerate the gpu taint
  gkm.cluster.hardware_preflight:
    tolerations:
      - {key: gpu, operator: Exists, effect: NoSchedule}
    rox_probe_storage_classes: [cephfs, nfs-client]
  register: preflight

- name: Show the report
  ansible.builtin.debug:
    msg: "{{ preflight.report }}"
"""

RETURN = r"""
kubernetes_version:
  description: The API server's version.
  returned: always
  type: str
  sample: v1.34.1
openshift:
  description: Whether the cluster is OpenShift (it serves *.openshift.io API groups).
  returned: always
  type: bool
openshift_groups:
  description: The *.openshift.io API groups found.
  returned: always
  type: list
  elements: str
storage_classes:
  description: Per class - name, provisioner, default, binding_mode, dynamic, driver_installed (null for in-tree).
  returned: always
  type: list
  elements: dict
rox_probe:
  description: Per probed class - result (bound, unbound, undetermined, not probed) and detail.
  returned: always
  type: dict
  sample: {fast-rwo: {result: unbound, detail: "ProvisioningFailed: access mode ReadOnlyMany not supported"}}
gpu_nodes:
  description: Per GPU node - name, vendor, sources, gpus, arch, gkm_labels, derived_labels, labels_to_apply, taints.
  returned: always
  type: list
  elements: dict
gpu_summary:
  description: GPU node counts per vendor and architecture.
  returned: always
  type: dict
  sample: {"amd gfx90a": 3, "nvidia 90": 2}
taints:
  description: NoSchedule/NoExecute taints of GPU nodes - taint, key, value, effect, nodes, tolerated.
  returned: always
  type: list
  elements: dict
pod_template:
  description: A podTemplate (GKMCache format) whose tolerations cover every taint listed.
  returned: always
  type: dict
  sample: {spec: {tolerations: [{key: gpu, operator: Equal, value: "true", effect: NoSchedule}]}}
proxy:
  description: C(apiserver) (per kube-apiserver pod with a proxy) and C(client) (this host's proxy, or null).
  returned: always
  type: dict
labelled:
  description: GPU nodes that were given gkm.io/gpu-* labels.
  returned: always
  type: list
  elements: str
findings:
  description: Problems found - severity (error, warning, info), message, fix.
  returned: always
  type: list
  elements: dict
report:
  description: The readable report, one line per entry.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.gkm.cluster.plugins.module_utils.common.module import run_module  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.platform.tasks import hardware_preflight  # noqa: E402

ARGUMENT_SPEC = dict(
    tolerations=dict(type="list", elements="dict", default=[]),
    rox_probe=dict(type="bool", default=True),
    rox_probe_storage_classes=dict(type="list", elements="str", default=[]),
    rox_probe_namespace=dict(type="str", default="default"),
    rox_probe_timeout=dict(type="int", default=20),
    apply_gpu_labels=dict(type="bool", default=False),
)


def main():
    run_module(ARGUMENT_SPEC, hardware_preflight)


if __name__ == "__main__":
    main()
