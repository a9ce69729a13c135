"""What the simulated cluster's Kyverno needs: its objects and its command line, pure.

Kyverno's admission controller runs here as a local process against the kubeconfig (out of cluster): it
registers its webhooks with `url: https://<serverIP>/...` and a certificate for that address, which the API
server (on this machine) calls. Everything it serves binds the given loopback or host address (the webhook server
and the Prometheus metrics server, which starts even with metrics disabled); the controller-runtime one is off.
"""

NAMESPACE = "kyverno"
# Kyverno reads its settings from these ConfigMaps (INIT_CONFIG, METRICS_CONFIG) and refuses to start without them.
CONFIG_MAP = "kyverno"
METRICS_CONFIG_MAP = "kyverno-metrics"
# The label Kyverno puts on the webhook configurations it registers (url-encoded for a labelSelector).
WEBHOOK_SELECTOR = "webhook.kyverno.io%2Fmanaged-by%3Dkyverno"


def namespace():
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}


def config_maps():
    """Kyverno's settings (its defaults, but no registry prefix is added to image names) and metrics settings."""
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE}, "data": data}
            for name, data in ((CONFIG_MAP, {"enableDefaultRegistryMutation": "false"}), (METRICS_CONFIG_MAP, {}))]


def environment():
    """What an in-cluster Kyverno gets from its Deployment, which it checks for at start."""
    return {"KYVERNO_NAMESPACE": NAMESPACE, "KYVERNO_SERVICEACCOUNT_NAME": "kyverno-admission-controller",
            "KYVERNO_DEPLOYMENT": "kyverno-admission-controller", "KYVERNO_POD_NAME": "gkm-sim-kyverno",
            "INIT_CONFIG": CONFIG_MAP, "METRICS_CONFIG": METRICS_CONFIG_MAP}


def argv(binary, kubeconfig, address, webhook_port, metrics_port):
    return [
        binary, "--kubeconfig", kubeconfig,
        "--serverIP", "%s:%d" % (address, webhook_port),
        "--webhookServerHost", address, "--webhookServerPort", str(webhook_port),
        # Kyverno's own CA and serving pair, kept in these Secrets of its namespace (the Helm chart's names).
        "--caSecretName", "kyverno-svc.kyverno.svc.kyverno-tls-ca",
        "--tlsSecretName", "kyverno-svc.kyverno.svc.kyverno-tls-pair",
        # The local registry is plain HTTP.
        "--allowInsecureRegistry",
        "--disableMetrics", "--metricsHost", address, "--metricsPort", str(metrics_port),
        "--controllerRuntimeMetricsAddress", "0",
        # Every admission is verified afresh: tests re-sign images and expect the new answer at once.
        "--imageVerifyCacheEnabled=false",
        "--admissionReports=false", "--disableLogColor",
    ]
