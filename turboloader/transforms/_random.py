"""Where random transform parameters come from.

Inside a turboloader dataset every sample gets its own generator, derived from
(seed, epoch, sample index), so a sample's augmentation does not depend on which rank,
worker process or thread handles it, and the same seed and epoch give the same
augmentations on any run with any number of workers. Outside a dataset (a transform
called by hand, or inside someone else's Dataset) parameters come from torch's global RNG,
as torchvision's do, so ``torch.manual_seed`` and DataLoader's per-worker seeding apply.
NumPy's global state is never used (pytorch#5059).

The per-sample generator is counter-based, so a whole batch's parameters can be drawn at
once with NumPy (``turboloader.transforms._batch``) and equal the ones drawn sample by
sample:

* ``key = sample_key(seed, epoch, index)``: a 64-bit word, ``m(m(m(seed) ^ epoch) ^ index)``
  with ``m`` the splitmix64 step (add the golden gamma ``0x9E3779B97F4A7C15``, then the
  splitmix64 finalizer), every value taken modulo 2**64. :func:`sample_keys` computes it
  for an array of indices.
* Draw ``k`` (k = 0, 1, 2, ...) of that sample is ``x_k = m(key + k * gamma)`` (mod 2**64):
  the splitmix64 sequence started at ``key``. It depends on (key, k) only.
* Every method of :class:`SampleRandom` consumes a fixed number of draws: ``random()`` is
  one draw, ``(x_k >> 11) * 2**-53``; ``_randbelow(n)`` (behind ``randint``, ``randrange``,
  ``choice``, ``shuffle``, ``sample``) is one draw for ``n <= 2**64``,
  ``(x_k * n) >> 64``; ``getrandbits(b)`` is ``ceil(b / 64)`` draws. ``uniform(a, b)`` is
  ``a + (b - a) * random()``, as in the standard library; ``shuffle`` is the standard
  library's Fisher-Yates with this ``_randbelow``.

So the k-th draw of many samples is one vectorized expression over their keys
(:func:`draws`), and a transform's ``make_params`` replayed on a batch gives the same
numbers as calling it with ``sample_rng(seed, epoch, index)`` for each sample.

Example:
    >>> rng = sample_rng(0, 1, 42)
    >>> rng.random() == sample_rng(0, 1, 42).random()
    True
    >>> int(sample_keys(0, 1, [42])[0]) == sample_key(0, 1, 42) == rng.key
    True
"""

from __future__ import annotations

from typing import Any
import contextlib
import os
import random
import threading

import numpy as np

from turboloader._native import _draws

__all__ = [
    "SampleRandom",
    "TorchRandom",
    "current_rng",
    "draws",
    "sample_key",
    "sample_keys",
    "sample_rng",
    "using_rng",
]

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_GAMMA_INV = pow(_GAMMA, -1, 1 << 64)   # the gamma is odd: counter = (state - key) / gamma
_C1_INT, _C2_INT = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_TWO53 = 1.0 / 9007199254740992.0  # 2**-53
_local = threading.local()


def _mix(x):
    # splitmix64: step by the golden gamma, then finalize (nearby inputs -> unrelated words)
    x = (x + _GAMMA) & _MASK64
    x = ((x ^ (x >> 30)) * _C1_INT) & _MASK64
    x = ((x ^ (x >> 27)) * _C2_INT) & _MASK64
    return x ^ (x >> 31)


_U30, _U27, _U31 = np.uint64(30), np.uint64(27), np.uint64(31)
_C1, _C2, _UGAMMA = np.uint64(_C1_INT), np.uint64(_C2_INT), np.uint64(_GAMMA)


def _mix_np(x):
    # _mix on a uint64 array (wrapping arithmetic); returns a new array
    x = x + _UGAMMA
    x ^= x >> _U30
    x *= _C1
    x ^= x >> _U27
    x *= _C2
    x ^= x >> _U31
    return x


def sample_key(seed: int, epoch: int, index: int):
    """The 64-bit key of sample ``index``'s generator in ``epoch`` (see the module docstring).

    Args:
        seed, epoch, index: ints (any size; taken modulo 2**64).

    Returns:
        An int in [0, 2**64).

    Example:
        >>> sample_key(0, 0, 1) != sample_key(0, 0, 2)
        True
    """
    return _mix(_mix(_mix(int(seed) & _MASK64) ^ (int(epoch) & _MASK64)) ^ (int(index) & _MASK64))


