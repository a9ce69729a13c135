"""Kyverno's admission controller as a local process (out of cluster; its objects and flags in kyverno_plan.py)."""

import json
import os
import ssl

from simcluster import api, builds, kyverno_plan
from simcluster.pki import ensure_pki
from simcluster.state_dir import (
    KUBECONFIG,
    bind_address,
    is_recorded_running,
    load_state,
    port,
    start_process,
    stop_recorded,
    wait_for,
)


def up():
    """Apply Kyverno's CRDs and objects and run it unless it runs; print its version and address as JSON."""
    state = load_state()
    pki = ensure_pki(state)
    directory = builds.kyverno_dir()
    address = "%s:%d" % (bind_address(state), port(state, "kyverno"))
    running = is_recorded_running(state, "kyverno")
    if not running:
        api.apply_crds(state, pki, os.path.join(directory, "crds"))
        api.create_if_missing(state, pki, "/api/v1/namespaces", kyverno_plan.namespace())
        for config_map in kyverno_plan.config_maps():
            api.create_if_missing(state, pki, "/api/v1/namespaces/%s/configmaps" % kyverno_plan.NAMESPACE, config_map)
        start_process(state, "kyverno", kyverno_plan.argv(os.path.join(directory, "bin", "kyverno"), KUBECONFIG,
                                                          bind_address(state), port(state, "kyverno"),
                                                          port(state, "kyverno-metrics")),
                      dict(os.environ, **kyverno_plan.environment()))
    # Kyverno's certificate comes from its own CA (a Secret it writes); only liveness is asked here.
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    wait_for("Kyverno", lambda: api.http_ok("https://%s/health/readiness" % address, context), 120, ["kyverno"],
             state)
    print(json.dumps({"changed": not running, "address": address,
                      "version": os.path.basename(directory).split("_")[0].split("-", 1)[1]}))


def down(purge):
    """Stop Kyverno; purge: also remove its webhook configurations, CRDs (and with them all policies) and namespace."""
    state, running = stop_recorded("kyverno")
    if purge:
        pki = ensure_pki(state)
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            api.request(state, pki, "DELETE", "/apis/admissionregistration.k8s.io/v1/%s?labelSelector=%s" % (
                kind, kyverno_plan.WEBHOOK_SELECTOR))
        paths = ["%s/%s" % (api.CRDS_PATH, crd["metadata"]["name"])
                 for crd in api.yaml_documents(os.path.join(builds.kyverno_dir(), "crds"))]
        for path in paths:
            api.delete_if_present(state, pki, path)
        api.delete_if_present(state, pki, "/api/v1/namespaces/" + kyverno_plan.NAMESPACE)
        # Gone, not only going: whoever comes next may install a Kyverno of its own.
        wait_for("Kyverno's CRDs to go", lambda: not any(api.exists(state, pki, path) for path in paths), 60)
    print(json.dumps({"changed": running or purge}))
