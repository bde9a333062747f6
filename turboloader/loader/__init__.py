"""``turboloader.DataLoader``: torch's DataLoader with good defaults, or a thread backend.

Two backends, one contract (same batches, same order, same sharding for the same seed and
epoch):

``backend="processes"``
    ``torch.utils.data.DataLoader`` itself (``loader.torch_loader``), with defaults that suit
    turboloader's datasets: ``persistent_workers`` when the dataset's decoded-sample cache is
    on or its shards are remote (a new worker process starts with an empty cache, and with no
    connections or bytes read ahead), the epoch forwarded to the dataset
    and sampler from the main process, ``shuffle`` checked against an iterable dataset's own.

``backend="threads"``
    A staged pipeline of native threads in this process (SPDL's design: stages with their
    own concurrency, bounded queues between them)::

        read ──► decode+transform (num_workers threads) ──► collate (1) ──► transfer (0/1) ──► you

    * **read**: where samples' bytes come from. For a map-style dataset a dispatcher thread
      walks the batch sampler (torch's own, built by torch's DataLoader) and splits each
      batch's indices across the decode threads; for an iterable dataset each decode thread
      runs its own logical worker's stream. The bytes themselves are gathered inside the
      decode threads (a ``pread`` of a shard member into a reused buffer, a file), and the
      time that takes is the read stage's, as the dataset measured and reported it.
    * **decode+transform**: ``num_workers`` threads, each decoding a chunk of samples (its
      part of a batch, or a whole batch of its stream) in one call that runs without the
      GIL, writing each sample straight into its row of the batch tensor.
    * **collate**: one thread puts the batches back in torch's order and collates labels.
    * **transfer**: pins batches that could not be allocated pinned (custom ``collate_fn``,
      non-tensor samples); absent otherwise. Host-to-device copies and on-device
      normalisation belong to :class:`turboloader.PrefetchLoader`.

    ``loader.stats()`` reports each stage's busy time, the time it starved on its input or
    blocked on its output queue, and throughput, and how the decode threads split their
    time between reading, decoding and Python; :func:`profile` prints it as a table and
    names the bottleneck.

Memory. Batch tensors are recycled (``turboloader.data._buffers.BufferPool``): one is
written again only once nothing outside the loader references it, i.e. the batch (and any
view, array or copy-in-flight of it) was dropped; otherwise a new one is allocated, so
keeping batches is always correct, just not free. Pinned batches come from torch's caching
host allocator, which recycles them the same way and also waits for asynchronous copies.
Float32 batches of 224 x 224 images are 600 KB per sample; a pipeline ending in
``ToImage()`` / ``PILToTensor()`` (no ``ToDtype``/``Normalize``) gives uint8 batches, 4x
less memory traffic, to be normalised on the device with
``PrefetchLoader(loader, "cuda", mean=..., std=...)``: the fastest recipe.

The dataset side of the thread backend is a documented protocol
(:mod:`turboloader.loader.protocol`): ``worker_stream``/``worker_sizes`` for iterable
datasets, ``__getitems__(indices, out=...)`` for map-style ones.

Ordering contract (iterable datasets). torch's DataLoader over an ``IterableDataset`` with
``W`` workers batches each worker's stream separately (each drops its own last partial
batch when ``drop_last``) and returns the workers' batches round-robin, skipping workers
that are exhausted. The thread backend runs the same ``W`` logical worker streams, from the
dataset's own per-worker generator (``worker_stream``), one per thread, and re-orders
their batches the same way, so items, order, transform parameters and the failure policy
(skips, replacements, budgets per worker) are identical by construction. Map-style datasets
use torch's sampler / batch sampler and ``__getitems__`` (or ``dataset[i]``), as torch does.

Modules: :mod:`~turboloader.loader.protocol` (the dataset side),
:mod:`~turboloader.loader.stats` (the stage table), ``_dataloader`` (:class:`DataLoader`,
:func:`profile`), ``_pipeline`` (threads, queues, batch buffers), ``_iterable`` and
``_mapstyle`` (the two layouts of the thread backend), ``_device`` (``decode="gpu"``: the
checks, device batch tensors; :class:`DeviceDecode` runs the batches).
"""

from turboloader.loader._dataloader import DataLoader, profile
from turboloader.loader.stats import STAGES, format_stats
from turboloader.decode.device_executor import DeviceDecode

__all__ = [
    "DataLoader",
    "DeviceDecode",
    "STAGES",
    "format_stats",
    "profile",
]
