#!/usr/bin/python
# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: component_ownership
short_description: Tell whether gkm.cluster installed a platform component, and record or forget that it did
description:
  - Platform components such as cert-manager, Kyverno or Node Feature Discovery may already be on a cluster,
    installed by someone else. This module keeps one ConfigMap (O(ownership_configmap) in
    O(ownership_namespace)) with a JSON record per component that this collection installed, so an undeploy
    removes only what this collection put there.
  - O(state=query) reads the record and detects the component (a CRD only it defines, and its Deployment for
    the version) and returns a plan - V(install), V(upgrade), V(apply), V(skip), V(remove), V(keep) or V(none) -
    with a reason a human can read. It never changes anything.
  - O(state=present) records an install; O(state=absent) forgets it (the ConfigMap is deleted when no record
    is left). Each is written only when the record changes, so re-runs report C(changed=false).
  - Check mode runs writes as server-side dry runs; diff mode shows the record before and after.
version_added: "0.1.0"
author:
  - gkm.cluster contributors (@gkm-cluster)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gkm.cluster.cluster_access
options:
  component:
    description: Name of the component, the data key of its record, for example C(cert-manager).
    type: str
    required: true
  state:
    description: V(query) plans, V(present) records an install, V(absent) forgets it.
    type: str
    choices: [query, present, absent]
    default: query
  wanted:
    description: With O(state=query), whether the caller wants the component V(present) or V(absent).
    type: str
    choices: [present, absent]
    default: present
  version:
    description:
      - The pinned version wanted (O(state=query)) or installed (O(state=present); required then).
    type: str
  method:
    description: How it was installed; required with O(state=present).
    type: str
    choices: [helm, manifest]
  source:
    description: Where it came from (chart reference or manifest URL or path), kept for the uninstall.
    type: str
  install_namespace:
    description: Namespace the component runs in; used for detection and kept in the record.
    type: str
  namespace_created:
    description: With O(state=present), whether the install created O(install_namespace), so removal deletes it.
    type: bool
    default: false
  detect_crd:
    description:
      - Name of a CustomResourceDefinition only this component defines, for example C(certificates.cert-manager.io).
    type: str
  detect_deployment:
    description:
      - Name of the component's main Deployment in O(install_namespace); its version label gives the version found.
    type: str
  ownership_namespace:
    description: Namespace of the ownership ConfigMap; created when missing.
    type: str
    default: gkm-system
  ownership_configmap:
    description: Name of the ownership ConfigMap.
    type: str
    default: gkm-cluster-ownership
"""

EXAMPLES = r"""
- name: Plan cert-manager
  gkm.cluster.component_ownership:
    component: cert-manager
    version: v1.18.2
    install_namespace: cert-manager
    detect_crd: certificates.cert-manager.io
    detect_deployment: cert-manager
  register: cert_manager_plan

- name: Record that we installed it
  gkm.cluster.component_ownership:
    component: cert-manager
    state: present
    version: v1.18.2
    method: manifest
    source: https://github.com/cert-manager/cert-manager/releases/download/v1.18.2/cert-manager.yaml
    install_namespace: cert-manager
"""

RETURN = r"""
component:
  description: The component asked about.
  returned: always
  type: str
  sample: cert-manager
owned:
  description: Whether a record says gkm.cluster installed the component (after this run).
  returned: always
  type: bool
record:
  description: The record after this run, or null.
  returned: always
  type: dict
  sample: {version: v1.18.2, method: manifest, source: ./cert-manager.yaml, namespace: cert-manager,
           namespace_created: true, recorded_at: "2026-08-01T10:00:00Z"}
found:
  description: Whether the component is on the cluster (its CRD or its Deployment exists).
  returned: when O(state=query)
  type: bool
found_version:
  description: The version of the Deployment found, or null.
  returned: when O(state=query)
  type: str
namespace_exists:
  description: Whether O(install_namespace) exists.
  returned: when O(state=query)
  type: bool
plan:
  description: What to do and why.
  returned: when O(state=query)
  type: dict
  sample: {action: skip, owned: false,
           reason: "found (version v1.17.0) and not installed by gkm.cluster: leaving it as it is"}
"""

from ansible_collections.gkm.cluster.plugins.module_utils.common.module import run_module  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.platform.tasks import component_ownership  # noqa: E402

ARGUMENT_SPEC = dict(
    component=dict(type="str", required=True),
    state=dict(type="str", choices=["query", "present", "absent"], default="query"),
    wanted=dict(type="str", choices=["present", "absent"], default="present"),
    version=dict(type="str"),
    method=dict(type="str", choices=["helm", "manifest"]),
    source=dict(type="str"),
    install_namespace=dict(type="str"),
    namespace_created=dict(type="bool", default=False),
    detect_crd=dict(type="str"),
    detect_deployment=dict(type="str"),
    ownership_namespace=dict(type="str", default="gkm-system"),
    ownership_configmap=dict(type="str", default="gkm-cluster-ownership"),
)


def main():
    run_module(ARGUMENT_SPEC, component_ownership, required_if=[("state", "present", ("version", "method"))])


if __name__ == "__main__":
    main()
