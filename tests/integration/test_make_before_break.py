"""Make before break end to end (docs/upgrades.md) against the real local control plane (kwok nodes) and registry:
while one `wait: true` run moves a cache to a new digest, every eligible node always has an extracted PVC to hand
out, and the same run releases the previous digest's slots."""

import threading
import time

import pytest
from kubernetes import client
from urllib3.exceptions import HTTPError

from tests.helpers import kcache_images
from tests.integration.test_cache_distribute import WORKERS, distribute, remove, tolerated, unique

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

POLL_SECONDS = 0.1
EXTRACTED = "gkm.io/extracted-digest"


@pytest.fixture(scope="module")
def images(registry):
    return [kcache_images.build_image(
        registry.host, "mbb/vector-add", tag, kcache_images.CacheSpec(backend="hip", seed=seed))
        for tag, seed in (("v1", 21), ("v2", 22))]


def handed_out(pvcs):
    """{node: short digests of its PVCs the webhook may hand out}: marked extracted at their own digest, and not
    terminating (a pod admitted now could not mount one that is)."""
    served = {}
    for pvc in pvcs:
        metadata = pvc.metadata
        digest = (metadata.labels or {}).get("gkm.io/digest") or ""
        marker = (metadata.annotations or {}).get(EXTRACTED) or ""
        if digest and marker.split(":", 1)[-1].startswith(digest) and not metadata.deletion_timestamp:
            served.setdefault(metadata.labels["gkm.io/node"], set()).add(digest)
    return served


class Watcher(threading.Thread):
    """Lists the cache's PVCs every POLL_SECONDS and records, per node, how long it had none to hand out."""

    def __init__(self, kube, name):
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(kube)
        self.selector = "gkm.io/cache=%s,gkm.io/node" % name
        self.done = threading.Event()
        self.polls = 0
        self.missing_since = {}
        self.longest_gap = {node: 0.0 for node in WORKERS}
        self.digests_seen = {node: set() for node in WORKERS}
        self.error = None

    def run(self):
        try:
            while not self.done.is_set():
                served = handed_out(self.core.list_persistent_volume_claim_for_all_namespaces(
                    label_selector=self.selector).items)
                now = time.monotonic()
                self.polls += 1
                for node in WORKERS:
                    if served.get(node):
                        self.digests_seen[node] |= served[node]
                        self.missing_since.pop(node, None)
                    else:
                        # A single poll without one counts as a gap of one poll interval at least.
                        since = self.missing_since.setdefault(node, now - POLL_SECONDS)
                        self.longest_gap[node] = max(self.longest_gap[node], now - since)
                self.done.wait(POLL_SECONDS)
        except (client.ApiException, HTTPError) as error:  # reported by the test, not lost with the thread
            self.error = error


def test_a_digest_change_never_leaves_a_node_without_an_extracted_pvc_and_releases_the_old_in_the_same_run(
        sim, kube, images, namespace):
    name = unique("mbb")
    args = tolerated(name=name, namespace=namespace, image=images[0].ref, wait=True, wait_timeout=120)
    old, new = (image.digest.split(":")[1][:12] for image in images)
    try:
        first = distribute(sim, **args)
        assert first["status"]["phase"] == "Extracted", first.get("msg") or first["status"]

        watcher = Watcher(kube, name)
        watcher.start()
        started = time.monotonic()
        changed = distribute(sim, **{**args, "image": images[1].ref})
        elapsed = time.monotonic() - started
        watcher.done.set()
        watcher.join(timeout=10)
        assert watcher.error is None, watcher.error
        assert not changed.get("failed"), changed.get("msg")

        gap = max(watcher.longest_gap.values())
        figures = "longest gap %.2fs over %d polls every %.1fs; run %.1fs" % (gap, watcher.polls, POLL_SECONDS, elapsed)
        assert gap == 0, "a node had no extracted PVC: %s (%s)" % (watcher.longest_gap, figures)
        assert watcher.digests_seen == {node: {old, new} for node in WORKERS}, figures
        # The same run released the previous digest: only the new slots are left, and nothing is kept.
        pvcs = client.CoreV1Api(kube).list_persistent_volume_claim_for_all_namespaces(
            label_selector="gkm.io/cache=%s,gkm.io/node" % name).items
        assert {(p.metadata.labels["gkm.io/node"], p.metadata.labels["gkm.io/digest"]) for p in pvcs
                if not p.metadata.deletion_timestamp} == {(node, new) for node in WORKERS}, figures
        assert changed["status"]["phase"] == "Extracted", changed["status"]
        assert {e["phase"] for e in changed["status"]["entries"]} == {"Extracted"}, changed["status"]["entries"]
        print("make before break: %s" % figures)
    finally:
        remove(sim, **args)
