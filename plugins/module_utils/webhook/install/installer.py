# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Install or remove the PVC-mutation webhook: the ordered steps behind gkm.cluster.webhook_install.

Order (state=present): namespace, ServiceAccount and RBAC, TLS, server Deployment, PDB and Service,
wait until the server is ready, and only then the MutatingWebhookConfiguration; so a half-finished
install never sends a pod to a server that is not there. state=absent removes the configuration
first. Each object is read first and written (server-side apply) only when it differs, so a re-run
with nothing to do writes nothing; check mode turns every write into a server-side dry run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import copy
import ipaddress
import ssl
import time

from ansible.module_utils.six.moves import http_client
from ansible.module_utils.six.moves.urllib.parse import urlsplit

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.common.tls import not_after
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import name_problem
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.install import objects, rollout
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.install import tls as webhook_tls

POLL_SECONDS = 1.0
# Made in every namespace by kube-controller-manager: it does not make a namespace anyone's.
SERVER_MADE_CONFIGMAPS = ("kube-root-ca.crt",)
# Server-filled bookkeeping left out of diffs.
_VOLATILE_METADATA = ("managedFields", "resourceVersion", "uid", "generation", "creationTimestamp")


class InstallError(GkmError):
    """A problem the user can fix; the message says which option or object and how."""


# --------------------------------------------------------------------------- validation


def validate(params):
    """Settings from module params, or InstallError naming the option at fault. Changes nothing."""
    problems = [name_problem("name", params["name"]), name_problem("namespace", params["namespace"])]
    for excluded in params.get("excluded_namespaces") or []:
        problems.append(name_problem("excluded_namespaces entry", excluded))
    problems = [problem for problem in problems if problem]
    present = params["state"] == "present"
    endpoint = params["endpoint"]
    if endpoint == "url" and (present or params.get("url")):
        url = params.get("url") or ""
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            problems.append("url must be an https:// URL with a host when endpoint=url, got {0!r}".format(url))
    elif endpoint == "service" and params.get("url"):
        problems.append("url is only used with endpoint=url; remove it or set endpoint: url")
    problems.extend(_cidr_problems(params.get("api_server_cidrs") or [], endpoint))
    if present and endpoint == "service" and not params.get("image"):
        problems.append("image is required with endpoint=service: the tools image that runs the webhook server")
    if params["tls_mode"] == "provided":
        if present and not webhook_tls.split_pem_bundle(params.get("ca_bundle")):
            problems.append("ca_bundle must hold the PEM CA certificate(s) that signed the server's certificate "
                            "when tls_mode=provided")
    elif params.get("ca_bundle"):
        problems.append("ca_bundle is only used with tls_mode=provided; the other modes make their own CA")
    if params["tls_mode"] == "self_signed" and params["renew_before_days"] >= params["cert_valid_days"]:
        problems.append("renew_before_days ({0}) must be below cert_valid_days ({1}), or every run renews".format(
            params["renew_before_days"], params["cert_valid_days"]))
    if not 1 <= params["timeout_seconds"] <= 30:
        problems.append("timeout_seconds must be between 1 and 30 (the API server's limits), got {0}".format(
            params["timeout_seconds"]))
    if params["replicas"] < 1:
        problems.append("replicas must be at least 1")
    if problems:
        raise InstallError("; ".join(problems))
    return objects.Settings(
        name=params["name"], namespace=params["namespace"], image=params.get("image"),
        replicas=params["replicas"], endpoint=endpoint, url=params.get("url"), tls_mode=params["tls_mode"],
        failure_policy=params["failure_policy"], timeout_seconds=params["timeout_seconds"],
        excluded_namespaces=params.get("excluded_namespaces") or [], cert_valid_days=params["cert_valid_days"],
        renew_before_days=params["renew_before_days"], ca_valid_days=params["ca_valid_days"],
        image_pull_policy=params["image_pull_policy"], tolerations=params.get("tolerations") or [],
        node_selector=params.get("node_selector") or {}, pod_security_level=params["pod_security_level"],
        default_mount_mode=params["default_mount_mode"], api_server_cidrs=params.get("api_server_cidrs") or [],
    )


