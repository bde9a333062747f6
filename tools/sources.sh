# The third-party sources a release wheel is built from, pinned once (sourced by
# tools/build_wheel.sh and tools/cibw_before_all.sh): Debian's copies of the upstream tarballs,
# fetched by tools/fetch_source.sh. libjpeg-turbo's SIMD code on x86_64 needs NASM >= 2.13.
JPEG_PKG=libjpeg-turbo
JPEG_VERSION=2.1.5
JPEG_SHA256=254f3642b04e309fee775123133c6464181addc150499561020312ec61c1bf7c
JPEG_TARBALL="${JPEG_PKG}_${JPEG_VERSION}.orig.tar.gz"
NASM_PKG=nasm
NASM_VERSION=2.16.01
NASM_SHA256=c77745f4802375efeee2ec5c0ad6b7f037ea9c87c92b149a9637ff099f162558
NASM_TARBALL="${NASM_PKG}_${NASM_VERSION}.orig.tar.xz"
