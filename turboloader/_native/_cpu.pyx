"""Runtime CPU dispatch: which instruction-set level the kernels run at.

A portable build carries each hot loop compiled for several levels (``simd.h``); this module
picks one per process: the best the CPU supports, capped by the environment variable
``TURBOLOADER_ISA`` (``baseline``, ``sse4.1`` or ``avx2``; unset or ``auto``: no cap), read
once at import. Every level computes the same results bit for bit, so the choice changes
speed only. At the avx2 level on a CPU with BMI2 the JPEG Huffman decoder (``jpeg_huffman.c``)
runs its BMI2 build too (``huffman_bmi2``: the same code, so the same coefficients).
``_set_isa`` switches the level at run time, for tests and benchmarks that compare the
variants in one process; it is not meant for use while kernels run on other threads.
"""
import os
import warnings

LEVELS = ("baseline", "sse4.1", "avx2")

cdef extern from "simd.h" nogil:
    int tl_cpu_detect()
    int tl_cpu_bmi2()

cdef int _detected = tl_cpu_detect()
cdef int _level = _detected
cdef int _bmi2 = tl_cpu_bmi2()


cdef int isa_level() noexcept nogil:
    return _level


cdef int huffman_bmi2() noexcept nogil:
    return _level >= TL_ISA_AVX2 and _bmi2


def _parse(name):
    n = str(name).strip().lower().replace("_", "").replace(".", "")
    for i, level in enumerate(LEVELS):
        if n == level.replace(".", ""):
            return i
    raise ValueError(f"unknown instruction-set level {name!r}: expected one of {LEVELS}")


def isa():
    """The level the kernels run at now, e.g. ``"avx2"``."""
    return LEVELS[_level]


def supported():
    """Every level this CPU can run, lowest first (``baseline`` always)."""
    return LEVELS[:_detected + 1]


def _set_isa(name):
    """Run the kernels at ``name`` (a level from ``supported()``) from now on; returns the
    previous level's name. Raises ValueError for an unknown level or one this CPU lacks."""
    global _level
    cdef int want = _parse(name)
    if want > _detected:
        raise ValueError(f"this CPU does not support {LEVELS[want]!r} (supported: {supported()})")
    previous = LEVELS[_level]
    _level = want
    return previous


def _from_environment():
    env = os.environ.get("TURBOLOADER_ISA", "").strip()
    if not env or env.lower() == "auto":
        return
    try:
        cap = _parse(env)
    except ValueError as exc:
        warnings.warn(f"TURBOLOADER_ISA ignored: {exc}", RuntimeWarning, stacklevel=2)
        return
    global _level
    _level = min(cap, _detected)


_from_environment()
