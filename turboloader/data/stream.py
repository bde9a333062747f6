"""The one stream walker: where a logical worker stream stands in its pass (the items it
read, skipped and replaced, what it delivered), with the dataset's failure policy; the
groupings (samples, batches, buckets) are policies over it."""

from __future__ import annotations

import itertools
import operator

import torch
import torch.utils.data

from turboloader.data._buffers import as_row, collated_batch_size
from turboloader.data.epochs import AUTO_EPOCH
from turboloader.data.failures import FailureLog
from turboloader.data.reader import SAMPLE_CHUNK, batch_of, compact, sample_of
from turboloader.data.step import fill_row
from turboloader.errors import FailureBudgetExceeded

__all__ = ["batches", "grouped", "grouped_marks", "samples", "send", "sent"]


class _Cursor:
    """Where one logical worker stream stands in its pass, with the per-sample semantics of
    the failure policy: items are read in order; a failed item (under "skip") is remembered
    and, once the items run out, replaced by the stream's good samples cycled in order
    with the failed item's random parameters. Rows are produced a chunk at a time
    (:meth:`fill`); the public ``progress`` (what ``state_dict`` reads) moves only as rows
    are delivered (:meth:`deliver`)."""

    def __init__(self, ds, st, slots, samples, epoch, *, worker, num_workers, resume):
        self.ds, self.st = ds, st
        self.worker, self.num_workers = worker, num_workers
        self.slots, self.samples = slots, samples
        self.size = len(samples)
        self.epoch = epoch
        # statistics and failures are filed under the epoch; automatic passes under 0
        self.label = epoch if epoch < AUTO_EPOCH else 0
        self.counters = st.recorder.counters(self.label)
        self.log = FailureLog(ds.policy, self.size, epoch=self.label, recorder=st.recorder)
        self.pos, self.k = 0, 0
        # the pass's first batch call: no core decodes before it starts, so a runner shared
        # by several streams asks for a short one (its ``first_chunk``, see
        # turboloader.loader._iterable.SharedRunner); None: the usual size
        self.first_chunk = getattr(st.executor, "first_chunk", None)
        self.good, self.failed = [], []
        self.failed_pos, self.failed_slots = [], []
        self.progress = {"epoch": epoch, "num_workers": num_workers, "pos": 0,
                         "failed_pos": [], "failed_slots": [], "replaced": 0, "failures": 0,
                         "size": self.size}
        if resume is not None:  # seek: no replay, no decoding of what was delivered
            start = min(int(resume["pos"]), self.size)
            failed_pos = [int(f) for f in resume["failed_pos"] if f < start]
            self.k = int(resume["replaced"])
            skip = set(failed_pos)
            self.good = [samples[i] for i in range(start) if i not in skip]
            self.failed = [slots[i] for i in failed_pos][self.k:]
            self.failed_pos = list(failed_pos)
            self.failed_slots = [slots[i] for i in failed_pos]
            self.log.count = int(resume["failures"])
            self.pos = start
            self.progress.update(pos=start, failed_pos=list(self.failed_pos),
                                 failed_slots=list(self.failed_slots), replaced=self.k,
                                 failures=self.log.count)
        ds._progress[worker] = self.progress

    def _event(self):
        return (self.pos, len(self.failed_pos), self.k, self.log.count)

    def deliver(self, event):
        """The row whose :meth:`fill` event this is has been handed out."""
        p = self.progress
        pos, nfail, k, failures = event
        p["pos"], p["replaced"], p["failures"] = pos, k, failures
        have = len(p["failed_pos"])
        if nfail > have:
            p["failed_pos"].extend(self.failed_pos[have:nfail])
            p["failed_slots"].extend(self.failed_slots[have:nfail])

    def _failure(self, chunk, i, exc, pos=-1):
        """Apply the policy to gathered row ``i`` (item ``pos`` of the stream's list, -1 for
        a replacement): raises (raise, over budget, or not a turboloader error), else
        returns after counting and listing the skip."""
        self.log.record_sample(exc, self.ds._where(self.st, chunk.where[i]),
                               stream=(self.epoch, self.num_workers, self.worker, pos))

    def fill(self, out, r0, r1, timing=None, *, defer=False, decoder=None, end=None,
             replace=None):
        """Rows ``r0..r1`` of ``out`` (``None``: no batch path) in the per-sample order.

        Returns ``(n, images, labels, events, exc)``: rows filled (fewer at the end of the
        stream), per filled row the image when it is not in ``out`` (else None) and its
        label; the progress events to :meth:`deliver` (with ``defer``, one per row, as rows
        are handed out one by one; else one for all of them); and, with ``defer``, the
        exception the policy raised after
        the filled rows (the caller raises it once it has handed them out); without
        ``defer`` it propagates at once.

        A grouping that decides which items make a row group (buckets) bounds the walk:
        ``end``, the item position it stops at (None: the list's end, then replacements);
        ``replace``, how many replacements it may have made when it stops (None: all);
        ``decoder``, the group's :class:`~turboloader.data.step.Decoder` (None: the
        stream's).
        """
        ds, st, counters = self.ds, self.st, self.counters
        images, labels, events = [], [], []
        row, exc_out = r0, None
        stop = self.size if end is None else min(end, self.size)
        while row < r1 and exc_out is None:
            need = st.chunk_size(r1 - row)
            if self.first_chunk is not None:
                need, self.first_chunk = min(need, self.first_chunk), None
            if self.pos < stop:
                p0 = self.pos
                p1 = min(stop, p0 + need)
                items = list(zip(self.samples[p0:p1], self.slots[p0:p1]))
                chunk = ds._gather_chunk(st, items, self.epoch, counters, timing)
                st.saw(chunk, len(items))
                errors, objs = st.decode(chunk, out, row, counters=counters, timing=timing,
                                         decoder=decoder)
                m = len(items)
                if not defer and errors.count(None) == m:
                    # every row read (the usual case): the walk below, for all rows at once
                    self.pos = p1
                    self.good.extend(self.samples[p0:p1])
                    images.extend(objs)
                    labels.extend(chunk.labels)
                    row += m
                    continue
                good_rows = []
                for i in range(m):
                    self.pos = p0 + i + 1
                    exc = errors[i]
                    if exc is not None:
                        try:
                            self._failure(chunk, i, exc, p0 + i)
                        except BaseException as raised:
                            if not defer:
                                raise
                            exc_out = raised
                            break
                        slot = items[i][1]
                        self.failed.append(slot)
                        self.failed_pos.append(p0 + i)
                        self.failed_slots.append(slot)
                        continue
                    self.good.append(items[i][0])
                    good_rows.append(row + i)
                    images.append(objs[i])
                    labels.append(chunk.labels[i])
                    if defer:
                        events.append(self._event())
                row = compact(out, good_rows, row) if out is not None else row + len(good_rows)
            elif self.pos < self.size:
                break  # the group ends here (end)
            elif self.failed and (replace is None or self.k < replace):
                # replacements, so every worker yields its full share
                if not self.good:
                    err = FailureBudgetExceeded(
                        f"no sample of this worker's {self.size} could be read to replace "
                        f"{len(self.failed)} skipped ones (epoch {self.label})", self.log.failures)
                    if not defer:
                        raise err
                    exc_out = err
                    break
                m = min(need, len(self.failed))
                if replace is not None:
                    m = min(m, replace - self.k)
                good = self.good
                items = [(good[(self.k + i) % len(good)], self.failed[i]) for i in range(m)]
                chunk = ds._gather_chunk(st, items, self.epoch, counters, timing)
                errors, objs = st.decode(chunk, out, row, counters=counters, timing=timing,
                                         decoder=decoder)
                for i in range(m):
                    exc = errors[i]
                    if exc is not None:
                        try:
                            self._failure(chunk, i, exc)
                        except BaseException as raised:
                            if not defer:
                                raise
                            exc_out = raised
                            break
                        # the rest of the chunk was planned with this sample still good
                        good.remove(items[i][0])
                        break
                    self.k += 1
                    self.failed.pop(0)
                    images.append(objs[i])
                    labels.append(chunk.labels[i])
                    if defer:
                        events.append(self._event())
                    row += 1
            else:
                break
        if not defer and row > r0:  # rows go out together: only the state after them counts
            events.append(self._event())
        return row - r0, images, labels, events, exc_out


