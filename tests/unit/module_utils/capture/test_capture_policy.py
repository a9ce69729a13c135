"""capture/policy.py: a pod is captured only when it opted in to the cache and the admin allows the cache and its
namespace; the annotation never widens the admin's setting."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError
from ansible_collections.gkm.cluster.plugins.module_utils.capture.policy import check_allowed, opted_in_cache


def _pod(namespace="team-a", capture="llama"):
    annotations = {"gkm.io/capture": capture} if capture else {}
    return {"metadata": {"name": "p", "namespace": namespace, "annotations": annotations}}


def test_an_opted_in_pod_of_an_allowed_namespace_into_an_allowed_cache_passes():
    check_allowed(_pod(), "GKMCache", "llama", "team-a", ["team-a/llama"], ["team-a"])
    check_allowed(_pod(), "ClusterGKMCache", "llama", None, ["llama"], ["team-a"])


@pytest.mark.parametrize("pod, kind, cache_namespace, caches, namespaces, fragment", [
    (_pod(capture=None), "GKMCache", "team-a", ["team-a/llama"], ["team-a"], "has not opted in"),
    (_pod(capture="other"), "GKMCache", "team-a", ["team-a/llama"], ["team-a"], "has not opted in"),
    (_pod(), "GKMCache", "team-a", ["team-b/llama"], ["team-a"], "not in allowed_caches"),
    (_pod(), "ClusterGKMCache", None, ["team-a/llama"], ["team-a"], "not in allowed_caches"),
    (_pod(), "GKMCache", "team-a", ["team-a/llama"], [], "not in allowed_namespaces"),
    (_pod(namespace="team-b"), "GKMCache", "team-a", ["team-a/llama"], ["team-a", "team-b"], "not in the namespace"),
], ids=["no annotation", "another cache", "cache not allowed", "cluster cache not allowed", "namespace not allowed",
        "another namespace's cache"])
def test_anything_else_is_refused(pod, kind, cache_namespace, caches, namespaces, fragment):
    with pytest.raises(CaptureError) as refused:
        check_allowed(pod, kind, "llama", cache_namespace, caches, namespaces)
    assert fragment in str(refused.value), str(refused.value)


def test_the_cache_an_opt_in_names_is_the_namespace_s_own_before_a_cluster_cache_and_only_one_the_admin_allows():
    assert opted_in_cache(_pod(), ["team-a/llama", "llama"]) == ("GKMCache", "llama", "team-a")
    assert opted_in_cache(_pod(), ["llama"]) == ("ClusterGKMCache", "llama", None)
    # Another namespace's GKMCache of that name is not the pod's to name.
    assert opted_in_cache(_pod(), ["team-b/llama"]) is None
    assert opted_in_cache(_pod(capture=None), ["team-a/llama"]) is None