def _cidr_problems(cidrs, endpoint):
    if cidrs and endpoint != "service":
        return ["api_server_cidrs is only used with endpoint=service (it guards the server pods in the cluster); "
                "remove it or set endpoint: service"]
    problems = []
    for cidr in cidrs:
        try:
            ipaddress.ip_network(u"{0}".format(cidr))
        except ValueError:
            try:
                meant = " (did you mean {0}?)".format(ipaddress.ip_network(u"{0}".format(cidr), strict=False))
            except ValueError:
                meant = ""
            problems.append("api_server_cidrs entry {0!r} is not a network in CIDR notation{1}".format(cidr, meant))
    return problems


# ------------------------------------------------------------------------------ helpers


def is_subset(desired, live):
    """True when every field of desired has the same value in live (the server may add more)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(key in live and is_subset(value, live[key])
                                              for key, value in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(desired) == len(live) and all(
            is_subset(desired[index], live[index]) for index in range(len(desired)))
    return desired == live


def _for_diff(obj):
    """A copy fit for a diff: no server bookkeeping, Secret values hidden."""
    if obj is None:
        return {}
    shown = copy.deepcopy(obj)
    metadata = shown.get("metadata") or {}
    for key in _VOLATILE_METADATA:
        metadata.pop(key, None)
    shown.pop("status", None)
    if shown.get("kind") == "Secret":
        shown["data"] = {key: "<hidden>" for key in shown.get("data") or {}}
    return shown


def _ref(obj):
    metadata = obj["metadata"]
    return obj["kind"], metadata.get("namespace"), metadata["name"]


def _describe(kind, namespace, name):
    return "{0} {1}/{2}".format(kind, namespace, name) if namespace else "{0} {1}".format(kind, name)


def _secret_text(secret):
    """A Secret's data decoded to strings, or None when there is no Secret."""
    if secret is None:
        return None
    data = secret.get("data") or {}
    return {key: base64.b64decode(value).decode("utf-8", "replace") for key, value in data.items()}


