# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Argument specs shared by the cache modules; their docs are the doc fragments gkm.cluster.registry and
gkm.cluster.distribution."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    MOUNT_MODES,
    PVC,
    SYSTEM_NAMESPACE,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.args import REGISTRY_ARG_SPEC

# How a cache is distributed, independent of which cache: set by the operator, not by a GKMCache.
DISTRIBUTION_ARG_SPEC = dict(
    REGISTRY_ARG_SPEC,
    node_selector=dict(type="dict"),
    compatibility=dict(type="str", choices=["skip", "fail", "ignore"], default="skip"),
    create_namespaces=dict(type="bool", default=False),
    create_pvs=dict(type="str", choices=["auto", "always", "never"], default="auto"),
    host_path_read_only_many=dict(type="bool", default=False),
    host_path_root=dict(type="str", default="/var/lib/gkm-cluster/caches"),
    system_namespace=dict(type="str", default=SYSTEM_NAMESPACE),
    system_namespace_jobs=dict(type="bool", default=True),
    set_volume_owner=dict(type="str", choices=["auto", "always", "never"], default="auto"),
    serving_pvc=dict(type="bool", default=True),
    # A cache resource's spec.mountMode wins over it (resource.distribute_params).
    mount_mode=dict(type="str", choices=list(MOUNT_MODES), default=PVC),
    extract_image=dict(type="str"),
    # Public, but a PEM block in every logged invocation is noise.
    signature_public_key=dict(type="str", no_log=True),
    signature_required=dict(type="bool", default=False),
    job_limits=dict(type="dict", options=dict(
        backoff_limit=dict(type="int", default=2),
        active_deadline_seconds=dict(type="int", default=900),
        ttl_seconds_after_finished=dict(type="int", default=86400),
    )),
    # No defaults: a limit left unset is the extractor's own (extract/pull.py), so there is one place for them.
    extract_limits=dict(type="dict", options=dict(
        max_bytes=dict(type="int"),
        max_files=dict(type="int"),
        max_expansion_ratio=dict(type="int"),
        max_digests=dict(type="int"),
    )),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    prune=dict(type="bool", default=True),
    force=dict(type="bool", default=False),
    wait=dict(type="bool", default=False),
    wait_timeout=dict(type="int", default=300),
    concurrency=dict(type="int", default=16),
    # What the result reports, not how the cache is distributed; module_result.py.
    node_details=dict(type="bool", default=False),
)
