"""TarDataset: (image, label) samples from WebDataset-style TAR shards."""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections import OrderedDict

import numpy as np
import torch.utils.data

from turboloader.data import sharding
from turboloader.data.cache import Decoder, parse_size
from turboloader.data.policy import (AUTO_EPOCH, EpochMixin, FailureLog, FailurePolicy, SharedEpoch,
                                     Telemetry, _mix64, torch_epoch_word)
from turboloader.io.shards import (
    check_record as _check_record,
    count_samples,
    expand_urls,
    open_shard,
    parse_label,
    random_access as _random_access,
)
from turboloader.io.remote import RemoteShardError, ShardCache
from turboloader.errors import FailureBudgetExceeded, TarFormatError, TurboLoaderError
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS
from turboloader.transforms._plan import _warn_unfused
from turboloader.transforms._random import sample_rng

__all__ = [
    "TarDataset",
    "delivered_counts",
]

_FAILED = object()
_STATES_LOCK = threading.Lock()  # guards TarDataset._states (module level: picklable dataset)


def _topology(rank, world_size):
    if rank is not None:
        return rank, world_size
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def delivered_counts(sizes, batches, batch_size, *, drop_last=False):
    """Samples each worker stream has delivered after ``batches`` batches of a torch
    DataLoader over an iterable dataset, and the stream the next batch comes from.

    Each worker batches its own stream (``batch_size`` samples, a short last batch unless
    ``drop_last``); the main process takes batches round-robin from worker 0, skipping
    workers that are exhausted (torch's order with ``in_order=True``).

    Example:
        >>> delivered_counts([5, 5, 4], 4, 2)
        ([4, 2, 2], 1)
    """
    if batch_size < 1 or batches < 0:
        raise ValueError(f"need batch_size >= 1 and batches >= 0, got {batch_size}, {batches}")
    nb = [n // batch_size if drop_last else -(-n // batch_size) for n in sizes]
    if batches > sum(nb):
        raise ValueError(f"{batches} batches is more than the epoch's {sum(nb)}")
    got = [0] * len(sizes)
    left, r = batches, 0
    while left:
        active = [w for w in range(len(sizes)) if nb[w] > r]
        if left >= len(active):  # a whole round
            for w in active:
                got[w] += 1
            left -= len(active)
            r += 1
            continue
        for w in active[:left]:
            got[w] += 1
        left = 0
    # the next batch: the lowest round still open, lowest worker in it
    waiting = [(got[w], w) for w in range(len(sizes)) if nb[w] > got[w]]
    next_worker = min(waiting)[1] if waiting else 0
    return [min(g * batch_size, n) for g, n in zip(got, sizes)], next_worker


class _ProcessState:
    """What one process keeps while reading: open shards, the decoder (and its cache),
    the statistics recorder. Never pickled; rebuilt in each worker process."""

    def __init__(self, dataset, name):
        self.pid = os.getpid()
        self.name = name
        self.shards = OrderedDict()
        self.max_open = dataset.mix_shards + 4  # the window, plus pads and replacements
        self.shard_cache = dataset.shard_cache
        self.plan = []  # the shards of the current pass, in order of first use (prefetch)
        self.decoder = Decoder(dataset.transform, cache=dataset._cache_bytes,
                               short_side=dataset.cache_short_side, max_pixels=dataset.max_pixels)
        self.recorder = dataset._telemetry.recorder(name, interval=dataset.stats_interval)
        self.recorder.cache = self.decoder.cache

    def shard(self, url):
        reader = self.shards.get(url)
        if reader is None:
            reader = self.shards[url] = open_shard(url, cache=self.shard_cache)
            if self.shard_cache is not None and self.plan:
                # a new shard: have the node cache fetch the ones this stream reads next
                try:
                    i = self.plan.index(url)
                except ValueError:
                    i = -1
                self.shard_cache.prefetch(self.plan[i + 1:i + 1 + self.shard_cache.prefetch_count])
            while len(self.shards) > self.max_open:
                self.shards.popitem(last=False)[1].close()
        else:
            self.shards.move_to_end(url)
        return reader

    def close(self):
        for reader in self.shards.values():
            reader.close()
        self.shards.clear()


class TarDataset(EpochMixin, torch.utils.data.IterableDataset):
    """(image, label) samples from WebDataset-style TAR shards, sharded over DDP ranks and
    DataLoader workers, shuffled per epoch, with an optional decoded-sample cache.

    Members group into samples by ``__key__`` (the member path up to the first ``"."`` of
    its basename; consecutive members only, as in webdataset). The image is the sample's
    ``.jpg``/``.jpeg``/``.png``/``.webp`` member (JPEGs decoded by libjpeg-turbo, others by
    Pillow, all to RGB); the label its ``.cls`` member (an int) or the ``label_key`` of its
    ``.json`` member. ``.tar`` shards are indexed natively over ``mmap``; ``.tar.gz``/
    ``.tgz`` shards are read as streams: counting their samples for ``len`` decompresses
    each once in ``__init__``, their samples are read in stream order, and reading one out
    of order (a pad or a replacement) decompresses the shard again up to it.

    When ``transform`` is a turboloader pipeline that has a fused plan
    (``turboloader.transforms.plan``), JPEGs are decoded and transformed in one native call;
    otherwise ``transform`` gets a PIL RGB image. Either way the random parameters of the
    sample with global index ``i`` in epoch ``e`` come from ``sample_rng(seed, e, i)``,
    whatever rank or worker reads it.

    **Sharding.** Each epoch, every sample is read exactly once across all ranks x workers,
    and every rank yields the same number of samples, ``len(dataset)``, so DDP never waits
    on a rank that ran out: with ``pad=True`` (default, like ``DistributedSampler``) the
    epoch is padded by repeating its first samples (fewer than ``world_size`` repeats;
    each repeat draws its own transform parameters); with ``pad=False`` the last
    ``len % world_size`` samples of the epoch order are dropped. Ranks are contiguous
    blocks of the epoch order and workers contiguous blocks of their rank's, so a worker
    opens few shards. See :mod:`turboloader.data.sharding`. The rank and world size come
    from ``torch.distributed`` when it is initialised (read at iteration and ``len`` time),
    unless ``rank``/``world_size`` are given.

    **Shuffling** is this dataset's job (``shuffle=True`` by default): torch's DataLoader
    rejects ``shuffle=True`` for iterable datasets. Call ``set_epoch(epoch)`` from the main
    process before each epoch (persistent workers see it too); the same ``seed`` and epoch
    give the same order on any run with the same topology. Shards are shuffled, then the
    samples within each window of ``mix_shards`` consecutive shards of a worker's share.
    Compressed stream shards keep their sample order; only their position is shuffled.

    **Cache.** ``cache="4GB"`` keeps decoded samples (HWC uint8, optionally DCT-downscaled
    to a short side of at least ``cache_short_side`` pixels) in an LRU bounded in bytes,
    *per reading process*: the total is ``cache x num_workers x local ranks``. With the
    cache on, each sample is assigned to the same (rank, worker) in every epoch and only
    the order within a worker is reshuffled, so from the second epoch on a cache that
    holds the worker's share serves every sample without decoding (use
    ``persistent_workers=True``: a new worker process starts with an empty cache).

    **Failures.** ``on_error="raise"`` (default) raises the typed error (DecodeError,
    SampleError, TarFormatError) with a note naming the shard, key and byte offset.
    ``on_error="skip"`` records it and moves on; each process may skip ``max_failures``
    samples per epoch (an int, or a fraction of the samples it is assigned), then raises
    FailureBudgetExceeded. Skipped samples are replaced at the end of the worker's pass by
    its own good samples (cycled in order, with the failed slot's transform parameters) so
    batches stay full and ranks stay equal. Only turboloader's errors are skipped: a
    TypeError in a transform, or an OSError reading a file, always propagates. A shard
    whose TAR index is malformed in ``__init__`` raises under "raise"; under "skip" the
    whole shard is left out (its samples are absent from ``len``), with a warning, and
    listed in ``stats()["failed_shards"]``; it does not count against ``max_failures``.

    Args:
        urls: a path, glob, brace pattern (``"train-{00000..00099}.tar"``) or list of them.
        transform: applied to each image (see above).
        target_transform: applied to each label.
        shuffle: shuffle per epoch (default True).
        seed: the shuffle's and the transforms' seed (int >= 0, default 0).
        label_key: the key of a ``.json`` member holding the label (default ``"label"``;
            ``None``: the whole JSON value).
        missing_label: the label of a sample with no ``.cls``/``.json`` member (e.g. ``-1``
            for unlabelled shards); None (default): such a sample is a SampleError.
        rank, world_size: this process's place among DDP ranks (default: from
            ``torch.distributed`` if initialised, else 0 and 1).
        pad: pad (True, default) or drop (False) to make ranks equal.
        cache: per-process decoded-sample cache size in bytes (int or ``"4GB"``); None/0: off.
        cache_short_side: decode cached JPEGs at the smallest DCT scale keeping the short
            side at least this many pixels (other formats resized to it); None: full size.
        on_error: ``"raise"`` or ``"skip"``.
        max_failures: skip budget per process per epoch: int count or fraction in [0, 1).
        max_pixels: refuse larger images (decompression-bomb guard).
        stats_interval: samples between statistics snapshots from each process.
        mix_shards: a worker shuffles together the samples of up to this many consecutive
            shards of its share at a time, and keeps that many open (default 16).
        strict_tar: a ``.tar`` shard without end-of-archive blocks (cut at a member
            boundary) is malformed (``TarFormatError``; left out under "skip") instead of
            a ``TruncatedArchiveWarning``.

    ``classes`` / ``class_to_idx``: from the ``classes.json`` that ``turboloader convert``
    writes next to the shards, as torchvision's ``ImageFolder`` has them (None without it).

    Raises:
        FileNotFoundError: a shard or glob does not exist.
        TarFormatError: a shard is malformed (``on_error="raise"``).

    Example:
        >>> from turboloader import TarDataset, transforms as T             # doctest: +SKIP
        >>> ds = TarDataset("train-{0000..0099}.tar", T.Compose([...]), cache="2GB")
        >>> loader = torch.utils.data.DataLoader(ds, batch_size=256, num_workers=8,
        ...                                      persistent_workers=True)
        >>> for epoch in range(90):
        ...     ds.set_epoch(epoch)
        ...     for images, labels in loader: ...
        >>> ds.stats()["workers"]
    """

    def __init__(self, urls, transform=None, target_transform=None, *, shuffle=True, seed=0,
                 label_key="label", missing_label=None, rank=None, world_size=None, pad=True,
                 cache=None,
                 cache_short_side=None, on_error="raise", max_failures=0.01,
                 max_pixels=DEFAULT_MAX_PIXELS, stats_interval=256, mix_shards=16,
                 shard_cache=None, shard_sizes=None, strict_tar=False):
        super().__init__()
        if (rank is None) != (world_size is None):
            raise ValueError("pass both rank and world_size, or neither")
        if world_size is not None and not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
        if int(seed) < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.transform = transform
        _warn_unfused(transform, type(self).__name__)  # once, here in the main process
        self.target_transform = target_transform
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.label_key = label_key
        self.missing_label = missing_label
        self.rank = rank
        self.world_size = world_size
        self.pad = bool(pad)
        self._cache_bytes = parse_size(cache) if cache else 0
        self.cache_short_side = cache_short_side
        self.policy = FailurePolicy(on_error, max_failures)
        self.max_pixels = max_pixels
        self.stats_interval = int(stats_interval)
        if int(mix_shards) < 1:
            raise ValueError(f"mix_shards must be >= 1, got {mix_shards}")
        self.mix_shards = int(mix_shards)
        if shard_cache is not None and not isinstance(shard_cache, ShardCache):
            shard_cache = ShardCache(shard_cache)
        self.shard_cache = shard_cache

        self.urls = []
        self.failed_shards = []
        counts = []
        expanded = expand_urls(urls)
        if shard_sizes is not None:
            shard_sizes = ([shard_sizes[u] for u in expanded] if isinstance(shard_sizes, dict)
                           else [int(c) for c in shard_sizes])
            if len(shard_sizes) != len(expanded) or min(shard_sizes, default=0) < 0:
                raise ValueError(f"shard_sizes needs one count >= 0 per shard "
                                 f"({len(expanded)} shards)")
        for i, url in enumerate(expanded):
            try:
                # strict_tar: a .tar without end-of-archive blocks (cut at a member
                # boundary) is a malformed shard, not a TruncatedArchiveWarning
                n = shard_sizes[i] if shard_sizes is not None else count_samples(
                    url, cache=self.shard_cache, strict=bool(strict_tar))
            except (TarFormatError, RemoteShardError) as exc:
                exc.add_note(f"while counting the samples of shard {url!r}")
                if self.policy.on_error == "raise":
                    raise
                warnings.warn(f"TarDataset: leaving out malformed shard {url!r}: {exc}",
                              RuntimeWarning, stacklevel=2)
                self.failed_shards.append({"shard": url, "reason": f"{type(exc).__name__}: {exc}"})
                continue
            self.urls.append(url)
            counts.append(n)
        # class names from the classes.json that `turboloader convert` writes next to the
        # shards (None without one), indexed like torchvision's ImageFolder
        from turboloader.io.shards import read_classes

        self.classes = read_classes(expanded)
        self.class_to_idx = (None if self.classes is None
                             else {c: i for i, c in enumerate(self.classes)})
        self._counts = np.asarray(counts, dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(self._counts)]).astype(np.int64)
        self._random_access = [_random_access(u, cache=self.shard_cache) for u in self.urls]
        self._epoch = SharedEpoch()
        self._telemetry = Telemetry()
        self._states = {}  # name -> _ProcessState of this process (one per reading stream)
        self._progress = {}  # logical worker -> its pass's position (see state_dict)
        self._resume = None  # what load_state_dict asked the next pass to skip
        self._last_pass = None  # the epoch word of this process's latest pass
        self._auto_passes = 0  # automatic passes this copy started (see _pass_epoch)

    # -- pickling (DataLoader workers) ----------------------------------------------------

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_states"] = {}
        state["_progress"] = {}
        if self.rank is None:
            # a spawned worker cannot see the parent's process group: resolve it now
            rank, world = _topology(None, None)
            if world > 1:
                state["rank"], state["world_size"] = rank, world
        return state

    # -- sizes and epochs -------------------------------------------------------------------

    @property
    def num_samples(self) -> int:
        """Samples in all (readable) shards."""
        return int(self._offsets[-1])

    @property
    def shard_sizes(self) -> list[int]:
        """Samples per shard, in ``urls`` order."""
        return self._counts.tolist()

    def __len__(self) -> int:
        """Samples this rank yields per epoch: ``ceil(n / world_size)`` (pad) or floor (drop)."""
        _, world = _topology(self.rank, self.world_size)
        return sharding.per_rank_count(self.num_samples, world, pad=self.pad)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that orders and augments the next pass (call from the main process)."""
        if int(epoch) != self._epoch.value:
            self._resume = None  # a resume point belongs to the epoch it was taken in
        super().set_epoch(epoch)

    # -- reading ----------------------------------------------------------------------------

    def _process_state(self, name):
        """The reading state named ``name`` in this process, kept across epochs (its cache
        too). One per stream: a DataLoader worker process has one, the thread backend one
        per logical worker, each used by one thread at a time. States inherited from a
        parent process (fork) are dropped, not closed."""
        pid = os.getpid()
        with _STATES_LOCK:
            states = self._states
            if any(st.pid != pid for st in states.values()):
                states = self._states = {k: st for k, st in states.items() if st.pid == pid}
            st = states.get(name)
            if st is None:
                st = states[name] = _ProcessState(self, name)
        return st

    @property
    def _state(self):
        """The most recently created reading state of this process, or None (debugging)."""
        states = [st for st in self._states.values() if st.pid == os.getpid()]
        return states[-1] if states else None

    def _read(self, st, g, slot, epoch, log, counters, out=None):
        """The sample with global index ``g`` (or _FAILED under skip)."""
        rng = sample_rng(self.seed, epoch, slot)
        label = st.decoder.cached_extra(g, _FAILED)
        if label is not _FAILED:  # cached with its label: no shard access at all
            try:
                image = st.decoder(None, key=g, rng=rng, counters=counters, out=out)
            except TurboLoaderError as exc:
                exc.add_note(f"TarDataset: cached sample #{g}")
                log.record(exc, shard=None, key=None)
                return _FAILED
        else:
            s = int(np.searchsorted(self._offsets, g, side="right")) - 1
            url, j = self.urls[s], g - int(self._offsets[s])
            start = time.perf_counter()
            try:
                record = st.shard(url).sample(j)
            except TurboLoaderError as exc:
                exc.add_note(f"TarDataset: shard {url!r}, sample #{j} of the shard")
                log.record(exc, shard=url, key=None)
                return _FAILED
            counters["read_s"] += time.perf_counter() - start
            counters["bytes_read"] += record.nbytes
            try:
                _check_record(record, require_label=self.missing_label is None)
                label = (self.missing_label if record.label is None
                         else parse_label(record.label, record.label_ext, self.label_key))
                image = st.decoder(record.image, key=g, rng=rng, counters=counters, extra=label,
                                   out=out)
            except TurboLoaderError as exc:
                exc.add_note(f"TarDataset: shard {url!r}, key {record.key!r}, member "
                             f"{record.member!r} at byte offset {record.offset}")
                log.record(exc, shard=url, key=record.key, offset=record.offset)
                return _FAILED
        if self.target_transform is not None:
            label = self.target_transform(label)
        counters["samples"] += 1
        st.recorder.sample_done()
        return image, label

    def _pass_epoch(self) -> int:
        """The epoch word of the pass starting now in this process.

        Explicit mode (``set_epoch``): that epoch. Automatic mode: in a DataLoader worker, a
        word every worker of the pass agrees on without talking to the others: a hash of the
        loader's base seed (``worker seed - worker id``, drawn from the loader's ``generator``
        for each iterator) and how many passes this copy of the dataset has started (persistent
        workers start one per epoch); in the main process (``num_workers=0``, or iterating the
        dataset directly), a draw from torch's global RNG. A pass pinned by
        ``load_state_dict`` (an automatic state) is used by the first pass that starts after it.
        """
        e = self._epoch
        value = e.value
        if 0 <= value < AUTO_EPOCH:
            return value
        info = torch.utils.data.get_worker_info()
        if info is None:
            if value >= AUTO_EPOCH:  # a pinned automatic pass: this one, then automatic again
                e.value = -1
                return value
            return torch_epoch_word()
        self._auto_passes = getattr(self, "_auto_passes", 0) + 1
        resume = self._resume
        if value < 0 and resume is not None and resume["epoch"] >= AUTO_EPOCH:
            return resume["epoch"]  # a worker's own state (StatefulDataLoader) continues it
        token = _mix64(info.seed - info.id, self._auto_passes) | 1
        if value >= AUTO_EPOCH and e.claim in (0, token):
            e.claim = token  # the workers of this pass (same base seed and pass) share it
            return value
        return AUTO_EPOCH | (_mix64(info.seed - info.id, self._auto_passes, self.seed)
                             % AUTO_EPOCH)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        epoch = self._pass_epoch()
        self._last_pass = epoch
        if info is None:
            return self._stream(0, 1, "main", epoch=epoch)
        worker = info.id
        resume = self._resume
        if resume is not None and resume["epoch"] == epoch and \
                resume["num_workers"] == info.num_workers:
            # torch hands out batches round-robin from worker 0: rotate the logical streams
            # so the first batch after a resume comes from the stream that was next
            worker = (worker + resume["next_worker"]) % info.num_workers
        return self._stream(worker, info.num_workers, f"worker{info.id}", epoch=epoch)

    def _stream(self, worker, num_workers, name, out_slots=None, *, epoch=None):
        """The (image, label) samples of logical worker ``worker`` of ``num_workers`` in the
        current epoch: exactly what ``__iter__`` yields in DataLoader worker ``worker``
        (same items, order, transform parameters and failure policy).

        The hook of ``turboloader.DataLoader(backend="threads")``, which runs each logical
        worker's stream in its own thread (after ``set_epoch``: every stream of a pass must
        see the same epoch). ``name`` names the reading state and its
        statistics (``"rank{r}-{name}"`` in ``stats()["workers"]``). ``out_slots``: None,
        or a callable returning the slot (a C-contiguous CPU tensor, e.g. ``batch[i]``, or
        None) that the next sample is decoded into; it is called before each read, so a
        read that fails and is skipped leaves its slot to the next sample. A yielded image
        is that slot when the fused plan wrote it, otherwise a new tensor to copy.
        """
        rank, world = _topology(self.rank, self.world_size)
        if epoch is None:
            epoch = self._epoch.value
            if epoch < 0:
                raise RuntimeError("TarDataset._stream: the streams of one pass must share an "
                                   "epoch; call set_epoch first (turboloader.DataLoader does)")
        st = self._process_state(f"rank{rank}-{name}")
        # automatic epochs cannot be agreed across ranks without communication: every rank
        # keeps its samples (fixed assignment, as with the cache) and reshuffles within them
        fixed = bool(self._cache_bytes) or (epoch >= AUTO_EPOCH and world > 1)
        slots, samples = sharding.worker_items(
            self._counts, seed=self.seed, epoch=epoch, shuffle=self.shuffle, rank=rank,
            world_size=world, worker=worker, num_workers=num_workers, pad=self.pad,
            fixed=fixed, random_access=self._random_access,
            mix_shards=self.mix_shards)
        slots, samples = slots.tolist(), samples.tolist()
        if self.shard_cache is not None:
            seen = dict.fromkeys(int(np.searchsorted(self._offsets, g, side="right")) - 1
                                 for g in samples)
            st.plan = [self.urls[s] for s in seen]
        resume = self._take_resume(epoch, worker, num_workers)
        return self._generate(st, slots, samples, epoch, out_slots, worker=worker,
                              num_workers=num_workers, resume=resume)

    def _generate(self, st, slots, samples, epoch, out_slots=None, *, worker=0, num_workers=1,
                  resume=None):
        recorder = st.recorder
        # statistics and failures are filed under the epoch; automatic passes under 0
        label = epoch if epoch < AUTO_EPOCH else 0
        counters = recorder.counters(label)
        log = FailureLog(self.policy, len(samples), epoch=label, recorder=recorder)
        good, failed = [], []
        # the position of this pass, for state_dict (updated before each yield)
        progress = {"epoch": epoch, "num_workers": num_workers, "pos": 0, "failed_pos": [],
                    "failed_slots": [], "replaced": 0, "failures": 0, "size": len(samples)}
        start, k = 0, 0
        if resume is not None:  # seek: no replay, no decoding of what was delivered
            start = min(int(resume["pos"]), len(samples))
            failed_pos = [int(f) for f in resume["failed_pos"] if f < start]
            k = int(resume["replaced"])
            skip = set(failed_pos)
            good = [samples[i] for i in range(start) if i not in skip]
            failed = [slots[i] for i in failed_pos][k:]
            log.count = int(resume["failures"])
            progress.update(pos=start, failed_pos=failed_pos,
                            failed_slots=[slots[i] for i in failed_pos], replaced=k,
                            failures=log.count)
        self._progress[worker] = progress
        try:
            slot_of = out_slots or (lambda: None)
            for pos in range(start, len(samples)):
                slot, g = slots[pos], samples[pos]
                out = self._read(st, g, slot, epoch, log, counters, slot_of())
                progress["pos"] = pos + 1
                if out is _FAILED:
                    failed.append(slot)
                    progress["failed_pos"].append(pos)
                    progress["failed_slots"].append(slot)
                    progress["failures"] = log.count
                    continue
                good.append(g)
                yield out
            while failed:  # replacements, so every worker yields its full share
                if not good:
                    raise FailureBudgetExceeded(
                        f"no sample of this worker's {len(samples)} could be read to replace "
                        f"{len(failed)} skipped ones (epoch {label})", log.failures)
                g = good[k % len(good)]
                out = self._read(st, g, failed[0], epoch, log, counters, slot_of())
                if out is _FAILED:
                    good.remove(g)
                    progress["failures"] = log.count
                    continue
                k += 1
                failed.pop(0)
                progress["replaced"] = k
                yield out
        finally:
            recorder.flush()

    # -- checkpoints: resume mid-epoch -------------------------------------------------------

    def _fingerprint(self):
        _, world = _topology(self.rank, self.world_size)
        return {"num_samples": self.num_samples, "seed": self.seed, "shuffle": self.shuffle,
                "pad": self.pad, "world_size": world, "mix_shards": self.mix_shards,
                "fixed": bool(self._cache_bytes)}

    def _worker_sizes(self, num_workers):
        """Samples each of ``num_workers`` logical worker streams of this rank yields."""
        _, world = _topology(self.rank, self.world_size)
        return sharding.worker_counts(self.num_samples, world, num_workers, pad=self.pad)

    def _take_resume(self, epoch, worker, num_workers):
        """The resume point of logical worker ``worker`` for this pass, used once."""
        resume = self._resume
        if resume is None or resume["epoch"] != epoch:
            return None
        if resume["num_workers"] != num_workers:
            raise ValueError(
                f"TarDataset: the loaded state was taken with {resume['num_workers']} "
                f"workers per rank but this pass has {num_workers}; resume with the same "
                f"num_workers (the split of a rank's samples depends on it)")
        entry = resume["workers"].pop(worker, None)
        if not resume["workers"]:
            self._resume = None
        return entry

    @staticmethod
    def _entry(delivered, size, progress=None):
        """A worker's resume entry after it delivered ``delivered`` samples. Failures are
        known only when this process ran the stream (``progress``); otherwise none are
        assumed (see state_dict)."""
        if progress is None:
            return {"pos": min(delivered, size), "failed_pos": [], "replaced": 0, "failures": 0}
        # every failure before the point took an item without delivering a sample
        fails = progress["failed_pos"]
        pos = delivered
        for fp in fails:
            if fp < pos:
                pos += 1
        pos = min(pos, size)
        before = [fp for fp in fails if fp < pos]
        replaced = max(0, delivered - (size - len(before))) if pos >= size else 0
        return {"pos": pos, "failed_pos": before, "replaced": replaced,
                "failures": len(before) if pos < progress["pos"] else progress["failures"]}

    def state_dict(self, *, batches=None, batch_size=None, num_workers=None, drop_last=False,
                   delivered=None) -> dict:
        """The position in the current epoch, to continue from with :meth:`load_state_dict`.

        Which samples were *delivered* decides the state; three ways to say it:

        * no arguments: the streams this process ran. Right in a DataLoader worker (what
          ``torchdata.stateful_dataloader.StatefulDataLoader`` calls; it saves one such
          state per worker) and for ``num_workers=0``.
        * ``batches=k, batch_size=B, num_workers=W`` (and ``drop_last``): the main process
          of a plain ``torch.utils.data.DataLoader`` (``in_order=True``, the default) that
          has handed out ``k`` batches of this epoch. Its workers' streams and torch's
          round-robin over them are deterministic, so each worker's count follows. The
          result is the same on every rank (ranks get equal shares), so rank 0's copy in a
          checkpoint serves all ranks.
        * ``delivered=[n_0, ..., n_{W-1}]``: samples delivered from each logical worker
          stream (a loader that tracks them, e.g. the thread backend).

        Returns:
            a JSON-able dict: ``format`` (``"turboloader.TarDataset/1"``), ``scope``
            (``"rank"``, or ``"worker"`` from inside a DataLoader worker), ``epoch``,
            ``num_workers``, ``next_worker`` (the stream the next batch comes from),
            ``workers`` (``{"<logical worker>": {"pos": items of its list consumed,
            "failed_pos": positions skipped, "replaced": replacements yielded,
            "failures": failures counted}}``), ``delivered`` (samples this rank delivered in the epoch) and the
            fingerprint it must match: ``num_samples``, ``seed``, ``shuffle``, ``pad``,
            ``world_size``, ``mix_shards``, ``fixed``.

        Raises:
            ValueError: inconsistent arguments.

        Example:
            >>> state = ds.state_dict(batches=step, batch_size=256, num_workers=8)  # doctest: +SKIP
            >>> ds2 = TarDataset(urls, tf); ds2.load_state_dict(state)
            >>> for images, labels in DataLoader(ds2, batch_size=256, num_workers=8): ...
        """
        epoch = self._automatic_state_epoch(batches, num_workers, delivered)
        rank, _ = _topology(self.rank, self.world_size)
        base = {"format": "turboloader.TarDataset/1", "epoch": epoch, "rank": rank,
                **self._fingerprint()}
        info = torch.utils.data.get_worker_info()
        progress = {w: p for w, p in self._progress.items() if p["epoch"] == epoch}
        if info is not None and batches is None and delivered is None:
            # inside a DataLoader worker: this worker's own stream
            entries = {w: {"pos": p["pos"], "failed_pos": list(p["failed_pos"]),
                           "replaced": p["replaced"], "failures": p["failures"]}
                       for w, p in progress.items() if p["num_workers"] == info.num_workers}
            if not entries:  # not started in this epoch yet
                resume = self._resume
                if resume is not None and resume["epoch"] == epoch:
                    entries = {w: dict(e) for w, e in resume["workers"].items()}
            return {**base, "scope": "worker", "num_workers": info.num_workers,
                    "next_worker": 0, "workers": {str(w): e for w, e in entries.items()},
                    "delivered": sum(e["pos"] for e in entries.values())}
        if batches is not None:
            if batch_size is None or num_workers is None or delivered is not None:
                raise ValueError("batches= needs batch_size= and num_workers= (and no delivered=)")
            W = max(int(num_workers), 1)
            delivered, next_worker = delivered_counts(
                self._worker_sizes(W), int(batches), int(batch_size), drop_last=drop_last)
        elif delivered is not None:
            delivered = [int(d) for d in delivered]
            W, next_worker = len(delivered), 0
        else:  # the streams run in this process (num_workers=0)
            W = max((p["num_workers"] for p in progress.values()), default=1)
            delivered = [progress[w]["pos"] - len(progress[w]["failed_pos"])
                         + progress[w]["replaced"] if w in progress else 0 for w in range(W)]
            sizes0 = self._worker_sizes(W)
            delivered = [min(d, n) for d, n in zip(delivered, sizes0)]
            next_worker = 0
        sizes = self._worker_sizes(W)
        if any(d < 0 or d > n for d, n in zip(delivered, sizes)):
            raise ValueError(f"delivered counts {delivered} do not fit the worker shares {sizes}")
        workers = {}
        for w in range(W):
            p = progress.get(w)
            if p is not None and p["num_workers"] != W:
                p = None
            workers[str(w)] = self._entry(delivered[w], sizes[w], p)
        return {**base, "scope": "rank", "num_workers": W, "next_worker": next_worker,
                "workers": workers, "delivered": int(sum(delivered))}

    def _automatic_state_epoch(self, batches, num_workers, delivered):
        """The epoch word a state of the current pass names (see ``_pass_epoch``)."""
        e = self._epoch
        value = e.value
        if 0 <= value < AUTO_EPOCH:
            return value  # explicit
        if value >= AUTO_EPOCH and e.claim == 0:
            return value  # pinned by load_state_dict (or below) and not started yet
        in_worker = torch.utils.data.get_worker_info() is not None
        ran_here = self._last_pass is not None and (in_worker or not num_workers)
        if ran_here:
            return self._last_pass
        nothing_delivered = not batches and not any(delivered or [])
        if self._last_pass is None and nothing_delivered:
            if in_worker:
                return -1  # this worker has not started: its state names no pass
            # no pass yet: pin the word the next pass will use, so the state can name it
            e.value = torch_epoch_word()
            return e.value
        raise ValueError(
            "TarDataset.state_dict: this pass used an automatic epoch (no set_epoch call) "
            "drawn inside the DataLoader's workers, so the main process cannot name its "
            "order. For mid-epoch checkpoints call dataset.set_epoch(epoch) before each "
            "epoch (turboloader.DataLoader and TurboDataModule do), or use "
            "StatefulDataLoader, whose workers save their own states")

    def _check_state_positions(self, state):
        """Positions that cannot come from state_dict would deliver duplicates or skip
        samples: refuse them (ValueError naming the field)."""
        def bad(what):
            raise ValueError(f"TarDataset.load_state_dict: {what}")

        try:
            W, epoch = int(state["num_workers"]), int(state["epoch"])
            nxt = int(state.get("next_worker", 0))
            workers = state["workers"]
        except (KeyError, TypeError, ValueError) as exc:
            bad(f"malformed state ({type(exc).__name__}: {exc})")
        if W < 0 or epoch < -1:
            bad(f"negative num_workers {W} or epoch {epoch}")
        sizes = self._worker_sizes(max(W, 1))
        if not 0 <= nxt < max(W, 1):
            bad(f"next_worker {nxt} is not one of the {max(W, 1)} streams")
        if not isinstance(workers, dict):
            bad("workers must be a dict")
        for w, e in workers.items():
            try:
                w = int(w)
                pos, replaced = int(e["pos"]), int(e["replaced"])
                failures = int(e["failures"])
                failed = [int(f) for f in e["failed_pos"]]
            except (KeyError, TypeError, ValueError) as exc:
                bad(f"malformed entry for worker {w!r} ({type(exc).__name__}: {exc})")
            if not 0 <= w < len(sizes):
                bad(f"worker {w} is not one of the {len(sizes)} streams")
            if not 0 <= pos <= sizes[w]:
                bad(f"worker {w}: position {pos} is outside its share of {sizes[w]} samples")
            if len(set(failed)) != len(failed) or any(not 0 <= f < pos for f in failed):
                bad(f"worker {w}: skipped positions {failed[:8]} are not distinct positions "
                    f"before {pos}")
            if not 0 <= replaced <= len(failed) or failures < 0:
                bad(f"worker {w}: {replaced} replacements / {failures} failures do not fit "
                    f"{len(failed)} skips")

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state`` (from :meth:`state_dict`): the next pass over its epoch
        skips what was delivered, by offset into each worker's item list (nothing is read or
        decoded again), and yields the rest in the same order with the same transform
        parameters. Sets the epoch to the state's (call ``set_epoch`` with that epoch, or
        not at all, before the pass; another epoch discards the resume point).

        Call it in the main process before the DataLoader starts its workers (with
        ``persistent_workers=True``, before the first ``iter(loader)``), with the same
        ``num_workers`` as when the state was taken. ``StatefulDataLoader`` calls it inside
        each worker with that worker's state, which is also supported.

        Raises:
            ValueError: the state is not a TarDataset state, or was taken over other data
                or another topology (shards, seed, shuffle, pad, world size, cache).
        """
        if not isinstance(state, dict) or state.get("format") != "turboloader.TarDataset/1":
            raise ValueError("not a TarDataset state (expected format 'turboloader.TarDataset/1')")
        mine = self._fingerprint()
        diff = {k: (state.get(k), v) for k, v in mine.items() if state.get(k) != v}
        if diff:
            raise ValueError("the state was taken over other data or another topology: " +
                             ", ".join(f"{k}={a!r} there, {b!r} here" for k, (a, b) in diff.items()))
        rank, _ = _topology(self.rank, self.world_size)
        self._check_state_positions(state)
        workers = {}
        for w, e in state["workers"].items():
            e = {k: (list(v) if isinstance(v, list) else int(v)) for k, v in e.items()}
            if state.get("rank") != rank:
                # positions are rank-independent (equal shares); the skip lists are not
                e.update(failed_pos=[], replaced=0, failures=0)
            workers[int(w)] = e
        self._resume = {"epoch": int(state["epoch"]), "num_workers": int(state["num_workers"]),
                        "next_worker": int(state.get("next_worker", 0)), "workers": workers}
        if torch.utils.data.get_worker_info() is None and int(state["epoch"]) >= 0:
            # an automatic pass is pinned for the next pass only (see _pass_epoch)
            self._epoch.value = int(state["epoch"])

    # -- statistics -------------------------------------------------------------------------

    def stats(self, epoch=None) -> dict:
        """Counters of every process that read this dataset, for ``epoch`` or all epochs.

        Returns a dict: ``samples``, ``bytes_read``, ``read_s``, ``decode_s`` (a fused
        decode + transform counts here), ``transform_s``, ``failures``, ``cache_hits``,
        ``cache_misses``, ``cache_evictions``, ``cache_bytes`` (now, summed over
        processes), ``skipped`` (one dict per skipped sample: ``shard``, ``key``,
        ``offset``, ``reason``, ``epoch``, ``worker``), ``failed_shards`` and ``workers``
        (the same counters per process, named ``"rank{r}-worker{w}"`` or
        ``"rank{r}-main"``, each with its ``cache`` gauge). Workers report every
        ``stats_interval`` samples and at the end of each pass. Counts are this rank's.
        """
        for st in list(self._states.values()):
            if st.pid == os.getpid():
                st.recorder.flush()
        out = self._telemetry.collect(epoch)
        out["failed_shards"] = list(self.failed_shards)
        if self.shard_cache is not None:
            out["shard_cache"] = self.shard_cache.stats()
        return out

    def __repr__(self):
        return (f"TarDataset({len(self.urls)} shards, {self.num_samples} samples, "
                f"shuffle={self.shuffle}, seed={self.seed}, pad={self.pad}, "
                f"cache={self._cache_bytes or None}, on_error={self.policy.on_error!r})")

