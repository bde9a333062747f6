"""TBLDataset: a map-style dataset over one or more TBL files."""

from __future__ import annotations

from typing import Any
import time

import numpy as np
import torch.utils.data

from turboloader.data.checkpoint import check_fingerprint, shard_fingerprint
from turboloader.data.map_dataset import MapDataset
from turboloader.data.reader import StreamReader
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS
from turboloader.errors import SampleError, TurboLoaderError
from turboloader.io.shards import expand_urls
from turboloader.io.tbl import Codec, TBLFile

__all__ = ["ResumableSampler", "TBLDataset"]

_TBL_FIELDS = ("cls", "__key__", "__url__")  # besides the image: what a record holds


class TBLDataset(MapDataset, torch.utils.data.Dataset):
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
            optional short side cached images are resized to (as TarDataset's).
        on_error, max_failures: the failure policy (``"raise"`` or ``"skip"``; default
            budget 0.01).
        check_crc: verify each record's CRC-32 when read.
        max_pixels: refuse larger images (decompression-bomb guard).
        stats_interval: samples between statistics snapshots from each worker (at most
            one a second).

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

    def __init__(self, paths: Any, transform: Any = None, target_transform: Any = None, *,
                 seed: int = 0, cache: Any = None, cache_short_side: Any = None,
                 on_error: str = "raise", max_failures: float = 0.01, check_crc: bool = True,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS, stats_interval: int = 256,
                 fields: Any = None) -> None:
        if fields is not None:
            from turboloader.data.fields import Fields

            self._fields = Fields(fields)
            other = [name for i, (name, _) in enumerate(self._fields.entries)
                     if i != self._fields.image and name not in _TBL_FIELDS]
            if other:
                raise ValueError(f"a TBL record holds its image, label and key: fields "
                                 f"{other} are not in it (use {', '.join(_TBL_FIELDS)})")
            if target_transform is not None:
                raise ValueError("target_transform applies to (image, label) samples; with "
                                 "fields=, transform the fields you get instead")
        self._init_reader(transform, target_transform, seed=seed, cache=cache,
                          cache_short_side=cache_short_side, on_error=on_error,
                          max_failures=max_failures, max_pixels=max_pixels,
                          stats_interval=stats_interval)
        self.paths = expand_urls(paths)
        self.check_crc = bool(check_crc)
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

    def __len__(self) -> int:
        return int(self._offsets[-1])

    @property
    def targets(self) -> np.ndarray:
        """int64 label of every sample (-1 where a record has none), read from the index."""
        return self._targets

    def _new_reader(self, name):
        st = StreamReader(self, name, flush_failures=True)
        st.files = [TBLFile(p, check_crc=self.check_crc) for p in self.paths]
        return st

    def locate(self, index: int) -> tuple:
        """``(path, record)``: the file holding sample ``index`` and its position there."""
        s = int(np.searchsorted(self._offsets, index, side="right")) - 1
        return self.paths[s], index - int(self._offsets[s])

    def _gather(self, st, chunk, i, slot, epoch, counters):
        s = int(np.searchsorted(self._offsets, i, side="right")) - 1
        f, j = st.files[s], i - int(self._offsets[s])
        where = (s, j, i)
        cache = st.decoder.cache
        if cache is not None and i in cache:
            entry = f.index[j]
            if self._fields is not None:
                label = int(entry["label"]) if int(entry["flags"]) & 1 else None
                try:
                    chunk.add(None, self._field_values(f, j, label), where, slot, epoch,
                              cache_key=i)
                except TurboLoaderError as exc:
                    chunk.fail(exc, where, slot, epoch)
            elif int(entry["flags"]) & 1:
                chunk.add(None, int(entry["label"]), where, slot, epoch, cache_key=i)
            else:
                chunk.fail(SampleError(f"record {j} has no label"), where, slot, epoch)
            return
        t = time.perf_counter()
        try:
            rec = f.record(j)
        except TurboLoaderError as exc:
            chunk.fail(exc, where, slot, epoch)
            return
        counters["read_s"] += time.perf_counter() - t
        counters["bytes_read"] += int(f.index[j]["size"])
        label = rec.label
        if self._fields is not None:
            try:
                label = self._field_values(f, j, label)
            except TurboLoaderError as exc:
                chunk.fail(exc, where, slot, epoch)
                return
        if label is None:
            chunk.fail(SampleError(f"record {j} has no label"), where, slot, epoch)
        elif rec.codec == Codec.RAW:  # decoded pixels: the transform only, never cached
            chunk.add(rec.array(), label, where, slot, epoch)
        else:
            chunk.add(rec.data, label, where, slot, epoch,
                      cache_key=None if cache is None else i)

    def _field_values(self, f, j, label):
        """The ``fields`` values of record ``j`` of ``f`` (None at the image's place)."""
        out = []
        for i, (name, _) in enumerate(self._fields.entries):
            if i == self._fields.image:
                out.append(None)
            elif name == "__key__":
                out.append(f.key(j))
            elif name == "__url__":
                out.append(f.path)
            elif label is None:
                raise SampleError(f"record {j} ({f.key(j)!r}) has no label (fields="
                                  f"{self._fields.spec!r})")
            else:
                out.append(int(label))
        return out

    def _where(self, st, where):
        s, j, i = where
        f = st.files[s]
        offset = int(f.index[j]["offset"])
        return (f"TBLDataset: file {f.path!r}, record {j}, key {f.key(j)!r}, byte offset "
                f"{offset} (index {i})", f.path, f.key(j), offset)

    def state_dict(self) -> dict:
        """``{"format": "turboloader.TBLDataset/1", "epoch": e, "shards": [...],
        "shard_sizes": [...]}``: the epoch, and the files in order (relative to their common
        directory) with their record counts, which the sampler's indices depend on. A
        map-style dataset has no position: where the epoch stands is the sampler's state
        (see :class:`ResumableSampler`)."""
        return {"format": "turboloader.TBLDataset/1", "epoch": self._epoch.value,
                **shard_fingerprint(self.paths, self._counts)}

    def load_state_dict(self, state: dict) -> None:
        """Restore the epoch of the per-sample transform parameters (main process).

        Raises:
            StateMismatchError: the state was taken over other files, or the same files in
                another order or with other record counts (a sampler's indices would name
                other samples); the message names the first file that differs.
            ValueError: not a TBLDataset state.
        """
        if not isinstance(state, dict) or state.get("format") != "turboloader.TBLDataset/1":
            raise ValueError("not a TBLDataset state (expected format 'turboloader.TBLDataset/1')")
        check_fingerprint("TBLDataset.load_state_dict", state,
                          shard_fingerprint(self.paths, self._counts))
        if int(state["epoch"]) < 0:  # taken while epochs were automatic: stay automatic
            self._epoch.value = -1
        else:
            self.set_epoch(state["epoch"])

    def stats(self, epoch=None) -> dict:
        """Counters of every stream that read this dataset (see ``TarDataset.stats`` and
        ``ImageFolder.stats``: skipped samples are reported at once, counters every
        ``stats_interval`` samples and when a worker exits)."""
        return super().stats(epoch)

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

    def __init__(self, dataset: Any, num_replicas: Any = None, rank: Any = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
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
