"""What the simulated cluster's Kyverno needs: its objects and its command line, pure.

Kyverno's admission controller runs here as a local process against the kubeconfig (out of cluster): it
registers its webhooks with `url: https://<serverIP>/...` and a certificate for that address, which the API
server (on this machine) calls. Everything it serves binds the given loopback or host address: the webhook
server explicitly, the metrics servers not at all.
"""

NAMESPACE = "kyverno"
# Kyverno reads its settings from this ConfigMap (INIT_CONFIG, default "kyverno") and refuses to start without it.
CONFIG_MAP = "kyverno"
# The label Kyverno puts on the webhook configurations it registers (url-encoded for a labelSelector).
WEBHOOK_SELECTOR = "webhook.kyverno.io%2Fmanaged-by%3Dkyverno"


def namespace():
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}


def config_map():
    # Kyverno's defaults otherwise; webhook events of our own namespaces are not filtered.
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
            "data": {"defaultRegistry": "docker.io", "enableDefaultRegistryMutation": "false"}}


def argv(binary, kubeconfig, address, webhook_port):
    return [
        binary, "--kubeconfig", kubeconfig,
        "--serverIP", "%s:%d" % (address, webhook_port),
        "--webhookServerHost", address, "--webhookServerPort", str(webhook_port),
        # The local registry is plain HTTP.
        "--allowInsecureRegistry",
        # No listener beyond the webhook server: no Prometheus or controller-runtime metrics endpoints.
        "--disableMetrics", "--controllerRuntimeMetricsAddress", "0",
        # Every admission is verified afresh: tests re-sign images and expect the new answer at once.
        "--imageVerifyCacheEnabled=false",
        "--admissionReports=false", "--disableLogColor",
    ]
