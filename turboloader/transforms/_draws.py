"""Where a batch of samples' random numbers come from, for the one definition of sampling.

Every random transform defines its parameter sampling once, for a batch of rows, with one
signature (``_draw_batch(sizes, d, mask)``: ``sizes`` the rows' ``int64 (n, 2)`` (height,
width) at that step, which a draw that does not depend on it ignores), against a draw source ``d`` with these methods, each of
which draws for the rows where ``mask`` is True (all rows when ``mask`` is None) and leaves
the others' generators where they are:

* ``random(mask)``: ``float64 (n,)`` in [0, 1), as ``rng.random()``;
* ``uniform(a, b, mask)``: as ``rng.uniform(a, b)``;
* ``below(m, mask)``: ``int64 (n,)``, as ``rng.randint(0, m - 1)`` for ``m >= 1`` (int64 (n,));
* ``permutation(k, mask)``: ``int64 (n, k)``, as ``rng.shuffle(list(range(k)))``;
* ``categorical(p, mask)``: ``int64 (n,)``, as RandomChoice's draw.

Two sources:

* :class:`KeyDraws`: many samples' :class:`~turboloader.transforms._random.SampleRandom`
  generators at once, from their keys, vectorized with NumPy (the batch path);
* :class:`RngDraws`: one sample, drawing through the methods of the generator it is given
  (a ``SampleRandom``, torch's global RNG via ``current_rng()``, any ``random.Random``), in
  the order the definition asks for them, so ``make_params(size, rng=...)`` is a batch of one
  and keeps each generator's own draws (torchvision's under ``torch.manual_seed``).

For a ``SampleRandom``, both give the same numbers (``tests/transforms/test_draws.py``).
"""

import numpy as np

from turboloader._native import _draws
from turboloader.transforms._random import TorchRandom

__all__ = []

_S11, _S32, _M32 = np.uint64(11), np.uint64(32), np.uint64(0xFFFFFFFF)
_TWO53 = 1.0 / 9007199254740992.0


_PLAIN = (int, float)   # uniform's bounds computed as Python floats are


def _categorical(rng, p):
    """An index drawn with probabilities ``p`` (normalised): torchvision's
    ``torch.multinomial(torch.tensor(p), 1)`` under torch's RNG."""
    if isinstance(rng, TorchRandom):
        import torch

        return int(torch.multinomial(torch.tensor(p), 1))
    u = rng.random()
    last = max(i for i, q in enumerate(p) if q > 0)
    total = 0.0
    for i, q in enumerate(p[:last]):
        total += q
        if u < total:
            return i
    return last


