# The operator image without an engine (sourced by build.sh): the tools image's root and wheels stages as they are,
# then three stages of its own, each a layer:
#   ansible   ansible-core, ansible-runner, ansible-runner-http (requirements/operator.txt, pinned by constraints.txt)
#   engine    operator-sdk's ansible-operator (tools/ansible-operator/build.sh), the kubernetes.core collection, the
#             entry point (tools/images/operator-entrypoint.sh)
#   code      the tools image's module_utils layer (the same bytes), then the rest of the collection the runs use
#             (roles, playbooks, plugins, meta) and the image's configuration
# A change to the collection's code rebuilds only the last stage.

OPERATOR_HOME=/home/operator
OPERATOR_COLLECTION=$TOOLS_COLLECTIONS/ansible_collections/gkm/cluster

operator_tag() { tools_tag; }

operator_ansible_stage() {
  local target=$1/tree$TOOLS_SITE script
  mapfile -t platforms < <(tools_platforms)
  # --no-deps: what the tools wheels already hold (PyYAML, cryptography, requests, kubernetes) stays in their layer;
  # requirements/operator.txt names every other distribution these need.
  "$BUILD_PYTHON" -m pip install --quiet --no-compile --no-warn-script-location --only-binary=:all: --no-deps \
    --python-version "$TOOLS_PYTHON_VERSION" --implementation cp "${platforms[@]}" \
    --target "$target" -r requirements/operator.txt -c requirements/constraints.txt >&2
  # The engine runs ansible-runner, which runs ansible-playbook: console scripts on PATH, with the image's python3
  # instead of the build machine's interpreter.
  mkdir -p "$1/tree/usr/local/bin"
  for script in "$target"/bin/*; do
    sed '1s|^#!.*|#!/usr/bin/python3|' "$script" > "$1/tree/usr/local/bin/$(basename "$script")"
    chmod 0755 "$1/tree/usr/local/bin/$(basename "$script")"
  done
  # ansible-core's wheel carries ansible-test, which nothing in the image runs.
  rm -rf "$target/bin" "$target/ansible_test"
  compile_tree "$target" "$TOOLS_SITE"
  pack_layer "$1/tree" "$1/ansible.tar"
  add_layer "$1/layout:$TAG" "$1/ansible.tar" "pip install --no-deps --target $TOOLS_SITE -r requirements/operator.txt"
}

operator_engine_stage() {
  local tree=$1/tree core=$1/tree$TOOLS_COLLECTIONS/ansible_collections/kubernetes/core
  install -D -m 0755 "$OPERATOR_ENGINE" "$tree/usr/local/bin/ansible-operator"
  install -D -m 0755 tools/images/operator-entrypoint.sh "$tree/usr/local/bin/gkm-operator"
  mkdir -p "$core"
  cp -r "$OPERATOR_KUBERNETES_CORE"/{MANIFEST.json,FILES.json,meta,plugins} "$core/"
  find "$core" -depth \( -name __pycache__ -o -name '*.pyc' \) -exec rm -rf {} +
  compile_tree "$core" "$TOOLS_COLLECTIONS/ansible_collections/kubernetes/core"
  pack_layer "$tree" "$1/engine.tar"
  add_layer "$1/layout:$TAG" "$1/engine.tar" "ansible-operator $OPERATOR_ENGINE_VERSION, kubernetes.core, gkm-operator"
}

operator_code_stage() {
  local tree=$1/collection
  tools_code_layer "$1"
  mkdir -p "$tree$OPERATOR_COLLECTION/plugins" "$tree$OPERATOR_HOME"
  cp -r galaxy.yml meta roles playbooks "$tree$OPERATOR_COLLECTION/"
  find plugins -mindepth 1 -maxdepth 1 -type d ! -name module_utils -exec cp -r {} "$tree$OPERATOR_COLLECTION/plugins/" \;
  find "$tree" -depth \( -name __pycache__ -o -name '*.pyc' \) -exec rm -rf {} +
  compile_tree "$tree$OPERATOR_COLLECTION/plugins" "$OPERATOR_COLLECTION/plugins"
  pack_layer "$tree" "$1/collection.tar"
  add_layer "$1/layout:$TAG" "$1/collection.tar" "roles, playbooks, plugins and meta of gkm.cluster $TAG"
  # HOME (ansible's temporary files) and /tmp (the engine's runner directory) are the Deployment's emptyDirs: the
  # root file system stays read-only. uid 1000 has no passwd entry: USER and LOGNAME name it for getpass; ansible
  # wants a UTF-8 locale (C.UTF-8 is built into glibc).
  umoci config --image "$1/layout:$TAG" --created "$IMAGE_CREATED" --history.created "$IMAGE_CREATED" \
    --history.created_by "image configuration" --os linux --architecture amd64 \
    --config.user 1000:1000 --config.workingdir "$OPERATOR_HOME" \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env HOME=$OPERATOR_HOME \
    --config.env USER=operator --config.env LOGNAME=operator --config.env LANG=C.UTF-8 \
    --config.env ANSIBLE_COLLECTIONS_PATH=$TOOLS_COLLECTIONS \
    --config.env ANSIBLE_PYTHON_INTERPRETER=/usr/bin/python3 \
    --config.env ANSIBLE_GATHERING=explicit \
    --config.env PYTHONDONTWRITEBYTECODE=1 --config.env PYTHONUNBUFFERED=1 \
    --config.entrypoint /usr/local/bin/gkm-operator \
    --config.cmd run \
    --config.cmd --watches-file \
    --config.cmd "$OPERATOR_COLLECTION/roles/gkm/files/operator/watches.yaml" \
    --config.label org.opencontainers.image.title=gkm-cluster-operator \
    --config.label "org.opencontainers.image.version=$TAG"
}

# Builds (or reuses) the operator image; prints the final layout's directory.
build_operator() {
  local ansible_key engine_key code_key engine_dir
  # The build Python's kubernetes.core: the `ansible` package of requirements/dev.txt (no Galaxy here).
  OPERATOR_KUBERNETES_CORE=$("$BUILD_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  OPERATOR_KUBERNETES_CORE=$OPERATOR_KUBERNETES_CORE/ansible_collections/kubernetes/core
  [ -f "$OPERATOR_KUBERNETES_CORE/MANIFEST.json" ] ||
    die "$BUILD_PYTHON has no kubernetes.core collection (the ansible package of requirements/dev.txt): run make venv"
  engine_dir=$(tools/ansible-operator/build.sh)
  OPERATOR_ENGINE=$engine_dir/bin/ansible-operator
  OPERATOR_ENGINE_VERSION=$(basename "$engine_dir")
  build_tools_base
  ansible_key=$(printf '%s\0' tools/images/operator.sh requirements/operator.txt | hash_inputs "${TOOLS_WHEELS##*-}")
  engine_key=$({ tree_files "$OPERATOR_KUBERNETES_CORE/meta"; tree_files "$OPERATOR_KUBERNETES_CORE/plugins"
                 printf '%s\0' "$OPERATOR_ENGINE" "$OPERATOR_KUBERNETES_CORE/MANIFEST.json" \
                   tools/images/operator-entrypoint.sh; } | hash_inputs "$ansible_key")
  code_key=$({ tree_files plugins; tree_files roles; tree_files playbooks; tree_files meta
               printf '%s\0' galaxy.yml; } | hash_inputs "$engine_key")
  run_stage "$IMAGE_CACHE/stages/operator-ansible-$ansible_key" "$TOOLS_WHEELS" operator_ansible_stage
  run_stage "$IMAGE_CACHE/stages/operator-engine-$engine_key" "$IMAGE_CACHE/stages/operator-ansible-$ansible_key" \
    operator_engine_stage
  run_stage "$IMAGE_CACHE/stages/operator-code-$code_key" "$IMAGE_CACHE/stages/operator-engine-$engine_key" \
    operator_code_stage
  echo "$IMAGE_CACHE/stages/operator-code-$code_key"
}
