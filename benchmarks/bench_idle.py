"""Where the thread backend leaves the two cores idle in run.py's epochs, from the
scheduler's own record (``perf sched``), and what run.py's memory sampler costs.

    python benchmarks/bench_idle.py --data-root benchmarks/data --n 2048 --epochs 3
    python benchmarks/bench_idle.py --data-root benchmarks/data --n 2048 --sampler

The loader is run.py's ``turboloader-threads`` row itself (``systems/tl_ours.py``, variant
``threads``: ``DataLoader(TarDataset(shards/), backend="threads", num_workers=2)``, batch 256),
its epochs timed as ``systems/_harness.py`` times them (the clock starts before
``iter()`` and stops after the last batch), one warm-up epoch first and ``--pause`` seconds
between epochs (run.py stops a system between its steps). Data: run.py's
(``<data-root>/bench-n<N>-s0/shards``; run run.py once to make it).

Under ``perf sched record`` (when ``perf`` is installed and may trace the scheduler), each
thread of the process is followed through the epoch: running, runnable (on the run queue:
another process has the core) or asleep (waiting for the GIL, the runner, a queue, I/O). The
cores the loader itself leaves idle are the times fewer than two of its threads want one
(``loader-idle``, core-ms); on a loaded machine those moments last longer than they would on
a quiet one, so they are also given scaled to a quiet machine (each moment weighted by the
share of its runnable threads that ran: ``quiet util`` = CPU / (CPU + scaled idle)). The
idle is split by where the epoch stood: ``start`` (``iter()`` to the first native batch
call), ``call`` (a call in flight: its last images on one core), ``gap`` (between calls:
both streams in Python) and ``tail`` (the last call's end to the epoch's end), with the
threads that were active then. Without ``perf`` only images/s, CPU and utilization
(CPU seconds over 2 x wall) are printed.

``--sampler`` also runs run.py's memory sampler (``run.Sampler``: RSS and PSS of the timed
system's process tree every 0.2 s, the tree re-read every second) on the loader's process
from a side process, as run.py does during every timed epoch, and prints its CPU per sample.
A one-thread loop (the full-decode limit's) leaves a core free for it; a two-thread loader
pays it out of its two cores.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORES = 2


# ------------------------------------------------------------------------------- the child
def _sampler_main(pid: int) -> None:
    """run.py's Sampler on process ``pid`` until SIGINT; prints its CPU."""
    sys.path.insert(0, str(HERE))
    import run

    class Proc:
        pass

    h = type("H", (), {})()
    h.proc, h.peaks, h.phase = Proc(), {}, "epoch"
    h.proc.pid = pid
    s = run.Sampler()
    s.active = h
    n = 0
    t0 = time.monotonic()
    try:
        while True:
            s.sample()
            n += 1
            time.sleep(s.period)
    except KeyboardInterrupt:
        pass
    t = os.times()
    print(json.dumps({"sampler": {"samples": n, "seconds": time.monotonic() - t0,
                                  "cpu_s": t.user + t.system, "sys_s": t.system,
                                  "rss_mib": h.peaks.get("epoch", {}).get("rss", 0) / 2**20}}),
          flush=True)


