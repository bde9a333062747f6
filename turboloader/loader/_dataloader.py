"""``turboloader.DataLoader``: torch's DataLoader with good defaults, or a thread backend
(see :mod:`turboloader.loader` for the design)."""

from __future__ import annotations

from collections.abc import Sized
from typing import Any, cast
import sys
import time
import warnings

import numpy as np
import torch
import torch.utils.data
from torch.utils.data import IterableDataset

from turboloader.data import BufferPool, env_budget, workers_exited
from turboloader.io.remote import is_remote
from turboloader.loader._device import DevicePool
from turboloader.loader._device import resolve as resolve_decode
from turboloader.loader._iterable import IterablePipeline, batch_len
from turboloader.loader._mapstyle import MapPipeline
from turboloader.loader._pipeline import DONE, Failure
from turboloader.loader.protocol import has_worker_streams, yields_batches
from turboloader.loader.stats import RunStats, format_stats

__all__ = ["DataLoader", "profile"]


def _cache_on(dataset) -> bool:
    return bool(getattr(dataset, "cache_bytes", 0))


def _remote(dataset) -> bool:
    """The dataset reads remote shards (streamed or through a shard cache)."""
    urls = getattr(dataset, "urls", None)
    return isinstance(urls, list) and any(isinstance(u, str) and is_remote(u) for u in urls)


def _accelerator() -> bool:
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        return bool(acc.is_available())
    return torch.cuda.is_available()


# -- progress ---------------------------------------------------------------------------


class _StderrBar:
    """A minimal progress bar for when tqdm is not installed."""

    def __init__(self, iterable, total, desc="turboloader"):
        self.iterable, self.total, self.desc = iterable, total, desc

    def __iter__(self):
        start = last = time.perf_counter()
        n = 0
        try:
            for item in self.iterable:
                n += 1
                now = time.perf_counter()
                if now - last > 0.5 or n == self.total:
                    last = now
                    self._draw(n, now - start)
                yield item
        finally:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def _draw(self, n, elapsed):
        rate = n / elapsed if elapsed > 0 else 0.0
        if self.total:
            frac = min(1.0, n / self.total)
            bar = "#" * int(30 * frac)
            line = f"\r{self.desc}: [{bar:<30}] {n}/{self.total} batches, {rate:.1f} it/s"
        else:
            line = f"\r{self.desc}: {n} batches, {rate:.1f} it/s"
        sys.stderr.write(line)
        sys.stderr.flush()


def _progress(iterable, total):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _StderrBar(iterable, total)
    return tqdm(iterable, total=total, unit="batch", desc="turboloader")


# -- the loader -------------------------------------------------------------------------


class _ResumableSampler(torch.utils.data.Sampler):
    """A map-style sampler that can leave out the first ``n`` indices of its next pass (what
    a loaded state already delivered); everything else is the wrapped sampler's."""

    def __init__(self, sampler):
        self.sampler = sampler
        self._skip = 0

    def skip_next(self, n: int) -> None:
        self._skip = int(n)

    def set_epoch(self, epoch):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __iter__(self):
        skip, self._skip = self._skip, 0
        it = iter(self.sampler)
        for _ in range(skip):
            if next(it, None) is None:
                return
        yield from it

    def __len__(self):
        return len(self.sampler)

    def __getattr__(self, name):
        if name == "sampler":
            raise AttributeError(name)
        return getattr(self.sampler, name)


