"""What one pass of a :class:`~turboloader.DataLoader` measured, and the stage table.

Each stage's threads add their busy time, the time they starved on their input queue and
the time they blocked on their output queue. On the thread backend the decode threads also
split their busy time by what the dataset reported through the protocol's ``timing``
callback (:mod:`turboloader.loader.protocol`): reading (gathering the samples' bytes),
decoding (the batch call: decode + transform), and the rest, which is Python (gathering
bookkeeping, the failure policy, batching). The read stage is that measured reading time,
not a figure derived from other counters; a dataset that does not report it shows ``-``.
"""

from __future__ import annotations

from typing import Any
import threading
import time

__all__ = ["STAGES", "RunStats", "StageStats", "bottleneck", "format_stats"]

STAGES = ("read", "decode", "collate", "transfer")


class StageStats:
    """Counters of one stage, added to by its threads (a lock per add: once per batch)."""

    __slots__ = ("name", "concurrency", "busy_s", "wait_in_s", "wait_out_s", "items", "_lock")

    def __init__(self, name, concurrency):
        self.name, self.concurrency = name, concurrency
        self.busy_s = self.wait_in_s = self.wait_out_s = 0.0
        self.items = 0
        self._lock = threading.Lock()

    def add(self, busy=0.0, wait_in=0.0, wait_out=0.0, items=0):
        with self._lock:
            self.busy_s += busy
            self.wait_in_s += wait_in
            self.wait_out_s += wait_out
            self.items += items


class RunStats:
    """Everything measured during one pass (one ``iter(loader)``).

    ``timing(stage, seconds)`` is the callback the thread backend hands the dataset: the
    seconds its decode threads spent reading and decoding."""

    def __init__(self, backend, epoch, concurrency, dataset):
        self.backend, self.epoch = backend, epoch
        self.stages = {name: StageStats(name, c) for name, c in concurrency.items()}
        self.start = time.perf_counter()
        self.end = None
        self.batches = self.samples = 0
        self.consumer_wait_s = 0.0
        self.dataset = dataset
        self.reported = {}  # stage -> seconds the dataset reported through timing()
        self._lock = threading.Lock()
        self.counters0 = self._dataset_counters() if backend == "processes" else None

    def timing(self, stage, seconds):
        with self._lock:
            self.reported[stage] = self.reported.get(stage, 0.0) + seconds

    def _dataset_counters(self):
        stats = getattr(self.dataset, "stats", None)
        if stats is None:
            return None
        try:
            s = stats(self.epoch)
            return {k: float(s[k]) for k in ("read_s", "decode_s", "transform_s")}
        except Exception:  # a dataset whose stats() differs: no figures from it
            return None

    def report(self) -> dict:
        elapsed = (self.end or time.perf_counter()) - self.start
        out = {"backend": self.backend, "epoch": self.epoch, "batches": self.batches,
               "samples": self.samples, "elapsed_s": elapsed,
               "samples_per_s": self.samples / elapsed if elapsed > 0 else 0.0,
               "batches_per_s": self.batches / elapsed if elapsed > 0 else 0.0,
               "consumer_wait_s": self.consumer_wait_s, "stages": {}}
        busy = {name: s.busy_s for name, s in self.stages.items()}
        measured = {}  # read/decode seconds, or None where nothing measured them
        if self.backend == "threads":
            with self._lock:
                reported = dict(self.reported)
            threads_busy = busy["decode"]
            read = reported.get("read")
            decode = reported.get("decode")
            measured["read"] = read
            busy["read"] = read or 0.0
            busy["decode"] = threads_busy - (read or 0.0)
            out["decode_threads"] = {
                "busy_s": threads_busy, "read_s": read, "decode_s": decode,
                "python_s": (None if decode is None else
                             max(0.0, threads_busy - (read or 0.0) - decode))}
        else:  # worker processes: only their counters (flushed every stats_interval) say
            now = self._dataset_counters()
            c0 = self.counters0
            if now is not None and c0 is not None:
                busy["read"] = now["read_s"] - c0["read_s"]
                busy["decode"] = (now["decode_s"] - c0["decode_s"]
                                  + now["transform_s"] - c0["transform_s"])
            measured["read"] = busy["read"] if now is not None and c0 is not None else None
        for name, s in self.stages.items():
            items = s.items if name != "read" or s.items else self.samples
            b = busy[name]
            out["stages"][name] = {
                "concurrency": s.concurrency, "busy_s": b, "wait_in_s": s.wait_in_s,
                "wait_out_s": s.wait_out_s, "items": items,
                "items_per_s": items / elapsed if elapsed > 0 else 0.0,
                "measured": measured.get(name, b) is not None,
                # share of the stage's thread-time spent working
                "utilisation": (b / (elapsed * s.concurrency)
                                if elapsed > 0 and isinstance(s.concurrency, int) and s.concurrency
                                else None)}
        out["bottleneck"] = bottleneck(out)
        return out


