# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a reconcile's cluster facts come from, behind one interface (the seam of issue 33) (I/O).

A FactsSource answers each read the facts stage makes, one method per read, and says how to wait between two polls.
ListSource answers with paged LISTs through common/kube.py: what the modules send, the only reads facts/cluster.py
made before the seam. facts/index.py answers the same reads from an in-memory copy of the cluster that a controller
keeps current from watch events. facts/cluster.py assemble_facts builds the planner's ClusterFacts from either.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import managed_selector, unmanaged_selector
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CACHE_KINDS, GROUP, VERSION
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.node_objects import list_node_objects
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.trimmed import (
    FINISHED_PODS,
    UNFINISHED_PODS,
    node_facts,
    object_facts,
    without_managed_fields,
)

# ------------------------------------------------------------------ the interface


class FactsSource:
    """Every read of the cluster a reconcile's facts stage makes, one method per read.

    gather(calls, what) runs independent reads (callables without arguments) and returns their results in order;
    a source that talks to the API server may run them at once. Each other method returns plain API dicts.
    """

    def gather(self, calls, what):
        raise NotImplementedError

    def settled(self, digest):
        """True when nothing this source would read changed since an earlier run of the same cache at `digest` read
        it and found nothing to do, so this run may stop before reading (the controller's resync). A source that
        keeps no record of earlier runs never knows."""
        return False

    def pause(self, seconds):
        """Wait before reading again (a poll of apply/wait.py): at most `seconds`, less when the source knows the
        cluster changed. Returns True when it saw a change, False when it only waited."""
        raise NotImplementedError

    def cache_objects(self, kind, selector):
        """Objects of one of OBJECT_KINDS carrying the cache's labels (cache_selector), cluster-wide."""
        raise NotImplementedError

    def nodes(self, pulled_image=None):
        """Every Node as node_facts(node, pulled_image) keeps it."""
        raise NotImplementedError

    def namespace_names(self):
        raise NotImplementedError

    def storage_classes(self):
        raise NotImplementedError

    def unfinished_pods(self, namespace):
        """Pods of the namespace whose phase is neither Succeeded nor Failed."""
        raise NotImplementedError

    def finished_workload_pods(self, namespace):
        """Succeeded or Failed pods of the namespace that are not the collection's (they still hold their claims)."""
        raise NotImplementedError

    def pods(self, namespace):
        """Every pod of the namespace (a finished pod's kernel-use sidecar printed its last figures)."""
        raise NotImplementedError

    def failed_managed_pods(self, namespace):
        """Failed pods of the namespace labelled as the collection's (its Jobs' pods)."""
        raise NotImplementedError

    def claims_named(self, name):
        """PVCs of that name in every namespace, whoever made them."""
        raise NotImplementedError

    def cache_resources_named(self, kind, name):
        """Cache resources of a kind (GKMCache or ClusterGKMCache) with that name, each with its kind set."""
        raise NotImplementedError

    def node_objects(self, cache_kind, namespace):
        """The collection's per-node objects of a cache kind (in the cache's namespace for a GKMCache): what
        status/node_writer.py compares its writes with."""
        raise NotImplementedError


class ListSource(FactsSource):
    """The reads as LISTs through common/kube.py: the requests the modules send, in the order assemble_facts asks."""

    def __init__(self, kube):
        self.kube = kube

    def gather(self, calls, what):
        return self.kube.map_all(lambda call: call(), calls, what, DistributeError)

    def pause(self, seconds):
        """Sleep the whole interval: LISTs cannot tell that nothing changed."""
        time.sleep(seconds)
        return False

    def _listed(self, kind, **query):
        """Every object of a paged LIST, without managedFields, dropped page by page."""
        return [without_managed_fields(obj) for obj in self.kube.items(kind, **query)]

    def cache_objects(self, kind, selector):
        return [object_facts(kind, obj) for obj in self.kube.items(kind, label_selector=selector)]

    def nodes(self, pulled_image=None):
        return [node_facts(node, pulled_image) for node in self.kube.items("Node")]

    def namespace_names(self):
        return {namespace["metadata"]["name"] for namespace in self.kube.items("Namespace", metadata_only=True)}

    def storage_classes(self):
        return self.kube.list("StorageClass")

    def unfinished_pods(self, namespace):
        return self._listed("Pod", namespace=namespace, field_selector=UNFINISHED_PODS)

    def finished_workload_pods(self, namespace):
        return self._listed("Pod", namespace=namespace, label_selector=unmanaged_selector(),
                            field_selector=FINISHED_PODS)

    def pods(self, namespace):
        return self._listed("Pod", namespace=namespace)

    def failed_managed_pods(self, namespace):
        return self._listed("Pod", namespace=namespace, label_selector=managed_selector(),
                            field_selector="status.phase=Failed")

    def claims_named(self, name):
        return self.kube.list("PersistentVolumeClaim", field_selector="metadata.name=%s" % name)

    def cache_resources_named(self, kind, name):
        path = "/apis/%s/%s/%s" % (GROUP, VERSION, CACHE_KINDS[kind][0])
        status, data = self.kube.request("GET", path, [("fieldSelector", "metadata.name=%s" % name)],
                                         what="list %s" % path)
        return [dict(item, kind=kind) for item in ((data or {}).get("items") or []) if status == 200]

    def node_objects(self, cache_kind, namespace):
        return list_node_objects(self.kube, cache_kind, namespace)
