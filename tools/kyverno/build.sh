#!/usr/bin/env bash
# Builds (or reuses) Kyverno's admission controller and its CRDs for the simulated cluster; prints their directory.
# Cache: ${XDG_CACHE_HOME:-~/.cache}/gkm-cluster/kyverno-<version>_<inputs>/ (bin/kyverno, crds/), where <inputs>
# hashes this module's go.mod, go.sum and this script with the Go version: a change to any of them rebuilds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The version comes from go.mod (the one place it is pinned).
VERSION=$(awk '$1 == "require" && $2 == "github.com/kyverno/kyverno" {print $3; exit}' "$here/go.mod")
inputs=$( (cat "$here/go.mod" "$here/go.sum" "$here/build.sh"; go env GOVERSION) | sha256sum | cut -c1-12)
out="${XDG_CACHE_HOME:-$HOME/.cache}/gkm-cluster/kyverno-${VERSION}_${inputs}"

if [ -x "$out/bin/kyverno" ] && [ -f "$out/crds/.complete" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$out/bin" "$out/crds"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
cd "$here"
if [ ! -x "$out/bin/kyverno" ]; then
  echo "building kyverno $VERSION" >&2
  go build -trimpath -ldflags "-s -w -X github.com/kyverno/kyverno/pkg/version.BuildVersion=$VERSION" \
    -o "$out/bin/kyverno.tmp" github.com/kyverno/kyverno/cmd/kyverno
  mv "$out/bin/kyverno.tmp" "$out/bin/kyverno"
fi
# The CRDs of the same module version: the admission controller watches all of them.
source_dir=$(go list -m -f '{{.Dir}}' github.com/kyverno/kyverno)
find "$source_dir/config/crds" -name '*.yaml' -exec cp {} "$out/crds/" \;
chmod u+w "$out/crds"/*.yaml
touch "$out/crds/.complete"
echo "$out"
