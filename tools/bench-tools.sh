#!/usr/bin/env bash
# Build the oras and cosign CLIs from the Go module proxy into ~/.cache/gkm-cluster/tools/bin.
# The extraction benchmark compares against the oras CLI; the signature tests sign with the real cosign
# (v2 as `cosign`, v3 as `cosign3`). Versions are pinned here; the directory records which versions it
# holds and is rebuilt when they change. A tool that cannot be built is reported and skipped.
set -uo pipefail

BIN="${GKM_TOOLS_BIN:-$HOME/.cache/gkm-cluster/tools/bin}"
ORAS_VERSION=v1.3.6
COSIGN_V2_VERSION=v2.6.5
COSIGN_V3_VERSION=v3.1.3
versions="oras-$ORAS_VERSION cosign-$COSIGN_V2_VERSION cosign3-$COSIGN_V3_VERSION"
mkdir -p "$BIN"
if [ "$(cat "$BIN/.versions" 2>/dev/null)" != "$versions" ]; then
  rm -f "$BIN/oras" "$BIN/cosign" "$BIN/cosign3"
  echo "$versions" > "$BIN/.versions"
fi

for name in oras cosign cosign3; do
  [ -x "$BIN/$name" ] && continue
  # Something to build: Go must be new enough for every one of them (their modules' go directives).
  "$(dirname "$0")/check-go.sh" "oras.land/oras@$ORAS_VERSION" "github.com/sigstore/cosign/v2@$COSIGN_V2_VERSION" \
    "github.com/sigstore/cosign/v3@$COSIGN_V3_VERSION" || exit 1
  break
done

build() {  # build <binary name in BIN> <package@version>
  local name="$1" pkg="$2" tmp
  if [ -x "$BIN/$name" ]; then return 0; fi
  tmp="$(mktemp -d)"
  if CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-trimpath go install "$pkg" >"$tmp/build.log" 2>&1; then
    mv "$tmp/$(basename "${pkg%@*}")" "$BIN/$name"
    echo "built $name from $pkg"
  else
    echo "could not build $name from $pkg:" >&2
    tail -5 "$tmp/build.log" >&2
  fi
  rm -rf "$tmp"
}

build oras "oras.land/oras/cmd/oras@$ORAS_VERSION"
build cosign "github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN_V2_VERSION"
build cosign3 "github.com/sigstore/cosign/v3/cmd/cosign@$COSIGN_V3_VERSION"