def _child(a) -> None:
    sys.path.insert(0, str(HERE / "systems"))
    import _harness as H
    import tl_ours
    from turboloader.loader import _iterable

    log = []
    orig = _iterable.SharedRunner.run_batch

    def run_batch(self, *args, **kw):
        t0 = time.monotonic()
        try:
            return orig(self, *args, **kw)
        finally:
            log.append(["call", threading.get_native_id(), t0, time.monotonic()])

    _iterable.SharedRunner.run_batch = run_batch
    data = Path(a.data_root) / f"bench-n{a.n}-s0"
    args = H.parse_args(["--data", str(data), "--out", os.devnull, "--variant", "threads",
                         "--workers", str(a.workers), "--batch", str(a.batch)])
    side = None
    if a.sampler:
        side = subprocess.Popen([sys.executable, __file__, "--sampler-of", str(os.getpid())],
                                stdout=subprocess.PIPE, text=True)
    for p in a.pipelines.split(","):
        loader = tl_ours.build(args, p, str(data))
        for e in range(1 + a.epochs):
            time.sleep(a.pause)
            c0 = os.times()
            t0 = time.monotonic()
            count = 0
            for batch in loader.epoch(e):
                count += len(batch[0])
                H._np(batch[1])  # what the harness does with the labels
            t1 = time.monotonic()
            c1 = os.times()
            cpu = (c1.user - c0.user) + (c1.system - c0.system)
            log.append(["epoch", p, e, t0, t1, count, cpu])
        loader.close()
    if side is not None:
        side.send_signal(signal.SIGINT)
        out, _ = side.communicate()
        log.append(["sampler", json.loads(out.strip().splitlines()[-1])["sampler"]])
    Path(a.log).write_text(json.dumps({"pid": os.getpid(), "log": log}))


# ------------------------------------------------------------------------------- analysis
_SW = re.compile(r"prev_comm=(.*) prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> "
                 r"next_comm=(.*) next_pid=(\d+)")
_WK = re.compile(r"comm=(.*) pid=(\d+) prio")


def _segments(perf_data: str, pid: int):
    """{tid: [(t0, t1, 'R' running | 'Q' runnable | 'S' asleep)]} and {tid: comm} of
    process ``pid``'s threads, from the sched_switch / sched_waking events."""
    out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "pid,tid,time,event,trace"],
                         capture_output=True, text=True, check=True).stdout
    ours, comm, ev = {pid}, {}, []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 4 or "/" not in parts[0]:
            continue
        pt, t, e, rest = parts
        spid, tid = pt.split("/")
        try:
            t = float(t.rstrip(":"))
        except ValueError:
            continue
        if spid.isdigit() and int(spid) == pid:
            ours.add(int(tid))
        if e.startswith("sched:sched_switch"):
            m = _SW.search(rest)
            if m:
                ev.append((t, "out", int(m.group(2)), m.group(3)))
                ev.append((t, "in", int(m.group(5)), None))
                comm[int(m.group(2))], comm[int(m.group(5))] = m.group(1), m.group(4)
        elif e.startswith(("sched:sched_waking", "sched:sched_wakeup_new")):
            m = _WK.search(rest)
            if m:
                ev.append((t, "wake", int(m.group(2)), None))
    state, segs = {}, collections.defaultdict(list)
    for t, what, tid, prev_state in ev:
        if tid not in ours:
            continue
        st, since = state.get(tid, ("S", None))
        if what == "in":
            new = "R"
        elif what == "out":
            new = "Q" if prev_state.startswith("R") else "S"
        elif st == "S":
            new = "Q"
        else:
            continue
        if since is not None:
            segs[tid].append((since, t, st))
        state[tid] = (new, t)
    return segs, comm