class DataLoader:
    """Batches from a turboloader (or any torch) dataset, with worker processes or threads.

    Args:
        dataset: a ``torch.utils.data.Dataset``: a map-style one (``ImageFolder``,
            ``TBLDataset``, ...) or an ``IterableDataset`` (``TarDataset``). (The top-level
            ``turboloader.DataLoader``, a subclass, also takes seed 001's path-first form:
            see :class:`turboloader.compat.DataLoader`.)
        batch_size: samples per batch (default 1).
        shuffle: map-style: shuffle with a ``RandomSampler`` seeded from ``(seed, epoch)``,
            or drawn from ``generator`` when one is given (default False). Iterable: shuffling is the dataset's own (``TarDataset(shuffle=)``);
            None accepts it, True/False must agree with ``dataset.shuffle`` (ValueError
            otherwise, or for an iterable dataset without one, as torch does).
        num_workers: worker processes, or decode threads (0: the process backend reads in
            the main process; the thread backend runs one stream in one thread).
        backend: ``"threads"`` (default) or ``"processes"``.
        pin_memory: allocate batches in pinned memory (when an accelerator exists;
            otherwise a warning, as torch gives, and ordinary memory).
        drop_last: drop the last partial batch (of each worker's stream, for iterables).
        sampler, batch_sampler, collate_fn, timeout, worker_init_fn, multiprocessing_context, generator, pin_memory_device, in_order: as torch's
            DataLoader, in torch's positional order (``DataLoader(ds, 8, True)`` is batch
            size 8, shuffled). On the thread backend ``worker_init_fn(worker_id)`` runs once
            in each decode thread per pass (threads are made per pass), ``generator`` drives
            the map-style shuffle, and ``timeout``, ``multiprocessing_context``,
            ``pin_memory_device`` and ``in_order=False`` raise ``ValueError`` (they need
            worker processes) rather than being dropped. ``sampler`` and ``batch_sampler``
            (e.g. torchvision's detection ``GroupedBatchSampler``; torch then has
            ``batch_size`` None) work on both backends. Without ``collate_fn`` both backends
            collate as :func:`turboloader.data.collate_fields` does: what
            ``default_collate`` can stack is stacked, the rest (images of several sizes,
            detection targets with different numbers of boxes) is a list.
        prefetch_factor: batches prefetched per worker (default 2, torch's): on the thread
            backend, the one a decode thread is filling plus those ready in its queue; the
            loader keeps ``prefetch_factor x max(1, num_workers)`` batch tensors to recycle.
        persistent_workers: keep worker processes across epochs (default: True when
            ``num_workers > 0`` and the dataset's cache is on or its shards are remote: the
            decoded samples, and a remote stream's fetch pool, connections and next epoch's
            read-ahead, live in the workers; a new worker starts them cold: 8 workers over
            S3 ran later epochs 1.7-2.3x faster kept, results/remote.md run 26).
        seed: seed of the map-style shuffle (default ``dataset.seed``, else 0).
        auto_epoch: each new pass uses the next epoch (see :meth:`set_epoch`). Default True.
        progress: show a progress bar (tqdm when installed, else a plain one on stderr).
        output: ``"torch"`` (default): tensors. ``"numpy"``: every tensor of a batch as a
            NumPy array over the same memory (``Tensor.numpy()``, no copy; the memory is
            recycled once the array and every view of it are gone), for JAX
            (``jax.device_put(images)``, ``jax.dlpack.from_dlpack``) or any NumPy consumer.
            Both backends.
        decode: where images are decoded and transformed: ``"cpu"`` (default; the dataset's
            fused native path), or ``"gpu"``: JPEGs batched to nvJPEG
            (``torchvision.io.decode_jpeg(..., device="cuda")``), the fused plan's crop,
            resize, flip and normalize on the GPU with torchvision's kernels, batches
            handed out as CUDA tensors; files nvJPEG does not take (progressive, CMYK,
            truncated, refused) are decoded on the CPU and copied to their rows, with the
            CPU path's typed errors and skip policy. Labels, order and exactly-once are the
            CPU path's. Needs the thread backend, a turboloader dataset whose transform
            fuses (one output size, no ColorJitter), no cache, ``collate_fn``,
            ``pin_memory`` or ``output="numpy"``. A
            :class:`~turboloader.loader.DeviceDecode` chooses the device, decoder and call
            size. See docs/guide/gpu.md.

    Epochs: the epoch of a pass is, in order of precedence, the one given to
    :meth:`set_epoch` since the last pass; the dataset's own if it was changed with
    ``dataset.set_epoch`` since; else (``auto_epoch``) the previous pass's plus one. It is
    set on the dataset and the sampler (``set_epoch``) from the main process before the
    pass starts.

    Raises:
        DeviceUnavailableError: ``decode="gpu"`` and torch sees no CUDA device.
        ValueError: bad arguments; ``shuffle`` against an iterable dataset's own; the thread
            backend with ``num_workers > 1`` on an iterable dataset that has no per-worker
            stream (``_stream``), which torch shards through ``get_worker_info()``, a
            per-process global threads cannot fake.

    Example:
        >>> import turboloader as tl                                      # doctest: +SKIP
        >>> from turboloader import transforms as T
        >>> ds = tl.TarDataset("train-{0000..0099}.tar", T.Compose([
        ...     T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()]))
        >>> loader = tl.DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True)
        >>> gpu = tl.PrefetchLoader(loader, "cuda", mean=(0.485, 0.456, 0.406),
        ...                         std=(0.229, 0.224, 0.225))
        >>> for epoch in range(90):
        ...     for images, labels in gpu: ...     # float32 on the GPU, normalised there
        >>> tl.profile(loader, num_batches=20)   # the stage table: where is the bottleneck?
    """

    def __init__(self, dataset: Any, batch_size: int = 1, shuffle: Any = None, sampler: Any = None,
                 batch_sampler: Any = None, num_workers: int = 0, collate_fn: Any = None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Any = None, multiprocessing_context: Any = None,
                 generator: Any = None, *, prefetch_factor: Any = None,
                 persistent_workers: Any = None, pin_memory_device: str = "",
                 in_order: bool = True, backend: str = "threads", seed: int | None = None,
                 auto_epoch: bool = True, progress: bool = False, output: str = "torch",
                 decode: str = "cpu") -> None:
        if not isinstance(dataset, torch.utils.data.Dataset):
            raise TypeError("dataset must be a torch.utils.data.Dataset or a path, got "
                            f"{type(dataset).__name__}")
        if backend not in ("threads", "processes"):
            raise ValueError(f'backend must be "threads" or "processes", got {backend!r}')
        if output not in ("torch", "numpy"):
            raise ValueError(f'output must be "torch" or "numpy", got {output!r}')
        self.output = output
        if int(num_workers) < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.dataset: Any = dataset   # map-style or iterable (with state_dict when resumable)
        self.backend = backend
        self.num_workers = int(num_workers)
        self.drop_last = bool(drop_last)
        self.collate_fn = collate_fn
        self.timeout = float(timeout)
        self.progress = bool(progress)
        self.auto_epoch = bool(auto_epoch)
        self.prefetch_factor = 2 if prefetch_factor is None else int(prefetch_factor)
        self.worker_init_fn = worker_init_fn
        self.generator = generator
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError("worker_init_fn must be callable")
        if backend == "threads":
            # what the thread backend cannot honour is an error, never silently dropped
            if multiprocessing_context is not None:
                raise ValueError("multiprocessing_context is for backend='processes': the thread "
                                 "backend starts no processes")
            if timeout:
                raise ValueError("timeout is for backend='processes' (torch's per-batch worker "
                                 "timeout); the thread backend has no worker processes to wait on")
            if pin_memory_device:
                raise ValueError("pin_memory_device is for backend='processes'; the thread "
                                 "backend pins for the current accelerator (pin_memory=True)")
            # persistent_workers is honoured by construction: the thread backend keeps its
            # reading states (and caches) across epochs
        self._iterable = isinstance(dataset, IterableDataset)
        self.seed = int(seed if seed is not None else getattr(dataset, "seed", 0) or 0)
        self._pin_requested = bool(pin_memory)

        self._sampler_gen = None
        if self._iterable:
            own = getattr(dataset, "shuffle", None)
            if shuffle is not None and own is None and shuffle:
                raise ValueError("shuffle=True needs a map-style dataset: an IterableDataset "
                                 "shuffles itself (torch's DataLoader rejects it too)")
            if shuffle is not None and own is not None and bool(shuffle) != bool(own):
                raise ValueError(f"shuffle={shuffle} but {type(dataset).__name__} was made with "
                                 f"shuffle={own}: an iterable dataset shuffles itself; pass "
                                 "shuffle to the dataset (or leave it None here)")
            if backend == "threads" and self.num_workers > 1 and not has_worker_streams(dataset):
                raise ValueError(
                    f"backend='threads' with num_workers={self.num_workers} needs an iterable "
                    "dataset with per-worker streams (TarDataset); this one shards through "
                    "get_worker_info(): use backend='processes' or num_workers <= 1")
            shuffle = None
        elif shuffle and sampler is None and batch_sampler is None:
            sampler = self._distributed_sampler(dataset, True)
            if sampler is None and generator is not None:
                # torch's contract: the generator drives the shuffle (and advances with it)
                sampler = torch.utils.data.RandomSampler(cast(Sized, dataset), generator=generator)
            elif sampler is None:
                self._sampler_gen = torch.Generator()
                sampler = torch.utils.data.RandomSampler(cast(Sized, dataset),
                                                        generator=self._sampler_gen)
            shuffle = None
        elif sampler is None and batch_sampler is None:
            sampler = self._distributed_sampler(dataset, False)
            if sampler is None:
                sampler = torch.utils.data.SequentialSampler(cast(Sized, dataset))
            shuffle = None
        if not self._iterable and batch_sampler is None and sampler is not None:
            sampler = _ResumableSampler(sampler)  # can skip what a loaded state delivered

        if persistent_workers is None:
            persistent_workers = self.num_workers > 0 and (_cache_on(dataset)
                                                           or _remote(dataset))
        procs = backend == "processes"
        if procs and self.num_workers > 0:
            env_budget()  # a bad TURBOLOADER_SHM_BUDGET: an error here, not in the workers
        torch_collate = collate_fn
        if procs and collate_fn is None and (batch_size is not None or batch_sampler is not None):
            # the thread backend's collation: default_collate, and a list where it cannot
            # stack (images of several sizes, detection targets with different box counts)
            from turboloader.data.fields import collate_fields as torch_collate
        # torch's DataLoader validates the arguments and builds the samplers for both backends
        self.torch_loader = torch.utils.data.DataLoader(
            dataset, batch_size=batch_size, shuffle=shuffle, sampler=sampler,
            batch_sampler=batch_sampler, num_workers=self.num_workers if procs else 0,
            collate_fn=torch_collate, pin_memory=bool(pin_memory) if procs else False,
            drop_last=drop_last, timeout=timeout if procs else 0,
            worker_init_fn=worker_init_fn if procs else None,
            multiprocessing_context=multiprocessing_context if procs else None,
            generator=generator, prefetch_factor=prefetch_factor if procs else None,
            persistent_workers=bool(persistent_workers) if procs else False,
            pin_memory_device=pin_memory_device if procs else "", in_order=in_order)
        self.batch_size: Any = self.torch_loader.batch_size
        self.sampler: Any = self.torch_loader.sampler
        self.batch_sampler = self.torch_loader.batch_sampler
        if not procs:
            if self.batch_sampler is None and not yields_batches(dataset):
                raise ValueError("backend='threads' needs batching (batch_size or batch_sampler), "
                                 "or a dataset of whole batches (TarDataset.batched(), "
                                 ".bucketed()) with batch_size=None")
            if self._iterable and batch_sampler is not None:
                raise ValueError("batch_sampler is for map-style datasets")
            if not in_order:
                raise ValueError("backend='threads' always returns batches in order")
        self._device = resolve_decode(decode, dataset, backend=backend, collate_fn=collate_fn,
                                      pin_memory=pin_memory, output=output,
                                      iterable=self._iterable)
        self._pin = False
        if pin_memory and not procs:
            if _accelerator():
                self._pin = True
            else:
                warnings.warn("'pin_memory' argument is set as true but no accelerator is "
                              "found, then device pinned memory won't be used.", stacklevel=2)
        self._next_epoch: int | None = None  # from set_epoch()
        self._last_epoch: int | None = None  # the epoch of the previous pass
        self._yielded, self._finished = 0, False  # batches handed out in the pass; its end
        self._resumed_batches = 0  # batches a loaded state already delivered
        # thread backend: batch tensors recycled across batches and passes once nothing
        # outside the loader holds them (kept between passes, like persistent workers'
        # memory). As many as the streams prefetch (torch's prefetch_factor x workers): the
        # batch the consumer still holds while the next ones fill is new memory when all of
        # those are busy, so the resident peak stays that of fresh batches per step
        self._pool = BufferPool(max(1, self.num_workers) * max(1, self.prefetch_factor),
                                pin=self._pin)
        if self._device is not None:   # decode="gpu": batch tensors on the device
            self._pool = DevicePool(self._device, self._pool.capacity)
        # the decode threads' shared native runner (thread backend, made by the first pass)
        self._shared_runner = None
        self._pass_generator_state = None
        self._pass_sampler_state = None
        # a user sampler's generator, restored next pass
        self._resume_sampler_state: torch.Tensor | None = None
        self._run = None

    @staticmethod
    def _distributed_sampler(dataset, shuffle):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return torch.utils.data.DistributedSampler(
                dataset, shuffle=shuffle, seed=int(getattr(dataset, "seed", 0) or 0))
        return None

    # -- epochs ------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next pass (then, with ``auto_epoch``, count on from it)."""
        epoch = int(epoch)
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._next_epoch = epoch

    @property
    def epoch(self):
        """The epoch of the current (or last) pass; None before the first."""
        return self._last_epoch

    def _begin_epoch(self) -> int:
        ds = self.dataset
        ds_epoch = getattr(ds, "epoch", None)
        if self._next_epoch is not None:
            epoch, self._next_epoch = self._next_epoch, None
        elif ds_epoch is not None and (self._last_epoch is None or ds_epoch != self._last_epoch):
            epoch = int(ds_epoch)  # first pass, or the user set the dataset's epoch directly
        elif self._last_epoch is not None and self.auto_epoch:
            epoch = self._last_epoch + 1
        else:
            epoch = self._last_epoch or 0
        if hasattr(ds, "set_epoch"):
            ds.set_epoch(epoch)
        sampler = self.sampler
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        if self._sampler_gen is not None:
            words = np.random.SeedSequence([self.seed, epoch, 0x5A4D]).generate_state(2, np.uint64)
            self._sampler_gen.manual_seed(int(words[0] >> np.uint64(1)))
        self._last_epoch = epoch
        self._pass_generator_state = None
        self._pass_sampler_state = None
        if self._resume_sampler_state is not None and self._user_generator() is not None:
            self._user_generator().set_state(self._resume_sampler_state)
        self._resume_sampler_state = None
        if not self._iterable and self._user_generator() is not None:
            self._pass_sampler_state = self._user_generator().get_state()
        if self.generator is not None and not self._iterable:
            self._pass_generator_state = self.generator.get_state()
            if self.backend == "threads":
                # torch's iterator draws its workers' base seed from the generator before the
                # sampler does: draw it too, so the shuffle is torch's for the same generator
                torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        self._yielded, self._finished = self._resumed_batches, False
        self._resumed_batches = 0
        return epoch

    # -- checkpoints -------------------------------------------------------------------

    def _inner_sampler(self):
        sampler = self.sampler
        return sampler.sampler if isinstance(sampler, _ResumableSampler) else sampler

    def _user_generator(self):
        """The generator of a user's own sampler (not the loader's), when it has one."""
        inner = self._inner_sampler()
        gen = getattr(inner, "generator", None)
        if gen is None or gen is self._sampler_gen or gen is self.generator:
            return None
        return gen

    def _replayable(self) -> str | None:
        """Why the map-style sampler's order of a pass cannot be drawn again (None: it can)."""
        if not isinstance(self.sampler, _ResumableSampler):
            return ("a custom batch_sampler has no position to save: pass a sampler and "
                    "batch_size instead")
        inner = self._inner_sampler()
        if isinstance(inner, (torch.utils.data.SequentialSampler,
                              torch.utils.data.DistributedSampler)):
            return None
        if getattr(inner, "generator", None) is not None:
            return None
        return (f"the sampler {type(inner).__name__} draws its order from torch's global RNG "
                "(no generator), so a resumed pass cannot repeat it: give it a "
                "generator=torch.Generator().manual_seed(...), or pass shuffle=True to "
                "turboloader.DataLoader instead of a sampler")

    def _depends(self) -> dict:
        """What a mid-pass position depends on besides the data."""
        inner = self._inner_sampler()
        world = getattr(inner, "num_replicas", None)
        if self._iterable:
            import torch.distributed as dist

            world = (getattr(self.dataset, "world_size", None) or
                     (dist.get_world_size() if dist.is_available() and dist.is_initialized()
                      else 1))
        return {"batch_size": self.batch_size, "drop_last": self.drop_last,
                "sampler": None if self._iterable else type(inner).__name__,
                "streams": max(1, self.num_workers) if self._iterable else None,
                "world_size": int(world or 1)}

    # -- checkpoints -------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Where this loader stands, for :meth:`load_state_dict` (torchdata's
        ``StatefulDataLoader`` shape: call it between batches, save it with the model).

        Returns a JSON-able dict: ``format``, ``epoch`` (of the current or last pass),
        ``batches`` handed out in that pass, ``finished`` (the pass ended), what the
        position depends on (``batch_size``, ``drop_last``, ``sampler`` kind, ``streams``
        (an iterable dataset's worker streams), ``world_size``), ``dataset`` (an iterable
        dataset's own ``state_dict(batches=...)``, e.g. ``TarDataset``'s) and, when a
        generator drives the shuffle (the loader's or the sampler's own), its state at the
        start of the pass.

        Raises:
            ValueError: the position cannot be named (e.g. a custom ``batch_sampler``, a
                sampler drawing from torch's global RNG, or an iterable dataset without
                ``state_dict``).
        """
        state = {"format": "turboloader.DataLoader/1", "epoch": self._last_epoch,
                 "batches": int(self._yielded), "finished": bool(self._finished),
                 **self._depends()}
        if self._last_epoch is None or self._finished:
            return state
        if self._iterable:
            if not hasattr(self.dataset, "state_dict"):
                raise ValueError(f"{type(self.dataset).__name__} has no state_dict: a mid-pass "
                                 "position of an iterable dataset must come from the dataset")
            state["dataset"] = self.dataset.state_dict(
                batches=self._yielded, batch_size=self.batch_size,
                num_workers=max(1, self.num_workers) if self.backend == "threads"
                else self.num_workers, drop_last=self.drop_last)
        else:
            why = self._replayable()
            if why is not None:
                raise ValueError(why)
        if self._pass_generator_state is not None:
            state["generator"] = self._pass_generator_state.tolist()
        if self._pass_sampler_state is not None:
            state["sampler_generator"] = self._pass_sampler_state.tolist()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`: the next pass is the saved epoch without the
        batches already handed out (nothing of them is read or decoded again), or, if that
        pass had finished, the epoch after it.

        Raises:
            ValueError: not a loader state, negative / impossible positions, or a state
                taken with another batch size, ``drop_last``, sampler kind, number of
                streams (iterable datasets: ``num_workers``) or world size, which this
                loader could not continue exactly.
        """
        if not isinstance(state, dict) or state.get("format") != "turboloader.DataLoader/1":
            raise ValueError("not a turboloader.DataLoader state "
                             "(expected format 'turboloader.DataLoader/1')")
        epoch, batches = state.get("epoch"), int(state.get("batches", 0))
        if epoch is None:
            return  # taken before the first pass
        epoch = int(epoch)
        if epoch < 0 or batches < 0:
            raise ValueError(f"negative position in the loader state: epoch {epoch}, "
                             f"batches {batches}")
        if state.get("finished"):
            self.set_epoch(epoch + 1)
            return
        mine = self._depends()
        diff = {k: (state[k], v) for k, v in mine.items() if k in state and state[k] != v}
        if diff:
            raise ValueError(
                "turboloader.DataLoader.load_state_dict: the state was taken with " +
                ", ".join(f"{k}={a!r}" for k, (a, _) in diff.items()) + " but this loader has " +
                ", ".join(f"{k}={b!r}" for k, (_, b) in diff.items()) +
                ": a pass cannot continue exactly with another one (make the loader as it was)")
        if not self._iterable:
            why = self._replayable()
            if why is not None:
                raise ValueError(why)
        try:
            total = len(self)
        except TypeError:
            total = None
        if total is not None and batches > total:
            raise ValueError(f"the state says {batches} batches were handed out but a pass of "
                             f"this loader has {total}")
        if self._iterable:
            self.dataset.load_state_dict(state["dataset"])
            self._drop_kept_workers()
            self.set_epoch(epoch)
        else:
            self.set_epoch(epoch)
            self.sampler.skip_next(batches * self.batch_size)
            if "generator" in state and self.generator is not None:
                self.generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))
            gen = self._user_generator()
            if "sampler_generator" in state and gen is not None:
                self._resume_sampler_state = torch.tensor(state["sampler_generator"],
                                                          dtype=torch.uint8)
        self._resumed_batches = batches

    def _batches(self):
        return iter(self.batch_sampler)

    def _drop_kept_workers(self):
        """Worker processes kept from an earlier pass (``persistent_workers``) hold their
        copy of the dataset as it was when they started, so a resume state loaded into it
        since would not reach them (the next pass ran the whole epoch again): shut them
        down; the next pass starts new ones from the dataset as it is now."""
        it = getattr(self.torch_loader, "_iterator", None)
        if it is not None:
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            self.torch_loader._iterator = None

    # -- iteration ---------------------------------------------------------------------

    def __len__(self) -> int:
        """Batches per pass. For an iterable dataset that knows its per-worker shares
        (``TarDataset``) the exact count: each of the ``max(1, num_workers)`` streams batches
        its own share, so the sum over workers of ``ceil(share / batch_size)`` (floor with
        ``drop_last``), whichever backend. Otherwise torch's count (for other iterable
        datasets with several workers and ``drop_last=False`` it can be up to
        ``workers - 1`` short)."""
        shares = getattr(self.dataset, "worker_sizes", None)
        if self._iterable and callable(shares) and self.batch_size is not None:
            B = self.batch_size
            sizes = shares(max(1, self.num_workers))
            return sum(n // B if self.drop_last else -(-n // B) for n in sizes)
        return len(self.torch_loader)

    def __iter__(self):
        epoch = self._begin_epoch()
        if self.backend == "processes":
            it = self._iter_processes(epoch)
        else:
            it = self._iter_threads(epoch)
        it = self._counted(it)
        if self.output == "numpy":
            it = _numpy_batches(it)
        if self.progress:
            try:
                total = len(self)
            except TypeError:
                total = None
            return iter(_progress(it, total))
        return it

    def _counted(self, it):
        try:
            for batch in it:
                self._yielded += 1
                yield batch
                batch = None  # only the caller holds it (its memory is recycled once dropped)
            self._finished = True
        finally:
            it.close()  # a consumer that stops early shuts the pass down now

    def _iter_processes(self, epoch):
        run = self._run = RunStats("processes", epoch, {
            "read": "in workers", "decode": self.num_workers or "main", "collate": "in workers",
            "transfer": 1 if self.torch_loader.pin_memory else 0}, self.dataset)
        it = iter(self.torch_loader)
        try:
            while True:
                t = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    return
                run.consumer_wait_s += time.perf_counter() - t
                run.batches += 1
                run.samples += batch_len(batch)
                yield batch
        finally:
            run.end = time.perf_counter()
            # shut the workers down now: an exception's traceback keeps torch's iterator
            # alive, and when the garbage collector ends it instead, its queues are already
            # closed and each worker exits only at its 5 s status check
            if not self.torch_loader.persistent_workers:
                shutdown = getattr(it, "_shutdown_workers", None)
                if shutdown is not None:
                    shutdown()
            # free what a killed worker left in /dev/shm (file_system sharing) now
            exited = {w.pid: w.exitcode for w in getattr(it, "_workers", ())
                      if w.exitcode is not None}
            if exited:
                workers_exited(exited)
            del it

    def _iter_threads(self, epoch):
        pipe = (IterablePipeline if self._iterable else MapPipeline)(self, epoch)
        self._run = pipe.stats
        try:
            while True:
                item = pipe.next(self.timeout)
                if item is DONE:
                    return
                if isinstance(item, Failure):
                    pipe.shutdown()
                    raise item.exc
                pipe.stats.batches += 1
                pipe.stats.samples += batch_len(item)
                yield item
                item = None
        finally:
            pipe.shutdown()

    # -- statistics ----------------------------------------------------------------------

    def stats(self) -> dict:
        """What the current (or last) pass measured.

        Returns a dict: ``backend``, ``epoch``, ``batches``, ``samples``, ``elapsed_s``,
        ``samples_per_s``, ``batches_per_s``, ``consumer_wait_s`` (time your loop waited
        for a batch: near zero means the loader keeps up), and ``stages``: for ``read``,
        ``decode``, ``collate`` and ``transfer``, ``concurrency`` (threads; a string where
        the work runs inside another stage or process), ``busy_s`` (thread-seconds
        working), ``wait_in_s`` (starved: waiting on the input queue), ``wait_out_s``
        (blocked: waiting for room in the output queue), ``items`` (samples for read and
        decode, batches after), ``items_per_s`` and ``utilisation`` (busy / (elapsed x
        threads)). The process backend measures only what the main process sees (its
        ``read``/``decode`` times come from the dataset's counters, when it has ``stats()``).
        """
        if self._run is None:
            raise RuntimeError("no pass yet: iterate the loader (or use turboloader.profile)")
        return self._run.report()

    def __repr__(self):
        return (f"DataLoader({type(self.dataset).__name__}, batch_size={self.batch_size}, "
                f"num_workers={self.num_workers}, backend={self.backend!r}, "
                f"drop_last={self.drop_last}, pin_memory={self._pin_requested})")


def _as_numpy(obj):
    """``obj`` with every CPU tensor replaced by a NumPy array over its memory."""
    if isinstance(obj, torch.Tensor):
        t = obj.as_subclass(torch.Tensor) if type(obj) is not torch.Tensor else obj
        return t.detach().cpu().numpy()
    if isinstance(obj, dict):
        return {k: _as_numpy(v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return type(obj)(*(_as_numpy(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_as_numpy(v) for v in obj)
    return obj


def _numpy_batches(it):
    try:
        for batch in it:
            batch = _as_numpy(batch)
            yield batch
            batch = None  # only the caller holds it
    finally:
        it.close()


def profile(loader: Any, num_batches: int = 20, *, file: Any = None) -> dict:
    """Run ``num_batches`` batches of ``loader``, print the stage table, return the stats.

    Args:
        loader: a :class:`DataLoader`.
        num_batches: how many batches to time (fewer if the pass ends first).
        file: where to print (default ``sys.stdout``); None output with ``file=False``.

    Returns:
        ``loader.stats()`` of that partial pass.

    Example:
        >>> turboloader.profile(loader, num_batches=50)                    # doctest: +SKIP
        turboloader.DataLoader (threads), epoch 0: 50 batches, ...
        stage      threads   busy s   util  starved s  blocked s   items   items/s
        read     in decode     0.41      -       0.00       0.00   12800    1650.2
        decode           2    14.98    97%       0.00       0.20   12800    1650.2
        ...
    """
    if not isinstance(loader, DataLoader):
        raise TypeError(f"profile needs a turboloader.DataLoader, got {type(loader).__name__}")
    if int(num_batches) < 1:
        raise ValueError(f"num_batches must be >= 1, got {num_batches}")
    it = loader._iter_threads(loader._begin_epoch()) if loader.backend == "threads" else \
        loader._iter_processes(loader._begin_epoch())
    try:
        for i, _ in enumerate(it, 1):
            if i >= num_batches:
                break
    finally:
        it.close()
    report = loader.stats()
    if file is not False:
        print(format_stats(report), file=file or sys.stdout)
    return report