def _as_u64(values):
    arr = np.asarray(values)
    if arr.dtype == np.uint64:
        return arr
    if arr.dtype.kind in "iub":
        return arr.astype(np.int64, copy=False).view(np.uint64)
    if not isinstance(values, np.ndarray) or arr.dtype == object:
        # Python ints outside int64 (NumPy made them float64 or object): mask them exactly
        flat = np.asarray(values, dtype=object).ravel()
        if not all(isinstance(v, (int, np.integer)) for v in flat):
            raise TypeError("indices must be integers")
        return np.array([int(v) & _MASK64 for v in flat], np.uint64).reshape(arr.shape)
    raise TypeError(f"indices must be integers, got dtype {arr.dtype}")


def sample_keys(seed: int, epoch: int, indices: Any):
    """:func:`sample_key` for many indices at once.

    Args:
        seed: an int, as :func:`sample_key`.
        epoch: an int, or an integer array broadcastable against ``indices`` (one epoch
            word per sample, e.g. the map-style datasets' per-sample words).
        indices: a sequence or array of ints (negative ones are taken modulo 2**64).

    Returns:
        ``np.ndarray`` of ``uint64``, the broadcast shape; element i equals
        ``sample_key(seed, epoch[i] (or epoch), indices[i])``.

    Raises:
        TypeError: ``indices`` or ``epoch`` are not integers.

    Example:
        >>> keys = sample_keys(0, 3, np.arange(256))
        >>> int(keys[7]) == sample_key(0, 3, 7)
        True
    """
    s = _mix(int(seed) & _MASK64)
    if type(indices) is list and np.ndim(epoch) == 0:   # a chunk's slots: mixed in one loop
        keys = np.empty(len(indices), np.uint64)
        if _draws.mixed_keys(indices, _mix(s ^ (int(epoch) & _MASK64)), keys):
            return keys
    idx = _as_u64(indices)
    if np.ndim(epoch) == 0:
        base = np.uint64(_mix(s ^ (int(epoch) & _MASK64)))
    else:
        base = _mix_np(_as_u64(epoch) ^ np.uint64(s))
    return _mix_np(idx ^ base)


def draws(keys, counters):
    """Draw ``counters`` of the generators with these ``keys``: ``x_k`` of the module docstring.

    Args:
        keys: ``uint64`` array (from :func:`sample_keys`).
        counters: int or integer array broadcastable against ``keys`` (e.g. ``keys[:, None]``
            with ``np.arange(k)`` gives each sample's first k draws).

    Returns:
        ``uint64`` array: what ``SampleRandom(key)`` yields as its ``counter``-th 64-bit draw.

    Example:
        >>> x = draws(sample_keys(0, 0, [5]), 0)
        >>> float((x[0] >> np.uint64(11)) * 2.0 ** -53) == sample_rng(0, 0, 5).random()
        True
    """
    keys = np.asarray(keys, np.uint64)
    ctr = np.asarray(counters).astype(np.uint64)
    return _mix_np(keys + ctr * _UGAMMA)


