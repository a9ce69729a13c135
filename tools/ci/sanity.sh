#!/usr/bin/env bash
# ansible-test sanity needs the collection at ansible_collections/<namespace>/<name>: copy the tracked
# (and new, not ignored) files into such a tree outside the checkout (inside it, ansible-test would
# ask git, which ignores the copy) and run it there, with no ignore file.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# The venv whose ansible-test runs: .venv (highest ansible-core) unless SANITY_VENV names another
# (make test-lowest and test-highest pass .venv-lowest and .venv-highest).
venv=$(cd "$root" && cd "${SANITY_VENV:-.venv}" && pwd)
base="${XDG_CACHE_HOME:-$HOME/.cache}/gkm-cluster/sanity"
mkdir -p "$base"
# One run at a time for this user, whichever checkout it comes from: a run empties and refills its copy, and
# ansible-test deletes and rebuilds any of its shared venvs under ~/.ansible/test/venv that another run has not
# finished creating. A second run (CI and a developer, say) waits here; the lock goes when this shell and its
# children exit, however they exit.
exec 9>"$base/.lock"
if ! flock -n 9; then
  echo "sanity: another run holds $base/.lock; waiting for it (at most 30 minutes)" >&2
  flock -w 1800 9 || { echo "sanity: gave up waiting for $base/.lock" >&2; exit 1; }
fi
# The tree is kept between runs (only tests/output survives a refresh): ansible-test caches its venvs there,
# so each checkout and venv (ansible-core version) has a tree of its own.
tree="$base/$(echo "$root $venv" | sha256sum | cut -c1-12)/ansible_collections/gkm/cluster"
if [ -d "$tree" ]; then
  find "$tree" -mindepth 1 -maxdepth 1 ! -name tests -exec rm -rf {} +
  find "$tree/tests" -mindepth 1 -maxdepth 1 ! -name output -exec rm -rf {} +
fi
mkdir -p "$tree"
# ansible-test bootstraps pip in its venvs with a script it downloads from a host we cannot reach; each
# ansible-core version asks for its own pip version (2.16: 23.1.2), the stand-in serves any of them.
pip_version=$("$venv/bin/python" -c \
  "import re, ansible_test, pathlib; print(re.search(r\"pip='([0-9.]+)'\", (pathlib.Path(ansible_test.__file__).parent / '_internal/python_requirements.py').read_text()).group(1))")
bootstrap="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
[ -f "$bootstrap" ] || install -D -m 0644 "$root/tools/ci/get_pip_offline.py" "$bootstrap"

cd "$root"
# What the collection ships is what is checked: galaxy.yml's build_ignore paths (bench/, controller/, tools/, ...)
# stay out.
git ls-files -co --exclude-standard -z | grep -zvE '^(\.ci|bench|controller|tools|requirements)/|^(Makefile|pyproject\.toml)$' \
  | xargs -0 cp --parents -t "$tree"
# Our modules use kubernetes.core's doc fragment and client; ansible-test finds it beside the collection. The
# venv's own copy (the matrix venvs link .venv's in), at the site-packages its interpreter names.
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
ln -sfn "$site/ansible_collections/kubernetes" "$tree/../../kubernetes"
cd "$tree"
rm -rf tests/sanity  # the rule is no ignore entries at all
# The venv's Python version: ansible-test then runs the checks with the venv's own interpreter.
python_version=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$venv/bin/ansible-test" sanity --venv --python "$python_version" --color no "$@"
