#!/bin/sh
# The image's build step: the Dockerfile's builder stage runs it, and tests/test_image.py runs it too (no
# engine builds the image in CI). Builds the project's wheel from SRC and a virtualenv at VENV holding it and
# its dependencies, without pip or setuptools (nothing installs into the shipped image later).
#
#   deploy/image/build.sh SRC VENV [EXTRAS]   PYTHON picks the interpreter (python3 by default); EXTRAS are
#                                             the project's extras to install too (comma-separated: kubernetes)
#
# A virtualenv is not relocatable: the runtime stage must copy it to the same path.
set -eu
src="${1:?usage: build.sh SRC VENV}"
venv="${2:?usage: build.sh SRC VENV}"
extras="${3:-}"
python="${PYTHON:-python3}"
wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT

echo "build.sh: virtualenv $venv ($("$python" --version))"
"$python" -m venv "$venv"
echo "build.sh: wheel of $src"
"$venv/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$wheels" "$src"
wheel="$(ls "$wheels"/*.whl)"
echo "build.sh: installing $(basename "$wheel") and its dependencies${extras:+ (with the extras $extras)}"
"$venv/bin/python" -m pip install --quiet "$wheel${extras:+[$extras]}"
"$venv/bin/python" -m pip uninstall --quiet --yes pip setuptools
"$venv/bin/rocm-watchdog" --version