class Installer:
    """Runs the steps against one Kube; collects per-object results and diffs."""

    def __init__(self, kube, settings, check_mode=False, wait=True, wait_timeout=120, provided_ca_bundle=None):
        self.kube = kube
        self.provided_ca_bundle = provided_ca_bundle
        self.settings = settings
        self.check_mode = check_mode
        self.wait = wait
        self.wait_timeout = wait_timeout
        self.results = []
        self.diffs = []
        self.namespace_exists = None
        self.kept = []

    @property
    def changed(self):
        return any(result["action"] not in ("unchanged", "absent") for result in self.results)

    def _record(self, kind, namespace, name, action, before=None, after=None):
        self.results.append({"kind": kind, "namespace": namespace, "name": name, "action": action})
        if action not in ("unchanged", "absent"):
            self.diffs.append({"before_header": _describe(kind, namespace, name),
                               "after_header": _describe(kind, namespace, name),
                               "before": _for_diff(before), "after": _for_diff(after)})

    def ensure(self, desired):
        """Apply desired unless the live object already has every field of it; returns the live object."""
        kind, namespace, name = _ref(desired)
        live = self.kube.get(kind, name, namespace)
        if live is not None and is_subset(desired, live):
            self._record(kind, namespace, name, "unchanged")
            return live
        # A dry run cannot place an object in a namespace that does not exist yet: show it as desired.
        dry_run_impossible = self.check_mode and namespace and not self.namespace_exists
        after = desired if dry_run_impossible else self.kube.apply(desired)
        self._record(kind, namespace, name, "created" if live is None else "updated", live, after)
        return after

    def remove(self, kind, name, namespace=None):
        live = self.kube.get(kind, name, namespace)
        if live is None:
            self._record(kind, namespace, name, "absent")
            return
        self.kube.delete(kind, name, namespace)
        self._record(kind, namespace, name, "deleted", live, None)

    def remove_if_present(self, kind, name, namespace):
        """Remove an optional object, recording nothing when there is none (most installs never make it)."""
        if self.kube.get(kind, name, namespace) is not None:
            self.remove(kind, name, namespace)

    # ------------------------------------------------------------------------ present

    def install(self):
        settings = self.settings
        if settings.tls_mode == "cert_manager" and not self._cert_manager_served():
            raise InstallError("tls_mode=cert_manager needs cert-manager (its cert-manager.io/v1 API is not served); "
                               "install cert-manager first or use tls_mode=self_signed")
        self.namespace_exists = self.kube.get("Namespace", settings.namespace) is not None
        self.ensure(objects.namespace(settings))
        if settings.serves_in_cluster:
            self.ensure(objects.service_account(settings))
            self.ensure(objects.cluster_role(settings))
            self.ensure(objects.cluster_role_binding(settings))
        ca_bundle, tls_result = self._tls()
        if settings.serves_in_cluster:
            self.ensure(objects.deployment(settings))
            self.ensure(objects.pod_disruption_budget(settings))
            self.ensure(objects.service(settings))
            self._network_policy()
        if self.wait and not self.check_mode:
            self._wait_ready(ca_bundle)
        self.ensure(objects.mutating_webhook_configuration(settings, ca_bundle))
        return tls_result

    def _network_policy(self):
        """The server pods' NetworkPolicy when api_server_cidrs are given; one left from an earlier run goes."""
        settings = self.settings
        if settings.api_server_cidrs:
            self.ensure(objects.network_policy(settings))
        else:
            self.remove_if_present("NetworkPolicy", settings.name, settings.namespace)

    def _tls(self):
        """Make or check the TLS material; returns (caBundle PEM to register, result details)."""
        mode = self.settings.tls_mode
        if mode == "self_signed":
            return self._self_signed()
        if mode == "cert_manager":
            return self._cert_manager()
        settings = self.settings
        if settings.serves_in_cluster and self.kube.get("Secret", settings.serving_secret, settings.namespace) is None:
            raise InstallError(
                "tls_mode=provided needs the Secret {0}/{1} with tls.crt and tls.key of the serving certificate; "
                "create it first".format(settings.namespace, settings.serving_secret))
        return self.provided_ca_bundle, {"mode": mode}

    def _self_signed(self):
        settings = self.settings
        hosts = settings.service_hosts() if settings.serves_in_cluster else [urlsplit(settings.url).hostname]
        ca_secret = self.kube.get("Secret", settings.ca_secret, settings.namespace)
        serving_secret = self.kube.get("Secret", settings.serving_secret, settings.namespace)
        common_name = hosts[2] if settings.serves_in_cluster else hosts[0]
        plan = webhook_tls.plan_self_signed(
            _secret_text(ca_secret), _secret_text(serving_secret), common_name, hosts,
            settings.cert_valid_days, settings.ca_valid_days, settings.renew_before_days)
        self.ensure(objects.secret(settings, settings.ca_secret, plan.ca_data))
        if plan.ca_renewed:
            # Trust the new CA (next to the old one) before any server can present a certificate it signed.
            self._publish_ca_bundle(plan.ca_bundle)
        self.ensure(objects.secret(settings, settings.serving_secret, plan.serving_data, "kubernetes.io/tls"))
        certificate = webhook_tls.split_pem_bundle(plan.serving_data[webhook_tls.TLS_CERT_KEY])[0]
        return plan.ca_bundle, {
            "mode": "self_signed",
            "ca_renewed": plan.ca_renewed,
            "certificate_renewed": plan.serving_renewed,
            "reasons": plan.reasons,
            "certificate_not_after": not_after(certificate).isoformat(),
            "ca_certificates": len(webhook_tls.split_pem_bundle(plan.ca_bundle)),
        }

    def _publish_ca_bundle(self, ca_bundle):
        """Put ca_bundle into the webhook configuration now, if one is registered already."""
        if self.kube.get("MutatingWebhookConfiguration", self.settings.cluster_name) is not None:
            self.ensure(objects.mutating_webhook_configuration(self.settings, ca_bundle))

    def _cert_manager(self):
        settings = self.settings
        for obj in objects.cert_manager_objects(settings):
            self.ensure(obj)
        if self.check_mode:
            return None, {"mode": "cert_manager"}
        serving = self._wait_for(
            lambda: self.kube.get("Secret", settings.serving_secret, settings.namespace),
            "cert-manager to issue Secret {0}/{1}".format(settings.namespace, settings.serving_secret))
        ca_bundle = (_secret_text(serving) or {}).get(webhook_tls.CA_CERT_KEY)
        # cert-manager's CA injector keeps the bundle current afterwards; setting it now closes the
        # gap between registering the webhook and the first injection.
        return ca_bundle, {"mode": "cert_manager"}

    def _cert_manager_served(self):
        status = self.kube.request("GET", "/apis/cert-manager.io/v1", what="the cert-manager API")[0]
        return status != 404

    def _wait_for(self, probe, what, explain=None):
        """Poll probe until it returns something true; at the deadline, explain() adds what is still missing."""
        deadline = time.monotonic() + self.wait_timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() >= deadline:
                details = explain() if explain else []
                raise InstallError("timed out after {0}s waiting for {1}{2}".format(
                    self.wait_timeout, what, "".join("; " + detail for detail in details)))
            time.sleep(POLL_SECONDS)

    def _wait_ready(self, ca_bundle):
        settings = self.settings
        if not settings.serves_in_cluster:
            self._wait_for(lambda: url_ready(settings.url, ca_bundle),
                           "the webhook server at {0} to answer /readyz".format(settings.url))
            return
        pods = []

        def deployment_ready():
            live = self.kube.get("Deployment", settings.name, settings.namespace)
            if rollout.is_available(live, settings.replicas):
                return True
            pods[:] = self.kube.list("Pod", settings.namespace, label_selector=objects.pod_label_selector(settings))
            # Fail now, not at the timeout, when the rollout cannot finish without the user.
            problem = rollout.blocking_problem(live, pods, settings.image)
            if problem:
                raise InstallError("Deployment {0}/{1}: {2}".format(settings.namespace, settings.name, problem))
            return False

        self._wait_for(deployment_ready, "Deployment {0}/{1} to have {2} available replicas".format(
            settings.namespace, settings.name, settings.replicas), explain=lambda: rollout.waiting_reasons(pods))

    # ------------------------------------------------------------------------- absent

    def uninstall(self):
        settings = self.settings
        self.remove("MutatingWebhookConfiguration", settings.cluster_name)
        self.remove_if_present("NetworkPolicy", settings.name, settings.namespace)
        for kind in ("Service", "PodDisruptionBudget", "Deployment"):
            self.remove(kind, settings.name, settings.namespace)
        if self._cert_manager_served():
            for obj in reversed(objects.cert_manager_objects(settings)):
                self.remove(*_ref(obj))
        for secret in (settings.serving_secret, settings.ca_secret):
            self.remove("Secret", secret, settings.namespace)
        self.remove("ClusterRoleBinding", settings.rbac_name)
        self.remove("ClusterRole", settings.rbac_name)
        self.remove("ServiceAccount", settings.name, settings.namespace)
        live_namespace = self.kube.get("Namespace", settings.namespace)
        ours = objects.labels(settings)
        if live_namespace is None or not is_subset(ours, (live_namespace.get("metadata") or {}).get("labels") or {}):
            return
        residents = self.residents()
        if residents:
            self.kept.extend("{0}: holds {1}".format(_describe("Namespace", None, settings.namespace), resident)
                             for resident in residents)
            return
        self.remove("Namespace", settings.namespace)

    def residents(self):
        """What else lives in our namespace: deleting it would take those along (for example the ownership
        records of components installed beside the webhook, which their own removal reads later)."""
        namespace = self.settings.namespace
        found = ["ConfigMap " + item["metadata"]["name"] for item in self.kube.list("ConfigMap", namespace)
                 if item["metadata"]["name"] not in SERVER_MADE_CONFIGMAPS]
        found += ["Secret " + item["metadata"]["name"] for item in self.kube.list("Secret", namespace)
                  if item.get("type") != "kubernetes.io/service-account-token"]
        return sorted(found)


