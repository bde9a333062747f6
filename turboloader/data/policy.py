"""The failure policy (skip or raise, with a budget), per-process statistics, shared epoch.

The datasets route every data error through :meth:`FailureLog.record`, the one place that
decides between raising and skipping. Only :class:`~turboloader.errors.TurboLoaderError`
is ever skipped; anything else (TypeError in a transform, OSError reading a file) is a
programming or environment error and propagates.

Statistics: each stream that reads samples (the main process, each DataLoader worker, or
each decode thread of ``turboloader.DataLoader(backend="threads")``) keeps its own counters
in a :class:`Recorder` and writes a JSON snapshot of them into a private directory owned by
the dataset object that created it, every ``interval`` samples, at the end of each pass over
an iterable dataset, on each skipped sample of a map-style dataset (which has no end of
pass in a worker), and when a worker process exits. The dataset's ``stats()`` in the main
process reads all snapshots. Files rather than a queue:
a worker never blocks on a pipe nobody drains, and the mechanism does not depend on the
DataLoader's multiprocessing context.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import multiprocessing.context
import multiprocessing.util
import numbers
import os
import shutil
import tempfile
import threading
import time
import weakref

from turboloader.errors import FailureBudgetExceeded, TurboLoaderError

__all__ = [
    "AUTO_EPOCH",
    "COUNTERS",
    "EpochMixin",
    "FailureLog",
    "FailurePolicy",
    "Recorder",
    "SharedEpoch",
    "Telemetry",
    "torch_epoch_word",
]

#: Counters kept per epoch.
COUNTERS = ("samples", "bytes_read", "read_s", "decode_s", "transform_s", "failures",
            "cache_hits", "cache_misses", "cache_evictions")
_MAX_LISTED = 10_000  # skipped samples listed per process (the count stays exact)


def _spawning() -> bool:
    return multiprocessing.context.get_spawning_popen() is not None


class FailurePolicy:
    """What to do when a sample cannot be read: ``"raise"`` or ``"skip"`` within a budget.

    Args:
        on_error: ``"raise"`` (default) re-raises the typed error, with notes naming the
            shard/file, key and byte offset; ``"skip"`` records it and moves on.
        max_failures: the skip budget per process (main or each DataLoader worker) per
            epoch: an int count, or a float in [0, 1) taken as a fraction of the samples
            that process is assigned in the epoch, and never less than one failure (so a
            small run, or a worker share under 100 samples, survives one bad file). One more
            failure than the budget raises :class:`FailureBudgetExceeded`. Default 0.01
            (1 %, at least 1). ``0`` allows none.

    Raises:
        ValueError: unknown ``on_error`` or a negative / out-of-range ``max_failures``.
        TypeError: ``max_failures`` is not a number.
    """

    def __init__(self, on_error="raise", max_failures=0.01):
        if on_error not in ("raise", "skip"):
            raise ValueError(f'on_error must be "raise" or "skip", got {on_error!r}')
        if isinstance(max_failures, bool) or not isinstance(max_failures, numbers.Real):
            raise TypeError(f"max_failures must be an int or a float, not {type(max_failures).__name__}")
        if isinstance(max_failures, numbers.Integral):
            if max_failures < 0:
                raise ValueError(f"max_failures must be >= 0, got {max_failures}")
            max_failures = int(max_failures)
        elif not 0 <= max_failures < 1:
            raise ValueError(f"a fractional max_failures must be in [0, 1), got {max_failures}")
        self.on_error = on_error
        self.max_failures = max_failures

    def budget(self, n_items: int) -> float:
        """Failures allowed among ``n_items`` samples."""
        if isinstance(self.max_failures, int):
            return self.max_failures
        if self.max_failures == 0:
            return 0
        return max(1.0, self.max_failures * n_items)

    def __repr__(self):
        return f"FailurePolicy(on_error={self.on_error!r}, max_failures={self.max_failures!r})"


class FailureLog:
    """Failures of one process in one epoch, under a :class:`FailurePolicy`."""

    def __init__(self, policy: FailurePolicy, n_items: int, *, epoch: int, recorder=None):
        self.policy = policy
        self.n_items = n_items
        self.epoch = epoch
        self.recorder = recorder
        self.failures = []  # (shard, key, reason)
        self.count = 0

    def record(self, exc: BaseException, *, shard, key, offset=None) -> None:
        """Raise ``exc`` under ``"raise"``; under ``"skip"`` count and list it, raising
        :class:`FailureBudgetExceeded` (caused by ``exc``) once over budget.

        Must be called from the ``except`` block that caught ``exc``.
        """
        if not isinstance(exc, TurboLoaderError) or self.policy.on_error == "raise":
            raise exc
        self.count += 1
        reason = f"{type(exc).__name__}: {exc}"
        self.failures.append((shard, key, reason))
        if self.recorder is not None:
            self.recorder.failure(self.epoch, shard, key, offset, reason)
        budget = self.policy.budget(self.n_items)
        if self.count > budget:
            if self.recorder is not None:
                self.recorder.flush()
            raise FailureBudgetExceeded(
                f"{self.count} samples failed in epoch {self.epoch}, over the budget of "
                f"max_failures={self.policy.max_failures!r} ({math.floor(budget)} of "
                f"{self.n_items} samples in this process); last: {reason}",
                self.failures,
            ) from exc


AUTO_EPOCH = 1 << 62
"""Epoch words at or above this are automatic: drawn from torch's RNG for a pass that no
``set_epoch`` call named. ``set_epoch`` values stay below it, so the two never collide."""


def _mix64(*words) -> int:
    x = 0
    for w in words:
        x = (x ^ (int(w) & 0xFFFFFFFFFFFFFFFF)) + 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x


def torch_epoch_word() -> int:
    """An automatic epoch word drawn from torch's global RNG (so ``torch.manual_seed`` and a
    DataLoader worker's seeding reproduce it)."""
    import torch

    return AUTO_EPOCH | int(torch.randint(0, AUTO_EPOCH, (), dtype=torch.int64))


