"""A batch's random transform parameters drawn row by row in C: the loops of the draws whose
NumPy form (``turboloader.transforms``' ``_draw_batch`` against a ``KeyDraws``) costs more
Python per image than the decode thread can spare (issue 42's GIL-held time per image).

The definition stays the transforms' (``RandomResizedCrop._draw_batch``); this is the same
arithmetic one row at a time: the counter-based ``SampleRandom`` words (draw ``k`` of key
``key`` is splitmix64's finalizer of ``key + (k + 1) * gamma``), ``random()`` as ``(x >> 11)
* 2**-53``, ``_randbelow(m)`` as ``(x * m) >> 64``, ``uniform(a, b)`` as ``a + (b - a) *
random()``, ``math.exp`` (the C library's ``exp``, which CPython's calls), IEEE ``sqrt`` and
round-half-even ``rint``, every operation in double without contraction into an FMA
(``-ffp-contract=off``), so every row equals the NumPy form's bit for bit
(``tests/transforms/test_draws.py``).
"""
from cpython.long cimport PyLong_AsUnsignedLongLongMask, PyLong_CheckExact
from libc.math cimport exp, rint, sqrt
from libc.stdint cimport int64_t, uint8_t, uint64_t

cdef uint64_t _GAMMA = 0x9E3779B97F4A7C15ULL
cdef uint64_t _C1 = 0xBF58476D1CE4E5B9ULL
cdef uint64_t _C2 = 0x94D049BB133111EBULL
cdef double _TWO53 = 1.0 / 9007199254740992.0


cdef inline uint64_t _word(uint64_t key, uint64_t *ctr) noexcept nogil:
    # the next draw of a SampleRandom generator: splitmix64 of key + counter * gamma
    cdef uint64_t x = key + ctr[0] * _GAMMA + _GAMMA
    ctr[0] += 1
    x = (x ^ (x >> 30)) * _C1
    x = (x ^ (x >> 27)) * _C2
    return x ^ (x >> 31)


cdef inline double _random(uint64_t key, uint64_t *ctr) noexcept nogil:
    return <double>(_word(key, ctr) >> 11) * _TWO53


cdef inline int64_t _below(uint64_t key, uint64_t *ctr, uint64_t m) noexcept nogil:
    # (x * m) >> 64 for 1 <= m < 2**32, as KeyDraws.below
    cdef uint64_t x = _word(key, ctr)
    return <int64_t>((((x >> 32) * m + (((x & 0xFFFFFFFFULL) * m) >> 32)) >> 32))


