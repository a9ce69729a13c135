"""status.kernelUse exported by the webhook server's /metrics (metrics.py, watched.py), and the Grafana dashboard
(docs/grafana/gkm-kernel-cache.json) querying only what is exported."""

import json
import os
import re

from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import kernel_use_rows
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.metrics import Metrics
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.watched import WatchedCluster, kept_cache
from tests.helpers.paths import ROOT

DASHBOARD = os.path.join(ROOT, "docs", "grafana", "gkm-kernel-cache.json")
ROWS = [{"node": "gkm-real-amd-1", "namespace": "team-a", "podCnt": 2, "hits": 11, "misses": 1,
         "compileSecondsSaved": 5.5}]


def _cache(name, kernel_use=None, kind="GKMCache"):
    status = {"resolvedDigest": "sha256:" + "a" * 64}
    if kernel_use is not None:
        status["kernelUse"] = kernel_use
    metadata = {"name": name, "namespace": "team-a"} if kind == "GKMCache" else {"name": name}
    spec = {"image": "r/x:1"} if kind == "GKMCache" else {"image": "r/x:1", "workloadNamespaces": ["team-a"]}
    return {"kind": kind, "metadata": metadata, "spec": spec, "status": status}


def _exported(text):
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def test_the_status_rows_are_kept_and_exported_per_cache_node_and_namespace():
    # The server keeps the rows it exports, not the pods listed beside them.
    assert kept_cache(_cache("c", {"nodes": ROWS, "pods": [{"name": "p"}]}))["status"]["kernelUse"] == {"nodes": ROWS}
    cluster = WatchedCluster()
    cluster.replace_caches("GKMCache", [kept_cache(_cache("vector-add", {"nodes": ROWS})), _cache("plain")])
    held = cluster.kernel_use
    text = Metrics().render({}, {}, cluster.kernel_use)
    labels = 'kind="GKMCache",cache="vector-add",cache_namespace="team-a",namespace="team-a",node="gkm-real-amd-1"'
    for name, value in (("gkm_cache_kernel_hits", 11), ("gkm_cache_kernel_misses", 1), ("gkm_cache_kernel_pods", 2),
                        ("gkm_cache_compile_seconds_saved", 5.5)):
        assert "%s{%s} %s" % (name, labels, value) in text.splitlines()
    # A watch event replaces one cache's rows, a DELETED one drops them; the app's dict is the same object.
    cluster.apply_cache_event("GKMCache", "MODIFIED", _cache("vector-add", {"nodes": [dict(ROWS[0], hits=12)]}))
    assert "gkm_cache_kernel_hits{%s} 12" % labels in Metrics().render({}, {}, held)
    cluster.apply_cache_event("GKMCache", "DELETED", _cache("vector-add"))
    assert held == {} and "gkm_cache_kernel_hits{" not in Metrics().render({}, {}, held)


def test_malformed_rows_are_left_out_and_label_values_escaped():
    rows = kernel_use_rows({"nodes": [dict(ROWS[0], hits=-1), dict(ROWS[0], node=3), "x",
                                      dict(ROWS[0], node='n"1\n', compileSecondsSaved=None)]})
    assert rows == [('n"1\n', "team-a", 2, 11, 1, None)]
    text = Metrics().render({}, {}, {("GKMCache", ("team-a", "c")): rows})
    assert 'node="n\\"1\\n"} 11' in text and "gkm_cache_compile_seconds_saved{" not in text
    assert kernel_use_rows(None) == [] and kernel_use_rows({"nodes": "x"}) == []


def test_the_dashboard_is_json_and_queries_only_exported_metrics():
    with open(DASHBOARD) as handle:
        dashboard = json.load(handle)
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    expressions += [variable["query"]["query"] for variable in dashboard["templating"]["list"]]
    queried = {name for expr in expressions for name in re.findall(r"\bgkm_[a-z_]+\b", expr)}
    exported = _exported(Metrics().render({}, {}, {("GKMCache", ("team-a", "c")): kernel_use_rows({"nodes": ROWS})}))
    assert queried and queried <= exported, queried - exported
    titles = " ".join(panel["title"] for panel in dashboard["panels"])
    assert "Hit ratio per cache and node" in titles and "seconds saved" in titles.lower()
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
