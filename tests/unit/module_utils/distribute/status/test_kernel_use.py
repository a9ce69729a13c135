"""status.kernelUse (distribute/status/kernel_use.py): a pod's sidecar report judged against the cache's image,
clamped and summarized; read from the pods' logs without failing the reconcile."""

import json

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.source import ListSource
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.spec import CacheSpec
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import kernel_use

TARGETS = [{"backend": "hip", "arch": "gfx90a", "warp_size": 64}]


def _spec(**fields):
    return CacheSpec(**dict(dict(name="vector-add", cache_namespace="team-a", namespaces=["team-a"], targets=TARGETS,
                                 triton_version="3.9.0", compile_seconds_per_kernel=0.5), **fields))


def _pod(name, node="gkm-real-amd-1", created="2026-11-28T05:00:00Z", sidecar="gkm-kernel-use-vector-add"):
    return {"metadata": {"name": name, "namespace": "team-a", "creationTimestamp": created},
            "spec": {"nodeName": node, "initContainers": [{"name": "gkm-kernels-vector-add"}, {"name": sidecar}]}}


def _report(hits=6, misses=0, overlaid=6, compiled=()):
    return {"gkm_kernel_use": 1, "overlaid": overlaid, "hits": hits, "misses": misses, "compiled": list(compiled)}


def _compiled(name="matmul", version="3.9.0", target="hip:gfx90a", cached_name=False, left_out=False):
    return {"name": name, "hash_dir": "X", "triton_version": version, "target": target, "cached_name": cached_name,
            "left_out": left_out}


def test_all_hits_and_the_seconds_they_saved():
    entry = kernel_use.pod_entry(_pod("warm"), _report(), _spec())
    assert entry == {"namespace": "team-a", "name": "warm", "node": "gkm-real-amd-1", "hits": 6, "misses": 0,
                     "missed": [], "compileSecondsSaved": 3.0}


@pytest.mark.parametrize(("compiled", "expected"), [
    (_compiled(), {"kernel": "matmul", "reason": "notCached"}),
    (_compiled(version="3.8.0"), {"kernel": "matmul", "reason": "tritonVersion", "tritonVersion": "3.8.0"}),
    (_compiled(target="cuda:90"), {"kernel": "matmul", "reason": "target", "target": "cuda:90"}),
    (_compiled(left_out=True), {"kernel": "matmul", "reason": "leftOut"}),
    (_compiled(cached_name=True), {"kernel": "matmul", "reason": "cachedName"}),
    # The version is compared first: another Triton explains the other target's miss too.
    (_compiled(version="3.8.0", target="cuda:90"), {"kernel": "matmul", "reason": "tritonVersion",
                                                    "tritonVersion": "3.8.0"}),
])
def test_each_miss_says_why_in_the_collections_words(compiled, expected):
    entry = kernel_use.pod_entry(_pod("p"), _report(hits=5, misses=1, compiled=[compiled]), _spec())
    assert entry["missed"] == [expected] and entry["misses"] == 1 and "reason" not in entry
    assert set(kernel_use.REASONS) >= {m["reason"] for m in entry["missed"]}


def test_a_cache_of_another_triton_build_hits_nothing_and_the_pod_says_so():
    """The cache's triton-key differs from the pod's Triton: same version, same kernels by name, no key matches."""
    compiled = [_compiled(name, cached_name=True) for name in ("vector_add", "row_softmax", "matmul")]
    entry = kernel_use.pod_entry(_pod("p"), _report(hits=0, misses=3, compiled=compiled), _spec())
    assert entry["reason"] == kernel_use.ANOTHER_BUILD and {m["reason"] for m in entry["missed"]} == {"cachedName"}
    # One hit is enough to rule it out.
    assert "reason" not in kernel_use.pod_entry(_pod("p"), _report(hits=1, misses=3, compiled=compiled), _spec())