def url_ready(url, ca_bundle, timeout=5):
    """True when the server behind url answers 200 on /readyz over TLS verified with ca_bundle."""
    parts = urlsplit(url)
    context = ssl.create_default_context(cadata=ca_bundle) if ca_bundle else ssl.create_default_context()
    connection = http_client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout, context=context)
    try:
        connection.request("GET", "/readyz")
        return connection.getresponse().status == 200
    except (OSError, ssl.SSLError, http_client.HTTPException):
        return False
    finally:
        connection.close()


def run(params, check_mode, make_kube):
    """Validate, then install or remove; returns (module result, per-object diffs).

    make_kube() returns the Kube to use, a dry-running one in check mode.
    """
    settings = validate(params)
    kube = make_kube()
    provided = "".join(webhook_tls.split_pem_bundle(params.get("ca_bundle"))) or None
    installer = Installer(kube, settings, check_mode=check_mode, wait=params["wait"],
                          wait_timeout=params["wait_timeout"], provided_ca_bundle=provided)
    tls_result = None
    if params["state"] == "present":
        tls_result = installer.install()
    else:
        installer.uninstall()
    result = {
        "changed": installer.changed,
        "objects": installer.results,
        "webhook_configuration": settings.cluster_name,
        "api_writes": kube.writes,
    }
    if installer.kept:
        result["kept"] = installer.kept
    if tls_result is not None:
        result["tls"] = tls_result
    return result, installer.diffs
