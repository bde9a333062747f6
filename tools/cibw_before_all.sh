#!/usr/bin/env bash
# cibuildwheel's before-all step on Linux (.github/workflows/wheels.yml): runs once per
# manylinux2014 container (CentOS 7, glibc 2.17; x86_64 or aarch64) and leaves a static,
# position-independent libjpeg-turbo in $PREFIX (default /opt/libjpeg-turbo) for setup.py
# (TURBOLOADER_JPEG_ROOT), with its licence and the linker version script that keeps its
# symbols inside the extensions.
#   tools/cibw_before_all.sh SOURCES_DIR
# SOURCES_DIR holds the tarballs pinned in tools/sources.sh, fetched on the runner beforehand
# by tools/fetch_source.sh (the container has no apt): the same libjpeg-turbo as
# tools/build_wheel.sh. x86_64's SIMD code needs NASM >= 2.13, newer than CentOS 7's 2.10:
# NASM is built from source first (aarch64's SIMD code is C intrinsics, built by gcc).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/sources.sh"
sources=$(cd "${1:?usage: cibw_before_all.sh SOURCES_DIR}" && pwd)
prefix="${PREFIX:-/opt/libjpeg-turbo}"
# the image's own CPython (manylinux images keep every version under /opt/python) runs the
# helpers: cmake from PyPI (CentOS 7's is 2.8) and the unpacking (xz may be absent)
py="${PYTHON:-/opt/python/cp311-cp311/bin/python}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

unpack() {  # TARBALL SHA256 DIR: check, unpack into DIR without the archive's top folder
  echo "$2  $1" | sha256sum -c -
  "$py" - "$1" "$3" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    for m in t.getmembers():
        m.name = m.name.partition("/")[2]
        if m.name:
            t.extract(m, sys.argv[2])
PY
}

if [ "$(uname -m)" = x86_64 ]; then
  unpack "$sources/$NASM_TARBALL" "$NASM_SHA256" "$work/nasm"
  (cd "$work/nasm" && ./configure --prefix="$work/tools" >/dev/null && make -j"$(nproc)" >/dev/null \
    && make install >/dev/null)
  nasm_opt=(-DCMAKE_ASM_NASM_COMPILER="$work/tools/bin/nasm")  # never an older one on PATH
  "$work/tools/bin/nasm" -v
else
  nasm_opt=()
fi

unpack "$sources/$JPEG_TARBALL" "$JPEG_SHA256" "$work/src"
"$py" -m pip install -q "cmake>=3.25,<5"
"$py" -m cmake -S "$work/src" -B "$work/build" -G "Unix Makefiles" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O3 -fPIC -DNDEBUG" \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DENABLE_SHARED=OFF -DENABLE_STATIC=ON \
  -DWITH_TURBOJPEG=OFF -DWITH_SIMD=ON -DREQUIRE_SIMD=ON ${nasm_opt[@]+"${nasm_opt[@]}"}
"$py" -m cmake --build "$work/build" --target jpeg-static -j "$(nproc)"

mkdir -p "$prefix/include" "$prefix/lib"
cp "$work/build/libjpeg.a" "$prefix/lib/"
cp "$work/build/jconfig.h" "$work/src/jpeglib.h" "$work/src/jmorecfg.h" "$work/src/jerror.h" \
  "$prefix/include/"
cp "$work/src/LICENSE.md" "$work/src/README.ijg" "$prefix/"
# an extension exports its module's init function and nothing else (as in tools/build_wheel.sh)
printf '{ global: PyInit_*; local: *; };\n' > "$prefix/exports.map"
ls -l "$prefix/lib"
