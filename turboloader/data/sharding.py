"""Which samples each (rank, worker) reads in an epoch, and in what order.

Pure functions of the shard sizes, seed, epoch and topology: no I/O, no global state.

The algorithm (samples are numbered globally, shard by shard, in URL order):

1. **Epoch order.** With ``shuffle``, shards are permuted by a generator seeded from
   ``(seed, epoch)`` and the samples of each random-access shard by one seeded from
   ``(seed, epoch, shard)``; compressed stream shards keep stream order. Without
   ``shuffle``, or with ``fixed=True`` (the decoded-sample cache is on), the order is the
   natural one and does not depend on the epoch.
2. **Ranks.** The order is padded by repeating its start (``pad=True``, like
   ``DistributedSampler``) or cut (``pad=False``) to ``per_rank * world_size`` positions;
   rank ``r`` takes the contiguous block ``[r * per_rank, (r + 1) * per_rank)``.
3. **Workers.** The rank's block is cut into ``num_workers`` contiguous pieces whose sizes
   differ by at most one (so a worker opens few shards).
4. **Within a worker.** With ``shuffle`` the piece is cut into windows of at most
   ``mix_shards`` consecutive random-access shards (default 16), and the samples of each
   window are permuted together by a generator seeded from ``(seed, epoch, rank,
   worker)``: a batch mixes up to 16 shards while a worker keeps at most 16 open and opens
   each about once per epoch. Stream runs are windows of their own, in stream order. With
   ``fixed=True`` the windows' order is permuted too.
5. **Ramp** (``ramp > 0``; :class:`~turboloader.io.shard_cache.ShardCache` datasets use
   it: shards that arrive over the network one after another). The worker's first window
   is not permuted all at once: it admits its shards one at a time, in window order, and
   position ``p`` draws uniformly among the not yet read samples of the shards admitted so
   far. Shard ``k`` of the window is admitted at position ``floor(ramp * s_k)``, where
   ``s_k`` is the number of samples of the window's shards before it: with ``ramp=0.5``
   half of what was admitted has been read when the next shard joins, so the pool the
   draw mixes grows by half a shard per shard. The first positions thus need only the
   window's first shard (the first batch comes once it is local), the next shard is needed
   ``ramp`` shards of reading later, and once every shard is admitted the window mixes as
   a whole. The draws come from a generator seeded from ``(seed, epoch, rank, worker)``
   as well; the order stays a pure function of the arguments. Later windows are permuted
   as in step 4 (their shards are downloaded while the previous window is read).

With ``fixed=True`` steps 1-3 do not depend on the epoch, so every sample stays with the
same (rank, worker) across epochs (its decoded copy stays in that worker's cache) and only
step 4 reshuffles. Every sample appears exactly once per epoch across all ranks and
workers, plus, with ``pad=True``, fewer than ``world_size`` padding repeats.

Slots: each position gets a *slot*, the number its transform randomness is drawn from:
the sample's global index for real positions, the padded position (``>= len``) for pads.
"""

from __future__ import annotations

from typing import Any
import operator

import numpy as np

__all__ = ["per_rank_count", "worker_counts", "worker_items"]

_SHARDS, _WITHIN, _WORKER, _RAMP = 1, 2, 3, 4


def _rng(*words):
    return np.random.default_rng(np.random.SeedSequence([int(w) for w in words]))


