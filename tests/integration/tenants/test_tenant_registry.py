"""A tenant's GKMCache naming a hostile "registry" (docs/security.md, classes 5 and 3): a server the test runs on
127.0.0.1, standing for the attacker, not for a registry. The reconcile reads it under a total deadline, follows no
redirect it was not meant to, keeps none of its error body, and ends by the deadline whatever the server or the
realm of its challenge does; the real registry of the simulated cluster stays the good path. The tenant writes and
reads its caches through its own token; the reconcile runs as the collection runs it."""

import json
import threading
import time

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import API_VERSION
from ansible_collections.gkm.cluster.plugins.module_utils.oci import registry as oci
from tests.helpers import kcache_images
from tests.helpers.hostile_registry import BLOB, ERROR_MARK, HostileServer
from tests.helpers.modules import NODE_DISK, run_module

pytestmark = [pytest.mark.cluster, pytest.mark.registry, pytest.mark.tenant]

GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
# The registry deadline the reconciles run with, and what a module run costs on top of it (ansible's start, the
# cluster's reads and writes).
DEADLINE = 10
SLACK = 30
# The hostile servers hold a connection at most this long, so a run without a deadline still ends.
HOLD = 60


@pytest.fixture(scope="module")
def good_image(registry):
    return kcache_images.build_image(registry.host, "tenant/good", "v1", kcache_images.CacheSpec(backend="hip"))


def create_cache(tenant, name, image):
    tenant.kube.request("POST", tenant.gkmcaches_path(), body={
        "apiVersion": API_VERSION, "kind": "GKMCache", "metadata": {"name": name},
        "spec": {"image": image, "podTemplate": {"spec": {"tolerations": [GPU_TOLERATION]}}}})


def reconcile(sim, tenant, name, **registry):
    """(the module's result, its seconds)."""
    started = time.monotonic()
    result = run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=tenant.namespace,
                        registry_plain_http=True, registry_deadline=DEADLINE, extract_image="gkm-cluster-tools:test",
                        host_path_root=NODE_DISK, wait=False, **registry)
    return result, time.monotonic() - started


def ready(tenant, name):
    status = tenant.kube.request("GET", tenant.gkmcaches_path(name))[1].get("status") or {}
    return status, next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})


def remove_host_path_pvs(kube, tenant):
    # hostPath PVs are cluster-scoped: the namespace's deletion would leave them.
    admin = Kube(kube)
    for pv in admin.list("PersistentVolume", label_selector="gkm.io/cache-kind=GKMCache"):
        if (pv["spec"].get("claimRef") or {}).get("namespace") == tenant.namespace:
            admin.delete("PersistentVolume", pv["metadata"]["name"])


def assert_refused_briefly(tenant, name, image, result, seconds):
    assert result.get("failed"), result
    assert seconds < DEADLINE + SLACK, "the reconcile took %.0f s, deadline %d s" % (seconds, DEADLINE)
    status, condition = ready(tenant, name)
    assert status.get("phase") == "Error", status
    assert image in condition["message"] and len(condition["message"]) < 600, condition["message"]
    return status, condition


def test_a_trickling_registry_is_cut_at_the_deadline_while_a_good_cache_reconciles(
        sim, crds, kube, tenant, good_image):
    with HostileServer("trickle", hold=HOLD) as hostile:
        image = "%s/tenant/evil:v1" % hostile.host
        create_cache(tenant, "evil", image)
        create_cache(tenant, "good", good_image.ref)
        outcome = {}
        thread = threading.Thread(target=lambda: outcome.update(zip(("result", "seconds"),
                                                                    reconcile(sim, tenant, "evil"))))
        thread.start()
        try:
            good, _seconds = reconcile(sim, tenant, "good")
        finally:
            thread.join()
            remove_host_path_pvs(kube, tenant)
    assert not good.get("failed"), good.get("msg")
    assert_refused_briefly(tenant, "evil", image, outcome["result"], outcome["seconds"])
    assert hostile.requests, "the hostile registry was never asked"


