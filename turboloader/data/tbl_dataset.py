"""TBLDataset: a map-style dataset over one or more TBL files."""

from __future__ import annotations

import time

import numpy as np
import torch.utils.data

from turboloader.data._streams import MapStreamState, own_states, stream_state
from turboloader.data.cache import Timer, parse_size
from turboloader.data.policy import EpochMixin, FailurePolicy, SharedEpoch, Telemetry
from turboloader.io.shards import expand_urls
from turboloader.errors import FailureBudgetExceeded, SampleError, TurboLoaderError
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS
from turboloader.io.tbl import Codec, TBLFile
from turboloader.transforms._plan import _warn_unfused
from turboloader.transforms._random import sample_rng, using_rng

__all__ = ["ResumableSampler", "TBLDataset"]


class _ProcessState(MapStreamState):
    """A stream's reading state plus its open TBL files."""

    def __init__(self, dataset, name):
        super().__init__(dataset, name)
        self.files = [TBLFile(p, check_crc=dataset.check_crc) for p in dataset.paths]

class TBLDataset(EpochMixin, torch.utils.data.Dataset):
    """Map-style ``(image, label)`` dataset over TBL files: O(1) random access by index.

    The files' records are numbered in order, file after file. Reading record ``i`` is one
    ``mmap`` slice (zero-copy for stored JPEGs) plus a CRC-32 check (``check_crc``); the image
    then goes through the same path as :class:`TarDataset` and :class:`ImageFolder`: with a
    turboloader pipeline that has a fused plan, JPEGs are decoded and transformed in one native
    call; otherwise ``transform`` gets a PIL RGB image. RAW records (decoded pixels) skip
    decoding. The random parameters of index ``i`` in epoch ``e`` come from
    ``sample_rng(seed, e, i)``, whichever process reads it; call ``set_epoch`` from the main
    process each epoch.

    **Sharding and shuffling** are the sampler's job, as for any map-style dataset: use
    ``DataLoader(ds, shuffle=True)`` on one process, or
    ``torch.utils.data.distributed.DistributedSampler(ds)`` under DDP (call its
    ``set_epoch`` too). Because any index is readable at any time, resuming mid-epoch is
    exact: skip the sampler's first indices.

    **Cache** and **failures** behave as in :class:`ImageFolder`: ``cache="4GB"`` is a
    per-stream LRU of decoded images (a stream: a process, or a decode thread of the thread
    backend); ``on_error="skip"`` replaces a sample that fails with a turboloader error (CRC
    mismatch, undecodable image, missing label) by the next index that reads, within
    ``max_failures`` per stream per epoch, and lists it in ``stats()``.
    Under ``"raise"`` the typed error (FormatError, DecodeError, SampleError) carries a note
    naming the file, key and byte offset. A file whose header or index is damaged raises
    FormatError in ``__init__``.

    Args:
        paths: a TBL file, a glob, a brace pattern or a list of them.
        transform, target_transform: applied to the image and the label.
        seed: seed of the per-sample transform parameters (int >= 0).
        cache, cache_short_side: decoded-image cache size (int bytes or ``"4GB"``) and the
            optional DCT pre-downscale of cached JPEGs.
        on_error, max_failures: the failure policy (``"raise"`` or ``"skip"``; default
            budget 0.01).
        check_crc: verify each record's CRC-32 when read.
        max_pixels: refuse larger images (decompression-bomb guard).
        stats_interval: samples between statistics snapshots from each worker.

    Raises:
        FileNotFoundError: a file or glob does not exist.
        FormatError: a file is not a valid TBL file.

    Example:
        >>> from turboloader import TBLDataset, transforms as T              # doctest: +SKIP
        >>> ds = TBLDataset("train-256.tbl", T.Compose([T.RandomResizedCrop(224),
        ...                 T.RandomHorizontalFlip(), T.ToTensor()]), on_error="skip")
        >>> sampler = torch.utils.data.distributed.DistributedSampler(ds)
        >>> loader = torch.utils.data.DataLoader(ds, batch_size=256, sampler=sampler,
        ...                                      num_workers=8, persistent_workers=True)
        >>> for epoch in range(90):
        ...     sampler.set_epoch(epoch); ds.set_epoch(epoch)
        ...     for images, labels in loader: ...
    """

    def __init__(self, paths, transform=None, target_transform=None, *, seed=0, cache=None,
                 cache_short_side=None, on_error="raise", max_failures=0.01, check_crc=True,
                 max_pixels=DEFAULT_MAX_PIXELS, stats_interval=256):
        if int(seed) < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.paths = expand_urls(paths)
        self.transform = transform
        _warn_unfused(transform, type(self).__name__)  # once, here in the main process
        self.target_transform = target_transform
        self.seed = int(seed)
        self._cache_bytes = parse_size(cache) if cache else 0
        self.cache_short_side = cache_short_side
        self.policy = FailurePolicy(on_error, max_failures)
        self.check_crc = bool(check_crc)
        self.max_pixels = max_pixels
        self.stats_interval = int(stats_interval)
        counts, labels, metadata = [], [], []
        for p in self.paths:
            with TBLFile(p, check_crc=False) as f:
                counts.append(len(f))
                labels.append(f.labels)
                metadata.append(f.metadata)
        self._counts = np.asarray(counts, np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(self._counts)]).astype(np.int64)
        self._targets = np.concatenate(labels) if labels else np.empty(0, np.int64)
        self.metadata = metadata
        self.classes = metadata[0].get("classes") if metadata else None
        self._epoch = SharedEpoch()
        self._telemetry = Telemetry()
        self._states = {}  # stream name -> _ProcessState (see data._streams)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_states"] = {}
        return state

    def __len__(self) -> int:
        return int(self._offsets[-1])

    @property
    def targets(self) -> np.ndarray:
        """int64 label of every sample (-1 where a record has none), read from the index."""
        return self._targets

    def _process_state(self):
        """The reading state of the calling thread's stream: one per DataLoader worker
        process, one per decode thread of the thread backend, ``"main"`` otherwise."""
        return stream_state(self, lambda name: _ProcessState(self, name))

    def locate(self, index: int) -> tuple:
        """``(path, record)``: the file holding sample ``index`` and its position there."""
        s = int(np.searchsorted(self._offsets, index, side="right")) - 1
        return self.paths[s], index - int(self._offsets[s])

    def _load(self, st, i, rng, counters):
        s = int(np.searchsorted(self._offsets, i, side="right")) - 1
        f, j = st.files[s], i - int(self._offsets[s])
        entry = f.index[j]
        try:
            cache = st.decoder.cache
            data = None
            if cache is None or i not in cache:
                t = time.perf_counter()
                rec = f.record(j)
                counters["read_s"] += time.perf_counter() - t
                counters["bytes_read"] += int(entry["size"])
                data, codec, label = rec.data, rec.codec, rec.label
            else:
                codec = Codec(int(entry["codec"]))
                label = int(entry["label"]) if int(entry["flags"]) & 1 else None
            if label is None:
                raise SampleError(f"record {j} has no label")
            if codec == Codec.RAW:
                img = self._from_pixels(st, rec.array(), rng, counters)
            else:
                img = st.decoder(data, key=i, rng=rng, counters=counters)
        except TurboLoaderError as exc:
            exc.add_note(f"TBLDataset: file {f.path!r}, record {j}, key {f.key(j)!r}, byte "
                         f"offset {int(entry['offset'])} (index {i})")
            raise
        return img, label

    def _from_pixels(self, st, arr, rng, counters):
        timer = Timer(counters)
        plan = st.decoder.plan
        if plan is not None:
            out = plan.from_array(arr, rng=rng)
        else:
            from PIL import Image

            img = Image.fromarray(np.array(arr))
            if self.transform is None:
                out = img
            else:
                with using_rng(rng):
                    out = self.transform(img)
        timer.lap("transform_s")
        return out

    def __getitem__(self, index: int):
        """``(image, label)`` for ``index`` (or, under "skip", for the next readable index)."""
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"index {index} out of range for {n} samples")
        index %= n
        epoch, word = self.epoch, self._sample_epoch()
        st = self._process_state()
        counters = st.recorder.counters(epoch)
        for attempt in range(n):
            i = (index + attempt) % n
            try:
                img, label = self._load(st, i, sample_rng(self.seed, word, index), counters)
            except TurboLoaderError as exc:
                s = int(np.searchsorted(self._offsets, i, side="right")) - 1
                f, j = st.files[s], i - int(self._offsets[s])
                st.log(self.policy, n, epoch).record(exc, shard=f.path, key=f.key(j),
                                                     offset=int(f.index[j]["offset"]))
                continue
            if self.target_transform is not None:
                label = self.target_transform(label)
            counters["samples"] += 1
            st.recorder.sample_done()
            return img, label
        raise FailureBudgetExceeded(f"no sample of {self.paths!r} could be read",
                                    st.log(self.policy, n, epoch).failures)

    def state_dict(self) -> dict:
        """``{"format": "turboloader.TBLDataset/1", "epoch": e}``. A map-style dataset
        has no position: where the epoch stands is the sampler's state (see
        :class:`ResumableSampler`)."""
        return {"format": "turboloader.TBLDataset/1", "epoch": self._epoch.value}

    def load_state_dict(self, state: dict) -> None:
        """Restore the epoch of the per-sample transform parameters (main process)."""
        if not isinstance(state, dict) or state.get("format") != "turboloader.TBLDataset/1":
            raise ValueError("not a TBLDataset state (expected format 'turboloader.TBLDataset/1')")
        if int(state["epoch"]) < 0:  # taken while epochs were automatic: stay automatic
            self._epoch.value = -1
        else:
            self.set_epoch(state["epoch"])

    def stats(self, epoch=None) -> dict:
        """Counters of every stream that read this dataset (see ``TarDataset.stats`` and
        ``ImageFolder.stats``: skipped samples are reported at once, counters every
        ``stats_interval`` samples and when a worker exits)."""
        for st in own_states(self):
            st.recorder.flush()
        return self._telemetry.collect(epoch)

    def __repr__(self) -> str:
        files = self.paths[0] if len(self.paths) == 1 else f"{len(self.paths)} files"
        return f"TBLDataset({files!r}, {len(self)} samples)"


