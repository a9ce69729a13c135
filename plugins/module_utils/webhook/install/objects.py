# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes objects of the admission webhook (PVC mutation and steering), rendered from validated settings
(pure).

webhook_install applies them in the order of `install_steps`, so that the
MutatingWebhookConfiguration only exists once a ready server answers behind it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import copy

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_ANNOTATION,
    GROUP,
    HOSTNAME_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    PLURALS,
    POD_SECURITY_LABEL,
    PVC,
    PVC_MUTATION_LABEL,
)

SERVER_MODULE = "ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.main"
# The webhook's name carries the install's name and namespace: the API server's denial messages and
# its per-webhook metrics (apiserver_admission_webhook_*{name=...}) then tell installs apart.
WEBHOOK_NAME_SUFFIX = "pvc-mutation.gkm.io"
STEERING_NAME_SUFFIX = "steering.gkm.io"
WORKLOADS_NAME_SUFFIX = "workload-steering.gkm.io"
# Steering's failure policy: an unsteered pod still never reads an empty directory (the serving PV is a hostPath of
# type Directory, an image volume is pulled or the container waits), so an unreachable server must not block pods.
STEERING_FAILURE_POLICY = "Ignore"
SERVER_PORT = 8443
CERT_DIR = "/etc/gkm-webhook/tls"
# The tools image's unprivileged user (containers/tools).
SERVER_UID = 1000
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
INJECT_CA_ANNOTATION = "cert-manager.io/inject-ca-from"
# Everything the server's ServiceAccount may do: the list+watch of each source webhook/server/sync.py keeps
# in its view, cluster-wide. The module's documentation lists the same set.
SERVER_RULES = (
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["list", "watch"]},
    {"apiGroups": [GROUP], "resources": list(PLURALS), "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
)
CERT_MANAGER_API = "cert-manager.io/v1"


class Settings:
    """Validated module options the objects depend on."""

    def __init__(self, name, namespace, image=None, replicas=2, endpoint="service", url=None,
                 tls_mode="self_signed", failure_policy="Fail", timeout_seconds=5,
                 excluded_namespaces=(), cert_valid_days=365, renew_before_days=30, ca_valid_days=3650,
                 image_pull_policy="IfNotPresent", tolerations=(), node_selector=None,
                 pod_security_level="restricted", default_mount_mode=PVC, api_server_cidrs=()):
        self.name = name
        self.namespace = namespace
        self.image = image
        self.replicas = replicas
        self.endpoint = endpoint
        self.url = url
        self.tls_mode = tls_mode
        self.failure_policy = failure_policy
        self.timeout_seconds = timeout_seconds
        self.excluded_namespaces = list(excluded_namespaces)
        self.cert_valid_days = cert_valid_days
        self.renew_before_days = renew_before_days
        self.ca_valid_days = ca_valid_days
        self.image_pull_policy = image_pull_policy
        self.tolerations = list(tolerations)
        self.node_selector = dict(node_selector or {})
        self.pod_security_level = pod_security_level
        self.default_mount_mode = default_mount_mode
        self.api_server_cidrs = list(api_server_cidrs)

    @property
    def serves_in_cluster(self):
        return self.endpoint == "service"

    # Names of the objects; cluster-scoped ones carry the namespace so two installs never clash.
    @property
    def cluster_name(self):
        return "{0}-{1}".format(self.name, self.namespace)

    @property
    def rbac_name(self):
        return "gkm.cluster:{0}:{1}".format(self.namespace, self.name)

    @property
    def webhook_name(self):
        return "{0}.{1}.{2}".format(self.name, self.namespace, WEBHOOK_NAME_SUFFIX)

    @property
    def steering_webhook_name(self):
        return "{0}.{1}.{2}".format(self.name, self.namespace, STEERING_NAME_SUFFIX)

    @property
    def workloads_webhook_name(self):
        return "{0}.{1}.{2}".format(self.name, self.namespace, WORKLOADS_NAME_SUFFIX)

    @property
    def serving_secret(self):
        return "{0}-tls".format(self.name)

    @property
    def ca_secret(self):
        return "{0}-ca".format(self.name)

    def service_hosts(self):
        service = "{0}.{1}.svc".format(self.name, self.namespace)
        return [self.name, "{0}.{1}".format(self.name, self.namespace), service, service + ".cluster.local"]


def labels(settings):
    return {
        "app.kubernetes.io/name": "gkm-webhook",
        "app.kubernetes.io/instance": settings.name,
        "app.kubernetes.io/component": "admission-webhook",
        MANAGED_BY_LABEL: MANAGER,
    }


def _selector_labels(settings):
    return {"app.kubernetes.io/name": "gkm-webhook", "app.kubernetes.io/instance": settings.name}


def pod_label_selector(settings):
    """The server pods' label selector as a query string."""
    return ",".join("{0}={1}".format(key, value) for key, value in sorted(_selector_labels(settings).items()))