# -- the groupings: what a pass yields from the walk -----------------------------------------


def samples(cur, timing=None):
    """``(image, label)`` one at a time, decoded a buffer at a time into a recycled
    buffer (yielded images are views of it; it is reused once none is referenced). A
    buffer is written whole before its first row is yielded, and never after.

    In a DataLoader worker whose ``default_collate`` has stacked a batch of ``B`` rows
    (see :func:`~turboloader.data._buffers.collated_batch_size`), the buffer is a
    recycled shared one of ``B`` rows starting at a batch boundary of the stream: the
    next batch is then exactly its rows, which collate hands on without a copy."""
    ds, st, counters = cur.ds, cur.st, cur.counters
    worker = torch.utils.data.get_worker_info() is not None
    # in a DataLoader worker, torch's collate stacks rows into recycled shared memory
    row = as_row if worker else None
    chunk = SAMPLE_CHUNK
    pos = 0  # samples yielded
    try:
        while True:
            B = collated_batch_size() if worker and st.plan is not None else 0
            if B:  # up to the next batch boundary
                st.buffers.clear()  # the chunk buffers of the first batch: not needed now
                size = B - pos % B
                out = st.rows(size, shared=True)
            else:
                size = chunk
                out = st.rows(size) if st.plan is not None else None
            images, labels, events = [], [], []
            r0, exc = 0, None
            while r0 < size:
                want = min(size - r0, chunk)
                n, imgs, labs, evs, exc = cur.fill(out, r0, r0 + want, timing, defer=True)
                images += imgs
                labels += labs
                events += evs
                r0 += n
                if exc is not None or n < want:
                    break
            for r in range(r0):
                cur.deliver(events[r])
                counters["samples"] += 1
                st.recorder.sample_done()
                img = images[r]
                if img is None:
                    img = out[r] if row is None else row(out[r])
                label = labels[r]
                images[r] = None
                yield sample_of(ds, img, label)
            pos += r0
            if exc is not None:
                raise exc
            if r0 < size:
                return
            # let go of this buffer before asking for the next one, so that it is
            # reused when the consumer has dropped its samples
            out = images = img = None
    finally:
        st.recorder.flush()


