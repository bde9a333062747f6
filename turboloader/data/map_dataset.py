"""The map-style datasets' reading (:class:`MapDataset`: ``ImageFolder``, ``TBLDataset``,
``ManifestDataset``, ``VideoFolder``): ``__getitem__``/``__getitems__`` over the batch path of
:mod:`~turboloader.data.reader`, a failed index replaced by the next readable one (wrapping
around) with the requested index's random parameters, within the failure budget.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from turboloader.data._buffers import as_row, shared_pool
from turboloader.data.reader import ReaderMixin, StreamReader, batch_of, sample_of
from turboloader.data.step import Chunk, _is_slot, fill_row
from turboloader.errors import FailureBudgetExceeded, UnreadableFileError
from turboloader.io.files import read_file

__all__ = ["MapDataset", "gather_file"]


def gather_file(st, chunk, path, target, i, slot, epoch, counters):
    """Add sample ``i`` (the file ``path``, label ``target``) to a map-style dataset's
    ``chunk``: from the stream's cache when it holds it, else the file's bytes (counted as
    read), or the ``UnreadableFileError`` that made it unreadable."""
    cache = st.decoder.cache
    if cache is not None and i in cache:
        chunk.add(None, target, i, slot, epoch, cache_key=i)
        return
    t = time.perf_counter()
    try:
        data = read_file(path)
    except UnreadableFileError as exc:
        chunk.fail(exc, i, slot, epoch)
        return
    counters["read_s"] += time.perf_counter() - t
    counters["bytes_read"] += len(data)
    chunk.add(data, target, i, slot, epoch, cache_key=None if cache is None else i)


class MapDataset(ReaderMixin):
    """The map-style datasets' reading: ``__getitem__`` and ``__getitems__`` over the batch
    path, with the skip-and-advance failure policy.

    A subclass provides ``__len__``, ``_gather(st, chunk, i, slot, epoch, counters)`` (add
    sample ``i`` to the chunk: its source and label, or the error that made it unreadable;
    errors that are not turboloader's propagate) and ``_where(st, where)`` (``(note,
    shard, key, offset)`` naming a gathered sample in errors and in ``stats()``).
    """

    _fields = None  # a turboloader.data.fields.Fields when the dataset yields fields

    def _new_reader(self, name) -> StreamReader:
        return StreamReader(self, name, flush_failures=True)

    def __getitem__(self, index):
        """``(image, target)`` for ``index`` (or, under "skip", for the next readable index).

        With a sequence of indices (a list, tuple, 1-D array or tensor), the whole batch:
        ``[images, targets]`` as ``default_collate`` makes them, the images decoded straight
        into one tensor, in recycled shared memory inside a DataLoader worker so that
        handing it to the main process copies nothing. That is torch's way to load batches from a
        map-style dataset::

            sampler = torch.utils.data.BatchSampler(RandomSampler(ds), 256, drop_last=False)
            loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None,
                                                 num_workers=8)
        """
        if isinstance(index, (list, tuple, np.ndarray, torch.Tensor)) and np.ndim(index) == 1:
            return self._batch([int(i) for i in index])
        return self.__getitems__([index])[0]

    def _batch(self, indices):
        st = self._lease()
        try:
            n = len(indices)
            out = None
            # in a worker the batch crosses to the main process by handle
            worker = torch.utils.data.get_worker_info() is not None
            if st.plan is not None and n:
                out = st.rows(n, shared=worker)
            images, labels = self._read(st, indices, out, None)
        finally:
            self._release(st)
        if out is not None:
            for r, img in enumerate(images):
                if not _is_slot(img, out[r]):
                    fill_row(out, r, img)
        else:
            from torch.utils.data._utils.collate import default_collate

            out = default_collate(images) if images else torch.empty(0)
        if worker:
            out = shared_pool().send(out)
        return batch_of(self, out, labels)

    def __getitems__(self, indices, *, out=None, timing=None) -> list:
        """``[(image, target), ...]`` for ``indices``, decoded and transformed as one batch
        (what torch's DataLoader calls to fetch a batch; ``__getitem__`` is a batch of one).

        Args:
            indices: sample indices (negative ones count from the end).
            out: optional ``(len(indices), C, H, W)`` CPU tensor the images are written
                into (the thread backend's batch rows); images on the batch path are then
                ``out[j]``. Without it they are views of a buffer recycled once nothing
                references it (e.g. after the DataLoader's collate copied them).
            timing: optional ``timing(stage, seconds)`` called with the time spent reading
                (``"read"``) and decoding (``"decode"``).

        Raises:
            IndexError: an index out of range. The typed error of a sample that does not
                read, under ``on_error="raise"``, with a note naming it;
                FailureBudgetExceeded over the skip budget.
        """
        st = self._lease()
        try:
            images, labels = self._read(st, indices, out, timing)
        finally:
            self._release(st)
        return [sample_of(self, img, label) for img, label in zip(images, labels)]

    def _read(self, st, indices, out, timing) -> tuple[list, list]:
        """The rows of ``indices`` read with the reader ``st`` this call leased: their
        images and labels (before ``target_transform``), in order, failed ones replaced
        under the policy."""
        n = len(self)
        idx = []
        for index in indices:
            index = int(index)
            if not -n <= index < n:
                raise IndexError(f"index {index} out of range for {n} samples")
            idx.append(index % n)
        epoch = self.epoch
        counters = st.recorder.counters(epoch)
        log = st.pass_log(self.policy, n, epoch, idx)
        row = None
        if out is None and st.plan is not None:
            # in a worker: rows of a recycled shared buffer, which torch's collate hands to
            # the main process as the batch without a copy
            worker = torch.utils.data.get_worker_info() is not None
            out = st.rows(len(idx), shared=worker)
            row = as_row if worker else None
        images, labels = [], []
        a = 0
        while a < len(idx):
            part = idx[a:a + st.chunk_size(len(idx) - a)]
            t0 = time.perf_counter()
            chunk = Chunk()
            for i in part:
                self._gather(st, chunk, i, i, self._sample_epoch(), counters)
                if i in log.bad and chunk.errors[-1] is None:  # failed before in this pass:
                    chunk.errors[-1] = log.bad[i]             # not decoded or counted again
            st.saw(chunk, len(part))
            if timing is not None:
                timing("read", time.perf_counter() - t0)
            errors, objs = st.decode(chunk, out, a, counters=counters, timing=timing)
            for r in range(len(part)):
                if errors[r] is not None:
                    img, label = self._replace(st, log, chunk, r, part[r], errors[r], out, a,
                                               counters)
                else:
                    img, label = objs[r], chunk.labels[r]
                if img is None:   # written into its row of out
                    img = out[a + r] if row is None else row(out[a + r])
                images.append(img)
                labels.append(label)
            a += len(part)
        counters["samples"] += len(images)
        st.recorder.sample_done(len(images))
        return images, labels

    def _replace(self, st, log, chunk, r, index, exc, out, row0, counters):
        """Row ``r`` (of ``out``'s row ``row0 + r``), sample ``index``, failed with ``exc``:
        apply the policy (raise) or read the next indices in turn, with row ``r``'s random
        parameters, until one reads (skip): its ``(image, label)``, the image None when it is
        in ``out``'s row. Each sample that fails is counted once per pass
        and never decoded again in it; a run of bad samples is jumped over once it is known
        (linear time however long the run)."""
        n = len(self)
        slot, epoch = chunk.slots[r], chunk.epochs[r]
        self._failed(st, log, index, exc, chunk.where[r])
        run = [index]
        cand = index
        for _ in range(n - 1):
            cand = log.jump.get(cand, (cand + 1) % n)
            if cand == index:
                break
            if cand in log.bad:
                run.append(cand)
                continue
            one = Chunk()
            self._gather(st, one, cand, slot, epoch, counters)
            errors, objs = st.decode(one, out, row0 + r, counters=counters)
            if errors[0] is None:
                for b in run:
                    log.jump[b] = cand
                return objs[0], one.labels[0]
            self._failed(st, log, cand, errors[0], one.where[0])
            run.append(cand)
        raise FailureBudgetExceeded(f"no sample of {self!r} could be read", log.failures)

    def _failed(self, st, log, index, exc, where):
        """Sample ``index`` failed with ``exc``: the policy decides (raise, or count it once
        per pass and remember it)."""
        if index in log.bad:
            return
        log.record_sample(exc, self._where(st, where))
        log.bad[index] = exc
