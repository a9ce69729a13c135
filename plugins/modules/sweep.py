#!/usr/bin/python
# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sweep
short_description: Remove whatever is still labelled app.kubernetes.io/managed-by=gkm.cluster
version_added: "0.1.0"
description:
  - The last step of C(playbooks/undeploy.yml) (the gkm role's C(tasks/sweep.yml)). It removes what is left of this
    collection once the caches, the GKM core and the platform components are removed, such as the PVCs, PVs and
    Jobs of a cache whose resource was deleted first, or what an interrupted run or an earlier version left.
  - Lists, in every namespace and at cluster scope, the objects of O(kinds) labelled
    C(app.kubernetes.io/managed-by=gkm.cluster), in one module run with parallel requests, and deletes them in the
    background (a Job's pods go with it). Kinds the API server does not serve are skipped.
  - Kept are ownership ConfigMaps that still hold a record (a platform component this collection installed and
    that is still there; see M(gkm.cluster.component_ownership)), and the namespaces they are in.
  - Namespaces labelled as ours are deleted only when named in O(delete_namespaces); any other only loses the
    label, because workloads live there.
  - Objects already being deleted are left to finish.
  - Before the hostPath PVs of cache slots are deleted, their directories are removed from the nodes' disks by one
    Job per node and cache root, pinned to the node. It runs the tools image's scrub program on a PV of its own whose
    hostPath is the cache root, and removes exactly the slot directories (never following symbolic links), then
    their empty parents up to, not including, the root. The Job runs as uid 0 with every capability dropped except
    DAC_OVERRIDE (the files belong to the extraction uid 1000, their parents to root). Its PVC and Job live in
    O(system_namespace), which must admit Pod Security C(baseline), under a name with a random part, and its PV is
    bound to that PVC's uid. Its PV, PVC and Job are removed when it ends.
  - The directories of PVCs that running pods still mount stay (a warning names them); so do those on nodes that
    no longer exist (a warning names the node and the path). When a scrub Job fails or does not finish in
    O(scrub_timeout), its PVs are kept and the module fails with the Job's termination message; a rerun tries again.
  - Check mode sends every write as a server-side dry run and creates no scrub Job; RV(scrub) says what would be
    removed.
author:
  - gkm.cluster contributors (@gkm-cluster)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gkm.cluster.cluster_access
options:
  kinds:
    description: The kinds to search, each a dict with C(api_version) and C(kind).
    type: list
    elements: dict
    required: true
  delete_namespaces:
    description: Namespaces to delete when they are labelled as ours (the collection's own namespace).
    type: list
    elements: str
    default: []
  scrub_image:
    description:
      - The tools image the scrub Jobs run (the extraction Jobs' image, with its C(scrub_main) program).
      - Unset, the image of an extraction Job found by the sweep is used; without either, the directories stay and
        a warning names them.
    type: str
  scrub_timeout:
    description: Seconds to wait for the scrub Jobs.
    type: int
    default: 300
  system_namespace:
    description:
      - The collection's own namespace, where the scrub Jobs and their PVCs run; created when missing (labelled as
        ours, enforcing Pod Security C(baseline)).
    type: str
    default: gkm-system
"""

EXAMPLES = r"""
- name: Remove whatever is still labelled as ours
  gkm.cluster.sweep:
    kinds:
      - {api_version: v1, kind: PersistentVolumeClaim}
      - {api_version: v1, kind: Namespace}
    delete_namespaces: [gkm-system]
    scrub_image: registry.example.com/gkm-cluster/tools:0.1.0
"""

RETURN = r"""
deleted:
  description: The objects deleted (or, in check mode, that would be), as C(Kind namespace/name) or C(Kind name).
  returned: always
  type: list
  elements: str
unlabelled:
  description: Namespaces that lost the label and stay.
  returned: always
  type: list
  elements: str
kept:
  description: Objects labelled as ours that stay, with the reason.
  returned: always
  type: list
  elements: str
scrub:
  description: The node disks scrubbed before the slot PVs were deleted.
  returned: always
  type: dict
  contains:
    nodes:
      description:
        - One entry per scrub Job - C(node), C(root), C(paths) (relative to the root), C(pvs), C(job) and C(result)
          (C(removed), or C(would remove) in check mode), or C(error) with the Job's termination message.
      type: list
      elements: dict
skipped_kinds:
  description: Kinds of O(kinds) the API server does not serve.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.gkm.cluster.plugins.module_utils.common.module import run_module  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.platform.tasks import sweep  # noqa: E402

ARGUMENT_SPEC = dict(
    kinds=dict(type="list", elements="dict", required=True),
    delete_namespaces=dict(type="list", elements="str", default=[]),
    scrub_image=dict(type="str"),
    scrub_timeout=dict(type="int", default=300),
    system_namespace=dict(type="str", default="gkm-system"),
)


def main():
    run_module(ARGUMENT_SPEC, sweep)


if __name__ == "__main__":
    main()