def batches(cur, B, out=None, timing=None, *, drop_last=False):
    """``[images, labels]`` batches of ``B`` (the last one shorter, or dropped with
    ``drop_last``), each decoded into one tensor from ``out(shape, dtype)`` (default
    ``torch.empty``)."""
    st = cur.st
    alloc = out or _empty
    try:
        while True:
            batch, n = _group(cur, B, alloc, st.out_shape, timing)
            if batch is None or (drop_last and n < B):
                return
            yield batch
            if n < B:
                return
            batch = None
    finally:
        st.recorder.flush()


def grouped(cur, groups, decoders, batch_size, out=None, timing=None):
    """Batches of an explicit grouping of the cursor's item list (aspect-ratio buckets):
    ``groups`` is ``[(g, n), ...]``, ``n`` consecutive items decoded by ``decoders[g]``
    into one batch, in list order; then the replacements of the items that failed, each
    with the group of the item it replaces, in runs of one group (at most ``batch_size``).
    A group whose items all failed yields nothing. A resumed cursor
    (``pos``, ``k``) continues at the boundary it names."""
    st = cur.st
    alloc = out or _empty
    group_at = []  # the group of each item position
    for g, n in groups:
        group_at += [g] * n
    if len(group_at) != cur.size:
        raise ValueError(f"the grouping covers {len(group_at)} items of {cur.size}")
    B = int(batch_size)
    try:
        at = 0
        for g, n in groups:
            at += n
            if at <= cur.pos:
                continue  # delivered before the resume point
            if at - n != cur.pos:
                raise ValueError(f"the resume point {cur.pos} is not a batch boundary of "
                                 f"this grouping")
            dec = decoders[g]
            batch, _ = _group(cur, n, alloc, _shape(dec), timing, decoder=dec, end=at)
            if batch is not None:
                yield batch
                batch = None
        while cur.k < len(cur.failed_pos):  # replacements: runs of one group
            g = group_at[cur.failed_pos[cur.k]]
            m = 1
            while (m < B and cur.k + m < len(cur.failed_pos)
                   and group_at[cur.failed_pos[cur.k + m]] == g):
                m += 1
            dec = decoders[g]
            k0 = cur.k
            batch, _ = _group(cur, m, alloc, _shape(dec), timing, decoder=dec,
                              replace=k0 + m)
            if batch is not None:
                yield batch
                batch = None
            elif cur.k == k0:
                break  # nothing more can be replaced
    finally:
        st.recorder.flush()


