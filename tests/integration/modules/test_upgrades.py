"""Cache upgrades end to end (docs/upgrades.md) against the real local control plane (kwok nodes) and registry.

Make before break: while one `wait: true` run moves a cache to a new digest, every eligible node always has an
extracted PVC to hand out, and the same run releases the previous digest's slots. Waves: a GKMCache with
spec.upgradePolicy moves at most maxUnavailable nodes at a time, and one `wait: true` run walks every wave; a
failed wave stops the rollout, and its node keeps serving the previous digest, also once its failed Job is gone.
"""

import threading
import time
import uuid

import pytest
from kubernetes import client
from urllib3.exceptions import HTTPError

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    upgrade_state_label_key,
)
from tests.helpers import job_pod_stages as stages
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.integration.modules.test_cache_distribute import (
    EXTRACT_IMAGE,
    GPU_TOLERATION,
    WORKERS,
    distribute,
    remove,
    tolerated,
    unique,
)

pytestmark = [pytest.mark.cluster, pytest.mark.registry]
POOL_LABEL = "gkm.test/upgrade-pool"

POLL_SECONDS = 0.1
EXTRACTED = "gkm.io/extracted-digest"


@pytest.fixture(scope="module")
def images(registry):
    return [kcache_images.build_image(
        registry.host, "upgrades/vector-add", tag, kcache_images.CacheSpec(backend="hip", seed=seed, compiled=True))
        for tag, seed in (("v1", 21), ("v2", 22))]


def short(image):
    return image.digest.split(":")[1][:12]


def node_pvcs(pvcs):
    """{node: {short digest: whether the webhook may hand that PVC out}}: marked extracted at its own digest, and
    not terminating (a pod admitted now could not mount one that is)."""
    by_node = {}
    for pvc in pvcs:
        metadata = pvc.metadata
        if metadata.deletion_timestamp:
            continue
        digest = (metadata.labels or {}).get("gkm.io/digest") or ""
        marker = (metadata.annotations or {}).get(EXTRACTED) or ""
        by_node.setdefault(metadata.labels["gkm.io/node"], {})[digest] = bool(digest) and (
            marker.split(":", 1)[-1].startswith(digest))
    return by_node


class Watcher(threading.Thread):
    """Lists the cache's PVCs every POLL_SECONDS while a run goes: per node, how long it had no PVC to hand out
    and which digests it handed out; per poll, the nodes upgrading (a new-digest PVC not extracted yet) and the
    nodes without a PVC to hand out; with label_key, the values of that node label seen; per node, each change of
    its PVCs with the time since the start (what a gap's message shows)."""

    def __init__(self, kube, name, new_digest, nodes=WORKERS, label_key=None):
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(kube)
        self.selector = "gkm.io/cache=%s,gkm.io/node" % name
        self.new_digest = new_digest
        self.nodes = nodes
        self.done = threading.Event()
        self.polls = 0
        self.missing_since = {}
        self.longest_gap = {node: 0.0 for node in nodes}
        self.digests_seen = {node: set() for node in nodes}
        self.most_upgrading = 0
        self.most_without = 0
        self.label_key = label_key
        self.labels_seen = set()
        self.history = {node: [] for node in nodes}
        self.started = time.monotonic()
        self.error = None

    def run(self):
        try:
            while not self.done.is_set():
                self.record(node_pvcs(self.core.list_persistent_volume_claim_for_all_namespaces(
                    label_selector=self.selector).items), time.monotonic())
                if self.label_key:
                    self.labels_seen.update(node.metadata.labels[self.label_key] for node in self.core.list_node(
                        label_selector=self.label_key).items)
                self.done.wait(POLL_SECONDS)
        except (client.ApiException, HTTPError) as error:  # reported by the test, not lost with the thread
            self.error = error

    def record(self, by_node, now):
        self.polls += 1
        upgrading = without = 0
        for node in self.nodes:
            pvcs = by_node.get(node, {})
            if not self.history[node] or self.history[node][-1][1] != pvcs:
                self.history[node].append((round(now - self.started, 2), pvcs))
            served = {digest for digest, extracted in pvcs.items() if extracted}
            upgrading += pvcs.get(self.new_digest) is False
            if served:
                self.digests_seen[node] |= served
                self.missing_since.pop(node, None)
            else:
                without += 1
                # A single poll without one counts as a gap of one poll interval at least.
                since = self.missing_since.setdefault(node, now - POLL_SECONDS)
                self.longest_gap[node] = max(self.longest_gap[node], now - since)
        self.most_upgrading = max(self.most_upgrading, upgrading)
        self.most_without = max(self.most_without, without)

    def stop(self):
        self.done.set()
        self.join(timeout=10)
        assert self.error is None, self.error
        gap = max(self.longest_gap.values())
        # A gap says what the node's PVCs were poll by poll: which digest went, which was not marked yet.
        changes = "; ".join("%s: %s" % (node, self.history[node]) for node, longest in self.longest_gap.items()
                            if longest)
        return "longest gap %.2fs over %d polls every %.1fs%s" % (
            gap, self.polls, POLL_SECONDS, " (%s)" % changes if changes else "")


