#!/usr/bin/env bash
# Sets up a virtual environment with turboloader built from this checkout, then runs a job:
#   ./dev.sh demo [ARGS]   `turboloader demo` on JPEGs it generates itself
#   ./dev.sh test [ARGS]   the test suite (pytest); no collected tests is a failure
#   ./dev.sh shell         a shell with the environment activated
# TURBOLOADER_VENV picks the environment's folder (default .venv); PYTHON the interpreter.
set -euo pipefail
cd "$(dirname "$0")"
job="${1:-}"
[ $# -gt 0 ] && shift
case "$job" in demo|test|shell) ;; *) sed -n '2,7p' "$0" >&2; exit 2 ;; esac

venv="${TURBOLOADER_VENV:-.venv}"
python="${PYTHON:-python3}"

die() { echo "dev.sh: $*" >&2; exit 1; }
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
  || die "needs Python >= 3.10 as '$python' (set PYTHON=...)"
command -v "${CC:-cc}" >/dev/null || die "needs a C compiler (Debian/Ubuntu: apt-get install build-essential)"
"$python" - <<'PY' || die "needs Python's headers (Debian/Ubuntu: apt-get install python3-dev)"
import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
PY

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv" || die "could not create a venv (Debian/Ubuntu: apt-get install python3-venv)"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
stamp="$venv/.turboloader-deps"
deps_key=$(cat requirements/constraints.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$deps_key" ]; then
  echo "dev.sh: installing dependencies into $venv (pinned by requirements/constraints.txt)" >&2
  "${pip[@]}" install -q -c requirements/constraints.txt setuptools wheel Cython numpy
  "${pip[@]}" install -q -c requirements/constraints.txt --no-build-isolation -e ".[test]"
  echo "$deps_key" > "$stamp"
else
  # dependencies are current: only rebuild the extensions from this checkout
  "${pip[@]}" install -q --no-build-isolation --no-deps -e .
fi

case "$job" in
  demo)  exec "$venv/bin/turboloader" demo "$@" ;;
  test)  exec "$venv/bin/python" -m pytest "$@" ;;   # pytest exits 5 when no test ran
  shell) exec env VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" "${SHELL:-bash}" ;;
esac
