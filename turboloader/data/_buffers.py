"""Recycled batch memory, safe by construction.

A fresh batch tensor costs more than filling it: the kernel zeroes every page on the first
write (a 64 x 3 x 224 x 224 float32 batch, 38.5 MB, takes ~40 ms to fault in on the project's
2-core machine and ~2 ms to overwrite once touched). :class:`BufferPool` reuses memory, and
the rule that makes that safe is one of ownership, not of detecting references:

* **A block is handed out as a tensor of its own storage.** The pool owns each block's
  memory; :meth:`BufferPool.get` returns ``torch.from_numpy`` of a NumPy view of it, a new
  torch storage. The block goes back to the pool only when that storage *dies*: when every
  tensor, view, NumPy array, DLPack capsule or ``pin_memory()`` source of the hand-out is
  gone. Not when the storage lets go of the memory: torch moves a storage that is not its
  shared memory elsewhere (``share_memory_()``, or pickling it to another process copies it
  into new shared memory and repoints the storage there), while a NumPy array or DLPack
  capsule taken before still points at the old memory; they hold the storage, so the block
  stays out, and mapped, until the storage dies (:func:`_own_storage`). Untracked memory
  (past ``capacity``) is handed out the same way.
* **Memory leaves the process only through the pool.** Because a hand-out is never torch's
  shared memory, torch's own pickler always *copies* it (see above): a view, a slice, a
  ``tv_tensors.Image``, a batch a custom ``collate_fn`` returns, a row a wrapper dataset
  yields all reach other processes as copies, and the block is free again here once the
  tensors here are gone. The one way
  a block's memory crosses processes without a copy is :meth:`BufferPool.send`, in a
  DataLoader worker: the batch pickles (through ``ForkingPickler``, the worker queue's
  pickler) to the block's shared-memory handle and counts a *send*; the receiving process
  maps it as a tensor of its own storage again and, when that storage lets go, counts a
  *release* in the block's shared counter. A block is rewritten only when the worker holds
  no hand-out of it **and** every send was released.
* **A fork pins what the parent holds.** A process forked while it holds a received batch
  shares that memory with its child, whose release the library cannot hear: every batch held
  at a fork (``os.register_at_fork``) is never released, so its block is never rewritten.

So correctness never depends on anyone releasing a batch; only the speed does: memory that
left by a route the library does not control is simply never reused.

Shared memory is bounded: each worker keeps at most ``capacity`` blocks per batch shape and
at most :func:`shm_budget` bytes in all (``TURBOLOADER_SHM_BUDGET``; default a share of
``/dev/shm``), past which batches are fresh shared memory freed when dropped, as torch's own
collate makes them. A worker frees its blocks when it exits (both sharing strategies); those
of a killed worker that the main process received are unlinked when the loader sees it die
(:func:`workers_exited`). When ``/dev/shm`` cannot hold even one batch,
:class:`~turboloader.errors.SharedMemoryError` says so (and names Docker's ``--shm-size``)
instead of a bus error.

Samples (``DataLoader(dataset, batch_size=B)``) reach the same shared blocks through torch's
collate: in a worker, the images a dataset yields from its recycled blocks are :class:`_Row`
tensors, for which ``torch.utils.data.default_collate`` (through ``default_collate_fn_map``,
torch's documented way to extend it) stacks the batch into a recycled shared block, or sends
the rows' own block when the batch is exactly its leading rows.
"""

from __future__ import annotations

from typing import Any
import errno
import os
import threading
import time
import weakref

import numpy as np
import torch

from turboloader.errors import SharedMemoryError
from turboloader.io.sizes import parse_size

__all__ = ["BufferPool", "as_row", "collated_batch_size", "env_budget", "new_shared",
           "shared_pool", "shm_budget", "workers_exited"]

_ALIGN = 64  # a shared block's release counter sits at the first multiple of this after the data

_NUMPY = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64,
          torch.uint8: np.uint8, torch.int8: np.int8, torch.int16: np.int16,
          torch.int32: np.int32, torch.int64: np.int64, torch.bool: np.bool_}
_BY_NAME = {str(d): d for d in _NUMPY}