class SampleRandom(random.Random):
    """A ``random.Random`` whose k-th 64-bit draw is a pure function of (key, k).

    Made by :func:`sample_rng`; ``SampleRandom(sample_key(seed, epoch, index))`` is the same
    generator. All of ``random.Random``'s methods work (``random``, ``uniform``,
    ``randint``, ``randrange``, ``choice``, ``shuffle``, ``sample``, ``gauss``,
    ``getrandbits``, ...); each consumes a fixed number of draws (module docstring), which
    is what lets :mod:`turboloader.transforms._batch` replay a batch's draws with NumPy.

    Args:
        x: an int key (used modulo 2**64); a str, bytes or bytearray (hashed, as
            ``random.Random`` does); None for a key from ``os.urandom``.

    Attributes:
        key: the 64-bit key.
        counter: the number of 64-bit draws consumed so far.

    Example:
        >>> r = SampleRandom(12345)
        >>> a = r.random(); r.counter
        1
        >>> SampleRandom(12345).random() == a
        True
    """

    def __init__(self, x: int | None = None) -> None:
        # random.Random.__init__ would seed the unused Mersenne Twister state too
        self.seed(x)

    def seed(self, a=None, version=2):
        """Set the key (see the class docstring) and restart at draw 0."""
        if a is None:
            key = int.from_bytes(os.urandom(8), "little")
        elif isinstance(a, int):
            key = a & _MASK64
        elif isinstance(a, (str, bytes, bytearray)):
            import hashlib

            data = a.encode() if isinstance(a, str) else bytes(a)
            key = int.from_bytes(hashlib.sha512(data).digest()[:8], "little")
        else:
            raise TypeError("The only supported seed types are: None, int, str, bytes, "
                            "and bytearray.")
        self._key = key
        self._s = key   # key + counter * gamma (mod 2**64): the splitmix64 state
        self.gauss_next = None

    @property
    def key(self):
        return self._key

    @property
    def counter(self):
        return ((self._s - self._key) * _GAMMA_INV) & _MASK64

    def _next(self, _M=_MASK64, _G=_GAMMA, _C1=_C1_INT, _C2=_C2_INT):
        # the constants as default arguments: local lookups on the per-sample hot path
        x = self._s = (self._s + _G) & _M
        x = ((x ^ (x >> 30)) * _C1) & _M
        x = ((x ^ (x >> 27)) * _C2) & _M
        return x ^ (x >> 31)

    def random(self, _M=_MASK64, _G=_GAMMA, _C1=_C1_INT, _C2=_C2_INT, _T=_TWO53):
        """One draw: a float in [0, 1), a multiple of 2**-53."""
        x = self._s = (self._s + _G) & _M   # _next(), inlined
        x = ((x ^ (x >> 30)) * _C1) & _M
        x = ((x ^ (x >> 27)) * _C2) & _M
        return ((x ^ (x >> 31)) >> 11) * _T

    def getrandbits(self, k):
        """``ceil(k / 64)`` draws: an int of ``k`` random bits."""
        if k < 0:
            raise ValueError("number of bits must be non-negative")
        if k <= 64:
            return self._next() >> (64 - k) if k else 0
        x, shift = 0, 0
        while shift < k:
            x |= self._next() << shift
            shift += 64
        return x & ((1 << k) - 1)

    def _randbelow(self, n):
        # One draw for n <= 2**64 (multiply-shift: bias below n / 2**64), so every
        # integer method consumes a fixed number of draws whatever the values drawn.
        if n <= 0:
            raise ValueError("empty range")
        if n <= 1 << 64:
            return (self._next() * n) >> 64
        bits = n.bit_length() + 64
        return (self.getrandbits(bits) * n) >> bits

    def randint(self, a, b):
        """An int in [a, b], both ends included: ``a + _randbelow(b - a + 1)`` (one draw)."""
        if type(a) is not int or type(b) is not int:
            return super().randint(a, b)
        if b < a:
            raise ValueError(f"empty range for randrange() ({a}, {b + 1}, {b + 1 - a})")
        return a + self._randbelow(b - a + 1)

    def getstate(self):
        return ("SampleRandom", self._key, self.counter, self.gauss_next)

    def setstate(self, state):
        if not (isinstance(state, tuple) and len(state) == 4 and state[0] == "SampleRandom"):
            raise ValueError("state is not from SampleRandom.getstate()")
        _, key, counter, self.gauss_next = state
        self._key = key & _MASK64
        self._s = (key + counter * _GAMMA) & _MASK64

    def __repr__(self):
        return f"SampleRandom(key={self._key:#018x}, counter={self.counter})"


def sample_rng(seed: int, epoch: int, index: int):
    """The generator that draws sample ``index``'s parameters in ``epoch``.

    Args:
        seed, epoch, index: ints (see :func:`sample_key`).

    Returns:
        A fresh :class:`SampleRandom` at draw 0, keyed by ``sample_key(seed, epoch, index)``.

    Example:
        >>> sample_rng(0, 1, 42).random() == sample_rng(0, 1, 42).random()
        True
    """
    return SampleRandom(sample_key(seed, epoch, index))


class TorchRandom:
    """The subset of ``random.Random`` that transforms use, drawn from torch's global RNG."""

    def random(self):
        import torch

        return float(torch.rand(()))

    def uniform(self, a, b):
        return a + (b - a) * self.random()

    def randint(self, a, b):
        """An int in [a, b], both ends included (like ``random.Random.randint``)."""
        import torch

        return int(torch.randint(a, b + 1, ()))

    def shuffle(self, x):
        import torch

        x[:] = [x[i] for i in torch.randperm(len(x)).tolist()]


_TORCH = TorchRandom()


def current_rng():
    """The generator transforms draw from now: the sample's inside a dataset, else torch's."""
    return getattr(_local, "rng", None) or _TORCH


@contextlib.contextmanager
def using_rng(rng: Any):
    """Make ``rng`` the current generator of this thread for the duration of the block."""
    previous = getattr(_local, "rng", None)
    _local.rng = rng
    try:
        yield rng
    finally:
        _local.rng = previous
