#!/usr/bin/env bash
# Builds (or reuses) the control-plane binaries for the simulated cluster, and the kubectl of the same version
# (the tests and benchmarks run it), and prints their directory.
# Cache: ${XDG_CACHE_HOME:-~/.cache}/gkm-cluster/<versions>/bin; rebuilt only when versions change.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Kubernetes and etcd versions come from go.mod (the one place they are pinned); kwok is built with
# `go install`, outside this module, because its own dependency set differs.
KWOK_VERSION=v0.7.0
K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")
ETCD_VERSION=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$here/go.mod")

key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
bin="${XDG_CACHE_HOME:-$HOME/.cache}/gkm-cluster/$key/bin"
wanted=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kwok)
# kwok's own Stage CRD and stage definitions, taken from the same kwok module version; sim.py applies
# them so that tests can add stages of their own (for example one that fails chosen Job pods).
stages="$bin/kwok-stages"
stage_files=(crd/bases/kwok.x-k8s.io_stages.yaml stage/node/fast/node-initialize.yaml
  stage/node/heartbeat/node-heartbeat.yaml stage/pod/fast/pod-ready.yaml stage/pod/fast/pod-complete.yaml
  stage/pod/fast/pod-delete.yaml)

complete() {
  local name
  for name in "${wanted[@]}"; do [ -x "$bin/$name" ] || return 1; done
  [ -f "$stages/.complete" ]
}

if complete; then
  echo "$bin"
  exit 0
fi

"$here/../check-go.sh" "sigs.k8s.io/kwok@$KWOK_VERSION"
mkdir -p "$bin"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"

cd "$here"
# The kubelet (real nodes) and kubectl joined later: a cache made before them keeps its binaries and gains only
# what it lacks.
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  [ -x "$bin/$cmd" ] && continue
  echo "building $cmd $K8S_VERSION" >&2
  go build -trimpath -ldflags "$ldflags" -o "$bin/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
  mv "$bin/$cmd.tmp" "$bin/$cmd"
done
if [ ! -x "$bin/etcd" ]; then
  echo "building etcd $ETCD_VERSION" >&2
  go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" ./etcd
  mv "$bin/etcd.tmp" "$bin/etcd"
fi
if [ ! -x "$bin/kwok" ]; then
  echo "building kwok $KWOK_VERSION" >&2
  GOBIN="$bin/.kwok" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
  mv "$bin/.kwok/kwok" "$bin/kwok"
  rmdir "$bin/.kwok"
fi
if [ ! -f "$stages/.complete" ]; then
  kwok_dir=$(go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" | awk -F'"' '$2 == "Dir" {print $4}')
  mkdir -p "$stages"
  for file in "${stage_files[@]}"; do cp "$kwok_dir/kustomize/$file" "$stages/"; done
  touch "$stages/.complete"
fi
echo "$bin"
