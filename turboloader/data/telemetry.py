"""Per-stream statistics, reported through files.

Each stream that reads samples (the main process, each DataLoader worker, or each decode
thread of ``turboloader.DataLoader(backend="threads")``) keeps its own counters in a
:class:`Recorder` and writes a JSON snapshot of them into a private directory owned by the
dataset object that created it, every ``interval`` samples (at most once a second), at the end of each pass over an
iterable dataset, on each skipped sample of a map-style dataset (which has no end of pass
in a worker), and when a worker process exits. The dataset's ``stats()`` in the main
process reads all snapshots. Files rather than a queue: a worker never blocks on a pipe
nobody drains, and the mechanism does not depend on the DataLoader's multiprocessing
context.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.util
import os
import shutil
import sys
import tempfile
import threading
import time
import weakref
from typing import Any

from turboloader.io.files import replace_file

__all__ = ["COUNTERS", "MIN_FLUSH_PERIOD_S", "Recorder", "Telemetry"]

#: Counters kept per epoch.
COUNTERS = ("samples", "bytes_read", "read_s", "decode_s", "transform_s", "failures",
            "cache_hits", "cache_misses", "cache_evictions")
_MAX_LISTED = 10_000  # skipped samples listed per process (the count stays exact)
MIN_FLUSH_PERIOD_S = 1.0  # periodic snapshots of one stream at most this often


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

    def stream_failures(self, epoch_word, num_workers) -> dict:
        """``{logical worker: sorted positions}`` of the items that failed in the pass
        ``epoch_word`` over ``num_workers`` streams, as every process reported them."""
        out = {}
        try:
            files = os.listdir(self.path)
        except FileNotFoundError:
            return out
        for f in files:
            if f.endswith(".failures.jsonl"):
                for line in _read_lines(os.path.join(self.path, f)):
                    s = line.get("stream")
                    if s and s[0] == epoch_word and s[1] == num_workers and s[3] >= 0:
                        out.setdefault(s[2], set()).add(s[3])
        return {w: sorted(v) for w, v in out.items()}

    def collect(self, epoch=None) -> dict:
        """Totals and per-process counters, for one epoch or (``None``) all of them."""
        total: dict[str, Any] = dict.fromkeys(COUNTERS, 0)
        workers, skipped = {}, []
        cache_bytes = 0
        for snap in self.snapshots():
            counters: dict[str, Any] = dict.fromkeys(COUNTERS, 0)
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
        looked = total["cache_hits"] + total["cache_misses"]
        total["cache_hit_rate"] = total["cache_hits"] / looked if looked else None
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
        self.cache = None  # a SampleCache whose gauge goes in the snapshot
        self._unflushed = 0
        self._flushed_at = time.monotonic()
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

    def sample_done(self, n: int = 1) -> None:
        """``n`` more samples delivered: flush every ``interval`` of them, at most once a
        second (a snapshot is a file written and renamed: ~2 ms on a busy machine, which
        every 256 samples would cost a decode thread ~8 us per sample)."""
        self._unflushed += n
        if self._unflushed >= self.interval and \
                time.monotonic() - self._flushed_at >= MIN_FLUSH_PERIOD_S:
            self.flush()

    def failure(self, epoch, shard, key, offset, reason, stream=None) -> None:
        """Count and list a skipped sample; with ``flush_failures``, report it at once
        (map-style datasets: their worker processes have no end-of-pass to flush at).
        ``stream``: ``[epoch word, num_workers, logical worker, position]`` of an iterable
        dataset's item, written before the batch that skips it is handed out (so the main
        process can name a resume point of streams it did not run)."""
        self.counters(epoch)["failures"] += 1
        if self.listed < _MAX_LISTED:
            entry = {"epoch": epoch, "shard": shard, "key": key, "offset": offset,
                     "reason": reason, "worker": self.name}
            if stream is not None:
                entry["stream"] = [int(v) for v in stream]
            line = json.dumps(entry)
            try:
                with open(self.failures_path, "a") as fh:
                    fh.write(line + "\n")  # one write: a reader sees whole lines or none
                self.listed += 1
            except OSError:
                pass  # the owning dataset is gone: nothing to report to
        if self.flush_failures:
            self.flush()

    def flush(self, *, _finalizing=sys.is_finalizing) -> None:
        # A stream left open (an iterator dropped mid-epoch) is closed by the garbage
        # collector, possibly while the interpreter shuts down, when this module's globals
        # (os, json) are already None; nobody reads the snapshot then. The default argument
        # keeps the check reachable (the idiom of the standard library's __del__ methods).
        if _finalizing():
            return
        snap = {"name": self.name, "pid": os.getpid(), "time": time.time(),
                "epochs": {str(e): dict(c) for e, c in list(self.epochs.items())},
                "cache": self.cache.stats() if self.cache is not None else None}
        tmp = f"{self.path}.{os.getpid()}.{threading.get_ident()}.tmp"
        data = json.dumps(snap).encode()   # the C encoder (json.dump's is the Python one)
        try:
            replace_file(self.path, data, tmp=tmp)
        except OSError:
            return  # the owning dataset is gone (its directory removed): nothing to report to
        self._unflushed = 0
        self._flushed_at = time.monotonic()




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