class SharedEpoch:
    """The epoch set in the main process and read by DataLoader workers, persistent ones too.

    ``value`` is -1 until ``set_epoch`` is called (automatic epochs, see :class:`EpochMixin`).
    ``claim`` marks which pass used an automatic epoch pinned by ``load_state_dict``. Backed by
    ``multiprocessing.RawValue`` (shared memory, no lock). It travels to workers by fork or
    when a spawned worker starts; any other pickling (e.g. a copy sent elsewhere) carries the
    current values instead.
    """

    def __init__(self, value: int = -1):
        self._value = multiprocessing.RawValue("q", int(value))
        self._claim = multiprocessing.RawValue("q", 0)

    @property
    def value(self) -> int:
        return int(self._value.value)

    @value.setter
    def value(self, v: int) -> None:
        self._value.value = int(v)
        self._claim.value = 0

    @property
    def claim(self) -> int:
        return int(self._claim.value)

    @claim.setter
    def claim(self, v: int) -> None:
        self._claim.value = int(v)

    def __getstate__(self):
        if _spawning():
            return {"shared": self._value, "claim": self._claim}
        return {"value": self.value, "claim_value": self.claim}

    def __setstate__(self, state):
        if "shared" in state:
            self._value, self._claim = state["shared"], state["claim"]
        else:
            self._value = multiprocessing.RawValue("q", state["value"])
            self._claim = multiprocessing.RawValue("q", state.get("claim_value", 0))