def test_a_pod_cannot_inflate_forge_or_inject():
    forged = {"gkm_kernel_use": 1, "overlaid": 3, "hits": 10 ** 9, "misses": 10 ** 9, "namespace": "kube-system",
              "name": "other", "node": "elsewhere",
              "compiled": [_compiled(name="x; DROP", version="3.9.0\nhello", target="cuda:90 evil")] * 40}
    entry = kernel_use.pod_entry(_pod("mine"), forged, _spec())
    # Counted for the pod the API names, hits no more than the kernels its overlay holds, misses clamped.
    assert (entry["namespace"], entry["name"], entry["node"]) == ("team-a", "mine", "gkm-real-amd-1")
    assert entry["hits"] == 3 and entry["misses"] == kernel_use.MAX_COUNT
    assert len(entry["missed"]) == kernel_use.MAX_MISSES
    # Nothing the pod wrote is echoed unless it has the shape Triton gives it.
    assert entry["missed"][0] == {"kernel": "?", "reason": "notCached"}
    for bad in ("nope", True, -5, 2.5, None):
        report = {"gkm_kernel_use": 1, "hits": bad, "misses": bad, "overlaid": 6, "compiled": bad}
        assert kernel_use.pod_entry(_pod("p"), report, _spec())["hits"] == 0


def test_without_recorded_compile_seconds_nothing_is_estimated():
    spec = _spec(compile_seconds_per_kernel=None)
    entries = [kernel_use.pod_entry(_pod("a"), _report(), spec)]
    assert "compileSecondsSaved" not in entries[0]
    assert "compileSecondsSaved" not in kernel_use.summary(entries, False)


def test_the_summary_has_per_node_rows_and_the_newest_pods():
    spec = _spec()
    entries = [kernel_use.pod_entry(_pod("p%02d" % i, node="n%d" % (i % 2)), _report(hits=i % 7, misses=1), spec)
               for i in range(13)]
    status = kernel_use.summary(entries, True)
    assert (status["podCnt"], status["hits"], status["misses"]) == (13, sum(i % 7 for i in range(13)), 13)
    assert [(r["node"], r["podCnt"]) for r in status["nodes"]] == [("n0", 7), ("n1", 6)]
    assert sum(r["compileSecondsSaved"] for r in status["nodes"]) == pytest.approx(status["compileSecondsSaved"])
    assert [p["name"] for p in status["pods"]] == ["p%02d" % i for i in range(kernel_use.MAX_LISTED_PODS)]


def test_last_report_skips_other_lines():
    line = json.dumps(_report(hits=2))
    assert kernel_use.last_report("Traceback\n%s\nnot json\n[1]\n" % line)["hits"] == 2
    assert kernel_use.last_report('{"hits": 3}') is None and kernel_use.last_report(None) is None


class _Kube:
    """The two calls read_kernel_use makes through a ListSource: a LIST of pods, and a pod's log (text)."""

    def __init__(self, pods, logs):
        self.pods, self.logs, self.asked = pods, logs, []

    def items(self, kind, namespace=None):
        assert kind == "Pod"
        return [p for p in self.pods if p["metadata"]["namespace"] == namespace]

    def request(self, method, path, query=None, what=None, accept=None, text=False):
        assert (method, text, accept) == ("GET", True, "*/*")
        self.asked.append((path, dict(query)))
        log = self.logs[path.split("/")[-2]]
        if isinstance(log, Exception):
            raise log
        return 200, log


def test_read_kernel_use_reads_the_newest_pods_with_the_sidecar_and_skips_what_it_cannot_read():
    pods = [_pod("p%02d" % i, created="2026-11-28T05:%02d:00Z" % i) for i in range(kernel_use.MAX_PODS + 3)]
    pods += [_pod("other-cache", sidecar="gkm-kernel-use-softmax"), _pod("starting", created="2026-11-28T06:00:00Z")]
    logs = {p["metadata"]["name"]: json.dumps(_report(hits=1)) + "\n" for p in pods}
    logs["starting"] = KubeError("container not started", 400)
    logs["p22"] = "no report yet\n"
    kube = _Kube(pods, logs)
    status = kernel_use.read_kernel_use(kube, _spec(), ListSource(kube))
    read = [path.split("/")[-2] for path, _query in kube.asked]
    assert read == ["starting"] + ["p%02d" % i for i in range(22, 3, -1)]
    assert kube.asked[0][1] == {"container": "gkm-kernel-use-vector-add", "tailLines": "1",
                                "limitBytes": str(kernel_use.LOG_BYTES)}
    assert status["podCnt"] == kernel_use.MAX_PODS - 2 and status["pods"][0]["name"] == "p21"
