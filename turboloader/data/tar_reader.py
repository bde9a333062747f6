"""How a :class:`~turboloader.data.tar_dataset.TarDataset` reads its shards.

:class:`_TarReader` is a stream's reader with its open shards (an LRU whose chunks pin what
they still read) and each shard's label table, parsed once; :class:`_TarGather` gathers a
chunk of the pass's items from those shards (or the decoded-sample cache) and names where a
gathered sample came from, for errors and statistics.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np

from turboloader.data.cache import own_copy
from turboloader.data.reader import StreamReader
from turboloader.data.step import Chunk
from turboloader.errors import SampleError, TurboLoaderError
from turboloader.io import files
from turboloader.io.remote import is_remote
from turboloader.io.shards import FIELDS_HINT, check_record as _check_record, parse_label
from turboloader.io.tar import read_extents_into

__all__ = []

_MISSING = object()
_PLAIN = frozenset({int, float, str, bool})   # labels handed out as they are (own_copy's)
_HEAD_AT = np.arange(3)   # a JPEG's first three bytes: FF D8 FF (decode.image.is_jpeg's test)
_JPEG_HEAD = np.array([0xFF, 0xD8, 0xFF], np.uint8)


class _TarReader(StreamReader):
    """A TarDataset stream's reader: the shared one plus its open shards (an LRU) and the
    labels of every shard it touched, parsed once.

    Every shard source (``.tar``, ``.tar.gz``, remote, Parquet row groups: whatever the
    dataset's shard I/O opens) is opened here and closed only here. The LRU's bound,
    ``max_open``, is soft: a shard a chunk still has to read is *pinned* (see
    :meth:`shard`, :meth:`unpin`) and never closed, so a chunk that spans more shards than
    the bound (the end of one mixing window and the start of the next, rare buckets,
    tiny shards) keeps them all open until its reads are done; the LRU then shrinks back.
    """

    def __init__(self, dataset, name):
        super().__init__(dataset, name)
        self.shards = OrderedDict()
        self.max_open = dataset.mix_shards + 4  # the window, plus pads and replacements
        self.pinned = {}  # url -> pins held on it (chunks still reading it)
        self.shard_cache = dataset.shard_cache
        self.open_shard = dataset._io.open
        self.upcoming = []  # the shards of the current pass, in order of first use (prefetch)
        self.done_after = {}  # url -> shards read before its first sample (ShardCache.release)
        # the shards downloaded ahead of the one opened last: the next mixing window (its
        # shards are opened at once) and ``prefetch`` more
        self.ahead = None if self.shard_cache is None else \
            dataset.mix_shards + self.shard_cache.prefetch_count
        self.labels = {}  # url -> (values, {j: (exception type, args)})
        self.plain = {}  # url -> the values when plain_labels says so, else None
        self.label_key = dataset.label_key
        self.fields = dataset._fields
        self.image_exts = (dataset._fields.image_exts if dataset._fields is not None
                           else dataset._image_exts)

    def shard(self, url, pin=None):
        """The open shard ``url`` (opened now if it is not), the most recently used.

        ``pin``: a set owned by a reader of several shards (a chunk being gathered); the
        shard is added to it and stays open, even past ``max_open``, until
        :meth:`unpin` releases the set. Without a pin the shard returned is still open,
        but a later call may close it.
        """
        reader = self.shards.get(url)
        if reader is None:
            reader = self.shards[url] = self.open_shard(url)
            if self.image_exts:  # the image member the fields (or a subclass) name
                reader.use_image_extensions(self.image_exts)
            if self.fields is not None and not reader.random_access:
                reader.read_members(self.fields.exts)
            if self.shard_cache is not None and self.upcoming:
                # a new shard: have the node cache fetch the ones this stream reads next
                try:
                    i = self.upcoming.index(url)
                except ValueError:
                    i = -1
                self.shard_cache.prefetch(self.upcoming[i + 1:], stream=self.name,
                                          start=i + 1, ahead=self.ahead)
            opened = True
        else:
            self.shards.move_to_end(url)
            opened = False
        if self.done_after:  # the shards read before this one's first sample: evicted first
            for done in self.done_after.pop(url, ()):
                if is_remote(done):
                    self.shard_cache.release(done)
        if pin is not None and url not in pin:
            pin.add(url)
            self.pinned[url] = self.pinned.get(url, 0) + 1
        if opened:
            self._shrink(keep=url)
        return reader

    def unpin(self, pin):
        """Release the shards of ``pin`` (see :meth:`shard`) and close the least recently
        used unpinned shards beyond ``max_open``."""
        pinned = self.pinned
        for url in pin:
            n = pinned.pop(url) - 1
            if n:
                pinned[url] = n
        pin.clear()
        self._shrink()

    def _shrink(self, keep=None):
        excess = len(self.shards) - self.max_open
        if excess <= 0:
            return
        pinned = self.pinned
        for url in [u for u in self.shards if u not in pinned and u != keep][:excess]:
            self.shards.pop(url).close()

    def release_shards(self):
        """The pass is over: the shards still open here are released too (the others were
        as the stream passed them, ``done_after``): the node cache evicts them before the
        ones other passes have still to read (``ShardCache.release``). They stay open for
        the next pass, which makes them current again if it reads them
        (``ShardCache.order``)."""
        self.done_after = {}
        for url in self.shards:
            if is_remote(url):
                self.shard_cache.release(url)

    def label_table(self, url, shard):
        table = self.labels.get(url)
        if table is None:
            values, errors = shard.labels(self.label_key)
            # kept as (type, args): each failure raises a fresh exception with its own notes
            table = self.labels[url] = (values, {j: (type(e), e.args) for j, e in errors.items()})
        return table

    def plain_labels(self, url, shard):
        """Every sample's label of the shard (:meth:`label_table`'s values) when each is
        there, parsed, and needs no copy to be handed out (ints, floats, strings); else
        None. Checked once per shard."""
        plain = self.plain.get(url, _MISSING)
        if plain is _MISSING:
            values, errors = self.label_table(url, shard)
            ok = not errors and all(type(v) in _PLAIN for v in values)
            plain = self.plain[url] = values if ok else None
        return plain

    def close(self):
        for reader in self.shards.values():
            reader.close()
        self.shards.clear()
        self.pinned.clear()


class _Places:
    """``chunk.where`` of a chunk gathered at once: row ``i``'s ``("tar", url, sample,
    shard)``, as :meth:`_TarGather._gather_rows` lists them, made only for the rows an
    error or a statistic names (most chunks name none)."""

    __slots__ = ("shard_of", "js", "urls", "shards")

    def __init__(self, shard_of, js, urls, shards):
        self.shard_of, self.js, self.urls, self.shards = shard_of, js, urls, shards

    def __len__(self):
        return len(self.js)

    def __getitem__(self, i):
        s = self.shard_of[i]
        return ("tar", self.urls[s], self.js[i], self.shards[s])


class _TarGather:
    """The TarDataset half that reads: a chunk of the pass's items gathered from its shards
    (or the cache), and where a gathered sample came from. A mixin of :class:`TarDataset`
    (``self`` is the dataset: its ``urls``, ``_offsets``, ``_fields``, labels)."""

    def _gather_chunk(self, st, items, epoch, counters, timing=None):
        """A :class:`~turboloader.data.step.Chunk` of the ``(global index, slot)`` items:
        cached images by key, a ``.tar`` shard's images read into the stream's gather buffer
        (one ``pread`` each) with their labels from the shard's parsed label table, a
        ``.tar.gz`` shard's records as they come. The chunk pins every shard it reads
        (see :meth:`_TarReader.shard`) until its reads are done, however many it spans."""
        pin = set()
        try:
            return self._gather_pinned(st, items, epoch, counters, timing, pin)
        finally:
            st.unpin(pin)

    def _gather_pinned(self, st, items, epoch, counters, timing, pin):
        t0 = time.perf_counter()
        chunk = None
        if st.decoder.cache is None and self._fields is None and items:
            chunk = self._gather_images(st, items, epoch, pin)
        if chunk is None:
            chunk, read = self._gather_rows(st, items, epoch, pin)
        else:
            read = True
        if read:
            dt = time.perf_counter() - t0
            counters["read_s"] += dt
            counters["bytes_read"] += chunk.nbytes
            if timing is not None:
                timing("read", dt)
        return chunk

    def _gather_images(self, st, items, epoch, pin):
        """The chunk of ``items`` at once, when every one is an image of a random-access
        shard with a label that needs no copy (ints, strings: the usual case), read in one
        native call for all the shards it spans, in the chunk's order
        (:func:`~turboloader.io.tar.read_extents_into`): the per-row gather
        (:meth:`_gather_rows`) without its per-row Python. None when any item is not, or a
        shard cannot be opened or read (the per-row gather then says which and why)."""
        gs, slots = zip(*items)
        offsets = self._offsets
        g = np.array(gs, np.int64)
        shard_of = np.searchsorted(offsets, g, side="right") - 1
        js = g - offsets[shard_of]
        sl = shard_of.tolist()
        n = len(sl)
        fds = np.empty(n, np.int32)
        starts = np.empty(n, np.int64)   # in the shard files
        sizes = np.empty(n, np.int64)
        urls, shards, tables = {}, {}, {}
        for s in dict.fromkeys(sl):   # the shards in first-use order
            url = self.urls[s]
            try:
                shard = st.shard(url, pin)
                if not getattr(shard, "random_access", False) or \
                        not hasattr(shard, "image_extents"):
                    return None
                values = st.plain_labels(url, shard)
            except TurboLoaderError:
                return None
            if values is None:
                return None
            rows = shard_of == s
            jj = js[rows]
            if int(jj.max()) >= len(shard):
                return None
            fds[rows], starts[rows], sizes[rows] = shard.image_extents(jj)   # pinned: open
            urls[s], shards[s], tables[s] = url, shard, values
        if int(sizes.min()) < 0 or int(sizes.max()) > files.MAX_FILE_BYTES:
            return None
        ends = np.cumsum(sizes)
        at = int(ends[-1])
        arr = st.gather_buffer(at)
        if read_extents_into(fds, starts, sizes, arr) != n:
            return None   # a file shorter than its index: the per-row gather says which
        begin = ends - sizes   # in the gather buffer
        jl = js.tolist()
        buf = arr.data
        chunk = Chunk()
        chunk.sources = [buf[a:b] for a, b in zip(begin.tolist(), ends.tolist())]
        chunk.labels = [tables[s][j] for s, j in zip(sl, jl)]
        chunk.where = _Places(sl, jl, urls, shards)
        chunk.slots = list(slots)
        chunk.sizes, chunk.errors, chunk.cache_keys = [None] * n, [None] * n, [None] * n
        chunk.epochs = [epoch] * n
        chunk.nbytes = at
        # the JPEG test of every row at once (the step's per-row is_jpeg, vectorized)
        if int(sizes.min()) > 2:
            chunk.all_jpeg = bool((arr[begin[:, None] + _HEAD_AT] == _JPEG_HEAD).all())
        return chunk

    def _gather_rows(self, st, items, epoch, pin):
        """``(chunk, read)``: the chunk of ``items`` gathered row by row (any shard, the
        cache, fields, failures); ``read``: a shard was read."""
        chunk = Chunk()
        cache = st.decoder.cache
        offsets = self._offsets
        shard_of = (np.searchsorted(offsets, [g for g, _ in items], side="right") - 1).tolist()
        pending = []  # (row, shard, member j, size): image bytes still to read
        read = False
        fields = self._fields
        require_label = self.missing_label is None and fields is None
        # shard number -> (url, shard, its length, labels, label errors, its first index)
        opened = {}
        add = chunk.add
        for r, (g, slot) in enumerate(items):
            if cache is not None:
                label = st.decoder.cached_extra(g, _MISSING)
                if label is not _MISSING:  # cached with its label: no shard access at all
                    add(None, label, ("cache", g), slot, epoch, cache_key=g)
                    continue
            read = True
            s = shard_of[r]
            entry = opened.get(s)
            j = g - (entry[5] if entry is not None else int(offsets[s]))
            try:
                if entry is None:
                    where = ("tar", self.urls[s], j, None)
                    url = self.urls[s]
                    shard = st.shard(url, pin)
                    table = ((None, None) if fields is not None or not shard.random_access
                             else st.label_table(url, shard))
                    entry = opened[s] = (url, shard, len(shard) if shard.random_access else -1,
                                         *table, int(offsets[s]))
                url, shard, n, values, label_errors, _ = entry
                where = ("tar", url, j, shard if n >= 0 else None)
                if n < 0:  # a stream shard: records as they come
                    record = shard.sample(j)
                    where = ("rec", url, record)
                    _check_record(record, require_label=require_label)
                    if fields is not None:
                        label = fields.values(record.key, url, record.extras or {})
                    else:
                        label = (self.missing_label if record.label is None
                                 else parse_label(record.label, record.label_ext, self.label_key))
                    add(record.image, label, where, slot, epoch,
                        cache_key=None if cache is None else g)
                    chunk.nbytes += record.nbytes
                    continue
                size = shard.image_size(j) if j < n else -1
                if size < 0:  # no usable image, or no sample j any more: the record says why
                    _check_record(shard.sample(j), require_label=require_label)
                if fields is not None:
                    label = fields.values(shard.key(j), url, shard.members(j, fields.exts))
                    add(None, label, where, slot, epoch, cache_key=None if cache is None else g)
                    pending.append((r, shard, j, size))
                    continue
                if label_errors and j in label_errors:
                    err = label_errors[j]
                    raise err[0](*err[1])
                label = own_copy(values[j])  # the table's is parsed once per shard
                if label is None:
                    if require_label:
                        raise SampleError(f"sample {shard.key(j)!r} has no label member "
                                          f"(.cls or .json); missing_label= labels such "
                                          f"samples{FIELDS_HINT}")
                    label = self.missing_label
            except TurboLoaderError as exc:
                chunk.fail(exc, where, slot, epoch)
                continue
            add(None, label, where, slot, epoch, cache_key=None if cache is None else g)
            pending.append((r, shard, j, size))
        if pending:
            buf = st.gather_buffer(sum(p[3] for p in pending)).data
            at = 0
            for r, shard, j, size in pending:
                view = buf[at:at + size]
                try:
                    shard.read_image_into(j, view)
                except TurboLoaderError as exc:
                    chunk.errors[r] = exc
                    continue
                chunk.sources[r] = view
                chunk.nbytes += size
                at += size
        return chunk, read

    def _where(self, st, where):
        """``(note, shard, key, offset)`` naming a gathered sample in errors and stats."""
        if where[0] == "cache":
            return f"TarDataset: cached sample #{where[1]}", None, None, None
        if where[0] == "rec":
            _, url, rec = where
            return (f"TarDataset: shard {url!r}, key {rec.key!r}, member {rec.member!r} at "
                    f"byte offset {rec.offset}", url, rec.key, rec.offset)
        _, url, j, shard = where
        if shard is None or not 0 <= j < len(shard):
            return f"TarDataset: shard {url!r}, sample #{j} of the shard", url, None, None
        key, member, offset = shard.where(j)
        return (f"TarDataset: shard {url!r}, key {key!r}, member {member!r} at byte offset "
                f"{offset}", url, key, offset)