def per_rank_count(n: int, world_size: int, *, pad: bool = True) -> int:
    """Samples each rank yields per epoch: ``ceil(n / world_size)`` with pad, else floor.

    Example:
        >>> per_rank_count(10, 4), per_rank_count(10, 4, pad=False)
        (3, 2)
    """
    return -(-n // world_size) if pad else n // world_size


def worker_counts(n: int, world_size: int, num_workers: int, *, pad: bool = True) -> list[int]:
    """Samples each of the ``num_workers`` workers of a rank reads per epoch: the rank's
    ``per_rank_count`` cut into contiguous pieces whose sizes differ by at most one (the
    lengths of :func:`worker_items` for ``worker = 0 .. num_workers - 1``).

    Example:
        >>> worker_counts(26, 1, 3), worker_counts(10, 4, 2, pad=False)
        ([8, 9, 9], [1, 1])
    """
    world_size, num_workers = _check("world_size", world_size, 1), _check("num_workers", num_workers, 1)
    per = per_rank_count(_check("n", n), world_size, pad=pad)
    return [(w + 1) * per // num_workers - w * per // num_workers for w in range(num_workers)]


def _check(name, value, lo=0):
    value = operator.index(value)
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    return value


def worker_items(counts: Any, *, seed: int = 0, epoch: int = 0, shuffle: bool = True,
                 rank: int = 0, world_size: int = 1, worker: int = 0, num_workers: int = 1,
                 pad: bool = True, fixed: bool = False, random_access: Any = None,
                 mix_shards: int = 16, ramp: float = 0.0):
    """The samples worker ``worker`` of rank ``rank`` reads in ``epoch``, in order.

    Args:
        counts: number of samples of each shard, in URL order.
        seed, epoch: the shuffle's seed and epoch (non-negative ints).
        shuffle: permute (see the module docstring); False gives the natural order.
        rank, world_size, worker, num_workers: the reader's place in the topology.
        pad: repeat samples so ranks get ``ceil(n / world_size)`` each (else drop the tail).
        fixed: keep the sample -> (rank, worker) assignment the same in every epoch.
        random_access: per shard, whether its samples can be read in any order
            (False for compressed streams). Default: all True.
        mix_shards: a worker interleaves the samples of at most this many consecutive
            shards of its piece at a time (bounds the shards it keeps open).
        ramp: 0 (default): the first window is permuted at once like the others. In
            ``(0, 1]``: it admits its shards one at a time, shard ``k`` at position
            ``floor(ramp * samples of the shards before it)`` (step 5 of the module
            docstring; 1 reads the window's shards one after another).

    Returns:
        ``(slots, samples)``: int64 arrays of equal length. ``samples`` are global sample
        indices; ``slots`` number the positions for per-sample randomness.

    Example:
        >>> slots, samples = worker_items([3, 2], shuffle=False, world_size=2, rank=1)
        >>> samples.tolist(), slots.tolist()
        ([3, 4, 0], [3, 4, 5])
    """
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    if (counts < 0).any():
        raise ValueError("shard sample counts must be non-negative")
    seed, epoch = _check("seed", seed), _check("epoch", epoch)
    world_size, num_workers = _check("world_size", world_size, 1), _check("num_workers", num_workers, 1)
    rank, worker = _check("rank", rank), _check("worker", worker)
    mix_shards = _check("mix_shards", mix_shards, 1)
    ramp = float(ramp)
    if not 0.0 <= ramp <= 1.0:
        raise ValueError(f"ramp must be in [0, 1], got {ramp}")
    if rank >= world_size:
        raise ValueError(f"rank {rank} is not below world_size {world_size}")
    if worker >= num_workers:
        raise ValueError(f"worker {worker} is not below num_workers {num_workers}")
    ra = (np.ones(len(counts), bool) if random_access is None
          else np.asarray(random_access, dtype=bool).reshape(-1))
    if len(ra) != len(counts):
        raise ValueError("random_access must have one entry per shard")

    n = int(counts.sum())
    per = per_rank_count(n, world_size, pad=pad)
    lo = rank * per + worker * per // num_workers
    hi = rank * per + (worker + 1) * per // num_workers
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)

    permute = shuffle and not fixed
    if permute:
        order = _rng(seed, epoch, _SHARDS).permutation(len(counts))
    else:
        order = np.arange(len(counts))
    ends = np.cumsum(counts[order])
    starts = ends - counts[order]

    def segment(a, b):
        """Base-order entries at positions [a, b) (0 <= a <= b <= n)."""
        parts = []
        k = int(np.searchsorted(ends, a, side="right"))
        while k < len(order) and starts[k] < b:
            s = int(order[k])
            c = int(counts[s])
            i, j = max(a - int(starts[k]), 0), min(b - int(starts[k]), c)
            if i < j:
                if permute and ra[s]:
                    local = _rng(seed, epoch, _WITHIN, s).permutation(c)[i:j]
                else:
                    local = np.arange(i, j, dtype=np.int64)
                parts.append(local + offsets[s])
            k += 1
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    real = segment(lo, min(hi, n)) if lo < n else np.empty(0, np.int64)
    pads = np.arange(max(lo, n), hi, dtype=np.int64)
    pad_samples = np.array([segment(q, q + 1)[0] for q in ((pads - n) % n).tolist()],
                           dtype=np.int64) if len(pads) else np.empty(0, np.int64)
    samples = np.concatenate([real, pad_samples]).astype(np.int64)
    slots = np.concatenate([real, pads]).astype(np.int64)

    if shuffle and len(samples) > 1:
        rng = _rng(seed, epoch, _WORKER, rank, world_size, worker, num_workers)
        # empty shards share offsets with the next one: searchsorted picks the last, the right one
        shard_of = np.searchsorted(offsets, samples, side="right") - 1
        runs = np.split(np.arange(len(samples)), np.flatnonzero(np.diff(shard_of)) + 1)
        windows, mixing = [], []
        window_runs = {}  # window number -> its runs in order (ramp: the first one's)

        def close_window():
            if mixing:
                if ramp:
                    window_runs[len(windows)] = list(mixing)
                windows.append(rng.permutation(np.concatenate(mixing)))
                mixing.clear()

        for run in runs:
            if ra[shard_of[run[0]]]:
                mixing.append(run)
                if len(mixing) == mix_shards:
                    close_window()
            else:  # a stream run stays in stream order
                close_window()
                windows.append(run)
        close_window()
        order_w = rng.permutation(len(windows)) if fixed else np.arange(len(windows))
        if ramp and len(order_w) and int(order_w[0]) in window_runs:
            first = int(order_w[0])  # the window read first ramps (its own generator)
            windows[first] = _ramped(window_runs[first], ramp,
                                     _rng(seed, epoch, _RAMP, rank, world_size, worker,
                                          num_workers))
        windows = [windows[i] for i in order_w]
        perm = np.concatenate(windows)
        samples, slots = samples[perm], slots[perm]
    return slots, samples


def _ramped(runs, ramp, rng):
    """The order of a window whose shards (``runs``: each one's positions, in window order)
    are admitted one at a time: shard ``k`` at position ``floor(ramp * samples before
    it)``; each position draws uniformly among the admitted, not yet drawn samples."""
    sizes = [len(r) for r in runs]
    admit = [int(ramp * s) for s in np.cumsum([0] + sizes[:-1]).tolist()]
    out, pool = [], np.empty(0, np.int64)
    for k, run in enumerate(runs):
        pool = np.concatenate([pool, run])
        nxt = admit[k + 1] if k + 1 < len(runs) else admit[k] + len(pool)
        take = nxt - admit[k]  # positions until the next shard joins (at most the pool)
        pool = rng.permutation(pool)
        out.append(pool[:take])
        pool = pool[take:]
    return np.concatenate(out)
