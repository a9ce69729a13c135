"""The run's certificates (made once per state directory) and the admin kubeconfig."""

import os

import yaml

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls
from simcluster import real_nodes_plan
from simcluster.state_dir import KUBECONFIG, PKI_DIR, bind_address, port, write_file


def ensure_pki(state):
    """CA, apiserver serving and kubelet-client certs, admin client cert and service-account keys (once per state)."""
    paths = {name: os.path.join(PKI_DIR, name) for name in (
        "ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key", "sa.key", "sa.pub",
        "kubelet-client.crt", "kubelet-client.key")}
    if all(os.path.exists(path) for path in paths.values()):
        return paths
    os.makedirs(PKI_DIR, exist_ok=True)
    ca_cert, ca_key = tls.new_ca("gkm-sim-ca")
    server_cert, server_key = tls.new_signed_cert(
        ca_cert, ca_key, "kube-apiserver",
        dns_names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                   "kubernetes.default.svc.cluster.local"],
        ip_addresses=sorted({"127.0.0.1", real_nodes_plan.SERVICE_IP, bind_address(state)}),
    )
    admin_cert, admin_key = tls.new_signed_cert(
        ca_cert, ca_key, "gkm-sim-admin", organization="system:masters", server=False, client=True)
    # The API server's identity towards kubelets (logs, exec, port-forward on real nodes).
    kubelet_client_cert, kubelet_client_key = tls.new_signed_cert(
        ca_cert, ca_key, "kube-apiserver-kubelet-client", organization="system:masters", server=False, client=True)
    sa_key = tls.new_private_key("rsa")
    for name, content in (("ca.crt", ca_cert), ("ca.key", ca_key), ("apiserver.crt", server_cert),
                          ("apiserver.key", server_key), ("admin.crt", admin_cert), ("admin.key", admin_key),
                          ("kubelet-client.crt", kubelet_client_cert), ("kubelet-client.key", kubelet_client_key),
                          ("sa.key", tls.key_to_pem(sa_key)), ("sa.pub", tls.public_key_to_pem(sa_key))):
        write_file(paths[name], content)
    return paths


def write_kubeconfig(state, pki):
    """The admin kubeconfig ($GKM_SIM_DIR/kubeconfig); returns the API server's URL."""
    server = "https://%s:%d" % (bind_address(state), port(state, "apiserver"))
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gkm-sim", "cluster": {"server": server, "certificate-authority": pki["ca.crt"]}}],
        "users": [{"name": "gkm-sim-admin", "user": {
            "client-certificate": pki["admin.crt"], "client-key": pki["admin.key"]}}],
        "contexts": [{"name": "gkm-sim", "context": {"cluster": "gkm-sim", "user": "gkm-sim-admin"}}],
        "current-context": "gkm-sim",
    }
    write_file(KUBECONFIG, yaml.safe_dump(config, sort_keys=False))
    return server