def _own_storage(array, release=None, *args) -> torch.Tensor:
    """``torch.from_numpy(array)``, keeping ``array`` and calling ``release(*args)`` (when
    given) until and when its torch storage dies.

    Not when the storage lets go of the memory: ``share_memory_()``, or pickling the tensor
    to another process (a ``torch.multiprocessing`` queue), copies a storage that is not
    torch's shared memory into new shared memory and frees the old memory at once, while a
    NumPy array (``.numpy()``) or DLPack capsule of the tensor still points there. Those
    hold the storage (through the tensor), never the memory, so the memory (``array``) is
    kept by the storage's Python object, which torch keeps alive as long as the storage
    lives, and only then may the pool rewrite or unmap it."""
    out = torch.from_numpy(array)
    storage = out.untyped_storage()
    storage._tl_memory = array
    if release is not None:
        weakref.finalize(storage, release, *args).atexit = False
    return out


def _aligned(nbytes) -> np.ndarray:
    """``nbytes`` (at least 1) of process memory, from torch's allocator: 64-byte aligned
    rows for the kernels' stores."""
    return torch.empty(max(nbytes, 1), dtype=torch.uint8).numpy()


def _nbytes(shape, dtype) -> int:
    numel = 1
    for v in shape:
        numel *= int(v)
    return numel * torch.empty((), dtype=dtype).element_size()


def _span(shape, stride, itemsize) -> int:
    """Bytes from a strided view's first element to the end of its last (0 when empty)."""
    if not all(shape):
        return 0
    return (1 + sum((n - 1) * st for n, st in zip(shape, stride))) * itemsize


