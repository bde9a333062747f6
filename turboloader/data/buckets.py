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
  uniformly random position, resized to it: a ``RandomResizedCrop`` whose window is
  always that largest one) and converts to a float tensor. The window is drawn from the
  header, and decoding is fused, as for any turboloader pipeline.
* **The walk is the dataset's** (:mod:`turboloader.data.stream`): the bucket policy only
  orders each stream's items into its batches; everything else is what every grouping
  has. **Failures**: a sample that fails is raised, or skipped (``on_error="skip"``,
  counted in ``stats()``, its batch one shorter) and replaced at the end of the stream by
  the stream's good samples cycled in order, each decoded with the skipped sample's
  random parameters into the skipped sample's bucket (batches of replacements of one
  bucket), so every stream yields its full share. **The cache** (``cache=``) serves the
  buckets as it serves samples (images are cached before any transform). **Fields**
  (``fields=``, masks and boxes too) come out as the dataset's batches of fields, each
  bucket's transform applied to the masks and boxes with the image's draws. **Resume**:
  :meth:`TarBuckets.state_dict` / ``load_state_dict``, or ``turboloader.DataLoader``'s on
  either backend; a state names positions in the buckets' order, so a state of the
  dataset's samples is refused by a bucketed pass (and the other way round).

Loaders: ``torch.utils.data.DataLoader(buckets, batch_size=None, num_workers=W)``, or
``turboloader.DataLoader(buckets, batch_size=None, ...)`` on either backend (the thread
backend runs the same worker streams in threads).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.utils.data

from turboloader.data._buffers import shared_pool
from turboloader.errors import TurboLoaderError
from turboloader.io.shards import TarShard
from turboloader.transforms import RandomResizedCrop

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


class _CoverCrop(RandomResizedCrop):
    """The largest window of the bucket's aspect ratio at a uniformly random position,
    resized to the bucket (``RandomResizedCrop`` with another draw: with ``scale=(1, 1)``
    its ten attempts fit only an image of the bucket's exact ratio, and every other image
    fell back to the centre). Fused like ``RandomResizedCrop``; masks and boxes follow it."""

    def __init__(self, size):
        super().__init__(size, scale=(1.0, 1.0))   # torchvision's size rule, then the ratio
        h, w = self.size
        self.ratio = (w / h, w / h)

    def _draw_batch(self, sizes, d, mask=None):
        H, W = sizes[:, 0], sizes[:, 1]
        r = self.ratio[0]
        wide = W * self.size[0] > H * self.size[1]  # W / H > r, exactly in integers
        hh = np.where(wide, H, np.minimum(H, np.maximum(1, np.rint(W / r)).astype(np.int64)))
        ww = np.where(wide, np.minimum(W, np.maximum(1, np.rint(H * r)).astype(np.int64)), W)
        top = d.below(H - hh + 1, mask)
        left = d.below(W - ww + 1, mask)
        return {"top": top, "left": left, "height": hh, "width": ww}

    def _extra_repr(self):
        return f"size={self.size}, interpolation={self.interpolation!r}"