class ResumableSampler(torch.utils.data.DistributedSampler):
    """``DistributedSampler`` (same order, padding and arguments) that can start mid-epoch.

    ``state_dict(batches=k, batch_size=B)`` after the DataLoader handed out ``k`` batches
    of this epoch; ``load_state_dict(state)`` makes the next pass over that epoch start at
    the first index not yet delivered (indices are skipped, nothing is read), and
    ``len()`` shrink accordingly. Map-style batches come in index order, so the main
    process's batch count fixes the position whatever ``num_workers`` is. The state is
    the same on every rank. Another ``set_epoch`` discards the resume point.

    With ``torchdata``'s ``StatefulDataLoader`` use torch's ``DistributedSampler``
    instead: that loader fast-forwards sampler indices itself.

    Example:
        >>> sampler = ResumableSampler(ds, num_replicas=world, rank=rank, seed=0)  # doctest: +SKIP
        >>> ckpt["sampler"] = sampler.state_dict(batches=step_in_epoch, batch_size=256)
        >>> sampler.load_state_dict(ckpt["sampler"]); ds.set_epoch(sampler.epoch)
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            # outside a distributed run: one replica, like a plain (resumable) RandomSampler
            num_replicas = 1 if num_replicas is None else num_replicas
            rank = 0 if rank is None else rank
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle,
                         seed=seed, drop_last=drop_last)
        self._skip = 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self._skip = 0
        super().set_epoch(epoch)

    def state_dict(self, *, batches: int, batch_size: int) -> dict:
        """The position after ``batches`` batches of ``batch_size`` of this epoch."""
        if batches < 0 or batch_size < 1:
            raise ValueError(f"need batches >= 0 and batch_size >= 1, got {batches}, {batch_size}")
        return {"format": "turboloader.ResumableSampler/1", "epoch": self.epoch,
                "consumed": min(self._skip + batches * batch_size, self.num_samples),
                "num_samples": self.num_samples, "num_replicas": self.num_replicas,
                "seed": self.seed, "shuffle": self.shuffle, "dataset_len": len(self.dataset)}

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("format") != "turboloader.ResumableSampler/1":
            raise ValueError("not a ResumableSampler state")
        mine = {"num_samples": self.num_samples, "num_replicas": self.num_replicas,
                "seed": self.seed, "shuffle": self.shuffle, "dataset_len": len(self.dataset)}
        diff = [k for k, v in mine.items() if state.get(k) != v]
        if diff:
            raise ValueError(f"the sampler state was taken with other {', '.join(diff)}")
        epoch, consumed = int(state["epoch"]), int(state["consumed"])
        if epoch < 0 or not 0 <= consumed <= self.num_samples:
            raise ValueError(f"impossible sampler position: epoch {epoch}, {consumed} consumed "
                             f"of {self.num_samples}")
        self.epoch = epoch
        self._skip = consumed

    def __iter__(self):
        indices = list(super().__iter__())
        skip, self._skip = self._skip, 0  # used by one pass
        return iter(indices[skip:])

    def __len__(self) -> int:
        return self.num_samples - self._skip
