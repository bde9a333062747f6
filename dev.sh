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
# The editable install is a path entry (a .pth file naming this checkout), not setuptools'
# default import hook: the hook comes after the path scan, so a script in the checkout's
# parent folder imported the checkout itself (a folder named turboloader without an
# __init__.py) as an empty namespace package. A path entry holding turboloader/__init__.py
# wins over that. The extensions are built in place, as before.
editable=(--config-settings editable_mode=compat)
# what is installed is stamped with a hash of the dependency files and the set ("run" for
# the demo's runtime dependencies, "test" for those plus the test tools)
want=run
[ "$job" = demo ] || want=test
stamp="$venv/.turboloader-deps"
deps_key=$(cat requirements/constraints.txt pyproject.toml | sha256sum | cut -d' ' -f1)
have=$(cat "$stamp" 2>/dev/null || true)
native_stamp="$venv/.turboloader-native"
# the editable install points at this checkout: its path is part of the key (CI clones anew)
# (hand-written sources only: the _*.c files are Cython's output, made by the build itself)
native_key=$( (pwd; echo "${editable[*]}"; cat setup.py turboloader/_native/*.pyx turboloader/_native/*.pxd \
  turboloader/_native/[!_]*.c turboloader/_native/*.h) 2>/dev/null | sha256sum | cut -d' ' -f1)
if [ "$have" != "$deps_key:test" ] && [ "$have" != "$deps_key:$want" ]; then
  extras=""
  [ "$want" = test ] && extras="[test]"
  echo "dev.sh: installing dependencies ($want) into $venv (pinned by requirements/constraints.txt)" >&2
  "${pip[@]}" install -q -c requirements/constraints.txt setuptools wheel Cython numpy
  "${pip[@]}" uninstall -q -y turboloader >/dev/null 2>&1 || true  # the old distribution name
  "${pip[@]}" install -q -c requirements/constraints.txt --no-build-isolation -e ".$extras" \
    "${editable[@]}"
  echo "$deps_key:$want" > "$stamp"
  echo "$native_key" > "$native_stamp"
elif [ "$(cat "$native_stamp" 2>/dev/null)" != "$native_key" ] || \
     ! ls turboloader/_native/_jpeg.*.so >/dev/null 2>&1; then
  echo "dev.sh: native sources (or the checkout, or the install's form) changed: rebuilding" >&2
  "${pip[@]}" install -q --no-build-isolation --no-deps -e . "${editable[@]}"
  echo "$native_key" > "$native_stamp"
fi

case "$job" in
  demo)  exec "$venv/bin/turboloader" demo "$@" ;;
  # three pytest processes (pytest-xdist) on two cores: most tests wait on subprocesses,
  # servers, worker processes and latency proxies, and with two processes the cores sat idle
  # about 30% of the suite (975 CPU-s in 1392 core-s, benchmarks/results/issue41-suite.md).
  # --dist loadgroup keeps each xdist_group on one process (the wheel's build, the benchmark
  # smoke runs: their module fixtures run once).
  # TURBOLOADER_TEST_PROCESSES picks another count (0: one process, no xdist)
  test)  exec "$venv/bin/python" -m pytest -n "${TURBOLOADER_TEST_PROCESSES:-3}" --dist loadgroup \
           "$@" ;;   # pytest exits 5 when no test ran
  shell) exec env VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" "${SHELL:-bash}" ;;
esac
