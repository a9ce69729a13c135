# The pause image without an engine (sourced by build.sh): one layer holding containers/pause/pause.c built
# static, run as nobody.

PAUSE_TAG=1.0.0  # our own: bump it when pause.c changes

pause_tag() { echo "$PAUSE_TAG"; }

pause_stage() {
  mkdir "$1/tree"
  # No build id or paths of the build machine in the binary: the same compiler gives the same bytes.
  gcc -static -Os -s -Wl,--build-id=none -o "$1/tree/pause" containers/pause/pause.c
  pack_layer "$1/tree" "$1/pause.tar"
  add_layer "$1/layout:$TAG" "$1/pause.tar" "gcc -static containers/pause/pause.c"
  umoci config --image "$1/layout:$TAG" --created "$IMAGE_CREATED" --history.created "$IMAGE_CREATED" \
    --history.created_by "image configuration" --os linux --architecture amd64 \
    --config.user 65535:65535 --config.entrypoint /pause \
    --config.label org.opencontainers.image.title=gkm-cluster-pause \
    --config.label "org.opencontainers.image.version=$TAG"
}

# Builds (or reuses) the pause image; prints its layout's directory.
build_pause() {
  local key
  key=$(printf '%s\0' tools/images/{build,lib,pause}.sh containers/pause/pause.c |
        hash_inputs pause "$SOURCE_DATE_EPOCH" "$(gcc --version | head -1)")
  run_stage "$IMAGE_CACHE/stages/pause-$key" - pause_stage
  echo "$IMAGE_CACHE/stages/pause-$key"
}