def only_new_slots(kube, name, new):
    pvcs = client.CoreV1Api(kube).list_persistent_volume_claim_for_all_namespaces(
        label_selector="gkm.io/cache=%s,gkm.io/node" % name).items
    return {(p.metadata.labels["gkm.io/node"], p.metadata.labels["gkm.io/digest"]) for p in pvcs
            if not p.metadata.deletion_timestamp} == {(node, new) for node in WORKERS}


def test_a_digest_change_never_leaves_a_node_without_an_extracted_pvc_and_releases_the_old_in_the_same_run(
        sim, kube, images, namespace):
    name = unique("mbb")
    args = tolerated(name=name, namespace=namespace, image=images[0].ref, wait=True, wait_timeout=120)
    old, new = short(images[0]), short(images[1])
    try:
        first = distribute(sim, **args)
        assert first["status"]["phase"] == "Extracted", first.get("msg") or first["status"]

        watcher = Watcher(kube, name, new)
        watcher.start()
        started = time.monotonic()
        changed = distribute(sim, **{**args, "image": images[1].ref})
        figures = "%s; run %.1fs" % (watcher.stop(), time.monotonic() - started)
        assert not changed.get("failed"), changed.get("msg")
        assert max(watcher.longest_gap.values()) == 0, "a node had no extracted PVC: %s (%s)" % (
            watcher.longest_gap, figures)
        assert watcher.digests_seen == {node: {old, new} for node in WORKERS}, figures
        # The same run released the previous digest: only the new slots are left, and nothing is kept.
        assert only_new_slots(kube, name, new), figures
        assert {e["phase"] for e in changed["status"]["entries"]} == {"Extracted"}, changed["status"]["entries"]
        print("make before break: %s" % figures)
    finally:
        remove(sim, **args)


def cache_manifest(name, namespace, image, policy, template=None):
    template = template or tolerated()["pod_template"]
    return {"apiVersion": "gkm.io/v1alpha1", "kind": "GKMCache", "metadata": {"name": name, "namespace": namespace},
            "spec": {"image": image, "podTemplate": template, "upgradePolicy": policy}}


def reconcile(sim, name, namespace, check=False, wait_timeout=120, **options):
    return run_module("cache_reconcile", sim.kubeconfig, check=check, diff=check, kind="GKMCache", name=name,
                      namespace=namespace, registry_plain_http=True, extract_image=EXTRACT_IMAGE,
                      host_path_root=NODE_DISK, serving_pvc=False, wait=True, wait_timeout=wait_timeout,
                      node_details=True, **options)


