"""Aspect-ratio buckets: batches of one resolution each, chosen from the images' headers.

Diffusion and ViT training at native aspect ratios batches images by shape: a fixed list of
bucket resolutions, each image resized to the bucket nearest its aspect ratio, every batch
from one bucket. :meth:`TarDataset.bucketed <turboloader.data.TarDataset.bucketed>` does it
on top of the dataset's own epoch order, sharding and failure policy:

* **Header sizes, read once.** A stream reads each sample's image header (one ``pread`` of
  its first bytes, no pixels) the first time it opens a shard, and keeps the sizes for
  every later epoch.
* **Bucket** of an image: the bucket whose aspect ratio is nearest in log scale
  (``|log(w/h) - log(bw/bh)|``), ties to the earlier bucket.
* **Batches**: each logical worker stream walks its items in the epoch's order, appending
  each to its bucket; a bucket that reaches ``batch_size`` is decoded and yielded as one
  batch at once. **Remainders**: when the stream's items run out, every bucket's partial
  batch is yielded (in bucket order), or dropped with ``drop_last=True``. Every sample of
  the epoch is therefore delivered exactly once across ranks and workers (as the dataset
  shards it), and no bucket waits past the end of an epoch.
* **Resize**: ``transform(size)`` builds the pipeline of a bucket of ``size = (h, w)``;
  the default covers the bucket (the largest window of the bucket's aspect ratio at a
  random position, resized to it: ``RandomResizedCrop(size, scale=(1, 1), ratio=(w/h,
  w/h))``) and converts to a float tensor. The window and scale are drawn from the
  header, and decoding is fused, as for any turboloader pipeline.
* **Failures**: a sample that fails is skipped (``on_error="skip"``, counted in
  ``stats()``, its batch one shorter) or raised. No replacements.

Loaders: ``torch.utils.data.DataLoader(buckets, batch_size=None, num_workers=W)``, or
``turboloader.DataLoader(buckets, batch_size=None, ...)`` on either backend (the thread
backend runs the same worker streams in threads). Not supported (yet): the cache, mid-epoch
resume (``state_dict`` raises).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.utils.data

from turboloader.data import sharding
from turboloader.data._buffers import shared_pool
from turboloader.data.failures import FailureLog
from turboloader.data.reader import collate_labels, compact, fill_row
from turboloader.errors import TurboLoaderError
from turboloader.io.shards import TarShard

__all__ = ["TarBuckets", "nearest_bucket"]

_HEADER = 1 << 16  # bytes read for a header first (a JPEG's SOF follows its EXIF)


def nearest_bucket(height, width, buckets) -> int:
    """Index of the bucket ``(h, w)`` whose aspect ratio is nearest ``width / height``
    in log scale (ties: the earlier bucket).

    Example:
        >>> nearest_bucket(480, 640, [(512, 512), (384, 640), (640, 384)])
        1
    """
    r = math.log(width / height)
    best, got = None, 0
    for i, (bh, bw) in enumerate(buckets):
        d = abs(r - math.log(bw / bh))
        if best is None or d < best - 1e-12:
            best, got = d, i
    return got


def _default_transform(size):
    from turboloader import transforms as T

    h, w = size
    return T.Compose([T.RandomResizedCrop(size, scale=(1.0, 1.0), ratio=(w / h, w / h)),
                      T.ToTensor()])


def _header_size(data):
    """``(h, w)`` of an encoded image from its first bytes, or None."""
    from turboloader.io.codec import detect_codec, image_size

    try:
        w, h = image_size(data, detect_codec(data))
    except TurboLoaderError:
        return None
    return (h, w) if w and h else None


class TarBuckets(torch.utils.data.IterableDataset):
    """A :class:`~turboloader.data.TarDataset` yielding ``[images, labels]`` batches of one
    aspect-ratio bucket each (see :mod:`turboloader.data.buckets` and
    :meth:`TarDataset.bucketed`). Attributes not defined here are the dataset's."""

    def __init__(self, dataset, batch_size, buckets, *, transform=None, drop_last=False):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        buckets = [tuple(int(v) for v in b) for b in buckets]
        if not buckets or any(len(b) != 2 or min(b) < 1 for b in buckets):
            raise ValueError(f"buckets must be a non-empty list of (height, width), got {buckets}")
        if dataset.cache_bytes:
            raise ValueError("bucketed() does not use the decoded-sample cache: make the "
                             "dataset with cache=None")
        if dataset._fields is not None:
            raise ValueError("bucketed() yields (images, labels): make the dataset without fields")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.buckets = buckets
        self.transform = transform or _default_transform
        self.drop_last = bool(drop_last)

    def __getattr__(self, name):
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def state_dict(self, *args, **kwargs):
        raise NotImplementedError("mid-epoch resume of bucketed batches is not supported yet")

    # the thread backend's protocol (turboloader.loader.protocol): whole batches per stream
    yields_batches = True

    def worker_sizes(self, num_workers):
        """Samples each logical worker stream reads per epoch (the dataset's shares)."""
        return self.dataset.worker_sizes(num_workers)

    def worker_stream(self, worker, num_workers, *, batch_size=None, out=None, timing=None):
        """The bucketed batches of logical worker ``worker`` of ``num_workers`` (what
        ``__iter__`` yields in that DataLoader worker), written into ``out(shape, dtype)``
        tensors when given. Call ``set_epoch`` first."""
        from turboloader.data.reader import stream_name

        ds = self.dataset
        epoch = ds._epoch.value
        if epoch < 0:
            raise RuntimeError("TarBuckets.worker_stream: call set_epoch first "
                               "(turboloader.DataLoader does)")
        rank, slots, samples = self._items(epoch, worker, num_workers)
        name = stream_name(default=f"rank{rank}-stream{worker}")
        return self._stream(name, slots, samples, epoch, alloc=out)

    def _items(self, epoch, worker, num_workers):
        from turboloader.data.checkpoint import topology

        ds = self.dataset
        rank, world = topology(ds.rank, ds.world_size)
        fixed = epoch >= (1 << 62) and world > 1
        slots, samples = sharding.worker_items(
            ds._counts, seed=ds.seed, epoch=epoch, shuffle=ds.shuffle, rank=rank,
            world_size=world, worker=worker, num_workers=num_workers, pad=ds.pad,
            fixed=fixed, random_access=ds._random_access, mix_shards=ds.mix_shards)
        return rank, slots.tolist(), samples.tolist()

    def __iter__(self):
        ds = self.dataset
        info = torch.utils.data.get_worker_info()
        epoch = ds._pass_epoch()
        ds._last_pass = epoch
        worker, W = (0, 1) if info is None else (info.id, info.num_workers)
        rank, slots, samples = self._items(epoch, worker, W)
        name = f"rank{rank}-{'main' if info is None else f'worker{info.id}'}"
        alloc = None
        if info is not None:  # the batch crosses to the main process by handle
            alloc = shared_pool().get
        return self._stream(name, slots, samples, epoch, alloc=alloc, send=info is not None)

    def _stream(self, name, slots, samples, epoch, *, alloc=None, send=False):
        from turboloader.data.cache import Decoder

        ds = self.dataset
        st = ds._lease(name)
        try:
            label = epoch if epoch < (1 << 62) else 0
            counters = st.recorder.counters(label)
            log = FailureLog(ds.policy, len(samples), epoch=label, recorder=st.recorder)
            decoders = [Decoder(self.transform(b), max_pixels=ds.max_pixels)
                        for b in self.buckets]
            sizes = self._sizes(st, samples)
            queues = [[] for _ in self.buckets]
            B = self.batch_size
            for g, slot, hw in zip(samples, slots, sizes):
                b = 0 if hw is None else nearest_bucket(hw[0], hw[1], self.buckets)
                q = queues[b]
                q.append((g, slot))
                if len(q) == B:
                    queues[b] = []
                    batch = self._batch(st, decoders[b], q, epoch, counters, log, alloc, send)
                    if batch is not None:
                        yield batch
                    batch = None
            for b, q in enumerate(queues):  # the remainders: every bucket's partial batch
                if q and not self.drop_last:
                    batch = self._batch(st, decoders[b], q, epoch, counters, log, alloc, send)
                    if batch is not None:
                        yield batch
                    batch = None
        finally:
            st.recorder.flush()
            ds._release(st)

    def _sizes(self, st, samples):
        """``(h, w)`` of each sample's image from its header (None where unreadable: that
        sample fails later, when it is decoded), read once per shard and stream."""
        ds = self.dataset
        cache = st.__dict__.setdefault("header_sizes", {})
        offsets = ds._offsets
        shard_of = (np.searchsorted(offsets, samples, side="right") - 1).tolist()
        out = []
        buf = np.empty(_HEADER, np.uint8)
        for g, s in zip(samples, shard_of):
            url = ds.urls[s]
            table = cache.get(url)
            if table is None:
                table = cache[url] = {}
            j = g - int(offsets[s])
            if j not in table:
                table[j] = self._read_header(st, url, j, buf)
            out.append(table[j])
        return out

    def _read_header(self, st, url, j, buf):
        try:
            shard = st.shard(url)
            if isinstance(shard, TarShard):  # the first bytes only: one short pread
                size = shard.image_size(j)
                if size < 0:
                    return None
                got = _header_size(buf[:shard.read_image_into(j, buf, head=True)])
                if got is not None or size <= len(buf):
                    return got
                # a header past the first 64 KiB (a large EXIF block): the whole image
            rec = shard.sample(j)
            return None if rec.image is None else _header_size(bytes(rec.image))
        except TurboLoaderError:
            return None

    def _batch(self, st, decoder, items, epoch, counters, log, alloc, send):
        """One bucket's batch: the items decoded into one tensor; failures skipped (or
        raised) by the policy; None when every item failed."""
        ds = self.dataset
        chunk = ds._gather_chunk(st, items, epoch, counters)
        shape = (len(items), *decoder.plan.output_shape) if decoder.plan is not None and \
            decoder.plan.output_shape is not None else None
        out = None
        if shape is not None:
            dtype = decoder.plan.output_dtype
            out = alloc(shape, dtype) if alloc is not None else torch.empty(shape, dtype=dtype)
        errors, objs = st.decode(chunk, out, counters=counters, decoder=decoder)
        good, images, labels = [], [], []
        for i, exc in enumerate(errors):
            if exc is not None:
                note, shard, key, offset = ds._where(st, chunk.where[i])
                if isinstance(exc, TurboLoaderError):
                    exc.add_note(note)
                log.record(exc, shard=shard, key=key, offset=offset)
                continue
            good.append(i)
            images.append(objs[i])
            labels.append(chunk.labels[i])
        counters["samples"] += len(good)
        st.recorder.sample_done(len(good))
        if not good:
            return None
        if out is None:
            from torch.utils.data import default_collate

            out = default_collate(images)
        else:
            n = compact(out, good, 0)
            for r, img in enumerate(images):
                if img is not None:
                    fill_row(out, r, img)
            if n < len(items):
                out = out[:n]
        if send:
            out = shared_pool().send(out)
        return [out, collate_labels(labels)]

    def __repr__(self):
        return (f"TarBuckets({self.dataset!r}, batch_size={self.batch_size}, "
                f"buckets={self.buckets})")