def _object(api_version, kind, name, settings, namespaced=True, **fields):
    metadata = {"name": name, "labels": labels(settings)}
    if namespaced:
        metadata["namespace"] = settings.namespace
    obj = {"apiVersion": api_version, "kind": kind, "metadata": metadata}
    obj.update(fields)
    return obj


def namespace(settings):
    obj = _object("v1", "Namespace", settings.namespace, settings, namespaced=False)
    # The server meets the restricted profile; enforcing it guards the namespace as a whole.
    obj["metadata"]["labels"].update({
        POD_SECURITY_LABEL: settings.pod_security_level,
        "pod-security.kubernetes.io/enforce-version": "latest",
    })
    return obj


def service_account(settings):
    return _object("v1", "ServiceAccount", settings.name, settings)


def cluster_role(settings):
    """Exactly what the server's view syncs: list and watch, nothing else."""
    return _object("rbac.authorization.k8s.io/v1", "ClusterRole", settings.rbac_name, settings, namespaced=False,
                   rules=copy.deepcopy(list(SERVER_RULES)))


def cluster_role_binding(settings):
    return _object("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", settings.rbac_name, settings,
                   namespaced=False,
                   roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": settings.rbac_name},
                   subjects=[{"kind": "ServiceAccount", "name": settings.name, "namespace": settings.namespace}])


def _b64(text):
    return base64.b64encode(text.encode()).decode()


def secret(settings, name, data, secret_type="Opaque"):
    """A Secret with `data` (PEM strings) base64-encoded, as the API returns it, so it compares 1:1."""
    return _object("v1", "Secret", name, settings, type=secret_type,
                   data={key: _b64(value) for key, value in sorted(data.items())})


def cert_manager_objects(settings):
    """A private CA made by cert-manager and the serving certificate it signs.

    A CA Issuer (rather than a self-signed serving certificate) keeps the trusted CA the same when
    cert-manager renews the serving certificate, so a renewal never breaks the caBundle.
    """
    bootstrap = "{0}-selfsigned".format(settings.name)
    hours = "{0}h".format
    return [
        _object(CERT_MANAGER_API, "Issuer", bootstrap, settings, spec={"selfSigned": {}}),
        _object(CERT_MANAGER_API, "Certificate", settings.ca_secret, settings, spec={
            "isCA": True,
            "commonName": "{0} CA".format(settings.cluster_name),
            "secretName": settings.ca_secret,
            "duration": hours(settings.ca_valid_days * 24),
            "renewBefore": hours(settings.renew_before_days * 24),
            "privateKey": {"algorithm": "ECDSA", "size": 256},
            "issuerRef": {"name": bootstrap, "kind": "Issuer", "group": "cert-manager.io"},
        }),
        _object(CERT_MANAGER_API, "Issuer", settings.ca_secret, settings,
                spec={"ca": {"secretName": settings.ca_secret}}),
        _object(CERT_MANAGER_API, "Certificate", settings.serving_secret, settings, spec={
            "commonName": settings.service_hosts()[2],
            "dnsNames": settings.service_hosts(),
            "secretName": settings.serving_secret,
            "duration": hours(settings.cert_valid_days * 24),
            "renewBefore": hours(settings.renew_before_days * 24),
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "issuerRef": {"name": settings.ca_secret, "kind": "Issuer", "group": "cert-manager.io"},
        }),
    ]


def deployment(settings):
    selector = _selector_labels(settings)
    https_probe = {"scheme": "HTTPS", "port": SERVER_PORT}
    container = {
        "name": "webhook",
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": [
            "python3", "-m", SERVER_MODULE,
            "--cert-file", CERT_DIR + "/tls.crt",
            "--key-file", CERT_DIR + "/tls.key",
            "--listen", "0.0.0.0:{0}".format(SERVER_PORT),
            "--default-mount-mode", settings.default_mount_mode,
            # The kernel overlay's init container runs the server's own image (webhook/admission/kernel_overlay.py).
            "--tools-image", settings.image,
        ],
        "ports": [{"name": "https", "containerPort": SERVER_PORT, "protocol": "TCP"}],
        "readinessProbe": dict(httpGet=dict(https_probe, path="/readyz"), periodSeconds=5, failureThreshold=2),
        "livenessProbe": dict(httpGet=dict(https_probe, path="/healthz"), periodSeconds=10, failureThreshold=3),
        # Give the endpoints controller time to drop this pod before it stops answering.
        "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": "tls", "mountPath": CERT_DIR, "readOnly": True}],
    }
    pod_spec = {
        "serviceAccountName": settings.name,
        # The server reads the API with this token (in-cluster config), whatever the cluster's default.
        "automountServiceAccountToken": True,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": SERVER_UID,
            "runAsGroup": SERVER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [{"name": "tls", "secret": {"secretName": settings.serving_secret}}],
        # Replicas on different nodes, so one node going away never takes admission with it.
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": {"labelSelector": {"matchLabels": selector}, "topologyKey": HOSTNAME_LABEL},
        }]}},
    }
    if settings.tolerations:
        pod_spec["tolerations"] = settings.tolerations
    if settings.node_selector:
        pod_spec["nodeSelector"] = settings.node_selector
    return _object("apps/v1", "Deployment", settings.name, settings, spec={
        "replicas": settings.replicas,
        "selector": {"matchLabels": selector},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
        "template": {"metadata": {"labels": dict(labels(settings))}, "spec": pod_spec},
    })


