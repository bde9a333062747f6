"""The protocol between :class:`~turboloader.DataLoader`'s thread backend and a dataset.

Any dataset can implement it; turboloader's ``TarDataset``, ``ImageFolder`` and
``TBLDataset`` do. Nothing here is required: without it the thread backend falls back to
what torch's DataLoader would do (``iter(dataset)`` in one thread, ``dataset[i]``).

**Iterable datasets** (sharded by DataLoader worker, like ``TarDataset``)::

    dataset.worker_sizes(num_workers) -> list[int]
        Samples each of ``num_workers`` logical worker streams yields in the current epoch
        (the loader's ``len`` and mid-epoch checkpoints use it).

    dataset.worker_stream(worker, num_workers, *, batch_size=None, out=None, timing=None)
        The stream DataLoader worker ``worker`` of ``num_workers`` would yield, run in a
        decode thread instead of a worker process (after ``set_epoch``, from the main
        thread, so all streams of a pass share the epoch). With ``batch_size=None`` it
        yields samples; with ``batch_size=B`` it yields ``[images, labels]`` batches of
        ``B`` samples of the stream (the last one shorter), the images written into
        ``out(shape, dtype)`` (a tensor the loader recycles, pinned when pinning is on),
        labels collated as ``default_collate`` would. ``timing(stage, seconds)`` reports
        the seconds spent reading (``"read"``) and decoding (``"decode"``) for the stage
        table. The thread calling it has entered :func:`turboloader.data.reader.reading_as`
        with the stream's name, so per-stream state (decoder, cache, statistics, failure
        budget) can be kept per thread.

    dataset.first_stream(num_workers) -> int  (optional)
        The logical stream whose batch comes first in the pass starting now: after a
        mid-epoch resume, the one whose batch was next (torch's workers rotate the same
        way); default 0.

    A dataset whose items already are batches (``TarDataset.batched()``,
    ``TarDataset.bucketed()``) says so with ``yields_batches = True``: it is loaded with
    ``batch_size=None``, and ``worker_stream(worker, num_workers, timing=...)`` yields its
    batches.

    With ``num_workers > 1`` the thread backend needs ``worker_stream`` (torch shards other
    iterable datasets through ``get_worker_info()``, a per-process global threads cannot
    fake). Batches come out in torch's order: workers' batches round-robin.

**Map-style datasets**::

    dataset.__getitems__(indices, *, out=None, timing=None) -> list of samples
        torch's batched-fetch hook, plus ``out``: a ``(len(indices), *shape)`` tensor of
        batch rows to write the images into (the thread backend passes a slice of its batch
        tensor; an image written there is returned as ``out[j]``, not copied again), and
        ``timing`` as above. Datasets with a plain ``__getitems__(indices)`` or only
        ``__getitem__`` work too (their samples are copied into the batch).

Example: a minimal iterable dataset the thread backend runs with 4 decode threads::

    class Squares(torch.utils.data.IterableDataset):
        def __init__(self, n):
            self.n = n

        def worker_sizes(self, num_workers):
            return [len(range(w, self.n, num_workers)) for w in range(num_workers)]

        def worker_stream(self, worker, num_workers, *, batch_size=None, out=None,
                          timing=None):
            items = ((torch.full((3,), float(i * i)), i)
                     for i in range(worker, self.n, num_workers))
            if batch_size is None:
                yield from items
                return
            chunk = []
            for item in items:
                chunk.append(item)
                if len(chunk) == batch_size:
                    yield default_collate(chunk)
                    chunk = []
            if chunk:
                yield default_collate(chunk)

        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            w, n = (info.id, info.num_workers) if info else (0, 1)
            return iter(self.worker_stream(w, n))

    loader = turboloader.DataLoader(Squares(100), batch_size=8, num_workers=4)
"""

from __future__ import annotations

import inspect

__all__ = ["accepts_out", "has_worker_streams", "yields_batches"]


def has_worker_streams(dataset) -> bool:
    """True when ``dataset`` implements the iterable side of the protocol."""
    return callable(getattr(dataset, "worker_stream", None)) and \
        callable(getattr(dataset, "worker_sizes", None))


def yields_batches(dataset) -> bool:
    """True when ``dataset``'s worker streams yield whole batches (load with
    ``batch_size=None``)."""
    return bool(getattr(dataset, "yields_batches", False)) and has_worker_streams(dataset)


def accepts_out(dataset) -> bool:
    """True when ``dataset.__getitems__`` takes the protocol's ``out`` and ``timing``."""
    fn = getattr(dataset, "__getitems__", None)
    if not callable(fn):
        return False
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "out" in params and "timing" in params
