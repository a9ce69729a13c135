"""webhook_install's pure parts: option validation, rendered objects and self-signed TLS decisions."""

import datetime

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.install import objects
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.install.installer import (
    InstallError,
    is_subset,
    validate,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.install.tls import (
    hosts_to_sans,
    plan_self_signed,
    split_pem_bundle,
    subject_alt_names,
)

HOSTS = ["gkm-webhook", "gkm-webhook.gkm-system", "gkm-webhook.gkm-system.svc",
         "gkm-webhook.gkm-system.svc.cluster.local"]
NOW = datetime.datetime.now(datetime.timezone.utc)


def params(**overrides):
    base = dict(name="gkm-webhook", namespace="gkm-system", state="present", endpoint="service", url=None,
                image="reg/tools:1", image_pull_policy="IfNotPresent", replicas=2, tls_mode="self_signed",
                ca_bundle=None, cert_valid_days=365, ca_valid_days=3650, renew_before_days=30,
                failure_policy="Fail", timeout_seconds=5, excluded_namespaces=[], wait=True, wait_timeout=120,
                default_mount_mode="PVC", tolerations=[], node_selector={}, pod_security_level="restricted")
    base.update(overrides)
    return base


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("overrides, expected", [
    (dict(name="Bad_Name"), "name 'Bad_Name' is not a valid DNS-1123 label"),
    (dict(namespace=""), "namespace must not be empty"),
    (dict(endpoint="url", url="http://127.0.0.1:9443/mutate"), "url must be an https:// URL"),
    (dict(url="https://x/mutate"), "url is only used with endpoint=url"),
    (dict(image=None), "image is required with endpoint=service"),
    (dict(tls_mode="provided", endpoint="url", url="https://127.0.0.1:1/mutate"), "ca_bundle must hold"),
    (dict(ca_bundle="x"), "ca_bundle is only used with tls_mode=provided"),
    (dict(renew_before_days=365), "renew_before_days (365) must be below cert_valid_days (365)"),
    (dict(timeout_seconds=31), "timeout_seconds must be between 1 and 30"),
    (dict(replicas=0), "replicas must be at least 1"),
    (dict(excluded_namespaces=["ok", "NOT OK"]), "excluded_namespaces entry 'NOT OK'"),
    (dict(api_server_cidrs=["10.0.0.1/8"]),
     "api_server_cidrs entry '10.0.0.1/8' is not a network in CIDR notation (did you mean 10.0.0.0/8?)"),
    (dict(api_server_cidrs=["control-plane"]), "api_server_cidrs entry 'control-plane' is not a network"),
    (dict(api_server_cidrs=["10.0.0.0/8"], endpoint="url", url="https://127.0.0.1:9443/mutate"),
     "api_server_cidrs is only used with endpoint=service"),
])
def test_invalid_options_are_named(overrides, expected):
    with pytest.raises(InstallError) as error:
        validate(params(**overrides))
    assert expected in str(error.value)


def test_url_endpoint_needs_no_image_and_absent_needs_neither():
    assert validate(params(endpoint="url", url="https://127.0.0.1:9443/mutate", image=None)).endpoint == "url"
    assert validate(params(state="absent", image=None)).name == "gkm-webhook"


# ---------------------------------------------------------------- objects

def test_webhook_configuration_matches_the_contract():
    settings = validate(params(excluded_namespaces=["monitoring"], failure_policy="Ignore", timeout_seconds=3))
    config = objects.mutating_webhook_configuration(settings, "PEM")
    assert config["metadata"]["name"] == "gkm-webhook-gkm-system"
    hooks = config["webhooks"]
    assert [hook["name"] for hook in hooks] == ["gkm-webhook.gkm-system.pvc-mutation.gkm.io",
                                                "gkm-webhook.gkm-system.steering.gkm.io",
                                                "gkm-webhook.gkm-system.workload-steering.gkm.io"]
    for hook in hooks:
        assert hook["namespaceSelector"]["matchExpressions"] == [{
            "key": "kubernetes.io/metadata.name", "operator": "NotIn",
            "values": ["kube-system", "gkm-system", "monitoring"]}]
        assert (hook["sideEffects"], hook["admissionReviewVersions"], hook["timeoutSeconds"]) == ("None", ["v1"], 3)
        assert (hook["reinvocationPolicy"], hook["matchPolicy"]) == ("IfNeeded", "Equivalent")
        assert hook["clientConfig"]["service"] == {"name": "gkm-webhook", "namespace": "gkm-system",
                                                   "path": "/mutate", "port": 443}
        assert hook["clientConfig"]["caBundle"] == "UEVN"  # base64 of "PEM"
    mutation, steering, workloads = hooks
    pods = [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"],
             "scope": "Namespaced"}]
    assert mutation["rules"] == steering["rules"] == pods
    assert workloads["rules"] == [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                   "resources": ["deployments", "statefulsets", "daemonsets"],
                                   "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}]
    # Labelled pods: the option's policy; the other two never block anything when the server is away.
    assert [hook["failurePolicy"] for hook in hooks] == ["Ignore", "Ignore", "Ignore"]
    assert [hook["failurePolicy"] for hook in objects.mutating_webhook_configuration(
        validate(params()), "PEM")["webhooks"]] == ["Fail", "Ignore", "Ignore"]
    # Each pod goes to one entry: labelled or not.
    assert mutation["objectSelector"] == {"matchLabels": {"gkm.io/pvc-mutation": "true"}}
    assert steering["objectSelector"] == {"matchExpressions": [
        {"key": "gkm.io/pvc-mutation", "operator": "NotIn", "values": ["true"]}]}
    assert "objectSelector" not in workloads and "matchConditions" not in mutation
    [pod_condition] = steering["matchConditions"]
    assert "object.spec.volumes.exists(v, has(v.persistentVolumeClaim))" in pod_condition["expression"]
    assert "'gkm.io/cache' in object.metadata.annotations" in pod_condition["expression"]
    [template_condition] = workloads["matchConditions"]
    assert "object.spec.template.spec.volumes.exists" in template_condition["expression"]


def test_url_endpoint_and_cert_manager_annotation():
    settings = validate(params(endpoint="url", url="https://127.0.0.1:9443/mutate", tls_mode="cert_manager"))
    config = objects.mutating_webhook_configuration(settings, None)
    assert config["webhooks"][0]["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate"}
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "gkm-system/gkm-webhook-tls"}