def pod_disruption_budget(settings):
    return _object("policy/v1", "PodDisruptionBudget", settings.name, settings, spec={
        "minAvailable": 1 if settings.replicas > 1 else 0,
        "selector": {"matchLabels": _selector_labels(settings)},
    })


def service(settings):
    return _object("v1", "Service", settings.name, settings, spec={
        "selector": _selector_labels(settings),
        "ports": [{"name": "https", "port": 443, "targetPort": SERVER_PORT, "protocol": "TCP"}],
    })


def network_policy(settings):
    """Only the API server's addresses reach the server pods, and only on the server's port: without it any pod in
    the cluster can post AdmissionReviews of its own making and spend the server's memory (docs/webhook.md)."""
    return _object("networking.k8s.io/v1", "NetworkPolicy", settings.name, settings, spec={
        "podSelector": {"matchLabels": _selector_labels(settings)},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"ipBlock": {"cidr": cidr}} for cidr in settings.api_server_cidrs],
                     "ports": [{"protocol": "TCP", "port": SERVER_PORT}]}],
    })


def client_config(settings, ca_bundle):
    if settings.serves_in_cluster:
        config = {"service": {"name": settings.name, "namespace": settings.namespace, "path": "/mutate", "port": 443}}
    else:
        config = {"url": settings.url}
    if ca_bundle:
        config["caBundle"] = _b64(ca_bundle)
    return config


def _uses_a_cache(pod):
    """CEL: the pod at `pod` (object, or a workload's object.spec.template) names a PVC or annotates gkm.io/cache;
    every has() is guarded, an error would count as a webhook failure."""
    return ("(has({0}.spec.volumes) && {0}.spec.volumes.exists(v, has(v.persistentVolumeClaim))) || "
            "(has({0}.metadata) && has({0}.metadata.annotations) && '{1}' in {0}.metadata.annotations)").format(
                pod, CACHE_ANNOTATION)


def _webhook(settings, ca_bundle, name, rules, failure_policy, **selection):
    hook = {
        "name": name,
        "clientConfig": client_config(settings, ca_bundle),
        "rules": rules,
        "namespaceSelector": {"matchExpressions": [
            {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": _excluded_namespaces(settings)},
        ]},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": settings.timeout_seconds,
        "failurePolicy": failure_policy,
        # Both decisions are idempotent: a pod changed by a later webhook is steered again to the same result.
        "reinvocationPolicy": "IfNeeded",
        "matchPolicy": "Equivalent",
    }
    hook.update(selection)
    return hook


def _excluded_namespaces(settings):
    excluded = ["kube-system", settings.namespace]
    return excluded + [ns for ns in settings.excluded_namespaces if ns not in excluded]


def mutating_webhook_configuration(settings, ca_bundle):
    """ca_bundle is the PEM to trust; None leaves it to cert-manager's CA injector.

    Three entries, one server: pods labelled gkm.io/pvc-mutation (claim rewrite and steering, failure_policy);
    other pods that could use a cache (steering); Deployments, StatefulSets and DaemonSets whose template could
    (steering of the template). Only the first may block pods when the server is down.
    """
    pods = [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"],
             "scope": "Namespaced"}]
    workloads = [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                  "resources": ["deployments", "statefulsets", "daemonsets"], "scope": "Namespaced"}]
    webhooks = [
        _webhook(settings, ca_bundle, settings.webhook_name, pods, settings.failure_policy,
                 objectSelector={"matchLabels": {PVC_MUTATION_LABEL: "true"}}),
        _webhook(settings, ca_bundle, settings.steering_webhook_name, pods, STEERING_FAILURE_POLICY,
                 objectSelector={"matchExpressions": [
                     {"key": PVC_MUTATION_LABEL, "operator": "NotIn", "values": ["true"]}]},
                 matchConditions=[{"name": "may-use-a-cache", "expression": _uses_a_cache("object")}]),
        _webhook(settings, ca_bundle, settings.workloads_webhook_name, workloads, STEERING_FAILURE_POLICY,
                 matchConditions=[{"name": "template-may-use-a-cache",
                                   "expression": _uses_a_cache("object.spec.template")}]),
    ]
    obj = _object("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", settings.cluster_name,
                  settings, namespaced=False, webhooks=webhooks)
    if settings.tls_mode == "cert_manager":
        obj["metadata"]["annotations"] = {
            INJECT_CA_ANNOTATION: "{0}/{1}".format(settings.namespace, settings.serving_secret)}
    return obj