def test_an_upgrade_policy_holds_while_paused_then_moves_one_node_at_a_time_in_one_run(
        sim, kube, crds, images, namespace):

    name = unique("waves")
    old, new = short(images[0]), short(images[1])
    core = client.CoreV1Api(kube)

    def state_labels():
        key = upgrade_state_label_key(name, namespace)
        return {node: (core.read_node(node).metadata.labels or {}).get(key) for node in WORKERS}

    def update(image, policy):
        crds.patch_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcaches", name,
                                            {"spec": {"image": image, "upgradePolicy": policy}})

    def upgrade_states():
        """{node: upgradeState of its per-node object's entry at the new digest}, as `kubectl get gkmcachenodes`."""
        objects = crds.list_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcachenodes")["items"]
        return {obj["metadata"]["name"]: obj["status"]["caches"][name].get(images[1].digest, {}).get("upgradeState")
                for obj in objects if obj["metadata"]["name"] in WORKERS and name in obj["status"].get("caches", {})}

    crds.create_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcaches",
                                         cache_manifest(name, namespace, images[0].ref, {"maxUnavailable": 1}))
    try:
        first = reconcile(sim, name, namespace)
        assert not first.get("failed"), first.get("msg")
        # No node had a previous digest: every node takes the first one at once, and no state label goes up.
        assert first["rollout"]["complete"] and first["rollout"]["labels"] == [], first["rollout"]

        update(images[1].ref, {"maxUnavailable": 1, "paused": True})
        # --check --diff shows the wave plan and writes nothing.
        planned = reconcile(sim, name, namespace, check=True)
        upgrade = [d for d in planned["diff"] if d.get("before_header") == "upgrade of %s/%s" % (namespace, name)]
        assert len(upgrade) == 1 and upgrade[0]["after"]["waves"] == [[node] for node in WORKERS], planned["diff"]
        assert state_labels() == {node: None for node in WORKERS}
        paused = reconcile(sim, name, namespace)
        assert not paused.get("failed"), paused.get("msg")
        assert paused["rollout"]["pending"] == WORKERS and paused["rollout"]["starting"] == [], paused["rollout"]
        assert paused["rollout"]["waves"] == [[node] for node in WORKERS], paused["rollout"]
        assert state_labels() == {node: "pending" for node in WORKERS}
        assert {e["reason"] for e in paused["status"]["entries"] if e["digest"] == new} == {"WaitingForWave"}
        # Each node's per-node entry of the new digest says what its label says.
        assert upgrade_states() == {node: "pending" for node in WORKERS}

        update(images[1].ref, {"maxUnavailable": 1, "paused": False})
        watcher = Watcher(kube, name, new)
        watcher.start()
        started = time.monotonic()
        rolled = reconcile(sim, name, namespace)
        figures = "%s; at most %d node(s) upgrading at once; run %.1fs" % (
            watcher.stop(), watcher.most_upgrading, time.monotonic() - started)
        assert not rolled.get("failed"), rolled.get("msg")
        assert watcher.most_upgrading == 1, figures
        assert max(watcher.longest_gap.values()) == 0, figures
        assert rolled["rollout"]["complete"] and rolled["rollout"]["upgraded"] == WORKERS, rolled["rollout"]
        assert watcher.digests_seen == {node: {old, new} for node in WORKERS}, figures
        assert only_new_slots(kube, name, new), figures
        # Complete: the state labels are gone, and so are the entries' upgrade states.
        assert state_labels() == {node: None for node in WORKERS}
        assert upgrade_states() == {node: None for node in WORKERS}
        print("waves: %s" % figures)
    finally:
        run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=namespace,
                   state="absent", force=True)
        crds.delete_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcaches", name)


def test_a_wave_that_fails_verification_stops_the_rollout_and_its_node_keeps_the_previous_digest(
        sim, kube, crds, images, namespace):

    name = unique("poison")
    old, new = short(images[0]), short(images[1])
    core = client.CoreV1Api(kube)
    crds.create_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcaches",
                                         cache_manifest(name, namespace, images[0].ref, {"maxUnavailable": 1}))
    try:
        # The kwok stage that fails the new digest's Job selects it by a pod template label, which the system
        # namespace refuses: the Jobs in the cache's namespace (the layout system_namespace_jobs=false keeps).
        first = reconcile(sim, name, namespace, system_namespace_jobs=False)
        assert not first.get("failed"), first.get("msg")
        # The new digest's extraction refuses (as a failed signature or digest check would): the first wave fails.
        crds.patch_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcaches", name, {"spec": {
            "image": images[1].ref, "podTemplate": {"metadata": {"labels": {stages.REFUSAL_LABEL: "true"}}}}})
        watcher = Watcher(kube, name, new)
        watcher.start()
        with stages.stage(kube, stages.REFUSAL):
            stopped = reconcile(sim, name, namespace, system_namespace_jobs=False)
        figures = watcher.stop()
        assert not stopped.get("failed"), stopped.get("msg")
        rollout = stopped["rollout"]
        assert rollout["stopped"] and rollout["rolled-back"] == WORKERS[:1], rollout
        assert rollout["pending"] == WORKERS[1:] and rollout["waves"] == [], rollout
        assert "failureThreshold" in rollout["message"], rollout["message"]
        # Every node still hands out the previous digest; only the failed node ever created a new slot.
        assert max(watcher.longest_gap.values()) == 0 and watcher.most_upgrading <= 1, figures
        assert node_pvcs(core.list_persistent_volume_claim_for_all_namespaces(
            label_selector="gkm.io/cache=%s,gkm.io/node" % name).items) == {
            WORKERS[0]: {old: True, new: False}, WORKERS[1]: {old: True}, WORKERS[2]: {old: True}}
        key = upgrade_state_label_key(name, namespace)
        assert {node: (core.read_node(node).metadata.labels or {}).get(key) for node in WORKERS} == {
            WORKERS[0]: "rolled-back", WORKERS[1]: "pending", WORKERS[2]: "pending"}
        upgrade = crds.get_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcaches", name)["status"]
        assert upgrade["upgrade"]["phase"] == "Stopped" and upgrade["upgrade"]["counts"] == {
            "pending": 2, "upgrading": 0, "upgraded": 0, "failed": 0, "rolledBack": 1}, upgrade["upgrade"]
        assert {c["type"]: c["reason"] for c in upgrade["conditions"]}["Upgraded"] == "RolloutStopped"

        # The failure outlives its Job: with the failed Job gone (as its TTL would delete it), the next run creates
        # no Job again and the node stays rolled back, its PVC labelled with the failed digest.
        failed = [e for e in stopped["status"]["entries"] if e["digest"] == new and e["phase"] == "Error"]
        assert [e["node"] for e in failed] == WORKERS[:1], stopped["status"]["entries"]
        batch = client.BatchV1Api(kube)
        batch.delete_namespaced_job(failed[0]["job"], namespace, propagation_policy="Background")
        again = reconcile(sim, name, namespace, system_namespace_jobs=False)
        assert not again.get("failed"), again.get("msg")
        assert again["rollout"]["stopped"] and again["rollout"]["rolled-back"] == WORKERS[:1], again["rollout"]
        assert not [a for a in again["plan"]["actions"] if a["kind"] == "Job"], again["plan"]
        entry = next(e for e in again["status"]["entries"] if e["node"] == WORKERS[0] and e["digest"] == new)
        assert entry["phase"] == "Error" and stages.REFUSAL_MESSAGE in entry["message"], entry
        assert [j.metadata.name for j in batch.list_namespaced_job(
            namespace, label_selector="gkm.io/cache=%s,gkm.io/digest=%s" % (name, new)).items
            if not j.metadata.deletion_timestamp] == []
        recorded = core.read_namespaced_persistent_volume_claim(failed[0]["pvc"], namespace)
        assert recorded.metadata.labels["gkm.io/extraction-failed"] == new
    finally:
        run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=namespace,
                   state="absent", force=True)
        crds.delete_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcaches", name)


