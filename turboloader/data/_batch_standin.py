"""A pure-Python stand-in for the batch API of ``Plan`` (see /work/wt/BATCH_API.md), built on
the per-sample ``Plan.from_jpeg`` / ``Plan.from_array``: same signatures, same results as the
per-sample path, none of the speed. Deleted once the native batch runner lands; the datasets
only call :func:`prepare_batch`, :func:`run_batch` and :func:`sample_keys` from here.
"""

from __future__ import annotations

import random

import numpy as np

__all__ = ["GENERIC", "OK", "ERROR", "prepare_batch", "run_batch", "sample_keys"]

OK, ERROR, GENERIC = 0, 1, 2

_M = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x):
    # turboloader.transforms._random._mix on uint64 arrays (wrapping arithmetic)
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def sample_keys(seed, epoch, indices) -> np.ndarray:
    """uint64 keys: ``random.Random(int(key))`` is ``sample_rng(seed, epoch, index)``.
    ``epoch`` may be one word or an array of one word per index."""
    with np.errstate(over="ignore"):
        s = _mix(np.asarray(int(seed) & 0xFFFFFFFFFFFFFFFF, np.uint64))
        e = np.asarray(epoch, dtype=np.uint64) if np.ndim(epoch) else np.uint64(int(epoch))
        i = np.asarray(indices, dtype=np.int64).astype(np.uint64)
        return _mix(_mix(s ^ e) ^ i)


class BatchParams:
    __slots__ = ("n", "status", "errors", "keys", "source_sizes")


class BatchResult:
    __slots__ = ("status", "errors", "warnings")


def _is_jpeg(src) -> bool:
    return not isinstance(src, np.ndarray) and bytes(memoryview(src)[:3]) == b"\xff\xd8\xff"


def prepare_batch(plan, sources, keys, *, source_sizes=None) -> BatchParams:
    p = BatchParams()
    n = p.n = len(sources)
    p.status = np.zeros(n, np.int32)
    p.errors = [None] * n
    p.keys = keys
    p.source_sizes = source_sizes
    for i, src in enumerate(sources):
        if not isinstance(src, np.ndarray) and not _is_jpeg(src):
            p.status[i] = GENERIC
    return p


def run_batch(plan, sources, params, out, *, rows=None, runner=None, strict=False,
              max_pixels=None) -> BatchResult:
    n = params.n
    rows = np.arange(n) if rows is None else rows
    r = BatchResult()
    r.status = params.status.copy()
    r.errors = list(params.errors)
    r.warnings = [None] * n
    sizes = params.source_sizes
    for i in range(n):
        if r.status[i] != OK:
            continue
        rng = random.Random(int(params.keys[i]))
        slot = out[int(rows[i])]
        try:
            src = sources[i]
            if isinstance(src, np.ndarray):
                size = None if sizes is None else tuple(int(v) for v in sizes[i])
                if size == src.shape[:2]:
                    size = None
                plan.from_array(src, rng=rng, source_size=size, out=slot)
            else:
                plan.from_jpeg(src, rng=rng, out=slot, strict=strict, max_pixels=max_pixels)
        except Exception as exc:  # a status for this row, as the native runner returns
            r.status[i] = ERROR
            r.errors[i] = exc
    return r
