#!/usr/bin/env bash
# Builds one of the collection's images and, with --push, copies it to a registry.
#
#   tools/images/build.sh NAME [--push HOST:PORT]      NAME: tools, controller, workload or pause
#
# With a working podman, buildah or docker, the tools and pause images are built from containers/NAME/Containerfile
# by it; the controller and workload images are always assembled without one (they build on the tools
# image's stages).
# Otherwise (no engine, or one whose daemon does not answer) it is assembled without one: umoci, mmdebstrap,
# pip, gcc, skopeo, cached by the hash of its inputs under ${XDG_CACHE_HOME:-~/.cache}/gkm-cluster/images/.
# GKM_IMAGE_ENGINE=none forces the engine-less build, GKM_IMAGE_ENGINE=podman (...) a given engine.
#
# Prints one line on stdout: with --push HOST:PORT/gkm-cluster/NAME:TAG@sha256:..., without it the local
# image (oci:DIR:TAG for the engine-less build, the engine's tag otherwise). Progress goes to stderr.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/../.."
. tools/images/lib.sh
. tools/images/debian.sh
. tools/images/tools.sh
. tools/images/controller.sh
. tools/images/workload.sh
. tools/images/pause.sh

usage() { die "usage: tools/images/build.sh tools|controller|workload|pause [--push HOST:PORT]"; }

NAME=${1:-}
REGISTRY=
case "$NAME" in tools | controller | workload | pause) ;; *) usage ;; esac
shift
case "$#:${1:-}" in
  0:) ;;
  2:--push) REGISTRY=$2 ;;
  *) usage ;;
esac
TAG=$("${NAME}_tag")

# The first engine that is installed and answers; none here, where docker's CLI has no daemon.
working_engine() {
  local engine
  for engine in podman buildah docker; do
    command -v "$engine" >/dev/null || continue
    "$engine" info >/dev/null 2>&1 && { echo "$engine"; return; }
    log "$engine is installed but does not answer ($engine info failed): not using it"
  done
}

build_with_engine() {  # ENGINE
  local engine=$1 context=. ref digest_file tls=()
  [ "$NAME" = pause ] && context=containers/pause
  ref=${REGISTRY:-localhost}/gkm-cluster/$NAME:$TAG
  log "building $ref with $engine from containers/$NAME/Containerfile"
  case $engine in
    buildah) buildah bud --layers -f "containers/$NAME/Containerfile" -t "$ref" "$context" >&2 ;;
    *) "$engine" build -f "containers/$NAME/Containerfile" -t "$ref" "$context" >&2 ;;
  esac
  if [ -z "$REGISTRY" ]; then
    echo "$ref"
    return
  fi
  if [ "$engine" = docker ]; then
    # docker pushes plain HTTP only to the registries its daemon is configured for (127.0.0.1 always).
    digest=$(docker push "$ref" | tee /dev/stderr | grep -o 'sha256:[0-9a-f]\{64\}' | tail -1)
  else
    insecure_registry "$REGISTRY" && tls=(--tls-verify=false)
    digest_file=$(mktemp)
    "$engine" push "${tls[@]}" --digestfile "$digest_file" "$ref" >&2
    digest=$(cat "$digest_file")
    rm -f "$digest_file"
  fi
  echo "$ref@$digest"
}

build_without_engine() {
  local layout
  lock_cache
  layout=$("build_$NAME")
  prune_stages
  if [ -n "$REGISTRY" ]; then
    push_layout "$layout" "$NAME" "$TAG" "$REGISTRY"
  else
    echo "oci:$layout:$TAG"
  fi
}

ENGINE=${GKM_IMAGE_ENGINE:-$(working_engine)}
if [ "$NAME" != controller ] && [ "$NAME" != workload ] && [ -n "$ENGINE" ] && [ "$ENGINE" != none ]; then
  build_with_engine "$ENGINE"
else
  build_without_engine
fi
