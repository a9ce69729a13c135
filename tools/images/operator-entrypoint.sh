#!/bin/sh
# The operator image's entry point: writes the kubeconfig the runs' modules use, then runs ansible-operator.
# The engine hands its runs a kubeconfig naming its own proxy, which answers reads from its informer cache (stale for
# the resourceVersion-guarded writes of the per-node objects) and does not page lists; the modules reach the API
# server directly instead, as the pod's service account (the Deployment's extra variables name this file as
# caches_kubeconfig). The token file is read at every module start, so a rotated token is picked up.
set -eu
account=/var/run/secrets/kubernetes.io/serviceaccount
host=${KUBERNETES_SERVICE_HOST:?not in a pod: KUBERNETES_SERVICE_HOST is unset}
case $host in *:*) host="[$host]" ;; esac
mkdir -p "$HOME"
cat > "$HOME/in-cluster.kubeconfig" <<CONFIG
apiVersion: v1
kind: Config
clusters:
- name: in-cluster
  cluster: {server: "https://$host:${KUBERNETES_SERVICE_PORT:-443}", certificate-authority: $account/ca.crt}
users:
- name: operator
  user: {tokenFile: $account/token}
contexts:
- name: in-cluster
  context: {cluster: in-cluster, user: operator}
current-context: in-cluster
CONFIG
exec ansible-operator "$@"
