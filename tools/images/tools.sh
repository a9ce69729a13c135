# The tools image without an engine (sourced by build.sh): three stages, each a layer of its own.
#   root    Debian bookworm, essential packages and python3, every version pinned by tools-debian.lock
#   wheels  the collection's run-time requirements, pinned by requirements/constraints.txt, binary wheels only
#   code    the collection's plugins/module_utils, importable by its FQCN; the image's configuration
# A change to the collection's code rebuilds only the last stage.

TOOLS_PYTHON_VERSION=3.11  # bookworm's python3
TOOLS_SITE=/usr/local/lib/python3.11/dist-packages  # on Debian's sys.path, outside the packages' own tree
TOOLS_COLLECTIONS=/opt/gkm/collections
TOOLS_MODULE_UTILS=$TOOLS_COLLECTIONS/ansible_collections/gkm/cluster/plugins/module_utils
# The Python that runs pip and compiles byte code on the build machine: a 3.11, as in the image.
BUILD_PYTHON=${GKM_IMAGE_PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}

tools_tag() { awk '$1 == "version:" {print $2}' galaxy.yml; }

# Byte code the image's Python 3.11 loads without writing (its user cannot): hash-based, fixed hash seed, the
# paths in it those of the image, so it depends on the sources and the compiling Python's version only.
compile_tree() {  # DIR PATH_IN_IMAGE
  PYTHONHASHSEED=0 "$BUILD_PYTHON" -m compileall -q -j1 --invalidation-mode unchecked-hash -d "$2" "$1" >&2
}

# A directory of this checkout at PARENT_IN_IMAGE/<its name>, byte-compiled, as a layer of its own (NAME.tar).
python_tree_layer() {  # STAGE_DIR NAME SOURCE_DIR PARENT_IN_IMAGE DESCRIPTION
  local tree=$1/$2
  mkdir -p "$tree$4"
  cp -r "$3" "$tree$4/"
  find "$tree" -depth \( -name __pycache__ -o -name '*.pyc' \) -exec rm -rf {} +
  compile_tree "$tree$4" "$4"
  pack_layer "$tree" "$1/$2.tar"
  add_layer "$1/layout:$TAG" "$1/$2.tar" "$5"
}

tools_root_stage() {
  local include
  include=$(grep -v '^#' "$DEBIAN_LOCK" | paste -sd,)
  # The mirror keeps only current versions: when a pinned one has left it, build from what it serves (the
  # image still works, it only stops matching the lock) rather than fail every fresh machine until a relock.
  if ! debian_root "$include" "$1/root.tar"; then
    log "WARNING: a version pinned in $DEBIAN_LOCK is no longer on the mirror; building with the mirror's current \
packages. Run tools/images/lock-debian.sh and commit $DEBIAN_LOCK to pin them again."
    debian_root "$DEBIAN_WANTED" "$1/root.tar"
  fi
  add_layer "$1/layout:$TAG" "$1/root.tar" "mmdebstrap --variant=essential $DEBIAN_SUITE ($DEBIAN_LOCK)"
}

# manylinux tags up to bookworm's glibc 2.36, so pip may run on any build machine.
tools_platforms() {
  local minor
  echo --platform=manylinux2014_x86_64
  for minor in $(seq 17 36); do echo "--platform=manylinux_2_${minor}_x86_64"; done
}

tools_wheels_stage() {
  local target=$1/tree$TOOLS_SITE
  mapfile -t platforms < <(tools_platforms)
  "$BUILD_PYTHON" -m pip install --quiet --no-compile --no-warn-script-location --only-binary=:all: \
    --python-version "$TOOLS_PYTHON_VERSION" --implementation cp "${platforms[@]}" \
    --target "$target" -r requirements.txt -c requirements/constraints.txt >&2
  # Console scripts carry the build machine's interpreter path; the image runs the modules with python3 -m.
  rm -rf "$target/bin"
  compile_tree "$target" "$TOOLS_SITE"
  pack_layer "$1/tree" "$1/wheels.tar"
  add_layer "$1/layout:$TAG" "$1/wheels.tar" "pip install --target $TOOLS_SITE -r requirements.txt"
}

