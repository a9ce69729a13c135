#!/usr/bin/env bash
# Builds (or reuses) the Triton venv of a requirements file (the argument; requirements/triton.txt when none);
# prints its directory.
# Cache: ${XDG_CACHE_HOME:-~/.cache}/gkm-cluster/triton-<version>_<inputs>/, where <inputs> hashes
# the requirements file, this script and the interpreter's version: a change to any of them builds a new venv,
# so every checkout and worktree of one machine shares one install (about 1 GB). PYTHON names the interpreter
# (default: the first of 3.11, 3.12, 3.13 that runs, as for .venv).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
requirements=${1:-"$here/../requirements/triton.txt"}
python=${PYTHON:-$("$here/find-python.sh" 3.11 3.12 3.13)}
version=$(awk -F'==' '$1 == "triton" {print $2; exit}' "$requirements")
inputs=$( (cat "$requirements" "$here/triton-venv.sh"; "$python" -c 'import sys; print(sys.version)') \
  | sha256sum | cut -c1-12)
out="${XDG_CACHE_HOME:-$HOME/.cache}/gkm-cluster/triton-${version}_${inputs}"

if [ -f "$out/.complete" ]; then
  echo "$out"
  exit 0
fi
echo "building the Triton $version venv in $out" >&2
# Built in place (a venv's scripts name its directory); .complete is written last, so a build cut short is
# started again from nothing.
rm -rf "$out"
"$python" -m venv "$out"
"$out/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
"$out/bin/python" -c 'import triton' >/dev/null
touch "$out/.complete"
echo "$out"