class EpochMixin:
    """Epochs over a :class:`SharedEpoch` in ``self._epoch``, in one of two modes.

    * **Explicit** (after ``set_epoch(e)``, from the main process): the pass's order and
      augmentations are a function of ``(seed, e)``: the same on any run, any number of
      workers, and resumable mid-epoch.
    * **Automatic** (no ``set_epoch`` call, the default): every pass draws a fresh epoch word
      from torch's RNG, as torchvision's transforms and torch's samplers do: new
      augmentations (and, for ``TarDataset``, a new order) every epoch under a plain
      ``torch.utils.data.DataLoader``, reproducible from ``torch.manual_seed`` (and, with
      workers, the loader's ``generator``).
    """

    @property
    def epoch(self) -> int:
        """The epoch given to ``set_epoch`` (0 while epochs are automatic)."""
        return max(self._epoch.value, 0)

    @property
    def auto_epochs(self) -> bool:
        """True until ``set_epoch`` is called: each pass draws its own epoch from torch's RNG."""
        return self._epoch.value < 0

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that orders and augments the next pass (call from the main process).

        From then on the dataset is in explicit mode: passes repeat their epoch's order and
        augmentations until ``set_epoch`` is called again."""
        epoch = int(epoch)
        if not 0 <= epoch < AUTO_EPOCH:
            raise ValueError(f"epoch must be in [0, 2**62), got {epoch}")
        self._epoch.value = epoch

    def _sample_epoch(self) -> int:
        """The epoch word of one map-style sample: the explicit epoch, else a fresh draw from
        torch's RNG (the worker's own stream, seeded by the DataLoader per worker and epoch)."""
        v = self._epoch.value
        return v if v >= 0 else torch_epoch_word()


def _remove_dir(path, owner):
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


class Telemetry:
    """A directory where the processes reading a dataset leave snapshots of their counters.

    Created by the dataset in the main process and removed when that object is collected
    (never by a forked copy). Picklable: it is just the path.
    """

    def __init__(self):
        self.path = tempfile.mkdtemp(prefix="turboloader-stats-")
        self._finalizer = weakref.finalize(self, _remove_dir, self.path, os.getpid())

    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        self.path = state["path"]
        self._finalizer = None

    def recorder(self, name: str, *, interval: int = 256, flush_failures: bool = False) -> "Recorder":
        """A recorder for the stream ``name``, continuing from any snapshot that name left."""
        return Recorder(os.path.join(self.path, f"{name}.json"), name, interval=interval,
                        flush_failures=flush_failures)

    def snapshots(self) -> list[dict]:
        out = []
        try:
            files = sorted(os.listdir(self.path))
        except FileNotFoundError:
            return out
        for f in files:
            if f.endswith(".json"):
                try:
                    with open(os.path.join(self.path, f)) as fh:
                        snap = json.load(fh)
                except (OSError, ValueError):
                    continue  # vanished or being replaced: os.replace makes this rare
                snap["failures"] = _read_lines(
                    os.path.join(self.path, f[: -len(".json")] + ".failures.jsonl"))
                out.append(snap)
        return out

    def collect(self, epoch=None) -> dict:
        """Totals and per-process counters, for one epoch or (``None``) all of them."""
        total = dict.fromkeys(COUNTERS, 0)
        workers, skipped = {}, []
        cache_bytes = 0
        for snap in self.snapshots():
            counters = dict.fromkeys(COUNTERS, 0)
            for e, c in snap["epochs"].items():
                if epoch is None or int(e) == epoch:
                    for k in COUNTERS:
                        counters[k] += c.get(k, 0)
            for k in COUNTERS:
                total[k] += counters[k]
            cache = snap.get("cache") or {}
            cache_bytes += cache.get("bytes", 0)
            counters["cache"] = cache
            counters["pid"] = snap["pid"]
            workers[snap["name"]] = counters
            skipped.extend(f for f in snap["failures"] if epoch is None or f["epoch"] == epoch)
        total["cache_bytes"] = cache_bytes
        total["skipped"] = skipped
        total["workers"] = workers
        return total


class Recorder:
    """Counters of one reading stream (the main process, a DataLoader worker, or one of the
    thread backend's decode threads), per epoch.

    Two files: ``<name>.json``, a snapshot of the counters replaced whole on each
    :meth:`flush`, and ``<name>.failures.jsonl``, one line appended per listed failure, so
    reporting a failure at once costs one small write however many came before.
    Each recorder is written by one thread at a time, plus ``stats()`` flushing it from the
    main thread; the temporary file is per thread so those two never collide.
    """

    def __init__(self, path, name, *, interval=256, flush_failures=False):
        self.path = path
        self.failures_path = path[: -len(".json")] + ".failures.jsonl"
        self.name = name
        self.interval = interval
        self.flush_failures = bool(flush_failures)
        self.epochs = {}
        self.listed = 0  # failures in the .failures.jsonl file
        self.cache = None  # a ByteLRU whose gauge goes in the snapshot
        self._unflushed = 0
        try:
            with open(path) as fh:
                snap = json.load(fh)
            self.epochs = {int(e): c for e, c in snap["epochs"].items()}
        except (OSError, ValueError, KeyError):
            pass
        self.listed = len(_read_lines(self.failures_path))
        if multiprocessing.parent_process() is not None:
            # a worker process: write the tail when it exits cleanly
            multiprocessing.util.Finalize(self, self.flush, exitpriority=10)

    @property
    def failures(self) -> list[dict]:
        """The failures listed so far (at most 10,000; the count in the counters is exact)."""
        return _read_lines(self.failures_path)

    def counters(self, epoch: int) -> dict:
        c = self.epochs.get(epoch)
        if c is None:
            c = self.epochs[epoch] = dict.fromkeys(COUNTERS, 0)
        return c

    def sample_done(self) -> None:
        self._unflushed += 1
        if self._unflushed >= self.interval:
            self.flush()

    def failure(self, epoch, shard, key, offset, reason) -> None:
        """Count and list a skipped sample; with ``flush_failures``, report it at once
        (map-style datasets: their worker processes have no end-of-pass to flush at)."""
        self.counters(epoch)["failures"] += 1
        if self.listed < _MAX_LISTED:
            line = json.dumps({"epoch": epoch, "shard": shard, "key": key, "offset": offset,
                               "reason": reason, "worker": self.name})
            try:
                with open(self.failures_path, "a") as fh:
                    fh.write(line + "\n")  # one write: a reader sees whole lines or none
                self.listed += 1
            except OSError:
                pass  # the owning dataset is gone: nothing to report to
        if self.flush_failures:
            self.flush()

    def flush(self) -> None:
        snap = {"name": self.name, "pid": os.getpid(), "time": time.time(),
                "epochs": {str(e): dict(c) for e, c in list(self.epochs.items())},
                "cache": self.cache.stats() if self.cache is not None else None}
        tmp = f"{self.path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            with open(tmp, "w") as fh:
                json.dump(snap, fh)
            os.replace(tmp, self.path)
        except OSError:
            return  # the owning dataset is gone (its directory removed): nothing to report to
        self._unflushed = 0


def _read_lines(path) -> list[dict]:
    """The JSON lines of ``path`` ([] if absent); a torn last line (being written) is left out."""
    out = []
    try:
        with open(path) as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return out
