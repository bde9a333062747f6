"""``TarDataset.batched()``: a :class:`~turboloader.data.tar_dataset.TarDataset` that
yields whole ``[images, labels]`` batches, decoded straight into (shared) batch memory."""

from __future__ import annotations

import torch.utils.data

from turboloader.data import stream
from turboloader.data._buffers import shared_pool
from turboloader.data.checkpoint import topology as _topology

__all__ = ["TarBatches"]


class TarBatches(torch.utils.data.IterableDataset):
    """A :class:`TarDataset` that yields ``[images, labels]`` batches (see
    :meth:`TarDataset.batched`). Attributes not defined here are the dataset's."""

    def __init__(self, dataset, batch_size, *, drop_last=False, num_workers=None):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.drop_last = bool(drop_last)
        self.num_workers = num_workers

    def __getattr__(self, name):
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    # the thread backend's protocol (turboloader.loader.protocol): whole batches per stream
    yields_batches = True

    def worker_sizes(self, num_workers):
        """Samples each logical worker stream yields per epoch (the dataset's shares)."""
        return self.dataset.worker_sizes(num_workers)

    def worker_stream(self, worker, num_workers, *, batch_size=None, out=None, timing=None):
        """The batches of logical worker ``worker`` (see :meth:`TarDataset.worker_stream`
        with this object's ``batch_size``), its short last one dropped with ``drop_last``."""
        B = self.batch_size
        for batch in self.dataset.worker_stream(worker, num_workers, batch_size=B, out=out,
                                                timing=timing):
            if self.drop_last and len(batch[1]) < B:
                return
            yield batch

    def state_dict(self, *, batches=None, batch_size=None, num_workers=None, drop_last=False,
                   delivered=None) -> dict:
        """The dataset's :meth:`TarDataset.state_dict` (batches of a stream are its samples in
        order, so the state is the same), with ``batches=k`` counted in this object's
        batches: ``batch_size`` and ``drop_last`` are this object's (a loader over it has
        ``batch_size=None``); ``batch_size=``, when given, must agree.

        Raises:
            ValueError: a ``batch_size`` other than this object's, or what the dataset's
                ``state_dict`` raises."""
        if batches is not None:
            if batch_size is not None and int(batch_size) != self.batch_size:
                raise ValueError(f"TarBatches.state_dict: batch_size={batch_size} but these "
                                 f"batches hold {self.batch_size}")
            batch_size, drop_last = self.batch_size, self.drop_last
        return self.dataset.state_dict(batches=batches, batch_size=batch_size,
                                       num_workers=num_workers, drop_last=drop_last,
                                       delivered=delivered)

    def load_state_dict(self, state: dict) -> None:
        """The dataset's :meth:`TarDataset.load_state_dict` (a state of its samples or of
        these batches: the positions are the same)."""
        self.dataset.load_state_dict(state)

    def __len__(self) -> int:
        """Batches per rank per epoch, for ``num_workers`` streams (one when not given)."""
        B = self.batch_size
        sizes = self.dataset.worker_sizes(max(1, int(self.num_workers or 0)))
        return sum(n // B if self.drop_last else -(-n // B) for n in sizes)

    def __iter__(self):
        ds = self.dataset
        info = torch.utils.data.get_worker_info()
        epoch = ds._pass_epoch()
        ds._last_pass = epoch
        rank, _ = _topology(ds.rank, ds.world_size)
        if info is None:
            worker, W, name = 0, 1, f"rank{rank}-main"
            pool = None
        else:
            worker, W = ds._rotated(info, epoch), info.num_workers
            name = f"rank{rank}-worker{info.id}"
            pool = shared_pool()  # the batch crosses to the main process by handle
        B = self.batch_size
        for batch in ds._open(worker, W, name, epoch, batch_size=B,
                              out=pool and pool.get):
            if self.drop_last and len(batch[1]) < B:
                return
            if pool is not None:
                stream.send(ds, batch, pool)
            yield batch

    def __repr__(self):
        return f"TarBatches({self.dataset!r}, batch_size={self.batch_size})"