def test_rbac_is_list_and_watch_of_what_the_view_syncs():
    role = objects.cluster_role(validate(params()))
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["list", "watch"]},
        {"apiGroups": ["gkm.io"], "resources": ["gkmcaches", "clustergkmcaches", "gkmcachenodes",
                                                "clustergkmcachenodes"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
    ]


@pytest.mark.parametrize("level", ["restricted", "baseline", "privileged"])
def test_namespace_enforces_the_pod_security_level(level):
    labels = objects.namespace(validate(params(pod_security_level=level)))["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == level
    assert labels["pod-security.kubernetes.io/enforce-version"] == "latest"


def test_deployment_is_restricted_probed_and_spread():
    deployment = objects.deployment(validate(params()))
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 1000
    assert pod["automountServiceAccountToken"] is True
    assert "--kubeconfig" not in container["command"]  # the server uses the pod's service account
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["command"][:3] == ["python3", "-m", objects.SERVER_MODULE]
    # The server knows its own image: a pod's kernel overlay init container runs it.
    assert container["command"][container["command"].index("--tools-image") + 1] == container["image"] == "reg/tools:1"
    assert pod["volumes"] == [{"name": "tls", "secret": {"secretName": "gkm-webhook-tls"}}]
    assert spec["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] == "gkm-webhook"
    assert objects.pod_disruption_budget(validate(params()))["spec"]["minAvailable"] == 1


def test_network_policy_admits_only_the_api_server_cidrs_to_the_server_pods_port():
    settings = validate(params(api_server_cidrs=["192.168.10.0/24", "fd00::/64"]))
    policy = objects.network_policy(settings)
    pod_labels = objects.deployment(settings)["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert policy["metadata"]["namespace"] == "gkm-system" and policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{
        "from": [{"ipBlock": {"cidr": "192.168.10.0/24"}}, {"ipBlock": {"cidr": "fd00::/64"}}],
        "ports": [{"protocol": "TCP", "port": objects.SERVER_PORT}]}]


def test_cert_manager_uses_a_ca_issuer_for_the_serving_certificate():
    issuer, ca_cert, ca_issuer, serving = objects.cert_manager_objects(validate(params(tls_mode="cert_manager")))
    assert issuer["spec"] == {"selfSigned": {}}
    assert ca_cert["spec"]["isCA"] is True
    assert ca_issuer["spec"] == {"ca": {"secretName": "gkm-webhook-ca"}}
    assert serving["spec"]["issuerRef"]["name"] == "gkm-webhook-ca"
    assert serving["spec"]["dnsNames"] == HOSTS
    assert serving["spec"]["renewBefore"] == "720h"


def test_is_subset():
    assert is_subset({"a": 1, "b": [{"c": 2}]}, {"a": 1, "b": [{"c": 2, "d": 3}], "e": 4})
    assert not is_subset({"a": 1}, {"a": 2})
    assert not is_subset({"b": [1]}, {"b": [1, 2]})
    assert not is_subset({"a": {"x": 1}}, {"a": None})


# ---------------------------------------------------------------- self-signed TLS

def first_plan():
    return plan_self_signed(None, None, HOSTS[2], HOSTS, 365, 3650, 30, now=NOW)


def test_first_run_makes_a_ca_and_a_serving_certificate_for_the_service_names():
    plan = first_plan()
    assert plan.ca_renewed and plan.serving_renewed
    cert = plan.serving_data["tls.crt"]
    assert tls.issued_by(cert, plan.ca_bundle)
    assert subject_alt_names(cert) == (sorted(HOSTS), [])
    assert plan.serving_data["ca.crt"] == plan.ca_bundle == plan.ca_data["ca.crt"]


def test_second_run_keeps_everything():
    first = first_plan()
    again = plan_self_signed(first.ca_data, first.serving_data, HOSTS[2], HOSTS, 365, 3650, 30, now=NOW)
    assert not again.ca_renewed and not again.serving_renewed and again.reasons == []
    assert again.ca_data == first.ca_data and again.serving_data == first.serving_data


def test_serving_certificate_renewed_within_renew_before_with_the_same_ca():
    first = first_plan()
    later = NOW + datetime.timedelta(days=340)
    plan = plan_self_signed(first.ca_data, first.serving_data, HOSTS[2], HOSTS, 365, 3650, 30, now=later)
    assert plan.serving_renewed and not plan.ca_renewed
    assert "within renew_before" in plan.reasons[0]
    assert plan.ca_bundle == first.ca_bundle
    assert plan.serving_data["tls.crt"] != first.serving_data["tls.crt"]


def test_ca_renewal_keeps_the_old_ca_trusted_until_it_expires():
    # A CA of 400 days must be renewed once it cannot outlive a new 365-day certificate plus 30 days.
    first = plan_self_signed(None, None, HOSTS[2], HOSTS, 365, 400, 30, now=NOW)
    assert not plan_self_signed(first.ca_data, first.serving_data, HOSTS[2], HOSTS, 365, 3650, 30,
                                now=NOW).ca_renewed
    later = NOW + datetime.timedelta(days=10)
    plan = plan_self_signed(first.ca_data, first.serving_data, HOSTS[2], HOSTS, 365, 3650, 30, now=later)
    assert plan.ca_renewed and plan.serving_renewed
    bundle = split_pem_bundle(plan.ca_bundle)
    assert len(bundle) == 2 and bundle[1] == first.ca_bundle
    assert tls.issued_by(plan.serving_data["tls.crt"], bundle[0])
    # Once the old CA has expired it leaves the bundle.
    expired = NOW + datetime.timedelta(days=401)
    after = plan_self_signed(plan.ca_data, plan.serving_data, HOSTS[2], HOSTS, 365, 3650, 30, now=expired)
    assert not after.ca_renewed
    assert split_pem_bundle(after.ca_bundle) == bundle[:1]


def test_new_hosts_or_a_mismatched_key_reissue_the_serving_certificate():
    first = first_plan()
    moved = plan_self_signed(first.ca_data, first.serving_data, "127.0.0.1", ["127.0.0.1"], 365, 3650, 30, now=NOW)
    assert moved.serving_renewed and not moved.ca_renewed
    assert subject_alt_names(moved.serving_data["tls.crt"]) == ([], ["127.0.0.1"])
    other_key = tls.new_ca("x")[1]
    broken = dict(first.serving_data, **{"tls.key": other_key})
    plan = plan_self_signed(first.ca_data, broken, HOSTS[2], HOSTS, 365, 3650, 30, now=NOW)
    assert plan.serving_renewed and "do not match" in plan.reasons[0]


def test_garbage_in_the_secrets_is_replaced():
    plan = plan_self_signed({"ca.crt": "junk", "ca.key": "junk"}, {"tls.crt": "junk", "tls.key": "junk"},
                            HOSTS[2], HOSTS, 365, 3650, 30, now=NOW)
    assert plan.ca_renewed and plan.serving_renewed
    assert len(split_pem_bundle(plan.ca_bundle)) == 1


def test_hosts_to_sans():
    assert hosts_to_sans(["b.example", "127.0.0.1", "a.example", "::1"]) == (["a.example", "b.example"],
                                                                             ["127.0.0.1", "::1"])
