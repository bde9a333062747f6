"""The one stream walker: where a logical worker stream stands in its pass (the items it
read, skipped and replaced, what it delivered), with the dataset's failure policy; the
groupings (samples, batches, buckets) are policies over it."""

from __future__ import annotations

from turboloader.data.epochs import AUTO_EPOCH
from turboloader.data.failures import FailureLog
from turboloader.data.reader import compact
from turboloader.errors import FailureBudgetExceeded, TurboLoaderError

__all__ = []


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
        note, shard, key, offset = self.ds._where(self.st, chunk.where[i])
        if isinstance(exc, TurboLoaderError):
            exc.add_note(note)
        self.log.record(exc, shard=shard, key=key, offset=offset,
                        stream=(self.epoch, self.num_workers, self.worker, pos))

    def fill(self, out, r0, r1, timing=None, *, defer=False):
        """Rows ``r0..r1`` of ``out`` (``None``: no batch path) in the per-sample order.

        Returns ``(n, images, labels, events, exc)``: rows filled (fewer at the end of the
        stream), per filled row the image when it is not in ``out`` (else None) and its
        label; the progress events to :meth:`deliver` (with ``defer``, one per row, as rows
        are handed out one by one; else one for all of them); and, with ``defer``, the
        exception the policy raised after
        the filled rows (the caller raises it once it has handed them out); without
        ``defer`` it propagates at once.
        """
        ds, st, counters = self.ds, self.st, self.counters
        images, labels, events = [], [], []
        row, exc_out = r0, None
        while row < r1 and exc_out is None:
            need = st.chunk_size(r1 - row)
            if self.pos < self.size:
                p0 = self.pos
                p1 = min(self.size, p0 + need)
                items = list(zip(self.samples[p0:p1], self.slots[p0:p1]))
                chunk = ds._gather_chunk(st, items, self.epoch, counters, timing)
                st.saw(chunk, len(items))
                errors, objs = st.decode(chunk, out, row, counters=counters, timing=timing)
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
            elif self.failed:  # replacements, so every worker yields its full share
                if not self.good:
                    err = FailureBudgetExceeded(
                        f"no sample of this worker's {self.size} could be read to replace "
                        f"{len(self.failed)} skipped ones (epoch {self.label})", self.log.failures)
                    if not defer:
                        raise err
                    exc_out = err
                    break
                m = min(need, len(self.failed))
                good = self.good
                items = [(good[(self.k + i) % len(good)], self.failed[i]) for i in range(m)]
                chunk = ds._gather_chunk(st, items, self.epoch, counters, timing)
                errors, objs = st.decode(chunk, out, row, counters=counters, timing=timing)
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
