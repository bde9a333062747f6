"""Build turboloader's Cython extensions against libjpeg-turbo.

Environment switches:
  TURBOLOADER_JPEG_ROOT     prefix holding include/jpeglib.h and lib/libjpeg.*
  TURBOLOADER_JPEG_INCLUDE  directory with jpeglib.h (overrides the root)
  TURBOLOADER_JPEG_LIB      directory with libjpeg.* (overrides the root)
  TURBOLOADER_DEBUG=1       Cython bounds/wraparound/initialized checks on, -O0 -g
  TURBOLOADER_MARCH=native  add -march=<value> (faster kernels, binaries not portable)
  TURBOLOADER_ONLY=a,b      build only these extension modules (e.g. _tar)
"""
import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext as _build_ext

HERE = Path(__file__).resolve().parent
NATIVE = Path("turboloader") / "_native"

MISSING_JPEG = """
turboloader needs libjpeg-turbo (>= 1.5) with its libjpeg API development files
(jpeglib.h declaring jpeg_crop_scanline, and libjpeg.so). None was found{detail}.

Install it with one of:
  Debian:         apt-get install libjpeg62-turbo-dev
  Ubuntu:         apt-get install libjpeg-turbo8-dev
  Fedora/RHEL:    dnf install libjpeg-turbo-devel
  macOS (brew):   brew install jpeg-turbo   (then TURBOLOADER_JPEG_ROOT=$(brew --prefix jpeg-turbo))
  conda:          conda install -c conda-forge libjpeg-turbo
or point TURBOLOADER_JPEG_ROOT (or TURBOLOADER_JPEG_INCLUDE and TURBOLOADER_JPEG_LIB)
at an existing installation.
"""


def _pkg_config(name):
    try:
        cflags = subprocess.run(["pkg-config", "--cflags-only-I", name], capture_output=True, text=True)
        libs = subprocess.run(["pkg-config", "--libs-only-L", name], capture_output=True, text=True)
    except OSError:
        return None
    if cflags.returncode or libs.returncode:
        return None
    inc = [f[2:] for f in shlex.split(cflags.stdout) if f.startswith("-I")]
    lib = [f[2:] for f in shlex.split(libs.stdout) if f.startswith("-L")]
    return inc or ["/usr/include"], lib


def _candidates():
    env_root = os.environ.get("TURBOLOADER_JPEG_ROOT")
    env_inc = os.environ.get("TURBOLOADER_JPEG_INCLUDE")
    env_lib = os.environ.get("TURBOLOADER_JPEG_LIB")
    if env_root or env_inc or env_lib:
        root = Path(env_root) if env_root else None
        inc = env_inc or (str(root / "include") if root else None)
        lib = env_lib or (str(root / "lib") if root else None)
        yield "environment", [inc] if inc else [], [lib] if lib else []
        return  # an explicit choice is never silently replaced by a guess
    for pc in ("libjpeg", "libturbojpeg"):
        found = _pkg_config(pc)
        if found:
            yield f"pkg-config {pc}", found[0], found[1]
    prefixes = ["/usr", "/usr/local", "/opt/libjpeg-turbo", "/opt/homebrew/opt/jpeg-turbo",
                "/usr/local/opt/jpeg-turbo", "/opt/homebrew"]
    if os.environ.get("CONDA_PREFIX"):
        prefixes.insert(0, os.environ["CONDA_PREFIX"])
    for p in prefixes:
        yield p, [f"{p}/include"], [f"{p}/lib", f"{p}/lib64", f"{p}/lib/x86_64-linux-gnu",
                                    f"{p}/lib/aarch64-linux-gnu"]


def find_libjpeg_turbo():
    """Return (include_dirs, library_dirs) of a libjpeg-turbo with the partial-decode API."""
    tried = []
    for origin, incs, libs in _candidates():
        for inc in incs:
            header = Path(inc) / "jpeglib.h"
            if header.is_file() and "jpeg_crop_scanline" in header.read_text(errors="replace"):
                return incs, [d for d in libs if Path(d).is_dir()]
        tried.append(f"{origin}: {', '.join(incs) or '-'}")
    detail = " (looked in " + "; ".join(tried) + ")" if tried else ""
    sys.exit(MISSING_JPEG.format(detail=detail))