def bottleneck(report) -> str:
    """What limits the pass, in words: the training loop when the loader kept ahead, else
    the busiest stage per thread (for the decode threads, with what they spent it on)."""
    stages = {k: v for k, v in report["stages"].items() if v["utilisation"] is not None}
    if not stages:
        return "unknown"
    if report["elapsed_s"] > 0 and report["consumer_wait_s"] < 0.05 * report["elapsed_s"]:
        return "the training loop (the loader was ahead)"
    name = max(stages, key=lambda k: stages[k]["utilisation"])
    text = f"{name} (busiest per thread: {stages[name]['utilisation']:.0%})"
    dt = report.get("decode_threads")
    if name == "decode" and dt and dt["decode_s"] is not None and dt["busy_s"] > 0:
        b = dt["busy_s"]
        share = {"decoding": dt["decode_s"] / b, "reading": (dt["read_s"] or 0.0) / b,
                 "Python": dt["python_s"] / b}
        top = max(share, key=share.__getitem__)
        text += f"; its threads spent {share[top]:.0%} of their time {top}"
        if report["stages"]["decode"]["utilisation"] < 0.8:
            text += " and were often idle (the GIL, or too few threads for the cores)"
    return text


def format_stats(report: Any) -> str:
    """``loader.stats()`` as the text table :func:`~turboloader.profile` prints."""
    lines = [f"turboloader.DataLoader ({report['backend']}), epoch {report['epoch']}: "
             f"{report['batches']} batches, {report['samples']} samples in "
             f"{report['elapsed_s']:.2f} s = {report['samples_per_s']:.1f} samples/s; "
             f"the loop waited {report['consumer_wait_s']:.2f} s for batches",
             f"{'stage':<10}{'threads':>8}{'busy s':>9}{'util':>7}{'starved s':>11}"
             f"{'blocked s':>11}{'items':>8}{'items/s':>10}"]
    for name, s in report["stages"].items():
        util = "-" if s["utilisation"] is None else f"{s['utilisation']:.0%}"
        busy = f"{s['busy_s']:>9.2f}" if s.get("measured", True) else f"{'-':>9}"
        lines.append(f"{name:<10}{s['concurrency']!s:>8}{busy}{util:>7}"
                     f"{s['wait_in_s']:>11.2f}{s['wait_out_s']:>11.2f}{s['items']:>8}"
                     f"{s['items_per_s']:>10.1f}")
    dt = report.get("decode_threads")
    if dt and dt["busy_s"] > 0 and dt["decode_s"] is not None:
        b = dt["busy_s"]
        lines.append(f"decode threads: {dt['decode_s'] / b:.0%} decoding (batch calls), "
                     f"{(dt['read_s'] or 0.0) / b:.0%} reading, {dt['python_s'] / b:.0%} "
                     f"Python (gather, policy, batching)")
    lines.append(f"bottleneck: {report.get('bottleneck') or bottleneck(report)}")
    return "\n".join(lines)
