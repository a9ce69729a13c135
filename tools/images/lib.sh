# Shared by the engine-less image builds (sourced by build.sh): cache stages, input hashes, layers, push.
# Every stage of an image is an OCI layout under $IMAGE_CACHE/stages/, named by the hash of its inputs and
# of the stage before it, so an unchanged stage is reused as it is and a changed one rebuilds only what
# follows it.

IMAGE_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/gkm-cluster/images
# Timestamps inside every image (files, history, config): fixed, so a rebuild from the same inputs gives the
# same digests on any machine and any day. 2026-01-01T00:00:00Z.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1767225600}
IMAGE_CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

log() { echo "build.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# sha256 of strings given as arguments, then of the files named on stdin (NUL-separated, sorted by name).
hash_inputs() {
  { printf '%s\n' "$@"; sort -z | xargs -0 -r sha256sum; } | sha256sum | cut -c1-32
}

# The files of a source tree, as hash_inputs reads them; byte-code caches are not sources.
tree_files() {
  find "$1" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0
}

# A tar of DIR's contents that depends only on their names, contents and executable bits.
pack_layer() {  # DIR OUT.tar
  tar --sort=name --format=pax --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
      --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --mode='u+rwX,go=rX,go-w' \
      -C "$1" -cf "$2" .
}

# Runs the stage function STAGE_FN into a new layout unless STAGE_DIR already exists; the function gets the
# work directory and the layout it must complete (copied from BASE_DIR, blobs hard-linked, when given).
run_stage() {  # STAGE_DIR BASE_DIR|- STAGE_FN
  local dir=$1 base=$2 fn=$3
  if [ -f "$dir/index.json" ]; then
    log "reusing $(basename "$dir")"
    touch "$dir"  # recently used: kept by prune_stages
    return
  fi
  log "building $(basename "$dir")"
  STAGE_WORK=$(mktemp -d "$IMAGE_CACHE/tmp-$(lock_name).XXXXXX")
  trap 'rm -rf "$STAGE_WORK"' EXIT
  local work=$STAGE_WORK
  if [ "$base" = - ]; then
    umoci init --layout "$work/layout" >&2
    umoci new --image "$work/layout:$TAG" >&2
  else
    mkdir "$work/layout"
    cp -al "$base/blobs" "$work/layout/blobs"
    # umoci rewrites index.json: the base's own copy must stay untouched.
    cp "$base/index.json" "$base/oci-layout" "$work/layout/"
  fi
  "$fn" "$work" >&2
  umoci gc --layout "$work/layout" >&2
  rm -rf "$dir"
  mv "$work/layout" "$dir"
  rm -rf "$work"
  trap - EXIT
}

# The controller and workload images build on the tools image's stages: they take its lock.
lock_name() { case $NAME in controller | workload) echo tools ;; *) echo "$NAME" ;; esac; }

# One build of an image at a time per cache (tests and helpers may run side by side); what a killed build left
# behind is removed once the lock is held.
lock_cache() {
  mkdir -p "$IMAGE_CACHE/stages"
  exec 9>"$IMAGE_CACHE/$(lock_name).lock"
  flock 9
  rm -rf "$IMAGE_CACHE/tmp-$(lock_name)".*
}

# Keeps the three most recently used layouts of each stage of NAME (blobs shared with later stages stay).
prune_stages() {
  local stage
  for stage in $(find "$IMAGE_CACHE/stages" -mindepth 1 -maxdepth 1 -name "$NAME*" -printf '%f\n' |
                 sed 's/-[0-9a-f]*$//' | sort -u); do
    ls -dt "$IMAGE_CACHE/stages/$stage"-* | tail -n +4 | xargs -r rm -rf
  done
}

add_layer() {  # LAYOUT:TAG LAYER.tar DESCRIPTION
  umoci raw add-layer --image "$1" --history.created "$IMAGE_CREATED" --history.created_by "$3" "$2"
}

# Plain HTTP only for registries on this machine or a private 10/8 network (the simulated cluster's).
insecure_registry() {  # HOST:PORT
  [[ ${1%:*} =~ ^(127\.0\.0\.1|10\.[0-9]+\.[0-9]+\.[0-9]+)$ ]]
}

# Copies the layout's TAG to HOST:PORT/gkm-cluster/NAME:TAG and prints the reference with its digest.
push_layout() {  # LAYOUT NAME TAG HOST:PORT
  local ref=$4/gkm-cluster/$2:$3 digest_file tls=()
  digest_file=$(mktemp)
  insecure_registry "$4" && tls=(--dest-tls-verify=false)
  log "pushing $ref"
  skopeo copy --quiet "${tls[@]}" --digestfile "$digest_file" "oci:$1:$3" "docker://$ref" >&2
  echo "$ref@$(cat "$digest_file")"
  rm -f "$digest_file"
}
