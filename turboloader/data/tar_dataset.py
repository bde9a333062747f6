"""TarDataset: (image, label) samples from WebDataset-style TAR shards."""

from __future__ import annotations

from typing import Any
import warnings

import numpy as np
import torch.utils.data

from turboloader.data import sharding
from turboloader.data.checkpoint import TarCheckpoints, delivered_counts, topology
from turboloader.data._buffers import shared_pool
from turboloader.data.epochs import AUTO_EPOCH, mix64, torch_epoch_word
from turboloader.data import stream
from turboloader.data.grouping import Batched, GroupedView, Samples
from turboloader.data.stream import _Cursor
from turboloader.data.reader import ReaderMixin, stream_name
from turboloader.data.tar_reader import _TarGather, _TarReader
from turboloader.io.shards import TarShards
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS
from turboloader.errors import TarFormatError
from turboloader.io.fetch import fetch_pool
from turboloader.io.remote import RemoteShardError, is_remote, warm
from turboloader.io.shard_cache import ShardCache

__all__ = ["MIX_RAMP", "TarBatches", "TarDataset", "delivered_counts"]

_topology = topology

#: The first mixing window's ramp over remote shards read through a ShardCache (see
#: :func:`turboloader.data.sharding.worker_items`): shard ``k`` of a worker's first window
#: joins the mix once half of the samples of the shards before it were read.
MIX_RAMP = 0.5


#: shards of the next epoch a streamed remote pass reads ahead (see ``_stream``): a stream
#: reads its first ones while the pool asks for the shards after them, whose first 8 MiB part
#: takes a request's latency and then part_bytes at one connection's rate (about 1.1 s at
#: 100 ms / 10 MB/s); at 36 MB/s per stream (the decoder's 71 MB/s over two) two shards of
#: 14 MB last 0.8 s: with two, streams waited for their third shard at epoch starts (epoch 2
#: at 100:10 through bench_remote's proxy: 0.00-0.52 s, mean 0.16 s in 7 runs), with four in
#: none of 7 (s10-cpu, benchmarks/results/remote.md). The bytes count against the pool's
#: buffer bound; after the last epoch, up to four shards per stream are fetched for nothing.
_NEXT_EPOCH_AHEAD = 4