class KeyDraws:
    """Rows of SampleRandom generators (``keys``, each at draw ``counter``), drawn at once."""

    def __init__(self, keys, counter=None):
        self.keys = np.ascontiguousarray(keys, np.uint64)
        self.n = len(self.keys)
        self.ctr = (np.zeros(self.n, np.uint64) if counter is None
                    else np.asarray(counter).astype(np.uint64))

    def next(self, mask=None):
        """The next 64-bit draw of every row (rows outside ``mask`` do not advance): the
        word at each row's own counter, mixed row by row in one native loop
        (``_native._draws.words``, the module's ``draws`` bit for bit)."""
        if mask is not None:
            mask = np.asarray(mask, bool)
            if mask.shape != (self.n,):
                mask = np.broadcast_to(mask, (self.n,))
            mask = np.ascontiguousarray(mask).view(np.uint8)
        x = np.empty(self.n, np.uint64)
        _draws.words(self.keys, self.ctr, mask, x)
        return x

    def random(self, mask=None):
        # SampleRandom.random(): (x >> 11) * 2**-53
        return (self.next(mask) >> _S11).astype(np.float64) * _TWO53

    def uniform(self, a, b, mask=None):
        u = self.random(mask)
        if type(a) in _PLAIN and type(b) in _PLAIN:
            return a + (b - a) * u   # random.Random.uniform, float64 as Python floats are
        # other number types (a NumPy float32): random.Random.uniform's own arithmetic
        return np.array([a + (b - a) * v for v in u.tolist()], np.float64)

    def below(self, m, mask=None):
        # SampleRandom._randbelow(m) = (x * m) >> 64, exactly, for 1 <= m < 2**32
        if not (type(m) is np.ndarray and m.shape == (self.n,) and m.dtype == np.int64):
            m = np.broadcast_to(np.asarray(m, np.int64), (self.n,))
        x = self.next(mask)
        use = m if mask is None else np.where(mask, m, 1)
        if use.size and (use.min() < 1 or use.max() >= 1 << 32):
            raise ValueError("range out of the vectorized draw's reach")
        u = use.astype(np.uint64)
        return (((x >> _S32) * u + (((x & _M32) * u) >> _S32)) >> _S32).astype(np.int64)

    def permutation(self, k, mask=None):
        # random.Random.shuffle of list(range(k)): Fisher-Yates from the end
        perm = np.tile(np.arange(k, dtype=np.int64), (self.n, 1))
        rows = np.arange(self.n)
        for i in range(k - 1, 0, -1):
            j = self.below(i + 1, mask)
            pi, pj = perm[:, i].copy(), perm[rows, j]
            perm[:, i] = pj
            perm[rows, j] = pi
        return perm

    def categorical(self, p, mask=None):
        # RandomChoice's draw with a random.Random: the first i with u < p[0] + ... + p[i]
        u = self.random(mask)
        last = max(i for i, q in enumerate(p) if q > 0)
        total, edges = 0.0, []
        for q in p[:last]:
            total += q
            edges.append(total)
        index = np.full(self.n, last, np.int64)
        for i in range(len(edges) - 1, -1, -1):
            index[u < edges[i]] = i
        return index

    @property
    def counter(self):
        """Draws consumed per row (``int64 (n,)``)."""
        return self.ctr.view(np.int64)


class RngDraws:
    """One sample's draws, through the methods of ``rng`` (a batch of one row)."""

    n = 1

    def __init__(self, rng):
        self.rng = rng

    def random(self, mask=None):
        if mask is not None and not mask[0]:
            return np.zeros(1)
        return np.array([self.rng.random()], np.float64)

    def uniform(self, a, b, mask=None):
        if mask is not None and not mask[0]:
            return np.zeros(1)
        return np.array([self.rng.uniform(a, b)], np.float64)

    def below(self, m, mask=None):
        if mask is not None and not mask[0]:
            return np.zeros(1, np.int64)
        return np.array([self.rng.randint(0, int(np.reshape(m, -1)[0]) - 1)], np.int64)

    def permutation(self, k, mask=None):
        order = list(range(k))
        if mask is None or mask[0]:
            self.rng.shuffle(order)
        return np.array([order], np.int64)

    def categorical(self, p, mask=None):
        if mask is not None and not mask[0]:
            return np.zeros(1, np.int64)
        return np.array([_categorical(self.rng, p)], np.int64)


def one_row(size):
    """``make_params``' ``size`` ((height, width), or None where the draw does not depend on
    it) as the ``sizes`` of a batch of one: ``int64 (1, 2)`` (``(0, 0)`` for None)."""
    return np.array([(0, 0) if size is None else tuple(size)[-2:]], np.int64)


def bernoulli(d, p, mask=None):
    """The one Bernoulli draw of every ``p``-gated transform: ``bool (n,)``, one
    ``random() < p`` per row (torchvision's ``torch.rand(1) < p``, i.e. skipping when
    ``>= p``), also when ``p`` is 0 or 1; rows outside ``mask``: False, nothing drawn."""
    hit = d.random(mask) < p
    return hit if mask is None else hit & mask


def coin(rng, p):
    """:func:`bernoulli` for one sample drawing from ``rng``: a ``bool``."""
    return bool(bernoulli(RngDraws(rng), p)[0])