def test_twenty_nodes_at_a_quarter_never_have_more_than_five_upgrading_or_without_a_verified_cache(
        sim, kube, crds, images, namespace, sim_nodes):
    """The issue's 20-node upgrade: kwok GPU nodes of their own, maxUnavailable 25%, the PVCs polled through the API
    during the one `wait: true` run that walks every wave."""

    pool = "waves-%s" % uuid.uuid4().hex[:4]
    nodes = sim_nodes([{"name": pool, "count": 20, "vendor": "amd", "labels": {POOL_LABEL: pool}}], timeout=120)
    template = {"spec": {"nodeSelector": {POOL_LABEL: pool}, "tolerations": [GPU_TOLERATION]}}
    name = unique("twenty")
    old, new = short(images[0]), short(images[1])
    crds.create_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcaches", cache_manifest(
        name, namespace, images[0].ref, {"maxUnavailable": "25%"}, template))
    try:
        first = reconcile(sim, name, namespace, wait_timeout=300)
        assert not first.get("failed"), first.get("msg")
        assert sorted(first["eligible_nodes"]) == nodes and first["rollout"]["complete"], first["rollout"]
        crds.patch_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcaches", name,
                                            {"spec": {"image": images[1].ref}})
        watcher = Watcher(kube, name, new, nodes, upgrade_state_label_key(name, namespace))
        watcher.start()
        started = time.monotonic()
        rolled = reconcile(sim, name, namespace, wait_timeout=300)
        figures = "%s; at most %d upgrading and %d without an extracted PVC at once; run %.1fs" % (
            watcher.stop(), watcher.most_upgrading, watcher.most_without, time.monotonic() - started)
        assert not rolled.get("failed"), rolled.get("msg")
        # 5 at once (a wave's new PVCs stay unmarked until all its Jobs are done), never more; no node without one.
        assert watcher.most_upgrading == 5 and watcher.most_without == 0, figures
        assert rolled["rollout"]["complete"] and rolled["rollout"]["upgraded"] == nodes, rolled["rollout"]
        assert watcher.digests_seen == {node: {old, new} for node in nodes}, figures
        # The state labels followed the waves during the run, and went at its end.
        assert {"pending", "upgrading", "upgraded"} <= watcher.labels_seen, watcher.labels_seen
        assert not client.CoreV1Api(kube).list_node(label_selector=upgrade_state_label_key(name, namespace)).items
        status = crds.get_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcaches", name)["status"]
        assert status["upgrade"]["phase"] == "Complete" and status["upgrade"]["counts"]["upgraded"] == 20, status
        print("20 nodes at 25%%: %s" % figures)
    finally:
        run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=namespace,
                   state="absent", force=True)
        crds.delete_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcaches", name)
