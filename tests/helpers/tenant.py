"""A tenant as issue 31's tests act as one (docs/security.md, "Tenant RBAC example").

The admin's client applies tests/fixtures/tenant/tenant.yaml for one namespace: the namespace at a Pod Security
level, the ServiceAccount `tenant` bound to the built-in `edit` ClusterRole there, and the `gkm-cache-owner` Role.
The tenant's own client then carries a short-lived token the TokenRequest API issued for that ServiceAccount, the
admin's host and CA, and no client certificate: whatever it is refused is real RBAC, whatever its pods are
refused is real Pod Security.
"""

import os
from dataclasses import dataclass, field

import yaml
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import APPLY_CONTENT_TYPE, Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import API_VERSION
from tests.helpers.paths import ROOT

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tenant")
TENANT_MANIFEST = os.path.join(FIXTURES, "tenant.yaml")
SERVICE_ACCOUNT = "tenant"
OWNER_BINDING = "tenant-gkm-cache-owner"
# The shortest lifetime the API server accepts; a test never outlives it.
TOKEN_SECONDS = 600
# For the tests on the real nodes, whose pods and scrubs take minutes more on a slow machine.
REAL_NODES_TOKEN_SECONDS = 3600
POD_SECURITY_LABEL = "pod-security.kubernetes.io/enforce"

# (API prefix, plural) of the kinds the tenant manifests and the operator's RBAC hold; common/kube.py's table has
# only what the collection itself writes.
_KINDS = {
    "Namespace": ("/api/v1", "namespaces"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles"),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings"),
}


@dataclass
class Tenant:
    """One tenant: its namespace, and the API as it reaches it (Kube for requests, the ApiClient under it)."""

    namespace: str
    kube: Kube = field(repr=False)
    api: client.ApiClient = field(repr=False)

    @property
    def core(self):
        """The core API as the tenant."""
        return client.CoreV1Api(self.api)

    @property
    def caches(self):
        """The custom objects API (GKMCaches) as the tenant."""
        return client.CustomObjectsApi(self.api)

    def gkmcaches_path(self, name=""):
        """The API path of the tenant's GKMCaches, or of the one named."""
        return gkmcaches_path(self.namespace, name)


def gkmcaches_path(namespace, name=""):
    return "/apis/%s/namespaces/%s/gkmcaches%s" % (API_VERSION, namespace, "/" + name if name else "")


def object_path(obj):
    """The API path of one object of the tenant manifests or of RBAC."""
    prefix, plural = _KINDS[obj["kind"]]
    metadata = obj["metadata"]
    scope = "namespaces/%s/" % metadata["namespace"] if metadata.get("namespace") else ""
    return "%s/%s%s/%s" % (prefix, scope, plural, metadata["name"])


def load_manifest(path, namespace=None):
    """The objects of a manifest (a v1 List, as the repository's YAML lint wants one document a file),
    __NAMESPACE__ replaced when given."""
    with open(path) as handle:
        text = handle.read()
    if namespace:
        text = text.replace("__NAMESPACE__", namespace)
    return yaml.safe_load(text)["items"]


def apply_objects(admin, objects):
    """Server-side apply each object with the admin's Kube."""
    for obj in objects:
        admin.request("PATCH", object_path(obj), [("fieldManager", "gkm-tests"), ("force", "true")], obj,
                      APPLY_CONTENT_TYPE, what="%s %s" % (obj["kind"], obj["metadata"]["name"]))


def apply_tenant(admin, namespace, pod_security="restricted"):
    """The tenant's namespace, ServiceAccount and RBAC, with its namespace enforcing `pod_security`."""
    objects = load_manifest(TENANT_MANIFEST, namespace)
    for obj in objects:
        if obj["kind"] == "Namespace":
            obj["metadata"]["labels"][POD_SECURITY_LABEL] = pod_security
    apply_objects(admin, objects)
    return objects


def service_account_token(admin, namespace, service_account=SERVICE_ACCOUNT, seconds=TOKEN_SECONDS):
    """A token of a ServiceAccount from the TokenRequest API (kubectl create token), for the API server's own
    audience."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"audiences": [], "expirationSeconds": seconds}}
    _status, reply = admin.request(
        "POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (namespace, service_account), body=request,
        what="token of %s/%s" % (namespace, service_account))
    return reply["status"]["token"]


def service_account_client(admin_api, namespace, service_account=SERVICE_ACCOUNT, seconds=TOKEN_SECONDS):
    """An ApiClient acting as a ServiceAccount: the admin's host and CA, its bearer token (valid `seconds`), no client
    certificate."""
    admin = admin_api.configuration
    configuration = client.Configuration()
    configuration.host = admin.host
    configuration.ssl_ca_cert = admin.ssl_ca_cert
    configuration.verify_ssl = admin.verify_ssl
    token = service_account_token(Kube(admin_api), namespace, service_account, seconds)
    configuration.api_key = {"authorization": "Bearer " + token}
    return client.ApiClient(configuration)


def tenant_kube(admin_api, namespace, seconds=TOKEN_SECONDS):
    """The tenant as a Tenant: its Kube reaches the API the way the collection does, as the tenant."""
    api = service_account_client(admin_api, namespace, seconds=seconds)
    return Tenant(namespace=namespace, kube=Kube(api), api=api)


def tenant_namespace(admin_api, namespace, pod_security, seconds=TOKEN_SECONDS):
    """A namespace made for a tenant (apply_tenant) and the tenant acting in it; `seconds` for a token that must
    outlive a module's tests."""
    apply_tenant(Kube(admin_api), namespace, pod_security)
    return tenant_kube(admin_api, namespace, seconds)


def whoami(kube):
    """The user name the API server sees for this client (SelfSubjectReview)."""
    _status, reply = kube.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                  body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    return reply["status"]["userInfo"]["username"]