def idle_by_region(t0, t1, calls, segs, kind) -> dict:
    """Where the cores went in the window ``t0..t1``: ``calls`` the batch calls'
    ``(start, end)``; ``segs`` ``{tid: [(a, b, state)]}`` (state ``R`` running, ``Q``
    runnable, ``S`` asleep; each thread's segments in time order), ``kind(tid)`` a thread's
    kind. Returns per region (``start``, ``call``, ``gap``, ``tail``) the seconds (``dur``),
    the idle core-seconds (``idle``: cores short of the threads that want one), the same
    scaled to a quiet machine (``scaled``: weighted by the share of the wanting threads
    that ran), the core-seconds run (``cpu``); ``who``: scaled idle by (region, threads
    active then); ``kinds``: per kind the seconds in each state; ``first`` / ``last``: the
    first call's start and the last one's end."""
    ec = sorted((a, b) for a, b in calls if a >= t0 - 1e-3 and b <= t1 + 1e-3)
    cov = []
    for a, b in ec:
        if cov and a <= cov[-1][1]:
            cov[-1][1] = max(cov[-1][1], b)
        else:
            cov.append([a, b])
    first = ec[0][0] if ec else t1
    last = max(b for _, b in ec) if ec else t0

    def region(x):
        if x < first:
            return "start"
        if x >= last:
            return "tail"
        return "call" if any(a <= x < b for a, b in cov) else "gap"

    cuts = {t0, t1, *(x for a, b in cov for x in (a, b))}
    kinds = collections.defaultdict(collections.Counter)
    for tid, ss in segs.items():
        for a, b, st in ss:
            lo, hi = max(a, t0), min(b, t1)
            if hi > lo:
                kinds[kind(tid)][st] += hi - lo
                cuts.update((lo, hi))
    cuts = sorted(x for x in cuts if t0 <= x <= t1)
    idx = {tid: 0 for tid in segs}
    out = {k: collections.Counter() for k in ("idle", "scaled", "cpu", "dur", "who")}
    for lo, hi in zip(cuts, cuts[1:]):
        # no thread changes state inside lo..hi: one look at its middle
        mid = (lo + hi) / 2
        act, r, d = [], 0, 0
        for tid, ss in segs.items():
            i = idx[tid]
            while i < len(ss) and ss[i][1] <= mid:
                i += 1
            idx[tid] = i
            if i < len(ss) and ss[i][0] <= mid and ss[i][2] in "RQ":
                d += 1
                r += ss[i][2] == "R"
                act.append(kind(tid) + ("" if ss[i][2] == "R" else " (queued)"))
        rg, dt = region(mid), hi - lo
        out["dur"][rg] += dt
        out["cpu"][rg] += dt * r
        if d < CORES:
            gone = dt * (CORES - d)
            out["idle"][rg] += gone
            s = gone * (r / d if d else 1.0)
            out["scaled"][rg] += s
            out["who"][(rg, ", ".join(sorted(act)) or "none")] += s
    out.update(kinds=kinds, first=first, last=last, calls=len(ec))
    return out


def _epoch_report(ep, calls, segs, kind) -> list:
    _, p, e, t0, t1, count, cpu = ep
    wall = t1 - t0
    r = idle_by_region(t0, t1, [(c[2], c[3]) for c in calls], segs, kind)
    idle, scaled, dur = r["idle"], r["scaled"], r["dur"]
    sc, cr = sum(scaled.values()), sum(r["cpu"].values())
    regions = ("start", "call", "gap", "tail")
    lines = [
        f"{p} epoch {e}: {count / wall:.0f} images/s, wall {wall * 1e3:.0f} ms, CPU "
        f"{cpu * 1e3:.0f} ms (util {cpu / (CORES * wall):.3f}), {r['calls']} calls, first call "
        f"{(r['first'] - t0) * 1e3:.1f} ms after iter(), the last ends "
        f"{(t1 - r['last']) * 1e3:.1f} ms before the end",
        f"  loader-idle {sum(idle.values()) * 1e3:.0f} core-ms "
        f"({sum(idle.values()) / (CORES * wall) * 100:.1f}% of the cores' wall) = "
        + ", ".join(f"{k} {idle[k] * 1e3:.0f} of {dur[k] * 1e3:.0f} ms" for k in regions),
        f"  scaled to a quiet machine: {sc * 1e3:.1f} core-ms idle against {cr * 1e3:.0f} "
        f"core-ms run -> quiet util {cr / (cr + sc) if cr + sc else 0:.3f}; "
        + ", ".join(f"{k} {scaled[k] * 1e3:.1f}" for k in regions),
    ]
    for (rg, act), v in r["who"].most_common(4):
        lines.append(f"    {rg}, active: {act}: {v * 1e3:.1f} core-ms (scaled)")
    for k, c in sorted(r["kinds"].items()):
        lines.append(f"    {k:16} run {c['R'] * 1e3:6.0f}  run queue {c['Q'] * 1e3:6.0f}  "
                     f"asleep {c['S'] * 1e3:6.0f} ms")
    return lines