def test_a_redirect_to_a_third_port_is_not_followed(sim, crds, kube, tenant):
    with HostileServer("record", hold=HOLD) as third, HostileServer("redirect", target=None, hold=HOLD) as hostile:
        hostile.target = third.host
        image = "%s/tenant/evil:v1" % hostile.host
        create_cache(tenant, "evil", image)
        result, seconds = reconcile(sim, tenant, "evil")
    assert hostile.requests
    assert third.connections == 0, third.requests
    assert_refused_briefly(tenant, "evil", image, result, seconds)


def test_an_error_body_of_a_mebibyte_is_kept_out_of_the_status(sim, crds, kube, tenant):
    with HostileServer("error_body", hold=HOLD) as hostile:
        image = "%s/tenant/evil:v1" % hostile.host
        create_cache(tenant, "evil", image)
        result, seconds = reconcile(sim, tenant, "evil")
    status, _condition = assert_refused_briefly(tenant, "evil", image, result, seconds)
    assert ERROR_MARK.strip() not in json.dumps(status), status
    assert ERROR_MARK.strip() not in json.dumps(result)[:100000]


def test_a_basic_challenge_never_gets_the_admins_credentials(sim, crds, kube, tenant):
    # The admin's credentials are for the real registry; the tenant's image names another host.
    with HostileServer("basic", hold=HOLD) as hostile:
        image = "%s/tenant/evil:v1" % hostile.host
        create_cache(tenant, "evil", image)
        result, seconds = reconcile(sim, tenant, "evil", registry_username="admin",
                                    registry_password="admins-secret", registry_host=sim.registry)
    assert hostile.requests
    assert hostile.authorizations() == []
    assert_refused_briefly(tenant, "evil", image, result, seconds)


def test_a_bearer_realm_that_never_answers_is_cut_at_the_deadline(sim, crds, kube, tenant):
    with HostileServer("silent", hold=HOLD) as realm, HostileServer("bearer", hold=HOLD) as hostile:
        hostile.target = realm.host
        image = "%s/tenant/evil:v1" % hostile.host
        create_cache(tenant, "evil", image)
        result, seconds = reconcile(sim, tenant, "evil")
    assert hostile.requests
    assert_refused_briefly(tenant, "evil", image, result, seconds)


def test_a_bearer_realm_on_another_host_never_gets_the_credentials(sim, crds, kube, tenant):
    # Credentials for the registry the image names; its challenge sends the token request to another host.
    with HostileServer("record", hold=HOLD) as realm, HostileServer("bearer", hold=HOLD) as hostile:
        hostile.target = realm.host
        image = "%s/tenant/evil:v1" % hostile.host
        create_cache(tenant, "evil", image)
        result, seconds = reconcile(sim, tenant, "evil", registry_username="admin",
                                    registry_password="admins-secret", registry_host=hostile.host)
    assert realm.requests, "the realm was never asked"
    assert realm.authorizations() == []
    assert_refused_briefly(tenant, "evil", image, result, seconds)


def redirect_chain(hops):
    """A registry that challenges, then redirects its blobs through `hops` servers to the one that serves it."""
    servers = [HostileServer("blob", hold=HOLD)]
    for _hop in range(hops - 1):
        servers.append(HostileServer("redirect", target=servers[-1].host, hold=HOLD))
    servers.append(HostileServer("basic_then_redirect", target=servers[-1].host, hold=HOLD))
    return servers


def fetch(servers):
    registry = servers[-1]
    client = oci.RegistryClient(registry.host, username="admin", password="admins-secret", plain_http=True,
                                deadline=DEADLINE)
    descriptor = {"digest": oci.sha256_digest(BLOB), "size": len(BLOB)}
    return client.fetch_blob(oci.parse_reference("%s/tenant/cache:v1" % registry.host), descriptor)


def test_a_blob_redirect_is_followed_without_the_credentials_at_most_three_times():
    # The registry protocol's one redirect, a blob to an object store: followed, the credentials left behind.
    servers = redirect_chain(3)
    try:
        assert fetch(servers) == BLOB
        assert servers[-1].authorizations(), "the registry never got the credentials it asked for"
        assert [server.authorizations() for server in servers[:-1]] == [[], [], []]
    finally:
        for server in servers:
            server.stop()
    # A fourth hop is refused before it is asked.
    servers = redirect_chain(4)
    try:
        with pytest.raises(oci.OCIError, match="redirected it more than 3 times"):
            fetch(servers)
        assert servers[0].connections == 0
    finally:
        for server in servers:
            server.stop()