class TarDataset(_TarGather, ReaderMixin, TarCheckpoints, torch.utils.data.IterableDataset):
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
    With a ``shard_cache`` over remote shards a worker's first window admits its shards one
    at a time (shard ``k`` once half the samples of those before it were read), so a pass's
    first batch needs only its first shard downloaded (``MIX_RAMP``; see
    :func:`~turboloader.data.sharding.worker_items`).
    Compressed stream shards keep their sample order; only their position is shuffled.

    **Cache.** ``cache="4GB"`` keeps decoded samples (HWC uint8, optionally resized to a
    short side of ``cache_short_side`` pixels) bounded in bytes *per reading process*: the total is ``cache x num_workers x local ranks``. Samples are admitted
    until the bound is reached and then kept (:class:`~turboloader.data.cache.SampleCache`):
    with a cache smaller than a worker's share, a fraction ``cache / share`` of the samples
    is served from memory in every later epoch and the rest decode as uncached (only their
    crop window). With the cache on, each sample is assigned to the same (rank, worker) in
    every epoch and only the order within a worker is reshuffled, so from the second epoch
    on a cache that holds the worker's share serves every sample without decoding (use
    ``persistent_workers=True``, or the thread backend: a new worker process starts with an
    empty cache). For RandomResizedCrop at 224 on 400-500 pixel photos,
    ``cache_short_side=160`` decodes them at half scale and keeps about a fifth of the
    memory of full-size images; cached samples are then cropped from that copy
    (:doc:`/guide/cache`).

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
        urls: a path, glob, brace pattern (``"train-{00000..00099}.tar"``), a directory
            (its ``.tar`` / ``.tar.gz`` shards in name order) or a list of them.
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
        cache_short_side: store cached images resized to this short side (never enlarged;
            a JPEG is decoded at the smallest DCT scale still at least that large, then
            resized as ``Resize(cache_short_side)`` would); None: full size.
        on_error: ``"raise"`` or ``"skip"``.
        max_failures: skip budget per process per epoch: int count or fraction in [0, 1).
        max_pixels: refuse larger images (decompression-bomb guard).
        stats_interval: samples between statistics snapshots from each process (at most
            one a second).
        mix_shards: a worker shuffles together the samples of up to this many consecutive
            shards of its share at a time, and keeps that many open, plus 4 (default 16;
            more while a chunk being read spans more shards, e.g. tiny shards).
        strict_tar: a ``.tar`` shard without end-of-archive blocks (cut at a member
            boundary) is malformed (``TarFormatError``; left out under "skip") instead of
            a ``TruncatedArchiveWarning``.
        fields: yield tuples of these WebDataset fields instead of ``(image, label)``, as
            webdataset's ``to_tuple`` does: e.g. ``("jpg;png", "txt", "__key__")`` gives
            ``(image, caption, key)``. The first image entry goes through ``transform``
            (fused); text is ``str``, ``.json`` parsed, ``.cls`` an int, other images
            ``uint8`` ``(C, H, W)`` tensors (masks keep their one channel), ``__key__`` /
            ``__url__`` strings, anything else bytes (see :mod:`turboloader.data.fields`).
            A missing field is a ``SampleError`` (a counted skip under "skip"); an entry
            that no member of the first shard has (a misspelt extension) is a
            ``ValueError`` at construction (local ``.tar`` shards). Not with
            ``target_transform``. ``MaskField("seg.png")`` / ``BoxesField("json",
            key="boxes")`` entries give a ``tv_tensors.Mask`` / ``BoundingBoxes``
            transformed with the image's drawn parameters (the image still fused).

    ``classes`` / ``class_to_idx``: from the classes file that ``turboloader convert``
    writes next to the shards (``train-classes.json`` for ``train-*.tar``, else
    ``classes.json``), as torchvision's ``ImageFolder`` has them (None without it).

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

    _image_exts: tuple[str, ...] | None = None  # the member extensions of a sample's "image" (None: image files)

    def __init__(self, urls: Any, transform: Any = None, target_transform: Any = None, *,
                 shuffle: bool = True, seed: int = 0, label_key: Any = "label",
                 missing_label: Any = None, rank: int | None = None,
                 world_size: int | None = None, pad: bool = True, cache: Any = None,
                 cache_short_side: int | None = None, on_error: Any = "raise",
                 max_failures: Any = 0.01, max_pixels: int | None = DEFAULT_MAX_PIXELS,
                 stats_interval: int = 256, mix_shards: int = 16, shard_cache: Any = None,
                 shard_sizes: Any = None, strict_tar: bool = False,
                 fields: Any = None) -> None:
        super().__init__()
        from turboloader.data.fields import Fields

        self._fields = (fields if fields is None or isinstance(fields, Fields)
                        else Fields(fields))
        if self._fields is not None:
            self._fields.check_transform(transform)
        if self._fields is not None and target_transform is not None:
            raise ValueError("target_transform applies to the label of (image, label) samples; "
                             "with fields=, transform the fields you get instead")
        if (rank is None) != (world_size is None):
            raise ValueError("pass both rank and world_size, or neither")
        if world_size is not None and rank is not None and not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
        self._init_reader(transform, target_transform, seed=seed, cache=cache,
                          cache_short_side=cache_short_side, on_error=on_error,
                          max_failures=max_failures, max_pixels=max_pixels,
                          stats_interval=stats_interval)
        self.shuffle = bool(shuffle)
        self.label_key = label_key
        self.missing_label = missing_label
        self.rank = rank
        self.world_size = world_size
        self.pad = bool(pad)
        if int(mix_shards) < 1:
            raise ValueError(f"mix_shards must be >= 1, got {mix_shards}")
        self.mix_shards = int(mix_shards)
        if shard_cache is not None and not isinstance(shard_cache, ShardCache):
            shard_cache = ShardCache(shard_cache)
        self.shard_cache = shard_cache

        self.urls = []
        self.failed_shards = []
        counts = []
        self._io = self._shard_io(urls, strict=bool(strict_tar))
        expanded = self._io.names
        # remote shards: the store's client (boto3's takes a good part of a second) is made
        # now in the background, not by the first request of the first pass
        first_remote = next((u for u in expanded if is_remote(u)), None)
        if first_remote is not None:
            warm(first_remote)
        if shard_sizes is not None:
            shard_sizes = ([shard_sizes[u] for u in expanded] if isinstance(shard_sizes, dict)
                           else [int(c) for c in shard_sizes])
            if len(shard_sizes) != len(expanded) or min(shard_sizes, default=0) < 0:
                raise ValueError(f"shard_sizes needs one count >= 0 per shard "
                                 f"({len(expanded)} shards)")
        # remote shards: from an index, the node-local count cache, or counted in parallel
        counted = (self._io.counts(expanded)
                   if shard_sizes is None and hasattr(self._io, "counts") else None)
        for i, url in enumerate(expanded):
            try:
                # strict_tar: a .tar without end-of-archive blocks (cut at a member
                # boundary) is a malformed shard, not a TruncatedArchiveWarning
                if shard_sizes is not None:
                    n = shard_sizes[i]
                elif counted is not None:
                    n = counted[i]
                    if isinstance(n, BaseException):
                        raise n
                else:
                    n = self._io.count(url)
            except (TarFormatError, RemoteShardError) as exc:
                exc.add_note(f"while counting the samples of shard {url!r}")  # type: ignore[union-attr]  # 3.11+
                if self.policy.on_error == "raise":
                    raise
                warnings.warn(f"TarDataset: leaving out malformed shard {url!r}: {exc}",
                              RuntimeWarning, stacklevel=2)
                self.failed_shards.append({"shard": url, "reason": f"{type(exc).__name__}: {exc}"})
                continue
            self.urls.append(url)
            counts.append(n)
        if self._fields is not None and self.urls and hasattr(self._io, "extensions"):
            self._fields.check_members(self._io.extensions(self.urls[0]), self.urls[0])
        # class names from the classes.json that `turboloader convert` writes next to the
        # shards (None without one), indexed like torchvision's ImageFolder
        self.classes = self._io.classes()
        self.class_to_idx = (None if self.classes is None
                             else {c: i for i, c in enumerate(self.classes)})
        self._counts = np.asarray(counts, dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(self._counts)]).astype(np.int64)
        self._random_access = [self._io.random_access(u) for u in self.urls]
        # remote TAR shards: read ahead by the fetch pool or the node cache (see _stream)
        self._remote = isinstance(self._io, TarShards) and any(is_remote(u) for u in self.urls)
        self._progress = {}  # logical worker -> its pass's position (see state_dict)
        self._resume = None  # what load_state_dict asked the next pass to skip
        self._last_pass = None  # the epoch word of this process's latest pass
        self._auto_passes = 0  # automatic passes this copy started (see _pass_epoch)

    def _shard_io(self, urls, *, strict):
        """How this dataset's shards are listed, counted and opened: a
        :class:`~turboloader.io.shards.TarShards`. The hook another shard format overrides
        (``ParquetDataset``: Parquet row groups), keeping the rest of this class."""
        return TarShards(urls, cache=self.shard_cache, strict=strict)

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

    def _new_reader(self, name):
        return _TarReader(self, name)

    @property
    def _state(self):
        """The most recently created reader of this process, or None (debugging)."""
        states = self._own_readers()
        return states[-1] if states else None

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
        token = mix64(info.seed - info.id, self._auto_passes) | 1
        if value >= AUTO_EPOCH and e.claim in (0, token):
            e.claim = token  # the workers of this pass (same base seed and pass) share it
            return value
        return AUTO_EPOCH | (mix64(info.seed - info.id, self._auto_passes, self.seed)
                             % AUTO_EPOCH)

    def __iter__(self):
        return self._iter(Samples())

    def _iter(self, grouping):
        """The pass ``iter()`` starts, grouped by ``grouping``: in a DataLoader worker, the
        logical stream it runs (its epoch agreed without talking to the others, see
        ``_pass_epoch``; batches cross to the main process by handle), else the rank's only
        stream."""
        info = torch.utils.data.get_worker_info()
        epoch = self._pass_epoch()
        self._last_pass = epoch
        if info is None:
            return self._pass(0, 1, epoch, grouping, process="main")
        pool = shared_pool() if grouping.batches else None
        batches = self._pass(self._rotated(info, epoch), info.num_workers, epoch, grouping,
                             process=f"worker{info.id}",
                             out=None if pool is None else pool.get)
        return batches if pool is None else stream.sent(self, batches, pool)

    def _rotated(self, info, epoch) -> int:
        """The logical stream DataLoader worker ``info.id`` runs: after a resume, torch hands
        out batches round-robin from worker 0, so the streams rotate to make the first batch
        come from the stream that was next."""
        resume = self._resume
        if resume is not None and resume["epoch"] == epoch and \
                resume["num_workers"] == info.num_workers:
            return (info.id + resume["next_worker"]) % info.num_workers
        return info.id

    # -- the loader protocol (turboloader.loader.protocol) ----------------------------------

    def worker_sizes(self, num_workers: int) -> list[int]:
        """Samples each of ``num_workers`` logical worker streams of this rank yields per
        epoch (their sum is ``len(self)``)."""
        _, world = _topology(self.rank, self.world_size)
        return sharding.worker_counts(self.num_samples, world, num_workers, pad=self.pad)

    def first_stream(self, num_workers: int) -> int:
        """The logical stream whose batch comes first in the pass starting now: after
        :meth:`load_state_dict`, the one whose batch was next when the state was taken
        (torch's workers rotate to it, see ``_rotated``); else 0."""
        resume = self._resume
        if resume is not None and resume["epoch"] == self._epoch.value and \
                resume["num_workers"] == num_workers:
            return resume["next_worker"]
        return 0

    def worker_stream(self, worker: int, num_workers: int, *, batch_size=None, out=None,
                      timing=None, grouping=None):
        """The samples (or batches) of logical worker ``worker`` of ``num_workers`` in the
        current epoch: exactly what ``__iter__`` yields in DataLoader worker ``worker``
        (same items, order, transform parameters, failure policy and replacements).

        Call ``set_epoch`` first: every stream of a pass must see the same epoch. The
        stream's reader (decoder, cache, statistics, failure budget) is the calling thread's
        stream (see :func:`turboloader.data.reader.reading_as`), kept across epochs.

        Args:
            worker, num_workers: which logical stream, of how many per rank.
            batch_size: None: yield ``(image, label)`` samples. An int ``B``: yield
                ``[images, labels]`` batches of ``B`` samples of this stream (the last one
                shorter), as torch's DataLoader batches a worker's stream, decoded a whole
                batch at a time straight into ``images``.
            out: with ``batch_size``, ``out(shape, dtype)`` returns the tensor a batch is
                written into (e.g. a recycled, pinned or shared-memory buffer); default
                ``torch.empty``.
            timing: optional ``timing(stage, seconds)``, called with the seconds spent
                gathering (``"read"``) and decoding (``"decode"``) each chunk.
            grouping: what the stream yields, a :mod:`turboloader.data.grouping` value
                (``batched()`` / ``bucketed()`` pass theirs); default: samples, or
                ``Batched(batch_size)``.

        Raises:
            RuntimeError: epochs are automatic (no ``set_epoch`` call).

        Example:
            >>> ds.set_epoch(3)                                              # doctest: +SKIP
            >>> with reading_as("rank0-thread1"):
            ...     for images, labels in ds.worker_stream(1, 4, batch_size=256): ...
        """
        if grouping is None:
            grouping = Samples() if batch_size is None else Batched(int(batch_size))
        epoch = self._epoch.value
        if epoch < 0:
            raise RuntimeError(f"{type(self).__name__}.worker_stream: the streams of one pass "
                               f"must share an epoch; call set_epoch first "
                               f"(turboloader.DataLoader does)")
        return self._pass(worker, num_workers, epoch, grouping, out=out, timing=timing)

    def _pass(self, worker, num_workers, epoch, grouping, *, process=None, out=None,
              timing=None):
        """One pass of logical worker stream ``worker`` of ``num_workers`` over ``epoch``,
        whatever it yields, read top-down: the topology (this rank; the stream's name, the
        thread's (``reading_as``) for the thread backend, ``rank{r}-{process}`` for torch's
        processes), the stream's items (:mod:`turboloader.data.sharding`), its resume point
        (used once; refused if taken over another grouping), then, when the returned
        generator starts, a reader, the cursor and the grouping (:meth:`_stream`)."""
        rank, _ = _topology(self.rank, self.world_size)
        name = (stream_name(default=f"rank{rank}-stream{worker}") if process is None
                else f"rank{rank}-{process}")
        slots, samples = self._worker_items(epoch, worker, num_workers)
        # streamed remote shards: the next epoch's first ones are read ahead (see _stream);
        # known only when epochs are numbered (set_epoch), not for automatic epoch words
        after = []
        if self._remote and self.shard_cache is None and 0 <= epoch < AUTO_EPOCH - 1:
            after = self._shard_order(self._worker_items(epoch + 1, worker, num_workers)[1])
        resume = self._take_resume(epoch, worker, num_workers, grouping)
        return self._stream(name, slots, samples, epoch, resume, worker=worker,
                            num_workers=num_workers, grouping=grouping, out=out, timing=timing,
                            after=after[:_NEXT_EPOCH_AHEAD])

    def _worker_items(self, epoch, worker, num_workers):
        """``(slots, samples)`` lists of logical worker ``worker``'s pass over ``epoch``."""
        rank, world = _topology(self.rank, self.world_size)
        # automatic epochs cannot be agreed across ranks without communication: every rank
        # keeps its samples (fixed assignment, as with the cache) and reshuffles within them
        fixed = bool(self.cache_bytes) or (epoch >= AUTO_EPOCH and world > 1)
        slots, samples = sharding.worker_items(
            self._counts, seed=self.seed, epoch=epoch, shuffle=self.shuffle, rank=rank,
            world_size=world, worker=worker, num_workers=num_workers, pad=self.pad,
            fixed=fixed, random_access=self._random_access,
            mix_shards=self.mix_shards, ramp=self._mix_ramp)
        return slots.tolist(), samples.tolist()

    @property
    def _mix_ramp(self) -> float:
        """The first window's ramp (:func:`~turboloader.data.sharding.worker_items`): on
        (:data:`MIX_RAMP`) for remote shards read through a :class:`ShardCache`, whose
        shards arrive one after another; 0 otherwise. A function of the configuration, not
        of what the cache holds now, so every pass, rank and resume orders alike."""
        return MIX_RAMP if (self.shard_cache is not None and self._remote) else 0.0

    def _stream(self, name, slots, samples, epoch, resume, *, worker, num_workers, grouping,
                out, timing, after=()):
        """The walk of one pass of one logical worker stream, with a reader of its own for
        as long as it runs (see :meth:`~turboloader.data.reader.ReaderMixin._lease`): the
        read-ahead of remote shards, the items in the grouping's order (buckets order them
        into their groups), the cursor (:mod:`turboloader.data.stream`), and what the
        grouping yields from it."""
        st = self._lease(name)
        planned = False
        lineage = (id(self), worker, num_workers)
        try:
            if self._remote:
                # a resumed pass reads on from its position: the shards before it are not
                # downloaded again (for a bucketed pass, positions are the buckets' order)
                skip = int(resume["pos"]) if resume is not None and grouping.key is None else 0
                st.upcoming = self._shard_order(samples[skip:])
                # network I/O ahead of the decode threads, in reading order: the node cache
                # downloads the first window's shards at once, then ``prefetch`` at a time;
                # without it the process's fetch pool reads streamed shards ahead into memory,
                # this pass's and then the next epoch's first four (kept for that pass when
                # this one ends, so an epoch does not start by waiting for the network; after
                # the last epoch they are dropped unread, at most four shards per stream)
                if self.shard_cache is not None:
                    self.shard_cache.order(st.upcoming)  # kept by when this pass needs them
                    # released as soon as read (a bucketed pass reads in its groups' order:
                    # its shards are released when the pass ends)
                    st.done_after = {} if grouping.key is not None else \
                        self._done_after(samples[skip:])
                    self.shard_cache.prefetch(st.upcoming, at_once=self.mix_shards, stream=name,
                                              ahead=st.ahead)
                else:
                    fetch_pool().plan(st, [u for u in st.upcoming if is_remote(u)],
                                      next_pass=[u for u in after if is_remote(u)],
                                      lineage=lineage)
                    planned = True
            slots, samples, groups = grouping.arrange(self, st, slots, samples)
            cursor = _Cursor(self, st, slots, samples, epoch, worker=worker,
                             num_workers=num_workers, resume=resume)
            cursor.progress["grouping"] = grouping.key
            yield from grouping.walk(cursor, groups, out, timing)
        finally:
            if planned:
                fetch_pool().forget(st, keep_for=lineage)
            if self.shard_cache is not None and self._remote:
                st.release_shards()  # read this pass: evicted before the ones still to read
            self._release(st)

    def _done_after(self, samples):
        """``{url: [urls]}``: the shards whose last sample in ``samples`` (a pass's reading
        order) comes before ``url``'s first sample, each listed once, under the first such
        ``url`` (the stream is done with them once it opens ``url``)."""
        ids = self._shard_ids(samples)
        if not len(ids):
            return {}
        shards, first = np.unique(ids, return_index=True)
        _, last = np.unique(ids[::-1], return_index=True)
        last = len(ids) - 1 - last
        by_last = np.argsort(last, kind="stable")
        out, j = {}, 0
        for i in np.argsort(first, kind="stable"):
            done = []
            while j < len(by_last) and last[by_last[j]] < first[i]:
                done.append(self.urls[shards[by_last[j]]])
                j += 1
            if done:  # (a URL listed twice: both lists, released at its first opening)
                out.setdefault(self.urls[shards[i]], []).extend(done)
        return out

    def _shard_ids(self, samples):
        """The shard index of each of ``samples`` (global indexes)."""
        return np.searchsorted(self._offsets, np.asarray(samples, np.int64), side="right") - 1

    def _shard_order(self, samples):
        """The URLs of the shards ``samples`` (global indexes) come from, in first-read order."""
        ids = self._shard_ids(samples)
        _, first = np.unique(ids, return_index=True)
        return [self.urls[ids[i]] for i in np.sort(first)]

    def bucketed(self, batch_size: int, buckets, *, transform=None, drop_last: bool = False):
        """This dataset yielding aspect-ratio-bucketed batches: each ``[images, labels]``
        batch holds images of one bucket resolution (see :mod:`turboloader.data.buckets`
        for how buckets are chosen and what happens to the remainders). Use with
        ``DataLoader(batch_size=None)``.

        Args:
            batch_size: samples per batch (a bucket's last batch of a stream may be short).
            buckets: ``[(height, width), ...]`` bucket resolutions.
            transform: ``transform((h, w))`` -> the pipeline of a bucket (default: cover
                the bucket at a random position, ``ToTensor``).
            drop_last: drop each bucket's partial batch at the end of a stream.

        Returns:
            A :class:`~turboloader.data.buckets.TarBuckets` ``IterableDataset``.

        Example:
            >>> buckets = [(512, 512), (384, 640), (640, 384)]                # doctest: +SKIP
            >>> loader = torch.utils.data.DataLoader(ds.bucketed(16, buckets),
            ...                                      batch_size=None, num_workers=8)
            >>> for images, labels in loader: ...   # images: (<=16, 3, h, w) of one bucket
        """
        from turboloader.data.buckets import TarBuckets

        return TarBuckets(self, batch_size, buckets, transform=transform, drop_last=drop_last)

    def batched(self, batch_size: int, *, drop_last: bool = False, num_workers=None):
        """This dataset yielding whole batches: use with ``DataLoader(batch_size=None)``.

        Each DataLoader worker decodes ``batch_size`` samples of its stream at a time
        straight into a recycled shared-memory batch tensor, so handing the batch to the
        main process copies nothing (torch's collate copies every sample into a batch;
        see ``turboloader.data._buffers`` for how shared buffers are recycled). The
        batches are exactly those of
        ``DataLoader(dataset, batch_size=batch_size, num_workers=W, drop_last=drop_last)``
        (each worker batches its own stream; torch takes them round-robin), labels
        collated the same way.

        Args:
            batch_size: samples per batch.
            drop_last: drop each worker stream's last partial batch.
            num_workers: the DataLoader's ``num_workers``, only for ``len()`` (batches per
                rank per epoch); without it ``len()`` assumes one stream.

        Returns:
            A :class:`TarBatches` ``IterableDataset`` (``set_epoch``, ``state_dict``,
            ``stats`` ... are this dataset's).

        Example:
            >>> loader = torch.utils.data.DataLoader(ds.batched(256), batch_size=None,
            ...                                      num_workers=8)       # doctest: +SKIP
            >>> for images, labels in loader: ...
        """
        return TarBatches(self, batch_size, drop_last=drop_last, num_workers=num_workers)

    # -- statistics -------------------------------------------------------------------------

    def stats(self, epoch=None) -> dict:
        """Counters of every process that read this dataset, for ``epoch`` or all epochs.

        Returns a dict: ``samples``, ``bytes_read``, ``read_s``, ``decode_s`` (a fused
        decode + transform counts here), ``transform_s``, ``failures``, ``cache_hits``,
        ``cache_misses``, ``cache_hit_rate`` (hits / lookups, None without the cache),
        ``cache_evictions`` (0: the cache keeps what it admitted), ``cache_bytes`` (now,
        summed over processes), ``skipped`` (one dict per skipped sample: ``shard``, ``key``,
        ``offset``, ``reason``, ``epoch``, ``worker``), ``failed_shards`` and ``workers``
        (the same counters per process, named ``"rank{r}-worker{w}"`` or
        ``"rank{r}-main"``, each with its ``cache`` gauge). Workers report every
        ``stats_interval`` samples and at the end of each pass. Counts are this rank's.
        """
        out = super().stats(epoch)
        out["failed_shards"] = list(self.failed_shards)
        if self.shard_cache is not None:
            out["shard_cache"] = self.shard_cache.stats()
        return out

    def __repr__(self):
        return (f"TarDataset({len(self.urls)} shards, {self.num_samples} samples, "
                f"shuffle={self.shuffle}, seed={self.seed}, pad={self.pad}, "
                f"cache={self.cache_bytes or None}, on_error={self.policy.on_error!r})")


class TarBatches(GroupedView):
    """A :class:`TarDataset` that yields ``[images, labels]`` batches (see
    :meth:`TarDataset.batched`): the dataset with a :class:`~turboloader.data.grouping.Batched`
    grouping. Attributes not defined here are the dataset's."""

    grouping: Batched

    def __init__(self, dataset: Any, batch_size: int, *, drop_last: bool = False,
                 num_workers: int | None = None) -> None:
        super().__init__(dataset, Batched(int(batch_size), drop_last=bool(drop_last)))
        self.num_workers = num_workers

    @property
    def batch_size(self) -> int:
        """Samples per batch."""
        return self.grouping.size

    @property
    def drop_last(self) -> bool:
        """Each worker stream's last partial batch is dropped."""
        return self.grouping.drop_last

    def __len__(self) -> int:
        """Batches per rank per epoch, for ``num_workers`` streams (one when not given)."""
        B = self.batch_size
        sizes = self.dataset.worker_sizes(max(1, int(self.num_workers or 0)))
        return sum(n // B if self.drop_last else -(-n // B) for n in sizes)

    def __repr__(self):
        return f"TarBatches({self.dataset!r}, batch_size={self.batch_size})"
