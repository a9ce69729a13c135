#!/usr/bin/env bash
# Prints the path of the first Python of the given versions (tools/find-python.sh 3.13 3.12) that runs: pythonX.Y
# on PATH, else one pyenv installed (its shims are on PATH but fail for versions pyenv does not have selected).
# The Makefile creates each venv with it; when none runs, it says what to install.
set -uo pipefail
pyenv_versions="${PYENV_ROOT:-$HOME/.pyenv}/versions"
for version in "$@"; do
  for candidate in "python$version" "$pyenv_versions/$version".*/bin/"python$version"; do
    if path=$("$candidate" -c 'import sys; print(sys.executable)' 2>/dev/null); then
      echo "$path"
      exit 0
    fi
  done
done
printf -v wanted '%s or ' "$@"
echo "no Python ${wanted% or } found: install one (Debian: apt-get install python<version>-venv; pyenv: pyenv install" \
  "<version>), or name an interpreter with PYTHON=, PYTHON_LOWEST= or PYTHON_HIGHEST= (see the Makefile)" >&2
exit 1
