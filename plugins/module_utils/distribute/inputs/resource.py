# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GKMCache and ClusterGKMCache custom resources: their API path, and their spec as distribution options.

Pure functions: the cache_reconcile module reads a resource, turns its spec into cache_distribute
options with `distribute_params`; reconcile.py writes its status (status/resource_status.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import (
    CLUSTER,
    SPEC_FIELDS,
    read_cache,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KINDS,
    GROUP,
    VERSION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.upgrade_policy import parse_upgrade_policy


class ResourceError(GkmError, ValueError):
    """A cache resource cannot be reconciled as written; the message names the field."""

    reason = "InvalidSpec"


def resource_path(kind, name=None, namespace=None):
    """API path of a cache resource (collection path without a name)."""
    if kind not in CACHE_KINDS:
        raise ResourceError("kind must be one of %s, got %r" % (", ".join(sorted(CACHE_KINDS)), kind))
    plural, namespaced = CACHE_KINDS[kind]
    path = "/apis/%s/%s" % (GROUP, VERSION)
    if namespaced:
        if not namespace:
            raise ResourceError("a %s needs a namespace" % kind)
        path += "/namespaces/%s" % namespace
    path += "/" + plural
    return path + ("/" + name if name else "")


def distribute_params(resource, defaults):
    """cache_distribute options for a cache resource: its spec over the operator's defaults.

    defaults holds the options a resource cannot set (extract_image, registry access, create_pvs,
    wait, ...) and the mount mode of a resource without spec.mountMode; the resource's spec decides image,
    access modes, storage class and pod template. The resource is read as the webhook reads it (contract/).
    """
    cache = read_cache(resource, defaults.get("mount_mode"))
    if cache.problems:
        raise ResourceError(cache.problems[0])
    params = copy.deepcopy(defaults)
    params.update({attribute: copy.deepcopy(getattr(cache, attribute)) for attribute, _field in SPEC_FIELDS})
    params.update(
        name=cache.name,
        upgrade_policy=upgrade_policy(resource) if cache.upgrade_policy is not None else None,
        scope=cache.scope,
        namespace=cache.namespace,
        workload_namespaces=params["workload_namespaces"] if cache.scope == CLUSTER else None,
    )
    return params


def upgrade_policy(resource):
    """The resource's spec.upgradePolicy (upgrade_policy.py), its defaults when it has none; raises
    UpgradePolicyError naming the field."""
    metadata = resource.get("metadata") or {}
    where = "%s %s: spec.upgradePolicy" % (resource.get("kind"), metadata.get("name"))
    return parse_upgrade_policy((resource.get("spec") or {}).get("upgradePolicy"), where)