def extensions():
    from Cython.Build import cythonize

    debug = os.environ.get("TURBOLOADER_DEBUG", "") not in ("", "0")
    inc, libdirs = find_libjpeg_turbo()
    if debug:
        cflags = ["-O0", "-g", "-UNDEBUG"]
    else:  # -g0 after Python's own -g: release binaries carry no debug info (8 MB -> 1.5 MB)
        cflags = ["-O3", "-ftree-vectorize", "-fno-math-errno", "-DNDEBUG", "-g0"]
    # Float kernels reproduce torch's roundings one operation at a time: never let the compiler
    # fuse a multiply and an add into an FMA (GCC's default for GNU C once -march allows FMA),
    # so every build and every runtime-dispatch level computes the same bits.
    cflags.append("-ffp-contract=off")
    march = os.environ.get("TURBOLOADER_MARCH")
    if march:
        cflags.append(f"-march={march}")
    native_inc = [str(NATIVE)]
    # headers (the kernels' per-ISA bodies are included ones) and .pxd declarations: a change
    # to any of them rebuilds the extensions, which setuptools would otherwise skip
    headers = sorted(str(p) for p in NATIVE.glob("*.[hp]*") if p.suffix in (".h", ".pxd"))

    def ext(name, *sources, jpeg=False, threads=False):
        return Extension(
            f"turboloader._native.{name}",
            [str(NATIVE / s) for s in sources],
            depends=headers,
            include_dirs=native_inc + (inc if jpeg else []),
            library_dirs=libdirs if jpeg else [],
            libraries=["jpeg"] if jpeg else [],
            extra_compile_args=cflags + (["-pthread"] if threads else []),
            extra_link_args=(["-g"] if debug else ["-Wl,--strip-debug"])
            + (["-pthread"] if threads else []),
        )

    exts = [
        ext("_cpu", "_cpu.pyx"),
        ext("_tar", "_tar.pyx"),
        # threads: jpeg_huffman.c's per-thread table cache (pthread keys)
        ext("_jpeg", "_jpeg.pyx", "jpeg_shim.c", "jpeg_transcode.c", "jpeg_huffman.c",
            jpeg=True, threads=True),
        ext("_resample", "_resample.pyx", "resample_kernels.c"),
        ext("_colour", "_colour.pyx", "colour_kernels.c"),
        ext("_chw", "_chw.pyx", "chw_kernels.c"),
        ext("_warp", "_warp.pyx", "warp_kernels.c"),
        ext("_mask", "_mask.pyx", "mask_kernels.c"),
        ext("_draws", "_draws.pyx"),
        ext("_fused", "_fused.pyx", "jpeg_shim.c", "jpeg_transcode.c", "jpeg_huffman.c",
            "batch_pool.c", jpeg=True, threads=True),
    ]
    only = {s.strip() for s in os.environ.get("TURBOLOADER_ONLY", "").split(",") if s.strip()}
    if only:
        exts = [e for e in exts if e.name.rsplit(".", 1)[1] in only]
    directives = {
        "language_level": 3,
        "boundscheck": debug,
        "wraparound": debug,
        "initializedcheck": debug,
        "cdivision": not debug,
        "embedsignature": True,
    }
    return cythonize(exts, compiler_directives=directives, quiet=True,
                     force=bool(os.environ.get("TURBOLOADER_FORCE_CYTHON")))


class build_ext(_build_ext):
    """Resolves libjpeg-turbo and cythonizes only when extensions are built, so that
    ``python -m build --sdist`` (and ``setup.py --name``) need no C toolchain or headers."""

    METADATA_ONLY = {"sdist", "egg_info", "dist_info", "check"}

    def finalize_options(self):
        # sdist finalizes build_ext too (to list sources) but builds nothing
        if not set(self.distribution.commands) <= self.METADATA_ONLY:
            self.distribution.ext_modules = extensions()
        super().finalize_options()


# Placeholders, replaced by build_ext: they mark the distribution as binary (a
# platform wheel) without resolving anything at import.
PLACEHOLDERS = [Extension(f"turboloader._native.{n}", [str(NATIVE / f"{n}.pyx")])
                for n in ("_cpu", "_tar", "_jpeg", "_resample", "_colour", "_chw", "_warp",
                          "_mask", "_draws", "_fused")]

setup(ext_modules=PLACEHOLDERS, cmdclass={"build_ext": build_ext})
