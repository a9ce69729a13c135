#!/usr/bin/env bash
# Fails, naming the Go to install, unless `go` is at least the newest Go that the tools/*/go.mod files and the
# modules given as module@version (what the calling build script `go install`s) declare in their go or toolchain
# directives. The build scripts call it before they build: tools/check-go.sh [module@version ...]
# GOTOOLCHAIN=local: an older go would otherwise fetch a newer toolchain by itself; this check says so instead.
set -euo pipefail
export GOTOOLCHAIN=local
tools=$(cd "$(dirname "$0")" && pwd)

declared=$(awk '$1 == "go" || $1 == "toolchain" {sub(/^go/, "", $2); print $2, FILENAME}' "$tools"/*/go.mod)
if ! command -v go >/dev/null; then
  newest=$(sort -V <<<"$declared" | tail -1)
  echo "go not found: install Go >= ${newest%% *} (https://go.dev/dl/) and put its bin directory on PATH" >&2
  exit 1
fi
if [ $# -gt 0 ]; then
  # Only the modules' go.mod files are fetched (from the module proxy, then the module cache), not their sources.
  declared+=$'\n'$(cd "$tools" && go list -m -f '{{.GoVersion}} {{.Path}}@{{.Version}}' "$@")
fi
newest=$(sort -V <<<"$declared" | tail -1)
have=$(go env GOVERSION)
have=${have#go}
have=${have%% *}
if [ "$(printf '%s\n' "$have" "${newest%% *}" | sort -V | head -1)" != "${newest%% *}" ]; then
  echo "go $have is too old: ${newest#* } needs Go >= ${newest%% *}; install it (https://go.dev/dl/)" \
    "and put its bin directory first on PATH" >&2
  exit 1
fi