# The collection's module_utils as a layer of its own (the controller image adds the same layer, byte for byte).
tools_code_layer() {
  local tree=$1/tree dir
  mkdir -p "$(dirname "$tree$TOOLS_MODULE_UTILS")"
  cp -r plugins/module_utils "$tree$TOOLS_MODULE_UTILS"
  find "$tree" -depth \( -name __pycache__ -o -name '*.pyc' \) -exec rm -rf {} +
  # module_utils import each other by their FQCN: every package above them needs its __init__.py.
  for dir in ansible_collections ansible_collections/gkm ansible_collections/gkm/cluster \
             ansible_collections/gkm/cluster/plugins; do
    : > "$tree$TOOLS_COLLECTIONS/$dir/__init__.py"
  done
  compile_tree "$tree$TOOLS_COLLECTIONS" "$TOOLS_COLLECTIONS"
  pack_layer "$tree" "$1/code.tar"
  add_layer "$1/layout:$TAG" "$1/code.tar" "plugins/module_utils of gkm.cluster $TAG"
}

tools_code_stage() {
  tools_code_layer "$1"
  umoci config --image "$1/layout:$TAG" --created "$IMAGE_CREATED" --history.created "$IMAGE_CREATED" \
    --history.created_by "image configuration" --os linux --architecture amd64 \
    --config.user 1000:1000 --config.workingdir /tmp \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env PYTHONPATH=$TOOLS_COLLECTIONS --config.env PYTHONDONTWRITEBYTECODE=1 \
    --config.env PYTHONUNBUFFERED=1 \
    --config.entrypoint python3 --config.entrypoint -m \
    --config.entrypoint ansible_collections.gkm.cluster.plugins.module_utils.extract.job_main \
    --config.label org.opencontainers.image.title=gkm-cluster-tools \
    --config.label "org.opencontainers.image.version=$TAG"
}

# The Python check and the root stage, which the controller and workload images share (TOOLS_ROOT names its layout).
build_tools_root() {
  local root_key
  "$BUILD_PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
    die "$BUILD_PYTHON is not Python $TOOLS_PYTHON_VERSION: set GKM_IMAGE_PYTHON to one (its byte code must fit the image's)"
  root_key=$(printf '%s\0' tools/images/{build,lib,debian,tools}.sh "$DEBIAN_LOCK" |
             hash_inputs tools "$SOURCE_DATE_EPOCH")
  TOOLS_ROOT=$IMAGE_CACHE/stages/tools-root-$root_key
  run_stage "$TOOLS_ROOT" - tools_root_stage
}

# The root and wheels stages, which the controller image shares (TOOLS_ROOT and TOOLS_WHEELS name their layouts).
build_tools_base() {
  local wheels_key build_python
  build_tools_root
  build_python=$("$BUILD_PYTHON" -c 'import pip, sys; print(sys.version, "pip", pip.__version__)')
  wheels_key=$(printf '%s\0' requirements.txt requirements/constraints.txt |
               hash_inputs "${TOOLS_ROOT##*-}" "$build_python")
  TOOLS_WHEELS=$IMAGE_CACHE/stages/tools-wheels-$wheels_key
  run_stage "$TOOLS_WHEELS" "$TOOLS_ROOT" tools_wheels_stage
}

# Builds (or reuses) the tools image; prints the final layout's directory.
build_tools() {
  local code_key
  build_tools_base
  code_key=$({ tree_files plugins/module_utils; printf '%s\0' galaxy.yml; } | hash_inputs "${TOOLS_WHEELS##*-}")
  run_stage "$IMAGE_CACHE/stages/tools-code-$code_key" "$TOOLS_WHEELS" tools_code_stage
  echo "$IMAGE_CACHE/stages/tools-code-$code_key"
}