def analyze(perf_data, log) -> None:
    pid, entries = log["pid"], log["log"]
    calls = [x for x in entries if x[0] == "call"]
    decode = {c[1] for c in calls}
    segs, comm = _segments(perf_data, pid) if perf_data else ({}, {})

    def kind(tid):
        if tid == pid:
            return "main"
        if tid in decode:
            return "decode threads"
        c = comm.get(tid, "")
        return "runner helper" if c.startswith("tl-batch") else f"other ({c})"

    for ep in (x for x in entries if x[0] == "epoch"):
        if ep[2] == 0:
            continue  # the warm-up epoch
        if segs:
            print("\n".join(_epoch_report(ep, calls, segs, kind)), flush=True)
        else:
            _, p, e, t0, t1, count, cpu = ep
            print(f"{p} epoch {e}: {count / (t1 - t0):.0f} images/s, CPU {cpu * 1e3:.0f} ms, "
                  f"util {cpu / (CORES * (t1 - t0)):.3f}")
    for x in entries:
        if x[0] == "sampler":
            s = x[1]
            per = s["cpu_s"] / max(1, s["samples"])
            print(f"run.py's memory sampler on the loader (peak RSS {s['rss_mib']:.0f} MiB): "
                  f"{s['samples']} samples, {per * 1e3:.1f} ms CPU each ({s['sys_s']:.2f} of "
                  f"{s['cpu_s']:.2f} s in the kernel): {per / 0.2:.2f} of a core while a "
                  f"system is timed, {per / 0.2 / CORES * 100:.1f}% of {CORES} cores")


def perf_works() -> bool:
    if shutil.which("perf") is None:
        return False
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(["perf", "sched", "record", "-o", f"{d}/p", "--", "true"],
                           capture_output=True)
        return r.returncode == 0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-root", default=str(HERE / "data"))
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--pipelines", default="train,val")
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs (after one warm-up)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--pause", type=float, default=0.5, help="seconds between epochs")
    ap.add_argument("--sampler", action="store_true", help="run run.py's memory sampler too")
    ap.add_argument("--no-perf", action="store_true", help="no perf sched record")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    ap.add_argument("--sampler-of", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.sampler_of:
        return _sampler_main(a.sampler_of)
    if a.child:
        return _child(a)
    if not (Path(a.data_root) / f"bench-n{a.n}-s0" / "shards").is_dir():
        sys.exit(f"no data under {a.data_root}/bench-n{a.n}-s0: run benchmarks/run.py "
                 f"--n {a.n} once to make it")
    import turboloader

    use_perf = not a.no_perf and perf_works()
    print(f"# bench_idle: n={a.n}, {a.workers} threads, batch {a.batch}, turboloader from "
          f"{os.path.dirname(turboloader.__file__)}, load average {os.getloadavg()[0]:.2f} "
          f"at the start; perf sched: {'yes' if use_perf else 'no'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_idle") as d:
        log = f"{d}/log.json"
        child = [sys.executable, __file__, "--child", "--log", log, "--data-root", a.data_root,
                 "--n", str(a.n), "--pipelines", a.pipelines, "--epochs", str(a.epochs),
                 "--workers", str(a.workers), "--batch", str(a.batch), "--pause", str(a.pause)]
        if a.sampler:
            child.append("--sampler")
        data = f"{d}/perf.data" if use_perf else None
        if use_perf:
            child = ["perf", "sched", "record", "-k", "CLOCK_MONOTONIC", "-o", data, "--"] + child
        # the child imports the same turboloader as this process
        env = dict(os.environ)
        tree = str(Path(turboloader.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(x for x in (tree, env.get("PYTHONPATH")) if x)
        subprocess.run(child, check=True, env=env)
        analyze(data, json.loads(Path(log).read_text()))
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
