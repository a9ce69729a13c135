# The controller image (issue 33's kopf controller, docs/controller-design.md section 9), without an engine (sourced
# by build.sh): the tools image's root and wheels stages as they are, then two stages of its own, each a layer:
#   kopf    kopf and the dependencies the tools wheels lack (requirements/controller.txt, pinned by constraints.txt)
#   code    the tools image's module_utils layer (the same bytes), then controller/gkm_controller and the image's
#           configuration: python3 -m gkm_controller.main, its settings from the Deployment's environment
# No ansible-core, ansible-runner or engine binary. A change to the collection's code rebuilds only the last stage.

CONTROLLER_HOME=/opt/gkm/controller

controller_tag() { tools_tag; }

controller_kopf_stage() {
  local target=$1/tree$TOOLS_SITE
  mapfile -t platforms < <(tools_platforms)
  # --no-deps: what the tools wheels already hold (aiohttp, PyYAML) stays in their layer.
  "$BUILD_PYTHON" -m pip install --quiet --no-compile --no-warn-script-location --only-binary=:all: --no-deps \
    --python-version "$TOOLS_PYTHON_VERSION" --implementation cp "${platforms[@]}" \
    --target "$target" -r requirements/controller.txt -c requirements/constraints.txt >&2
  # kopf's and click's console scripts name the build machine's interpreter; the image runs python3 -m.
  rm -rf "$target/bin"
  compile_tree "$target" "$TOOLS_SITE"
  pack_layer "$1/tree" "$1/kopf.tar"
  add_layer "$1/layout:$TAG" "$1/kopf.tar" "pip install --no-deps --target $TOOLS_SITE -r requirements/controller.txt"
}

controller_code_stage() {
  tools_code_layer "$1"
  python_tree_layer "$1" controller controller/gkm_controller "$CONTROLLER_HOME" \
    "controller/gkm_controller of gkm.cluster $TAG"
  # The root file system stays read-only and nothing is written at run time (the byte code is in the image).
  umoci config --image "$1/layout:$TAG" --created "$IMAGE_CREATED" --history.created "$IMAGE_CREATED" \
    --history.created_by "image configuration" --os linux --architecture amd64 \
    --config.user 1000:1000 --config.workingdir /tmp \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env PYTHONPATH=$TOOLS_COLLECTIONS:$CONTROLLER_HOME --config.env PYTHONDONTWRITEBYTECODE=1 \
    --config.env PYTHONUNBUFFERED=1 \
    --config.entrypoint python3 --config.entrypoint -m --config.entrypoint gkm_controller.main \
    --config.label org.opencontainers.image.title=gkm-cluster-controller \
    --config.label "org.opencontainers.image.version=$TAG"
}

# Builds (or reuses) the controller image; prints the final layout's directory.
build_controller() {
  local kopf_key code_key
  build_tools_base
  kopf_key=$(printf '%s\0' tools/images/controller.sh requirements/controller.txt | hash_inputs "${TOOLS_WHEELS##*-}")
  code_key=$({ tree_files plugins/module_utils; tree_files controller/gkm_controller
               printf '%s\0' galaxy.yml; } | hash_inputs "$kopf_key")
  run_stage "$IMAGE_CACHE/stages/controller-kopf-$kopf_key" "$TOOLS_WHEELS" controller_kopf_stage
  run_stage "$IMAGE_CACHE/stages/controller-code-$code_key" "$IMAGE_CACHE/stages/controller-kopf-$kopf_key" \
    controller_code_stage
  echo "$IMAGE_CACHE/stages/controller-code-$code_key"
}