def grouped_marks(groups, failed_pos, batch_size):
    """``(pos, replaced)`` after each batch :func:`grouped` yields, when the items at
    ``failed_pos`` (all the stream's failures, in the order they were met) fail: the
    points a resumed pass can start from. Pure: the main process names a stream's
    position from it without running the stream."""
    failed = set(failed_pos)
    group_at = []
    for g, n in groups:
        group_at += [g] * n
    B = int(batch_size)
    marks, at = [], 0
    for g, n in groups:
        if any(p not in failed for p in range(at, at + n)):
            marks.append((at + n, 0))
        at += n
    k, F = 0, list(failed_pos)
    if F and len(failed) == len(group_at):
        return marks  # nothing good to replace with
    while k < len(F):
        g, m = group_at[F[k]], 1
        while m < B and k + m < len(F) and group_at[F[k + m]] == g:
            m += 1
        k += m
        marks.append((at, k))
    return marks


def sent(ds, batches, pool):
    """``batches`` as :func:`send` hands them to the main process (a DataLoader worker's
    batches of a grouping)."""
    for batch in batches:
        yield send(ds, batch, pool)


def send(ds, batch, pool):
    """``batch`` (a list) with its image tensor, written into ``pool``'s shared memory,
    sent by handle (:meth:`~turboloader.data._buffers.BufferPool.send`): the images are
    entry 0, or the image field's place with ``fields=``."""
    i = 0 if ds._fields is None else ds._fields.image
    batch[i] = pool.send(batch[i])
    return batch


def _empty(shape, dtype):
    return torch.empty(shape, dtype=dtype)


def _shape(decoder):
    plan = decoder.plan
    if plan is None or plan.output_shape is None:
        return None
    return tuple(plan.output_shape), plan.output_dtype


def _group(cur, B, alloc, shape, timing, **bounds):
    """``(batch, n)``: one batch of up to ``B`` rows from the walk (``n``, fewer where it
    ends), assembled once for every grouping: the rows decoded into one ``alloc`` tensor
    when the output shape is known (``shape``), else stacked; labels collated, or the
    dataset's fields. ``(None, 0)`` when the walk has no row left."""
    ds, st, counters = cur.ds, cur.st, cur.counters
    images_out = alloc((B, *shape[0]), shape[1]) if shape is not None else None
    n, images, labels, events, _ = cur.fill(images_out, 0, B, timing, **bounds)
    if n == 0:
        return None, 0
    cur.deliver(events[-1])
    counters["samples"] += n
    st.recorder.sample_done(n)
    if images_out is None:
        images_out = _stack(images, alloc)
    else:
        # rows of the generic path (an identity test in C per row: == on an array row
        # would compare elementwise): copied in
        if any(map(operator.is_not, images, itertools.repeat(None))):
            for r, img in enumerate(images):
                if img is not None:
                    fill_row(images_out, r, img)
        if n < B:
            images_out = images_out[:n]
    return batch_of(ds, images_out, labels), n


def _stack(images, alloc):
    """Images of the generic path as one batch: rows of an ``alloc`` tensor when they are
    tensors of one shape, else torch's ``default_collate``."""
    first = images[0]
    if isinstance(first, torch.Tensor) and all(
            isinstance(x, torch.Tensor) and x.shape == first.shape and x.dtype == first.dtype
            for x in images):
        out = alloc((len(images), *first.shape), first.dtype)
        for r, img in enumerate(images):
            out[r].copy_(img)
        return out
    from torch.utils.data._utils.collate import default_collate

    return default_collate(images)