def resized_crop(const uint64_t[::1] keys not None, uint64_t[::1] counter not None,
                 const int64_t[:, :] sizes not None, const uint8_t[::1] mask not None,
                 int64_t[:, ::1] out not None, double scale_lo, double scale_span,
                 double ratio_lo, double ratio_span, double ratio_min, double ratio_max, /):
    """``RandomResizedCrop``'s draw for every row ``i`` with ``mask[i]``: up to 10
    attempts, each ``uniform(scale)`` (``scale_lo + scale_span * random()``) of the area
    and ``uniform(log ratio)`` (``ratio_lo + ratio_span * random()``), ``w = rint(sqrt(area
    * exp(r)))``, ``h = rint(sqrt(area / exp(r)))``; the first that fits draws ``top =
    below(H - h + 1)`` then ``left = below(W - w + 1)``; after 10 the centre-crop fallback
    (``ratio_min``, ``ratio_max``). Rows outside ``mask`` draw nothing and get ``(0, 0, H,
    W)``.

    Args:
        keys: ``uint64 (n,)``, the rows' generator keys.
        counter: ``uint64 (n,)``, each row's draws consumed so far, advanced in place.
        sizes: ``int64 (n, 2)`` (height, width), each side in ``[1, 2**32 - 1)``.
        out: ``int64 (n, 4)``, written ``(top, left, height, width)``.

    Raises:
        ValueError: mismatched lengths, a size outside the draw's reach.
    """
    cdef Py_ssize_t n = keys.shape[0], i
    if counter.shape[0] != n or sizes.shape[0] != n or mask.shape[0] != n \
            or out.shape[0] != n or sizes.shape[1] != 2 or out.shape[1] != 4:
        raise ValueError("keys, counter, sizes, mask and out must have one row per sample")
    for i in range(n):
        if mask[i] and not (1 <= sizes[i, 0] < 0xFFFFFFFF and 1 <= sizes[i, 1] < 0xFFFFFFFF):
            raise ValueError("range out of the vectorized draw's reach")
    cdef int64_t H, W, hi, wi, top, left
    cdef double area, target, ratio, w, h, in_ratio
    cdef uint64_t key
    cdef uint64_t *ctr
    cdef int attempt, done
    with nogil:
        for i in range(n):
            H, W = sizes[i, 0], sizes[i, 1]
            out[i, 0], out[i, 1], out[i, 2], out[i, 3] = 0, 0, H, W
            if not mask[i]:
                continue
            key, ctr = keys[i], &counter[i]
            area = <double>(H * W)
            done = 0
            for attempt in range(10):
                target = area * (scale_lo + scale_span * _random(key, ctr))
                ratio = exp(ratio_lo + ratio_span * _random(key, ctr))
                w = rint(sqrt(target * ratio))
                h = rint(sqrt(target / ratio))
                if w > 0 and w <= W and h > 0 and h <= H:
                    hi, wi = <int64_t>h, <int64_t>w
                    top = _below(key, ctr, <uint64_t>(H - hi + 1))
                    left = _below(key, ctr, <uint64_t>(W - wi + 1))
                    out[i, 0], out[i, 1], out[i, 2], out[i, 3] = top, left, hi, wi
                    done = 1
                    break
            if done:
                continue
            # torchvision's fallback: the whole image, cropped to the ratio range, centred
            in_ratio = <double>W / <double>H
            hi, wi = H, W
            if in_ratio < ratio_min:
                hi = <int64_t>rint(<double>W / ratio_min)
            elif in_ratio > ratio_max:
                wi = <int64_t>rint(<double>H * ratio_max)
            out[i, 0], out[i, 1] = (H - hi) // 2, (W - wi) // 2
            out[i, 2], out[i, 3] = hi, wi


def words(const uint64_t[::1] keys not None, uint64_t[::1] counter not None, mask,
          uint64_t[::1] out not None, /):
    """The next 64-bit word of every row's generator (``KeyDraws.next``): ``out[i]`` is
    draw ``counter[i]`` of ``keys[i]``; the counters of the rows in ``mask`` (a ``uint8
    (n,)`` array, or None: every row) advance by one, the others stay.

    Raises:
        ValueError: mismatched lengths.
    """
    cdef Py_ssize_t n = keys.shape[0], i
    cdef const uint8_t[::1] m
    cdef bint every = mask is None
    cdef uint64_t c
    if counter.shape[0] != n or out.shape[0] != n:
        raise ValueError("keys, counter and out must have one row per sample")
    if not every:
        m = mask
        if m.shape[0] != n:
            raise ValueError("mask must have one row per sample")
    with nogil:
        for i in range(n):
            c = counter[i]
            out[i] = _word(keys[i], &c)
            if every or m[i]:
                counter[i] = c


cdef inline uint64_t _mix64(uint64_t x) noexcept nogil:
    # transforms._random._mix: splitmix64's step and finalizer
    x = x + _GAMMA
    x = (x ^ (x >> 30)) * _C1
    x = (x ^ (x >> 27)) * _C2
    return x ^ (x >> 31)


def mixed_keys(list indices not None, uint64_t base, uint64_t[::1] out not None, /):
    """``sample_keys``' last step for a list of Python ints: ``out[i] = mix(indices[i] mod
    2**64 ^ base)``. Returns False, ``out`` not all written, when an entry is not exactly
    an ``int`` (the caller takes the general path).

    Raises:
        ValueError: ``out`` of another length.
    """
    cdef Py_ssize_t n = len(indices), i
    cdef object v
    if out.shape[0] != n:
        raise ValueError("out must have one entry per index")
    for i in range(n):
        v = indices[i]
        if not PyLong_CheckExact(v):
            return False
        out[i] = _mix64(PyLong_AsUnsignedLongLongMask(v) ^ base)
    return True
