#!/usr/bin/env bash
# Builds (or reuses) operator-sdk's ansible-operator, the engine of the collection's operator mode; prints its directory.
# Cache: ${XDG_CACHE_HOME:-~/.cache}/gkm-cluster/ansible-operator-<version>_<inputs>/bin/ansible-operator, where <inputs>
# hashes this module's go.mod, go.sum and this script with the Go version: a change to any of them rebuilds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
MODULE=github.com/operator-framework/ansible-operator-plugins
# The version comes from go.mod (the one place it is pinned).
VERSION=$(awk -v m="$MODULE" '$1 == "require" && $2 == m {print $3; exit}' "$here/go.mod")
inputs=$( (cat "$here/go.mod" "$here/go.sum" "$here/build.sh"; go env GOVERSION) | sha256sum | cut -c1-12)
out="${XDG_CACHE_HOME:-$HOME/.cache}/gkm-cluster/ansible-operator-${VERSION}_${inputs}"

if [ -x "$out/bin/ansible-operator" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$out/bin"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
cd "$here"
echo "building ansible-operator $VERSION" >&2
go build -trimpath -ldflags "-s -w -X $MODULE/internal/version.Version=$VERSION" \
  -o "$out/bin/ansible-operator.tmp" "$MODULE/cmd/ansible-operator"
mv "$out/bin/ansible-operator.tmp" "$out/bin/ansible-operator"
echo "$out"
