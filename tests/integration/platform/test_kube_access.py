"""common/kube.py against the real API server, with whichever kubernetes client this interpreter has.

make test runs this file with the highest client the collection declares (the main venv) and with the
lowest (the lowest-versions venv), so every request shape the collection sends is checked on both:
server-side apply, its dry run, GET/LIST with selectors, DELETE, watch, and the server's errors.
"""

import threading

import kubernetes
import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_kubeconfig
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube, KubeError, resource_path

pytestmark = [pytest.mark.cluster, pytest.mark.matrix]


def config_map(namespace, name, value):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": {"gkm.io/test": "kube-access"}},
            "data": {"value": value}}


@pytest.fixture
def kube_access(sim):
    return Kube(api_client_from_kubeconfig(sim.kubeconfig))


def test_apply_dry_run_list_and_delete(kube_access, namespace):
    created = kube_access.apply(config_map(namespace, "first", "1"))
    assert created["data"] == {"value": "1"}
    assert created["metadata"]["managedFields"][0]["manager"] == "gkm.cluster"
    assert kube_access.writes == 1

    dry = Kube(kube_access.api, dry_run=True)
    assert dry.apply(config_map(namespace, "first", "2"))["data"] == {"value": "2"}
    assert dry.delete("ConfigMap", "first", namespace) is True
    assert dry.writes == 0
    assert kube_access.get("ConfigMap", "first", namespace)["data"] == {"value": "1"}, "a dry run changed the object"

    listed = kube_access.list("ConfigMap", namespace, label_selector="gkm.io/test=kube-access")
    assert [item["metadata"]["name"] for item in listed] == ["first"]
    assert listed[0]["kind"] == "ConfigMap"
    assert kube_access.list("ConfigMap", namespace, label_selector="gkm.io/test=other") == []

    assert kube_access.delete("ConfigMap", "first", namespace) is True
    assert kube_access.delete("ConfigMap", "first", namespace) is False
    assert kube_access.get("ConfigMap", "first", namespace) is None


def test_lists_arrive_in_pages_and_as_metadata_when_asked(kube_access, namespace):
    for index in range(5):
        kube_access.apply(config_map(namespace, "paged-%d" % index, "x" * 100))
    before = kube_access.requests
    paged = list(kube_access.items("ConfigMap", namespace, label_selector="gkm.io/test=kube-access", page_size=2))
    assert sorted(item["metadata"]["name"] for item in paged) == ["paged-%d" % index for index in range(5)]
    assert kube_access.requests - before == 3, "5 objects in pages of 2"
    assert all(item["data"] == {"value": "x" * 100} for item in paged)

    names = kube_access.list("ConfigMap", namespace, label_selector="gkm.io/test=kube-access", metadata_only=True)
    assert sorted(item["metadata"]["name"] for item in names) == ["paged-%d" % index for index in range(5)]
    assert all(item["kind"] == "ConfigMap" and "data" not in item for item in names)
    assert names[0]["metadata"]["labels"] == {"gkm.io/test": "kube-access"}


def test_server_errors_name_the_object_and_the_reason(kube_access, namespace):
    bad = config_map(namespace, "Not_A_Name", "1")
    with pytest.raises(KubeError) as error:
        kube_access.apply(bad)
    assert error.value.status == 422
    assert "ConfigMap %s/Not_A_Name" % namespace in str(error.value)
    assert "is invalid" in str(error.value)


def test_watch_streams_events_until_the_server_ends_it(kube_access, namespace):
    status, listed = kube_access.request("GET", resource_path("ConfigMap", namespace),
                                         [("labelSelector", "gkm.io/test=kube-access")])
    assert status == 200
    events = []

    def watch():
        for event_type, obj in kube_access.watch(resource_path("ConfigMap"), listed["metadata"]["resourceVersion"],
                                                 "gkm.io/test=kube-access", timeout_seconds=3):
            if event_type != "BOOKMARK" and obj["metadata"]["namespace"] == namespace:
                events.append((event_type, obj["metadata"]["name"], (obj.get("data") or {}).get("value")))

    watcher = threading.Thread(target=watch)
    watcher.start()
    # The watch must be open before the writes; a bookmark-less gap would only show as missing events.
    threading.Event().wait(0.5)
    kube_access.apply(config_map(namespace, "watched", "1"))
    kube_access.apply(config_map(namespace, "watched", "2"))
    kube_access.delete("ConfigMap", "watched", namespace)
    watcher.join(15)
    assert not watcher.is_alive(), "the watch did not end on the server's timeout"
    assert events == [("ADDED", "watched", "1"), ("MODIFIED", "watched", "2"), ("DELETED", "watched", "2")]


def test_a_watch_the_server_refuses_raises_with_its_status(kube_access):
    with pytest.raises(KubeError) as error:
        for _event in kube_access.watch("/apis/gkm.io/v1alpha1/nosuchkinds", "0", timeout_seconds=3):
            pass
    assert error.value.status == 404, "client %s: %s" % (kubernetes.__version__, error.value)
    assert "/apis/gkm.io/v1alpha1/nosuchkinds" in str(error.value)