def _default_transform(size):
    from turboloader import transforms as T

    return T.Compose([_CoverCrop(size), T.ToTensor()])


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
    :meth:`TarDataset.bucketed`). Attributes not defined here are the dataset's.

    The bucket policy only orders each stream's items into batches (:meth:`layout`); the
    walk itself (failures, replacements, the cache, fields, resume, batch assembly) is the
    dataset's one stream walker (:mod:`turboloader.data.stream`)."""

    def __init__(self, dataset, batch_size, buckets, *, transform=None, drop_last=False):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        buckets = [tuple(int(v) for v in b) for b in buckets]
        if not buckets or any(len(b) != 2 or min(b) < 1 for b in buckets):
            raise ValueError(f"buckets must be a non-empty list of (height, width), got {buckets}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.buckets = buckets
        self.transform = transform or _default_transform
        self.drop_last = bool(drop_last)
        if dataset._fields is not None:
            for b in buckets:
                dataset._fields.check_transform(self.transform(b))
        self._headers = {}  # (url, j) -> (h, w) or None, read once per process

    def __getattr__(self, name):
        if name in ("dataset", "_headers"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_headers"] = {}  # each process reads the headers of the streams it runs
        return state

    # the thread backend's protocol (turboloader.loader.protocol): whole batches per stream
    yields_batches = True

    def key(self) -> dict:
        """What a resume state of this grouping records (positions are in its order)."""
        return {"kind": "buckets", "batch_size": self.batch_size,
                "buckets": [list(b) for b in self.buckets], "drop_last": self.drop_last}

    def layout(self, st, samples):
        """The bucket policy over one stream's items (its dataset-order ``samples``):
        ``(order, groups, decoders)``: the items in delivery order, ``[(bucket, n), ...]``
        the batches they form, one Decoder per bucket."""
        from turboloader.data.step import Decoder

        groups = self._groups(st, samples)
        decoders = [Decoder(self.transform(b), max_pixels=self.dataset.max_pixels)
                    for b in self.buckets]
        return groups[0], groups[1], decoders

    def _groups(self, st, samples):
        B, nb = self.batch_size, len(self.buckets)
        queues = [[] for _ in range(nb)]
        order, groups = [], []
        for i, hw in enumerate(self._sizes(st, samples)):
            b = 0 if hw is None else nearest_bucket(hw[0], hw[1], self.buckets)
            q = queues[b]
            q.append(i)
            if len(q) == B:
                order += q
                groups.append((b, B))
                queues[b] = []
        for b, q in enumerate(queues):  # the remainders: every bucket's partial batch
            if q and not self.drop_last:
                order += q
                groups.append((b, len(q)))
        return order, groups

    def worker_sizes(self, num_workers):
        """Samples each logical worker stream reads per epoch (the dataset's shares)."""
        return self.dataset.worker_sizes(num_workers)

    def worker_stream(self, worker, num_workers, *, batch_size=None, out=None, timing=None):
        """The bucketed batches of logical worker ``worker`` of ``num_workers`` (what
        ``__iter__`` yields in that DataLoader worker), written into ``out(shape, dtype)``
        tensors when given. Call ``set_epoch`` first."""
        from turboloader.data.checkpoint import topology
        from turboloader.data.reader import stream_name

        ds = self.dataset
        epoch = ds._epoch.value
        if epoch < 0:
            raise RuntimeError("TarBuckets.worker_stream: call set_epoch first "
                               "(turboloader.DataLoader does)")
        rank, _ = topology(ds.rank, ds.world_size)
        name = stream_name(default=f"rank{rank}-stream{worker}")
        return ds._open(worker, num_workers, name, epoch, out=out, timing=timing,
                        grouping=self)

    def __iter__(self):
        from turboloader.data.checkpoint import topology

        ds = self.dataset
        info = torch.utils.data.get_worker_info()
        epoch = ds._pass_epoch()
        ds._last_pass = epoch
        rank, _ = topology(ds.rank, ds.world_size)
        if info is None:
            return ds._open(0, 1, f"rank{rank}-main", epoch, grouping=self)
        return self._sent(ds._open(ds._rotated(info, epoch), info.num_workers,
                                   f"rank{rank}-worker{info.id}", epoch,
                                   out=shared_pool().get, grouping=self))

    def _sent(self, batches):
        from turboloader.data.stream import send

        pool = shared_pool()  # the batch crosses to the main process by handle
        for batch in batches:
            yield send(self.dataset, batch, pool)

    # -- resume ---------------------------------------------------------------------------

    def state_dict(self, *, batches=None, batch_size=None, num_workers=None, drop_last=False,
                   delivered=None) -> dict:
        """The position in the current epoch, as :meth:`TarDataset.state_dict
        <turboloader.data.TarDataset.state_dict>` names it, in this grouping's order.

        No arguments: the streams this process ran (a DataLoader worker, or
        ``num_workers=0``). ``batches=k, num_workers=W``: the main process of a loader that
        handed out ``k`` batches (torch's round-robin over ``W`` worker streams); the
        main process then reads the headers of this rank's images once (one short read
        each) to know every stream's batches. ``batch_size`` and ``drop_last`` are this
        object's (a loader's are ignored: it loads with ``batch_size=None``).

        Raises:
            ValueError: ``delivered=`` (bucketed streams deliver batches, not samples), or
                a main-process state of an automatic epoch (see TarDataset.state_dict).
        """
        from turboloader.data.checkpoint import batches_per_worker, topology

        ds = self.dataset
        if delivered is not None:
            raise ValueError("TarBuckets.state_dict: a bucketed stream's position is counted "
                             "in batches (batches=, num_workers=), not delivered samples")
        epoch = ds._automatic_state_epoch(batches, num_workers, None)
        rank, _ = topology(ds.rank, ds.world_size)
        key = self.key()
        base = {"format": "turboloader.TarDataset/1", "epoch": epoch, "rank": rank,
                **ds._fingerprint(), "grouping": key}
        info = torch.utils.data.get_worker_info()
        progress = {w: p for w, p in ds._progress.items()
                    if p["epoch"] == epoch and p.get("grouping") == key}
        if batches is None:
            W = info.num_workers if info is not None else max(
                (p["num_workers"] for p in progress.values()), default=1)
            workers = {str(w): _entry(p["pos"], p["failed_pos"], p["replaced"])
                       for w, p in progress.items() if p["num_workers"] == W}
            if info is None:
                for w in range(W):
                    workers.setdefault(str(w), _entry(0, [], 0))
            return {**base, "scope": "worker" if info is not None else "rank",
                    "num_workers": W, "next_worker": 0, "workers": workers,
                    "delivered": None}
        W = max(1, int(num_workers or 0))
        reported = None
        marks = []
        for w in range(W):
            p = progress.get(w)
            if p is not None and p["num_workers"] == W:
                failed = p["failed_pos"]
            else:
                if reported is None:
                    reported = ds._telemetry.stream_failures(epoch, W)
                failed = list(reported.get(w, []))
            marks.append((self._marks(epoch, w, W, failed), failed))
        got, next_worker = batches_per_worker([len(m) for m, _ in marks], int(batches))
        workers = {}
        for w, ((m, failed), g) in enumerate(zip(marks, got)):
            pos, k = m[g - 1] if g else (0, 0)
            workers[str(w)] = _entry(pos, failed, k)
        return {**base, "scope": "rank", "num_workers": W, "next_worker": next_worker,
                "workers": workers, "delivered": None}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict` (the dataset's ``load_state_dict``, checked to
        be a state of this grouping).

        Raises:
            ValueError: a state of another grouping (the dataset's samples, other buckets,
                batch size or ``drop_last``), or any reason the dataset refuses it."""
        if isinstance(state, dict) and state.get("grouping") != self.key():
            raise ValueError(f"TarBuckets.load_state_dict: the state was taken over "
                             f"{state.get('grouping') or 'the dataset samples'}, not over "
                             f"these buckets ({self.key()})")
        self.dataset.load_state_dict(state)

    def _marks(self, epoch, worker, num_workers, failed):
        """``(pos, replaced)`` after each batch stream ``worker`` yields in ``epoch``."""
        from turboloader.data.checkpoint import topology
        from turboloader.data.stream import grouped_marks

        ds = self.dataset
        _, samples = ds._worker_items(epoch, worker, num_workers)
        rank, _ = topology(ds.rank, ds.world_size)
        st = ds._lease(f"rank{rank}-main")  # its shards, to read headers
        try:
            _, groups = self._groups(st, samples)
        finally:
            ds._release(st)
        return grouped_marks(groups, failed, self.batch_size)

    # -- header sizes ---------------------------------------------------------------------

    def _sizes(self, st, samples):
        """``(h, w)`` of each sample's image from its header (None where unreadable: that
        sample fails later, when it is decoded), read once per process."""
        ds = self.dataset
        cache = self._headers
        offsets = ds._offsets
        shard_of = (np.searchsorted(offsets, samples, side="right") - 1).tolist()
        out = []
        buf = np.empty(_HEADER, np.uint8)
        for g, s in zip(samples, shard_of):
            url = ds.urls[s]
            j = g - int(offsets[s])
            hw = cache.get((url, j), cache)
            if hw is cache:
                hw = cache[(url, j)] = self._read_header(st, url, j, buf)
            out.append(hw)
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

    def __repr__(self):
        return (f"TarBuckets({self.dataset!r}, batch_size={self.batch_size}, "
                f"buckets={self.buckets})")


def _entry(pos, failed, replaced):
    before = [int(f) for f in failed if f < pos]
    return {"pos": int(pos), "failed_pos": before, "replaced": int(replaced),
            "failures": len(before)}
