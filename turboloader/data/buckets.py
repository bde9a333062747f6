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

from typing import Any
import math

import numpy as np

from turboloader.data.grouping import GroupedView
from turboloader.data.stream import grouped, grouped_marks
from turboloader.errors import TurboLoaderError
from turboloader.io.shards import TarShard
from turboloader.transforms import RandomResizedCrop

__all__ = ["Bucketed", "TarBuckets", "nearest_bucket"]

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


class Bucketed:
    """The aspect-ratio bucket grouping (a :class:`~turboloader.data.grouping.Grouping`):
    each stream's items ordered into batches of one bucket each (:meth:`arrange`), each
    bucket decoded by its own pipeline; the walk itself (failures, replacements, the cache,
    fields, resume, batch assembly) is the dataset's one stream walker
    (:mod:`turboloader.data.stream`).

    Args:
        batch_size: samples per batch (a bucket's last batch of a stream may be short).
        buckets: ``[(height, width), ...]`` bucket resolutions.
        transform: ``transform((h, w))`` -> the pipeline of a bucket (default: cover the
            bucket at a random position, ``ToTensor``).
        drop_last: drop each bucket's partial batch at the end of a stream.

    Raises:
        ValueError: ``batch_size < 1``, or no / malformed buckets.
    """

    batches = True

    def __init__(self, batch_size: int, buckets, *, transform=None, drop_last: bool = False):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        buckets = [tuple(int(v) for v in b) for b in buckets]
        if not buckets or any(len(b) != 2 or min(b) < 1 for b in buckets):
            raise ValueError(f"buckets must be a non-empty list of (height, width), got {buckets}")
        self.batch_size = int(batch_size)
        self.buckets = buckets
        self.transform = transform or _default_transform
        self.drop_last = bool(drop_last)
        self._headers = {}  # (url, j) -> (h, w) or None, read once per process

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_headers"] = {}  # each process reads the headers of the streams it runs
        return state

    @property
    def key(self) -> dict:
        """What a resume state of this grouping records (positions are in its order)."""
        return {"kind": "buckets", "batch_size": self.batch_size,
                "buckets": [list(b) for b in self.buckets], "drop_last": self.drop_last}

    def check(self, ds) -> None:
        """Refuse, at construction, a dataset whose fields the buckets' pipelines cannot
        transform."""
        if ds._fields is not None:
            for b in self.buckets:
                ds._fields.check_transform(self.transform(b))

    def arrange(self, ds, st, slots, samples):
        """The bucket policy over one stream's items (its dataset-order ``samples``):
        the items in delivery order, and ``([(bucket, n), ...], decoders)``: the batches
        they form, one Decoder per bucket."""
        from turboloader.data.step import Decoder

        order, groups = self._groups(ds, st, samples)
        decoders = [Decoder(self.transform(b), max_pixels=ds.max_pixels)
                    for b in self.buckets]
        return [slots[i] for i in order], [samples[i] for i in order], (groups, decoders)

    def walk(self, cursor, groups, out, timing):
        groups, decoders = groups
        return grouped(cursor, groups, decoders, self.batch_size, out, timing)

    def counted(self, batch_size, drop_last):
        """These batches (a loader's ``batch_size`` and ``drop_last`` are ignored: it loads
        them with ``batch_size=None``)."""
        return self

    def marks(self, ds, epoch, worker, num_workers, share, progress):
        """The batches stream ``worker`` yields, and its resume entry after ``g`` of them:
        the main process reads the headers of the stream's images once (one short read
        each) to know them."""
        from turboloader.data.checkpoint import topology

        failed = list(progress["failed_pos"]) if progress else []
        _, samples = ds._worker_items(epoch, worker, num_workers)
        rank, _ = topology(ds.rank, ds.world_size)
        st = ds._lease(f"rank{rank}-main")  # its shards, to read headers
        try:
            _, groups = self._groups(ds, st, samples)
        finally:
            ds._release(st)
        marks = grouped_marks(groups, failed, self.batch_size)

        def after(g):
            pos, k = marks[g - 1] if g else (0, 0)
            return _entry(pos, failed, k)

        return len(marks), after

    def _groups(self, ds, st, samples):
        B, nb = self.batch_size, len(self.buckets)
        queues = [[] for _ in range(nb)]
        order, groups = [], []
        for i, hw in enumerate(self._sizes(ds, st, samples)):
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

    # -- header sizes ---------------------------------------------------------------------

    def _sizes(self, ds, st, samples):
        """``(h, w)`` of each sample's image from its header (None where unreadable: that
        sample fails later, when it is decoded), read once per process."""
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
                hw = cache[(url, j)] = _read_header(st, url, j, buf)
            out.append(hw)
        return out

    def __repr__(self):
        return (f"Bucketed({self.batch_size}, {self.buckets}, drop_last={self.drop_last})")


def _read_header(st, url, j, buf):
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


class TarBuckets(GroupedView):
    """A :class:`~turboloader.data.TarDataset` yielding ``[images, labels]`` batches of one
    aspect-ratio bucket each (see :mod:`turboloader.data.buckets` and
    :meth:`TarDataset.bucketed`): the dataset with a :class:`Bucketed` grouping, so its
    pass, worker streams and resume states are the dataset's with this grouping.
    Attributes not defined here are the dataset's.

    ``state_dict(batches=k, num_workers=W)`` counts the buckets' batches (the main process
    then reads the headers of this rank's images once to know every stream's batches);
    ``delivered=`` is refused (bucketed streams deliver batches, not samples in order), and
    a state of another grouping (the dataset's samples, other buckets, batch size or
    ``drop_last``) is refused by ``load_state_dict``."""

    grouping: Bucketed

    def __init__(self, dataset: Any, batch_size: int, buckets: Any, *, transform: Any = None,
                 drop_last: bool = False) -> None:
        grouping = Bucketed(batch_size, buckets, transform=transform, drop_last=drop_last)
        grouping.check(dataset)
        super().__init__(dataset, grouping)

    @property
    def batch_size(self) -> int:
        """Samples per batch."""
        return self.grouping.batch_size

    @property
    def buckets(self) -> list:
        """The bucket resolutions, ``[(height, width), ...]``."""
        return self.grouping.buckets

    @property
    def transform(self):
        """``transform((h, w))`` -> the pipeline of a bucket."""
        return self.grouping.transform

    @property
    def drop_last(self) -> bool:
        """Each bucket's partial batch at the end of a stream is dropped."""
        return self.grouping.drop_last

    def key(self) -> dict:
        """What a resume state of this grouping records (positions are in its order)."""
        return self.grouping.key

    def __repr__(self):
        return (f"TarBuckets({self.dataset!r}, batch_size={self.batch_size}, "
                f"buckets={self.buckets})")


def _entry(pos, failed, replaced):
    before = [int(f) for f in failed if f < pos]
    return {"pos": int(pos), "failed_pos": before, "replaced": int(replaced),
            "failures": len(before)}
