#!/usr/bin/env bash
# Builds (or reuses) containerd 2.x, its runc shim, ctr and runc for the real nodes; prints the bin directory.
# Cache: ${XDG_CACHE_HOME:-~/.cache}/gkm-cluster/containerd-<version>_runc-<version>_<inputs>/bin, where <inputs>
# hashes this script with the Go version: a change to either rebuilds.
# Both are built with `go install module@version`, so each uses its own go.mod and go.sum exactly (neither has
# replace directives); Debian's containerd 1.6 cannot mount image volumes (ImageVolume needs containerd >= 2.1).
set -euo pipefail
CONTAINERD_VERSION=v2.4.2
# The runc version containerd $CONTAINERD_VERSION tests with (its script/setup/runc-version); Debian's 1.1.5 is older.
RUNC_VERSION=v1.5.2
inputs=$( (cat "$0"; go env GOVERSION) | sha256sum | cut -c1-12)
bin="${XDG_CACHE_HOME:-$HOME/.cache}/gkm-cluster/containerd-${CONTAINERD_VERSION}_runc-${RUNC_VERSION}_${inputs}/bin"
wanted=(containerd containerd-shim-runc-v2 ctr runc)

complete() {
  local name
  for name in "${wanted[@]}"; do [ -x "$bin/$name" ] || return 1; done
}

if complete; then
  echo "$bin"
  exit 0
fi
"$(dirname "$0")/../check-go.sh" "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" \
  "github.com/opencontainers/runc@$RUNC_VERSION"
mkdir -p "$bin"
export GOFLAGS=-buildvcs=false
staging="$bin/.install"
trap 'rm -rf "$staging"' EXIT

# No btrfs (needs cgo and its headers), devmapper or zfs snapshotters: the nodes use overlayfs.
tags="urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
module=github.com/containerd/containerd/v2
for cmd in containerd containerd-shim-runc-v2 ctr; do
  [ -x "$bin/$cmd" ] && continue
  echo "building $cmd $CONTAINERD_VERSION" >&2
  cmd_tags=$tags
  # As upstream's Makefile: the shim carries no gRPC server.
  [ "$cmd" = containerd-shim-runc-v2 ] && cmd_tags="$tags no_grpc"
  CGO_ENABLED=0 GOBIN="$staging" go install -trimpath -tags "$cmd_tags" \
    -ldflags "-s -w -X $module/version.Version=$CONTAINERD_VERSION" "$module/cmd/$cmd@$CONTAINERD_VERSION"
  mv "$staging/$cmd" "$bin/$cmd"
done
if [ ! -x "$bin/runc" ]; then
  echo "building runc $RUNC_VERSION" >&2
  # runc's nsenter is C: cgo is required, and seccomp needs libseccomp's headers (bindep: libseccomp-dev).
  # No libpathrs tag: that library is Rust and not packaged here; runc then uses its Go implementation.
  CGO_ENABLED=1 GOBIN="$staging" go install -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs" \
    -ldflags "-s -w" "github.com/opencontainers/runc@$RUNC_VERSION"
  mv "$staging/runc" "$bin/runc"
fi
echo "$bin"