def _shm_free():
    """``(free, total)`` bytes of the shared-memory file system, or None where there is none."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def _no_room(nbytes, room, after="") -> SharedMemoryError:
    mb = 1 << 20
    free = "" if room is None else (f" but /dev/shm has {room[0] / mb:.0f} MiB free of "
                                    f"{room[1] / mb:.0f} MiB{after}")
    return SharedMemoryError(
        f"a DataLoader worker needs {nbytes / mb:.0f} MiB of shared memory for one batch"
        f"{free}. In Docker, start the container with a larger --shm-size (e.g. "
        f"--shm-size=8g); otherwise lower batch_size or num_workers, or use "
        f"turboloader.DataLoader(backend='threads'), which needs no shared memory")


def _check_shm(nbytes):
    """Raise SharedMemoryError when ``/dev/shm`` cannot hold ``nbytes`` more (torch would
    die of a bus error on first touch instead)."""
    room = _shm_free()
    if room is not None and room[0] < nbytes:
        raise _no_room(nbytes, room)


def _new_shared_storage(nbytes) -> torch.UntypedStorage:
    """``nbytes`` of torch's shared memory, after :func:`_check_shm`.

    Raises:
        SharedMemoryError: no room, also when other processes took it between the check and
            the allocation (torch's ``RuntimeError``, ENOSPC, is its cause).
    """
    _check_shm(nbytes)
    try:
        return torch.UntypedStorage._new_shared(nbytes)
    except RuntimeError as exc:
        text = str(exc)
        if "No space left on device" not in text and f"({errno.ENOSPC})" not in text:
            raise
        raise _no_room(nbytes, _shm_free(), " (other processes filled it meanwhile)") from exc


def new_shared(shape, dtype) -> torch.Tensor:
    """An uninitialised tensor in torch's shared memory from the start (sending it to another
    process copies nothing; torch frees it when every process dropped it).

    Raises:
        SharedMemoryError: ``/dev/shm`` has no room for it.
    """
    storage = _new_shared_storage(_nbytes(shape, dtype))
    return torch.empty((0,), dtype=dtype).set_(storage, 0, tuple(shape))


def shm_budget(num_workers=1) -> int:
    """Bytes of recycled shared memory one DataLoader worker may keep.

    ``TURBOLOADER_SHM_BUDGET`` (bytes or ``"2GB"``; ``0``: recycle nothing) when set; else an
    eighth of ``/dev/shm`` shared by this node's workers (``num_workers`` x the
    ``LOCAL_WORLD_SIZE`` that torchrun sets). Past it a worker's batches are fresh shared
    memory, freed when dropped (torch's own behaviour).
    """
    env = env_budget()
    if env is not None:
        return env
    room = _shm_free()
    if room is None:
        return 0
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return room[1] // 8 // (max(1, int(num_workers)) * local)


def env_budget():
    """Bytes ``TURBOLOADER_SHM_BUDGET`` sets, or None when it is not set (or empty).

    Raises:
        ValueError: the variable is not a size (the message names it). A loader checks it
            in the main process, where it is made, rather than from its workers.
    """
    env = os.environ.get("TURBOLOADER_SHM_BUDGET")
    if not env:
        return None
    try:
        return parse_size(env)
    except ValueError as exc:
        raise ValueError(f"the environment variable TURBOLOADER_SHM_BUDGET={env!r} is not a "
                         f"size of shared memory ({exc}; '0' turns recycling off)") from None


class _Block:
    """One buffer of a pool: its memory and who may still read it."""

    __slots__ = ("key", "nbytes", "array", "base", "ptr", "out", "sent", "counter", "name")

    def __init__(self, key, nbytes, array, base=None, counter=None, name=None):
        self.key, self.nbytes, self.array = key, nbytes, array
        self.base = base  # shared: the uint8 tensor over the whole block, sent by handle
        self.name = name  # its shared-memory file under the file_system strategy, else None
        self.ptr = array.ctypes.data
        self.out = 0  # live hand-outs in this process
        self.sent = 0  # sends to other processes (shared blocks)
        self.counter = counter  # shared: releases counted by the receivers

    def free(self) -> bool:
        return self.out == 0 and (self.counter is None or int(self.counter[0]) == self.sent)


class BufferPool:
    """Tensors of a few (shape, dtype) kinds whose memory is reused once it is given back
    (see the module docstring for when that is).

    Args:
        capacity: blocks kept per kind; past it (or past ``budget``), new memory is handed
            out untracked (freed as usual when dropped), so a consumer that keeps every
            batch never makes the pool grow without bound.
        pin: allocate in pinned memory. Pinned buffers are not pooled here: torch's caching
            host allocator already recycles pinned blocks, and it also waits for
            asynchronous copies still reading a block before reusing it.
        shared: blocks in shared memory, for batches a DataLoader worker sends to the main
            process with :meth:`send`.
        budget: bytes of blocks kept in all (None: no limit beyond ``capacity``).

    Thread-safe.
    """

    def __init__(self, capacity: int = 8, *, pin: bool = False, shared: bool = False,
                 budget: Any = None) -> None:
        self.capacity = int(capacity)
        self.pin = bool(pin)
        self.shared = bool(shared)
        self.budget = None if budget is None else int(budget)
        self._blocks = {}  # (shape, dtype) -> [_Block]
        self._by_ptr = {}  # block address -> _Block
        self._kept = 0
        self._files = ()  # the blocks' shared-memory file names (file_system strategy)
        self._lock = threading.RLock()  # a hand-out's return may run inside get() (GC)
        self.allocated = self.reused = self.waited = 0

    def get(self, shape, dtype=torch.float32, *, wait=None) -> torch.Tensor:
        """A tensor of ``shape`` and ``dtype`` with undefined contents that nothing else
        reads: a block given back, or new memory.

        Args:
            wait: when all ``capacity`` blocks of the kind are out, poll (every 0.5 to 5 ms)
                for one to come back for as long as ``wait()`` is False, then allocate an
                untracked buffer. A loader passes "the consumer is not waiting for a batch":
                while the consumer works on a batch, the producers, already ahead, wait for
                the one it drops next instead of growing the resident set; once it waits, a
                consumer that keeps its batches gets new memory at once. None: allocate at
                once.

        Raises:
            SharedMemoryError: a shared pool, and ``/dev/shm`` has no room for the batch.
        """
        shape = tuple(int(v) for v in shape)
        if self.pin:
            self.allocated += 1
            return torch.empty(shape, dtype=dtype, pin_memory=True)
        key = (shape, dtype)
        if dtype in _NUMPY:
            with self._lock:
                got = self._take(key, fresh=True)
            if got is not None:
                return got
            if wait is not None:
                pause = 0.0005
                while not wait():
                    time.sleep(pause)
                    pause = min(pause * 2, 0.005)  # a consumer busy for long costs few wake-ups
                    with self._lock:
                        got = self._take(key, fresh=False)
                    if got is not None:
                        self.waited += 1
                        return got
        self.allocated += 1
        if self.shared:
            return new_shared(shape, dtype)
        if dtype in _NUMPY:  # untracked, but as safe to move as a block's hand-out
            nbytes = _nbytes(shape, dtype)
            return _own_storage(_aligned(nbytes)[:nbytes].view(_NUMPY[dtype]).reshape(shape))
        return torch.empty(shape, dtype=dtype)

    def _take(self, key, *, fresh):
        """A hand-out of a free block of ``key``, or (``fresh``) of a new one when there is
        room; else None. Holds the lock."""
        blocks = self._blocks.setdefault(key, [])
        for block in blocks:
            if block.free():
                self.reused += 1
                return self._hand_out(block)
        if not fresh or len(blocks) >= self.capacity:
            return None
        nbytes = _nbytes(*key)
        if self.budget is not None and self._kept + nbytes > self.budget:
            return None
        block = self._new(key, nbytes)
        blocks.append(block)
        self._by_ptr[block.ptr] = block
        if block.name is not None:
            self._files += (block.name,)
        self._kept += nbytes
        self.allocated += 1
        return self._hand_out(block)

    def _new(self, key, nbytes):
        if not self.shared:
            return _Block(key, nbytes, _aligned(nbytes))
        at = -(-nbytes // _ALIGN) * _ALIGN
        storage = _new_shared_storage(at + _ALIGN)
        name = None
        if torch.multiprocessing.get_sharing_strategy() == "file_system":
            name = storage._share_filename_cpu_()[1].decode()  # (already a file: no copy)
        base = torch.empty((0,), dtype=torch.uint8).set_(storage, 0, (at + _ALIGN,))
        array = base.numpy()
        counter = array[at:at + 8].view(np.uint64)
        counter[0] = 0
        return _Block(key, nbytes, array, base, counter, name)

    def _hand_out(self, block):
        """A new torch storage over ``block``: the block is out until that storage dies."""
        shape, dtype = block.key
        view = block.array[:block.nbytes].view(_NUMPY[dtype]).reshape(shape)
        block.out += 1
        return _own_storage(view, self._given_back, block)

    def _given_back(self, block):
        with self._lock:
            block.out -= 1

    def send(self, tensor):
        """``tensor`` ready to cross to another process: when it lies in one of this pool's
        shared blocks, the same memory as a tensor that ``ForkingPickler`` (a worker queue)
        sends by handle, counting a send that the receiver releases; otherwise ``tensor``."""
        if not self.shared or self._sending(tensor, count=False) is None:
            return tensor
        out = tensor.as_subclass(_Recycled)
        out._tl_pool = self
        return out

    def _sending(self, tensor, *, count=True):
        """``(block, byte offset)`` of ``tensor`` when it is a hand-out (or a view of one) of
        a shared block still in place, counting a send; else None."""
        if tensor.dtype not in _NUMPY or tensor.device.type != "cpu":
            return None
        with self._lock:
            block = self._by_ptr.get(tensor.untyped_storage().data_ptr())
            if block is None or block.base is None:
                return None
            offset = tensor.data_ptr() - block.ptr
            span = _span(tensor.shape, tensor.stride(), tensor.element_size())
            if offset < 0 or offset + span > block.nbytes:
                return None
            if count:
                block.sent += 1
            return block, offset

    def block_of(self, tensor):
        """The block ``tensor``'s storage is a hand-out of, or None."""
        with self._lock:
            return self._by_ptr.get(tensor.untyped_storage().data_ptr())

    def clear(self) -> None:
        """Forget every block (memory still handed out or sent lives on there)."""
        with self._lock:
            self._blocks.clear()
            self._by_ptr.clear()
            self._kept = 0
            self._files = ()

    def nbytes(self) -> int:
        """Bytes of the blocks the pool keeps."""
        with self._lock:
            return self._kept


# -- crossing processes ------------------------------------------------------------------------


class _Recycled(torch.Tensor):
    """A batch in a pooled shared block on its way to another process (see
    :meth:`BufferPool.send`). Operations on it give plain tensors; pickled by anything but
    ``ForkingPickler`` (``pickle``, ``torch.save``) it is a plain tensor."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __reduce_ex__(self, protocol):
        return self.as_subclass(torch.Tensor).__reduce_ex__(protocol)


def _reduce_recycled(tensor):
    """``ForkingPickler``'s reduction of a :class:`_Recycled` tensor: the block's handle
    (torch's reduction of its shared base), the view, and a send counted; torch's own
    reduction (a copy) when the tensor no longer lies in the block."""
    from torch.multiprocessing.reductions import reduce_tensor

    plain = tensor.as_subclass(torch.Tensor)
    pool = getattr(tensor, "_tl_pool", None)
    sending = pool._sending(plain) if pool is not None else None
    if sending is None:
        return reduce_tensor(plain)
    block, offset = sending
    at = int(block.counter.ctypes.data - block.ptr)
    # every block's file goes along, so the receiver knows those still in flight too
    return _received, (block.base, offset, tuple(plain.shape), tuple(plain.stride()),
                       str(plain.dtype), at, pool._files, os.getpid())


class _Receipt:
    """What a receiving process owes a block: one release, unless it forked meanwhile."""

    __slots__ = ("counter", "pid", "pinned", "__weakref__")

    def __init__(self, counter):
        self.counter, self.pid, self.pinned = counter, os.getpid(), False

    def release(self):
        if not self.pinned and os.getpid() == self.pid:
            self.counter[0] += 1
        self.counter = None


_receipts = weakref.WeakSet()  # receipts still owed in this process


def _pin_receipts():
    """Before a fork: the child shares every batch this process holds, and its release
    cannot be heard, so none of them is ever released."""
    for receipt in list(_receipts):
        receipt.pinned = True


os.register_at_fork(before=_pin_receipts)


_worker_files = {}  # worker pid -> names of its blocks' shared-memory files (file_system)


def _received(base, offset, shape, stride, dtype, at, files=(), pid=None):
    """The receiving side of :func:`_reduce_recycled`: the block's memory as a tensor of its
    own storage, whose death counts the release (and unmaps the block here). ``files``: the
    sending worker's block files (file_system strategy), for :func:`workers_exited`."""
    if files:
        if pid not in _worker_files and len(_worker_files) >= 64:
            _forget_gone_workers()  # torch's own DataLoader never tells workers_exited
        _worker_files.setdefault(pid, set()).update(files)
    dtype = _BY_NAME[dtype]
    array = base.numpy()
    span = _span(shape, stride, torch.empty((), dtype=dtype).element_size())
    flat = array[offset:offset + span].view(_NUMPY[dtype])
    receipt = _Receipt(array[at:at + 8].view(np.uint64))
    _receipts.add(receipt)
    return _own_storage(flat, receipt.release).as_strided(shape, stride)


def _forget_gone_workers():
    for pid in list(_worker_files):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            del _worker_files[pid]
        except OSError:
            pass


def workers_exited(exitcodes: Any) -> int:
    """Tell the receiving process that DataLoader workers exited (``{pid: exitcode}``).

    Under the ``file_system`` sharing strategy, a worker's blocks are files in ``/dev/shm``
    that torch unlinks when the last process mapping one lets go; a worker that dies
    (SIGKILL, the OOM killer) never lets go, so its blocks would stay until torch's
    manager exits with the main process. A dead worker's (non-zero exit code) blocks that
    this process has heard of (every batch received from it names them all) are unlinked
    here: the memory lives on for whoever still maps it (a batch still held) and is freed
    when they let go. (The worker's share of torch's reference count keeps torch from
    unlinking the name again.) A worker that exited cleanly freed its own; its names are
    forgotten.

    Returns the number of files unlinked.
    """
    freed = 0
    for pid, code in exitcodes.items():
        names = _worker_files.pop(pid, ())
        if not code:
            continue
        for name in names:
            try:
                os.unlink("/dev/shm/" + name.lstrip("/"))
                freed += 1
            except OSError:
                pass
    return freed


_shared = (None, None)  # (pid, pool): a forked child makes its own


def shared_pool(*, create=True):
    """This process's pool of shared batch blocks (each worker process has its own, freed
    when it exits); with ``create=False``, None when this process has none yet."""
    global _shared
    pid, pool = _shared
    if pid != os.getpid():
        if not create:
            return None
        info = torch.utils.data.get_worker_info()
        # a batch being written, one queued, one held
        pool = BufferPool(3, shared=True,
                          budget=shm_budget(info.num_workers if info is not None else 1))
        _shared = (os.getpid(), pool)
        if info is not None:
            # a worker leaves through os._exit: free the blocks first, so that shared memory
            # under the file_system strategy is unlinked once the main process drops it too
            from multiprocessing.util import Finalize

            Finalize(pool, pool.clear, exitpriority=100)
    return pool


# -- samples through torch's default_collate ---------------------------------------------------


class _Row(torch.Tensor):
    """A sample's image inside a DataLoader worker, a row of a recycled block (see
    :func:`as_row`). Operations on it give plain tensors; pickled, it is a plain tensor (a
    copy, through torch's own reduction)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __reduce_ex__(self, protocol):
        return self.as_subclass(torch.Tensor).__reduce_ex__(protocol)


def _reduce_row(tensor):
    from torch.multiprocessing.reductions import reduce_tensor

    return reduce_tensor(tensor.as_subclass(torch.Tensor))


def as_row(image: torch.Tensor) -> torch.Tensor:
    """``image`` (a row of a dataset's recycled block, in a DataLoader worker) as a tensor
    that ``default_collate`` stacks into a recycled shared batch."""
    return image.as_subclass(_Row)


_collated = [0]  # the batch size default_collate last stacked rows into, in this process


def collated_batch_size() -> int:
    """The size of the last batch of rows ``default_collate`` made in this process (0:
    none yet): a worker's dataset writes its next samples into a shared block of that many
    rows, starting at a batch boundary, so that collating them copies nothing."""
    return _collated[0]


def _collate_rows(batch, *, collate_fn_map=None):
    """``default_collate``'s tensor case for :class:`_Row` samples: the same stacked batch,
    in one of the worker's recycled shared blocks: the rows' own block when the batch is
    exactly its first rows in order (nothing copied), else a copy into a new one."""
    elem = batch[0]
    if torch.utils.data.get_worker_info() is None:
        return _torch_collate(batch, collate_fn_map=collate_fn_map)
    _collated[0] = len(batch)
    pool = shared_pool()
    whole = _leading_rows(pool, batch)
    if whole is not None:
        return pool.send(whole)
    out = pool.get((len(batch), *elem.shape), elem.dtype)
    torch.stack(batch, 0, out=out)
    return pool.send(out)


def _leading_rows(pool, batch):
    """Rows ``0..n-1`` of one of ``pool``'s blocks as an ``(n, ...)`` tensor when ``batch``
    is exactly those rows, in order, of one hand-out; else None."""
    elem = batch[0]
    storage = elem.untyped_storage()
    ptr = storage.data_ptr()
    if pool.block_of(elem) is None or elem.storage_offset() != 0 or not elem.is_contiguous():
        return None
    step = elem.numel()
    for i, x in enumerate(batch):
        if (type(x) is not _Row or x.untyped_storage().data_ptr() != ptr or x.shape != elem.shape
                or x.dtype != elem.dtype or x.storage_offset() != i * step
                or not x.is_contiguous()):
            return None
    return torch.empty((0,), dtype=elem.dtype).set_(storage, 0, (len(batch), *elem.shape))


def _register():
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (torch's tensor reductions first)

    ForkingPickler.register(_Recycled, _reduce_recycled)
    ForkingPickler.register(_Row, _reduce_row)


_register()

try:
    from torch.utils.data._utils.collate import collate_tensor_fn as _torch_collate
    from torch.utils.data._utils.collate import default_collate_fn_map
except ImportError:  # another torch: rows collate as plain tensors (fresh shared memory)
    pass
else:
    default_collate_fn_map.setdefault(_Row, _collate_rows)
