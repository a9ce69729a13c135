# The workload image without an engine (sourced by build.sh): a pod that compiles Triton kernels as a model's
# warm-up would, to show whether a cache given to it is hit (docs/kernels.md). The tools image's root stage as it
# is, then two stages of its own:
#   triton  libstdc++6 (libtriton needs it; the tools root has no C++ program) as one layer, then the pinned Triton
#           of requirements/triton.txt (the wheel for CPython 3.11) as another
#   code    tools/triton_kernels (the kernel set and its warm-up command) and the image's configuration
# A change to tools/triton_kernels rebuilds only the last stage.

WORKLOAD_HOME=/opt/gkm/workload

workload_tag() { tools_tag; }

# libstdc++6 comes from the same gcc-12 source package as the root's pinned libgcc-s1: the same version.
workload_libstdcxx_version() { awk -F= '$1 == "libgcc-s1" {print $2}' "$DEBIAN_LOCK"; }

workload_triton_stage() {
  local deb=$1/deb version
  version=$(workload_libstdcxx_version)
  mkdir -p "$deb" "$1/cxx"
  (cd "$deb" && apt-get download -q "libstdc++6=$version" >&2) ||
    die "apt-get download libstdc++6=$version failed: the mirror no longer serves the version $DEBIAN_LOCK pins; \
run tools/images/lock-debian.sh and commit $DEBIAN_LOCK"
  dpkg-deb -x "$deb"/libstdc++6_*.deb "$1/cxx"
  rm -rf "$1/cxx/usr/share"
  pack_layer "$1/cxx" "$1/cxx.tar"
  add_layer "$1/layout:$TAG" "$1/cxx.tar" "dpkg-deb -x libstdc++6=$version"
  local target=$1/tree$TOOLS_SITE
  mapfile -t platforms < <(tools_platforms)
  "$BUILD_PYTHON" -m pip install --quiet --no-compile --no-warn-script-location --only-binary=:all: --no-deps \
    --python-version "$TOOLS_PYTHON_VERSION" --implementation cp "${platforms[@]}" \
    --target "$target" -r requirements/triton.txt >&2
  rm -rf "$target/bin"
  compile_tree "$target" "$TOOLS_SITE"
  pack_layer "$1/tree" "$1/triton.tar"
  add_layer "$1/layout:$TAG" "$1/triton.tar" "pip install --no-deps --target $TOOLS_SITE -r requirements/triton.txt"
}

workload_code_stage() {
  python_tree_layer "$1" code tools/triton_kernels "$WORKLOAD_HOME/tools" "tools/triton_kernels of gkm.cluster $TAG"
  # HOME: Triton's default directories are below it; the pod sets TRITON_CACHE_DIR and GKM_WARMUP_TARGET.
  umoci config --image "$1/layout:$TAG" --created "$IMAGE_CREATED" --history.created "$IMAGE_CREATED" \
    --history.created_by "image configuration" --os linux --architecture amd64 \
    --config.user 1000:1000 --config.workingdir /tmp \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env HOME=/tmp --config.env PYTHONPATH=$WORKLOAD_HOME --config.env PYTHONDONTWRITEBYTECODE=1 \
    --config.env PYTHONUNBUFFERED=1 \
    --config.entrypoint python3 --config.entrypoint -m --config.entrypoint tools.triton_kernels \
    --config.cmd warmup \
    --config.label org.opencontainers.image.title=gkm-cluster-workload \
    --config.label "org.opencontainers.image.version=$TAG"
}

# Builds (or reuses) the workload image; prints the final layout's directory.
build_workload() {
  local triton_key code_key build_python
  build_tools_root
  build_python=$("$BUILD_PYTHON" -c 'import pip, sys; print(sys.version, "pip", pip.__version__)')
  triton_key=$(printf '%s\0' tools/images/workload.sh requirements/triton.txt |
               hash_inputs "${TOOLS_ROOT##*-}" "$build_python")
  code_key=$({ tree_files tools/triton_kernels; printf '%s\0' galaxy.yml; } | hash_inputs "$triton_key")
  run_stage "$IMAGE_CACHE/stages/workload-triton-$triton_key" "$TOOLS_ROOT" workload_triton_stage
  run_stage "$IMAGE_CACHE/stages/workload-code-$code_key" "$IMAGE_CACHE/stages/workload-triton-$triton_key" \
    workload_code_stage
  echo "$IMAGE_CACHE/stages/workload-code-$code_key"
}
