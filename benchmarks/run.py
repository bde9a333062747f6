"""End-to-end loader benchmark: images/s of whole data-loading pipelines, one process per system.

    python benchmarks/run.py --quick          # < 3 min on 2 cores: 512 images, 1+1 epochs
    python benchmarks/run.py                  # 2048 ImageNet-sized images, 1+3 epochs
    python benchmarks/run.py --hires          # high-resolution variant (1600-4000 px)
    python benchmarks/run.py --systems torchvision,turboloader-tar --epochs 5

Pipelines (same output for everyone: float32 N x 3 x 224 x 224, ImageNet-normalised, labels):
- train: RandomResizedCrop(224) + RandomHorizontalFlip + normalize, shuffled;
- val: Resize(256) + CenterCrop(224) + normalize, in order.
Every system uses the same batch size (256) and the same number of worker processes or
threads (``--workers``, default 2). Each system runs in its own process, in its own venv where
its package clashes with the dev environment (``benchmarks/setup_envs.py`` creates those).
Each row: median images/s of the timed epochs after the warm-up, the ratio to the classic
baseline (torchvision ImageFolder + v2 + DataLoader) and to the decode limit (libjpeg-turbo full
decode alone, single-threaded x workers), peak memory of the whole process tree (RSS summed
over the process and its workers, and PSS, which counts pages shared between forked workers
once), CPU seconds per image (process tree, timed epochs), and the correctness checks:
labels delivered, every sample exactly once per epoch, output statistics against the
baseline's, and what happened to a truncated JPEG in a separate pass.

Issue 22's rows: NVIDIA DALI's CPU pipeline (``dali``), the thread backend on shards rewritten
by ``turboloader convert --seekable`` (``turboloader-seekable``; ``turboloader-seekable-stock``:
the same with libjpeg-turbo's own Huffman decoder, ``TURBOLOADER_STOCK_HUFFMAN=1``), and the
decoded-sample cache's
filling epoch and epoch from the cache (``turboloader-cache-fill``, ``turboloader-cache``;
``--cache-size``, ``--cache-short-side 0,160``, ``--cache-epochs``), with a table of their
ratios to rows of the same run. Systems run one step at a time; a waiting one is stopped
(SIGSTOP), so none computes ahead off the clock.

Writes ``benchmarks/results/<tag>.md`` (+ ``.json`` with everything measured, ``.png`` chart).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SYSTEMS_DIR = HERE / "systems"
sys.path.insert(0, str(HERE))

import setup_envs  # noqa: E402

BASELINE = "torchvision"
LIMIT = "decode-limit"

# key -> (row label, script, venv name or None for this interpreter, variant, needs repo on path)
SYSTEMS = {
    "turboloader-tar": ("turboloader TarDataset + torch DataLoader", "tl_ours.py", None, "tar", True),
    "turboloader-batched": ("turboloader TarDataset.batched() + torch DataLoader", "tl_ours.py", None, "tar-batched", True),
    "turboloader-folder": ("turboloader ImageFolder + torch DataLoader", "tl_ours.py", None, "folder", True),
    "turboloader-threads": ("turboloader DataLoader(backend='threads')", "tl_ours.py", None, "threads", True),
    "turboloader-threads-stock": ("turboloader DataLoader(backend='threads'), libjpeg-turbo's Huffman decoder (TURBOLOADER_STOCK_HUFFMAN=1)", "tl_ours.py", None, "threads", True),
    "torchvision": ("torchvision ImageFolder + v2 + DataLoader (Pillow)", "tv_folder.py", None, "", False),
    "pillow-simd": ("torchvision ImageFolder + v2 + DataLoader (pillow-simd)", "tv_folder.py", "simd", "", False),
    "webdataset": ("WebDataset + v2 + DataLoader", "wds.py", "webdataset", "", False),
    "turboloader-pypi": ("TurboLoader 2.39.0 (PyPI, C++)", "tl_pypi.py", "turboloader-pypi", "", False),
    "spdl": ("SPDL pipeline (threads)", "spdl_sys.py", "spdl", "", False),
    "dali": ("NVIDIA DALI CPU pipeline (device_id=None)", "dali_sys.py", "dali", "", False),
    "datago": ("datago file source, crop_and_resize (PyPI, Rust)", "datago_sys.py", "datago", "", False),
    "turboloader-seekable": ("turboloader DataLoader(backend='threads'), --seekable shards", "tl_ours.py", None, "threads-seekable", True),
    "turboloader-seekable-stock": ("turboloader DataLoader(backend='threads'), --seekable shards, libjpeg-turbo's Huffman decoder (TURBOLOADER_STOCK_HUFFMAN=1)", "tl_ours.py", None, "threads-seekable", True),
    "turboloader-cache-fill": ("turboloader threads + cache: filling epoch", "tl_ours.py", None, "threads-cache-fill", True),
    "turboloader-cache": ("turboloader threads + cache: epoch from the cache", "tl_ours.py", None, "threads-cache", True),
    LIMIT: ("libjpeg-turbo full decode alone, 1 thread x workers", "decode_limit.py", None, "", True),
}
# systems that run only some pipelines, and those that skip the corrupt-sample pass (they
# share the thread backend's failure policy, which its own row already shows)
ONLY_PIPELINES = {"turboloader-cache-fill": ("train",), "turboloader-cache": ("train",)}
NO_CORRUPT = {"turboloader-seekable", "turboloader-seekable-stock", "turboloader-threads-stock",
              "turboloader-cache-fill", "turboloader-cache"}
SEEKABLE_KEYS = ("turboloader-seekable", "turboloader-seekable-stock")
# environment a system's process gets on top of this one's
SYSTEM_ENV = {"turboloader-seekable-stock": {"TURBOLOADER_STOCK_HUFFMAN": "1"},
              "turboloader-threads-stock": {"TURBOLOADER_STOCK_HUFFMAN": "1"}}
CACHE_KEYS = ("turboloader-cache-fill", "turboloader-cache")
CACHE_SIDE = {}  # cache row key -> its cache_short_side (0: full size); set by expand_cache_rows
_CACHE_LABELS = {k: SYSTEMS[k][0] for k in CACHE_KEYS}


def expand_cache_rows(keys, sides):
    """One pair of cache rows per short side of ``--cache-short-side``: the first side keeps
    the plain keys, the others get ``-s<side>`` keys (registered in SYSTEMS on the fly)."""
    out = []
    for k in keys:
        if k not in CACHE_KEYS:
            out.append(k)
            continue
        for i, side in enumerate(sides):
            key = k if i == 0 else f"{k}-s{side}"
            _, script, venv, variant, repo = SYSTEMS[k]
            head, tail = _CACHE_LABELS[k].split(": ", 1)
            SYSTEMS[key] = (f"{head} (cache_short_side={side or None}): {tail}", script, venv,
                            variant, repo)
            ONLY_PIPELINES[key] = ONLY_PIPELINES[k]
            NO_CORRUPT.add(key)
            CACHE_SIDE[key] = side
            out.append(key)
    return out
THREADS = "turboloader-threads"  # what the DALI, seekable and cache rows are compared with


# ---------------------------------------------------------------- data
def _write_folder(root: Path, items):
    for i, (data, label) in enumerate(items):
        d = root / f"class_{label:05d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:05d}.jpg").write_bytes(data)


def _truncate(jpeg: bytes) -> bytes:
    """The first 45 % of the file: the header parses, the entropy data ends early (libjpeg's
    'premature end of data' warning, which a lenient decoder turns into grey rows)."""
    return jpeg[: int(len(jpeg) * 0.45)]


def prepare_data(root: Path, n: int, seed: int, hires: bool, workers: int, *,
                 corrupt: bool = False) -> Path:
    """Write (once) ``root/{folder,shards,all.tar,manifest.json}``: ``n`` JPEGs from
    ``datasets.make_jpegs`` where image ``i`` has label ``i`` (labels identify samples, so
    'exactly once' is checkable from labels alone). ``corrupt``: the last image is truncated."""
    from datasets import describe, make_jpegs, write_shards

    m = root / "manifest.json"
    if m.exists():
        return root
    t0 = time.time()
    jpegs = make_jpegs(n, seed, hires)
    items = [(data, i) for i, (data, _) in enumerate(jpegs)]
    meta = {"n": n, "seed": seed, "hires": hires}
    if corrupt:
        items[-1] = (_truncate(items[-1][0]), n - 1)
        meta["corrupt_label"] = n - 1
        meta["corrupt"] = "last image truncated to 45 % of its bytes"
    tmp = root.with_name(root.name + ".tmp")
    if tmp.exists():
        import shutil
        shutil.rmtree(tmp)
    _write_folder(tmp / "folder", items)
    shard_size = max(1, min(256, math.ceil(n / (2 * max(workers, 1)))))
    write_shards(tmp / "shards", items, shard_size=shard_size)
    write_shards(tmp, items, shard_size=len(items), prefix="all")
    (tmp / "all-00000.tar").rename(tmp / "all.tar")
    meta["shard_size"] = shard_size
    meta["stats"] = describe(jpegs)
    meta["seconds_to_make"] = round(time.time() - t0, 1)
    (tmp / "manifest.json").write_text(json.dumps(meta, indent=1, default=str))
    tmp.rename(root)
    return root


def prepare_seekable(data: Path, workers: int, log=print) -> dict:
    """Write (once) ``data/shards-seekable/``: ``turboloader convert shards/ shards-seekable/
    --to tar --seekable --no-shuffle`` (this checkout's turboloader, same shard size) and return
    what it took: {"command", "seconds", "bytes_in", "bytes_out"} or {"error"}."""
    dst = data / "shards-seekable"
    meta_f = data / "seekable.json"
    if meta_f.exists() and dst.is_dir():
        return json.loads(meta_f.read_text())
    shard_size = json.loads((data / "manifest.json").read_text())["shard_size"]
    tmp = data / "shards-seekable.tmp"
    cmd = [sys.executable, "-m", "turboloader", "convert", str(data / "shards"), str(tmp),
           "--to", "tar", "--seekable", "--no-shuffle", "--shard-size", str(shard_size),
           "-j", str(max(workers, 1)), "--overwrite"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    log(f"converting {data / 'shards'} -> {dst} (--seekable) ...")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(REPO))
    dt = time.perf_counter() - t0
    shown = "turboloader convert shards/ shards-seekable/ " + " ".join(cmd[6:-1])
    if p.returncode != 0:
        err = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        return {"command": shown, "error": f"convert exited {p.returncode}: {err[:300]}"}

    def jpeg_bytes(folder):
        import tarfile
        total = 0
        for f in sorted(folder.glob("*.tar")):
            with tarfile.open(f) as t:
                total += sum(m.size for m in t.getmembers() if m.name.endswith(".jpg"))
        return total

    meta = {"command": shown, "seconds": round(dt, 2), "bytes_in": jpeg_bytes(data / "shards"),
            "bytes_out": jpeg_bytes(tmp), "shards": len(list(tmp.glob("*.tar")))}
    import shutil
    if dst.exists():
        shutil.rmtree(dst)
    tmp.rename(dst)
    meta_f.write_text(json.dumps(meta, indent=1))
    return meta


# ---------------------------------------------------------------- machine
def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = ""
    try:
        txt = Path("/proc/cpuinfo").read_text()
        flags = ",".join(f for f in ("avx2", "avx512f") if f" {f} " in txt.replace("\n", " "))
    except OSError:
        pass
    try:
        mem = int(Path("/proc/meminfo").read_text().split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        mem = float("nan")
    return {"cpu": cpu, "simd": flags, "cores": os.cpu_count(), "mem_gib": round(mem, 1),
            "os": platform.platform(), "python": platform.python_version(),
            "load_start": os.getloadavg()}


# ---------------------------------------------------------------- process-tree memory
def _children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                s = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(s[s.rfind(")") + 2:].split()[1]), []).append(int(d))
    return kids


class Sampler(threading.Thread):
    """Samples RSS and PSS summed over the *active* system's process tree every ``period``
    seconds (only one system works at a time; its process tree is re-read every second), keeping
    the peak per system and phase (phases come from the system's ``@@PHASE`` lines).

    During a timed epoch it reads RSS only, and PSS once when the epoch has ended: reading PSS
    makes the kernel walk every page table of the process (``smaps_rollup``) under its
    memory-map lock, 60-70 ms of CPU per read of a 1.2 GB loader process
    (``benchmarks/results/issue42-idle.md``). Every 0.2 s that took about a tenth of two cores
    from a two-thread system being timed, and nothing from the one-thread decode limit, which
    leaves a core free. The build and warm-up steps are sampled in full."""

    def __init__(self, period=0.2):
        super().__init__(daemon=True)
        self.period = period
        self.timed = False  # the active step is a timed epoch: RSS only until it ends
        self._tree, self._tree_of, self._tree_at = [], None, 0.0
        self.active = None
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.page = os.sysconf("SC_PAGE_SIZE")

    def sample(self, h=None, pss=True):
        with self.lock:
            h = h or self.active
            if h is None:
                return
            now = time.monotonic()
            if h is not self._tree_of or now - self._tree_at > 1.0:
                # walking /proc is the expensive part: refresh the tree once a second
                kids = _children_map()
                tree, stack = [], [h.proc.pid]
                while stack:
                    p = stack.pop()
                    tree.append(p)
                    stack.extend(kids.get(p, ()))
                self._tree, self._tree_of, self._tree_at = tree, h, now
            rss = pss_sum = procs = 0
            for p in self._tree:
                try:
                    rss += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * self.page
                    if pss:
                        for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                            if line.startswith("Pss:"):
                                pss_sum += int(line.split()[1]) * 1024
                                break
                    procs += 1
                except (OSError, ValueError, IndexError):
                    continue
            pk = h.peaks.setdefault(h.phase, {"rss": 0, "pss": 0, "procs": 0})
            pk["rss"] = max(pk["rss"], rss)
            pk["pss"] = max(pk["pss"], pss_sum)
            pk["procs"] = max(pk["procs"], procs)

    def run(self):
        while not self.halt.is_set():
            self.sample(pss=not self.timed)
            self.halt.wait(self.period)


def pipelines_of(key, a) -> str:
    """The pipelines system ``key`` runs: --pipelines, less those it does not do."""
    only = ONLY_PIPELINES.get(key)
    return ",".join(p for p in a.pipelines.split(",") if p and (only is None or p in only))


class Handle:
    """One system's process, driven step by step (see ``_harness.gate``)."""

    def __init__(self, key, a, data, corrupt, workdir, log):
        self.key, self.log = key, log
        label, script, venv, variant, needs_repo = SYSTEMS[key]
        self.result = None
        self.peaks, self.phase, self.tail = {}, "startup", []
        self.next_step = ""  # the step the system announced last (@@READY)
        self.proc = None
        why = getattr(a, "unavailable", {}).get(key)
        if why:
            self.result = {"system": key, "unavailable": why}
            return
        if venv:
            st, detail = setup_envs.status(venv)
            if st != "ok":
                why = (f"venv benchmarks/.venv-{venv} not set up ({detail})" if st == "missing"
                       else detail)
                self.result = {"system": key, "unavailable": why}
                return
            py = str(setup_envs.venv_python(venv))
        else:
            py = sys.executable
        self.out = workdir / f"{key}.json"
        self.thumbs = workdir / f"{key}-val-thumbs.npy"
        cmd = [py, str(SYSTEMS_DIR / script), "--data", str(data), "--out", str(self.out),
               "--epochs", str(a.epochs), "--warmup", str(a.warmup), "--workers",
               str(a.workers), "--batch", str(a.batch), "--seed", str(a.seed),
               "--pipelines", pipelines_of(key, a), "--thumbs", str(self.thumbs)]
        if variant:
            cmd += ["--variant", variant]
        if key in CACHE_SIDE:
            cmd += ["--cache", a.cache_size, "--cache-short-side", str(CACHE_SIDE[key]),
                    "--epochs", str(a.cache_epochs)]  # the last --epochs wins
        if corrupt is not None and key != LIMIT and key not in NO_CORRUPT:
            cmd += ["--corrupt-data", str(corrupt)]
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # keeps this repo's turboloader away from PyPI's
        if needs_repo:
            env["PYTHONPATH"] = str(REPO)
        env.update(SYSTEM_ENV.get(key, {}))
        env["PYTHONUNBUFFERED"] = "1"
        env["BENCH_LOCKSTEP"] = "1"
        self.t0 = time.time()
        self.busy = 0.0
        self.cpu_end, self.idle_cpu = None, 0.0
        # its own process group, so that pause() stops its workers and threads too
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env,
                                     cwd=str(workdir), start_new_session=True)
        self.paused = False
        self.alive = True

    def read_until_ready(self, sampler, first=False):
        """Read output until the system asks for the next step (True) or exits (False)."""
        for line in self.proc.stdout:
            if line.startswith("@@READY "):
                self.next_step = line.split(maxsplit=1)[1].strip()
                return True
            if line.startswith("@@PHASE "):
                sampler.sample(self)
                self.phase = line.split()[1]
            elif line.startswith("@@END "):
                sampler.sample(self)
                self.phase = "between"
            else:
                self.tail = (self.tail + [line.rstrip()])[-40:]
                self.log.write(f"[{self.key}] {line}")
        self.alive = False
        return False

    def tree_cpu(self):
        """user+sys seconds of this system's process tree, reaped children included."""
        kids = _children_map()
        total, stack = 0.0, [self.proc.pid]
        while stack:
            p = stack.pop()
            stack.extend(kids.get(p, ()))
            try:
                s = Path(f"/proc/{p}/stat").read_text()
            except OSError:
                continue
            f = s[s.rfind(")") + 2:].split()
            total += sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")
        return total

    def pause(self, stop=True):
        """SIGSTOP (``stop``) or SIGCONT this system's process group: while another system
        has its turn, nothing of this one runs (a pipeline that computes ahead, as DALI's
        prefetch queue does across an epoch's end, would otherwise do part of its next
        epoch's work off the clock and steal CPU from the system being timed)."""
        if self.proc is None or self.proc.poll() is not None or self.paused == stop:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGSTOP if stop else signal.SIGCONT)
            self.paused = stop
        except (ProcessLookupError, PermissionError):
            pass

    def step(self, sampler):
        t = time.time()
        c = self.tree_cpu()
        if self.cpu_end is not None:  # work done while waiting for its turn
            self.idle_cpu += max(0.0, c - self.cpu_end)
        with sampler.lock:
            sampler.active = self
            sampler.timed = ":epoch" in self.next_step
        self.pause(False)
        try:
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        ok = self.read_until_ready(sampler)
        if ok and self.pause_between:
            self.pause(True)
        sampler.sample(self)  # PSS too: the step is over (its process waits at the gate)
        with sampler.lock:
            sampler.active = None
            sampler.timed = False
        self.busy += time.time() - t
        if ok:
            self.cpu_end = self.tree_cpu()
        return ok

    def finish(self, timeout):
        if self.result is not None:
            return self.result
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "timeout"
        if self.out.exists():
            res = json.loads(self.out.read_text())
        else:
            err = next((ln for ln in reversed(self.tail) if ln.strip()), f"exit status {rc}")
            res = {"system": self.key, "error": f"exit status {rc}: {err[:300]}", "pipelines": {}}
        res["system"] = self.key
        res["memory"] = self.peaks
        res["wall_s"] = round(self.busy, 1)
        res["idle_cpu_s"] = round(self.idle_cpu, 2)
        res["returncode"] = rc
        if self.thumbs.exists():
            res["thumbs_file"] = str(self.thumbs)
        self.result = res
        return res


def run_lockstep(keys, a, data, corrupt, workdir, log):
    """Start every system, then hand out one step (a loader build or one epoch) at a time,
    round-robin in an order rotated every round: only one system works at any moment, and a
    burst of load from elsewhere lands on all systems alike instead of on one row."""
    sampler = Sampler()
    sampler.start()
    handles = [Handle(k, a, data, corrupt, workdir, log) for k in keys]
    live = [h for h in handles if h.proc is not None]
    for h in live:  # imports run concurrently; wait for each to be ready
        h.read_until_ready(sampler, first=True)
    live = [h for h in live if h.alive]
    for h in live:
        h.pause_between = not a.no_pause
        if h.pause_between:
            h.pause(True)
    r = 0
    try:
        while live:
            order = live[r % len(live):] + live[: r % len(live)]
            for h in order:
                if not h.step(sampler):
                    print(f"[{h.key}] done ({h.busy:.0f} s of work)", flush=True)
            live = [h for h in live if h.alive]
            r += 1
    finally:
        for h in handles:  # never leave a stopped process behind
            h.pause(False)
    sampler.halt.set()
    return {h.key: h.finish(a.timeout) for h in handles}


# ---------------------------------------------------------------- report
def _fmt(x, spec=".0f", none="–"):
    return none if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def output_check(res, base, pipeline, thumbs_base):
    """Compare a system's delivered output with the baseline's: channel mean/std and, for val,
    per-image thumbnail differences (normalised units; one 8-bit level is about 0.017)."""
    p, b = res["pipelines"].get(pipeline, {}), base["pipelines"].get(pipeline, {})
    o, ob = p.get("output"), b.get("output")
    if not o:
        return None, "no output"
    notes = []
    if o["shape"] != [3, 224, 224]:
        notes.append(f"shape {o['shape']}")
    if o["dtype"] != "float32":
        notes.append(f"dtype {o['dtype']}")
    if o["constant_images"]:
        notes.append(f"{o['constant_images']} constant images")
    if o["nonfinite"]:
        notes.append(f"{o['nonfinite']} non-finite values")
    dm = ds = None
    if ob and res is not base:
        dm = max(abs(x - y) for x, y in zip(o["mean"], ob["mean"]))
        ds = max(abs(x / y - 1) for x, y in zip(o["std"], ob["std"]))
        notes.append(f"Δmean {dm:.3f}, std ratio-1 {ds:+.1%}" if ds is not None else "")
    mad = None
    if pipeline == "val" and thumbs_base is not None and res.get("thumbs_file") and res is not base:
        t = np.load(res["thumbs_file"])
        if p.get("thumbs_order") == "delivery":
            notes.append("thumbnails unmatched (no labels)")
        elif t.shape == thumbs_base.shape:
            d = np.abs(t - thumbs_base).mean(axis=(1, 2, 3))
            d = d[np.isfinite(d)]
            if len(d):
                mad = float(np.median(d))
                notes.append(f"val thumbs abs Δ median {mad:.3f}, max {d.max():.3f}")
    ok = (not o["constant_images"] and not o["nonfinite"] and o["shape"] == [3, 224, 224]
          and (dm is None or dm < 0.05) and (ds is None or abs(ds) < 0.05)
          and (mad is None or mad < 0.1))
    return ok, "; ".join(n for n in notes if n)


def build_report(a, results, mach, cmdline, started, duration, data_meta):
    base = results.get(BASELINE)
    lim = results.get(LIMIT)
    thumbs_base = None
    if base and base.get("thumbs_file"):
        thumbs_base = np.load(base["thumbs_file"])
    pipelines = [p for p in a.pipelines.split(",") if p]
    lines = []
    title = "hires" if a.hires else "ImageNet-sized"
    lines.append(f"# Loader benchmark ({title}{', quick' if a.quick else ''})\n")
    lines.append(f"- date: {started} UTC; whole run {duration / 60:.1f} min")
    lines.append(f"- command: `{cmdline}`")
    lines.append(f"- machine: {mach['cpu']} ({mach['simd']}), {mach['cores']} cores, "
                 f"{mach['mem_gib']} GiB, {mach['os']}, Python {mach['python']}; "
                 f"load average at start {mach['load_start'][0]:.2f}, at end "
                 f"{os.getloadavg()[0]:.2f}")
    st = data_meta.get("stats", {})
    lines.append(f"- data: {data_meta['n']} JPEGs from `benchmarks/datasets.py` (seed "
                 f"{data_meta['seed']}{', hires' if a.hires else ''}; mean "
                 f"{_fmt(st.get('mean_megapixels'), '.3f', '?')} MP, "
                 f"{_fmt(st.get('mean_kbytes'), '.1f', '?')} KB), label = image index; "
                 f"page-cached (every system reads the same files from RAM after the first pass)")
    lines.append(f"- {a.workers} worker processes/threads, batch {a.batch}, {a.warmup} warm-up + "
                 f"{a.epochs} timed epochs per pipeline (median epoch reported)")
    vers = {}
    for r in results.values():
        for k, v in (r.get("versions") or {}).items():
            vers.setdefault(k, set()).add(str(v))
    lines.append("- versions: " + "; ".join(f"{k} {'/'.join(sorted(v))}" for k, v in
                                            sorted(vers.items()) if k != "PIL module"))
    seek = getattr(a, "seekable_meta", None)
    if seek:
        if "error" in seek:
            lines.append(f"- seekable shards: `{seek['command']}` failed: {seek['error']}")
        else:
            lines.append(f"- seekable shards: `{seek['command']}` took {seek['seconds']:.1f} s "
                         f"({data_meta['n'] / seek['seconds']:.0f} images/s, made once and "
                         f"reused while the data dir is kept); JPEG bytes "
                         f"{seek['bytes_out'] / 1e6:.2f} MB vs {seek['bytes_in'] / 1e6:.2f} MB "
                         f"({seek['bytes_out'] / seek['bytes_in']:.3f}x)")
    if any(k in results for k in CACHE_SIDE):
        sides = " / ".join(str(x or None) for x in a.cache_short_sides)
        lines.append(f"- cache rows: `TarDataset(..., cache={a.cache_size!r}, cache_short_side="
                     f"{sides})` (per decode thread), thread backend, {a.cache_epochs} timed "
                     f"epochs each (filling: a new loader before every epoch; from the cache: "
                     f"after a filling warm-up epoch)")
    lines.append("")
    for pl in pipelines:
        desc = ("RandomResizedCrop(224) + RandomHorizontalFlip + Normalize, shuffled"
                if pl == "train" else "Resize(256) + CenterCrop(224) + Normalize, in order")
        lines.append(f"## {pl}: {desc}\n")
        lines.append("| system | images/s | × baseline | × decode limit | peak RSS / PSS MiB "
                     "(procs) | CPU ms/image | labels | exactly once | output vs baseline |")
        lines.append("|---|---:|---:|---:|---:|---:|---|---|---|")
        brate = (base or {}).get("pipelines", {}).get(pl, {}).get("images_per_s")
        lrate = (lim or {}).get("pipelines", {}).get(pl, {}).get("images_per_s")
        for key, r in results.items():
            label = SYSTEMS[key][0]
            if key in ONLY_PIPELINES and pl not in ONLY_PIPELINES[key]:
                continue
            if "unavailable" in r:
                lines.append(f"| {label} | not run: {r['unavailable']} | | | | | | | |")
                continue
            p = r.get("pipelines", {}).get(pl)
            if p is None or "error" in p:
                why = (p or {}).get("error") or r.get("error") or "did not run"
                if why.startswith("Unavailable: "):
                    lines.append(f"| {label} | {why.split(': ', 1)[1]} | | | | | | | |")
                else:
                    lines.append(f"| {label} | error: {why} | | | | | | | |")
                continue
            rate = p["images_per_s"]
            mem = r.get("memory", {}).get(pl, {})
            memtxt = (f"{mem.get('rss', 0) / 2**20:.0f} / {mem.get('pss', 0) / 2**20:.0f} "
                      f"({mem.get('procs', 0)})") if mem else "–"
            if key == LIMIT:
                lines.append(f"| **{label}** | **{rate:.0f}** | {_fmt(rate / brate if brate else None, '.2f')} "
                             f"| 1.00 | {memtxt} | {p['cpu_s_per_image'] * 1e3:.2f} | n/a | n/a | "
                             f"{p.get('note', '')} |")
                continue
            labels = [x for x in p.get("labels", [])]
            has_labels = not any("no labels" in x for x in labels)
            byidx = [x.split("by sample index: ", 1)[1] for x in labels if "by sample index: " in x]
            if labels == ["ok"]:
                once = "yes"
            elif byidx and not has_labels:
                once = ("yes (by sample index)" if byidx == ["ok"] and len(labels) == 1
                        else "by sample index: " + "; ".join(byidx))
            elif not has_labels:
                once = "unknown (no labels)"
            else:
                once = "**" + "; ".join(labels) + "**"
            ok, notes = output_check(r, base, pl, thumbs_base) if base else (None, "")
            if key == BASELINE:
                o = p.get("output") or {}
                notes = (f"reference: mean {o.get('mean')}, std {o.get('std')}")
            elif ok is False:
                notes = "**differs**: " + notes
            bold = "**" if key == BASELINE else ""
            lines.append(f"| {bold}{label}{bold} | {rate:.0f} | "
                         f"{_fmt(rate / brate if brate else None, '.2f')} | "
                         f"{_fmt(rate / lrate if lrate else None, '.2f')} | {memtxt} | "
                         f"{p['cpu_s_per_image'] * 1e3:.2f} | {'yes' if has_labels else '**no**'} | "
                         f"{once} | {notes} |")
        lines.append("")
    lines.extend(ratio_section(results, pipelines))
    same = seekable_pixels(results)
    if same:
        lines[-1:-1] = [same]
    lines.append("## Corrupt sample (one truncated JPEG among 32, val pipeline, one epoch)\n")
    lines.append("| system | what happened |")
    lines.append("|---|---|")
    for key, r in results.items():
        if key == LIMIT or "unavailable" in r or key in NO_CORRUPT:
            continue
        c = r.get("corrupt")
        if any("not available yet" in str(p.get("error", "")) for p in r.get("pipelines", {}).values()):
            continue
        lines.append(f"| {SYSTEMS[key][0]} | {(c or {}).get('outcome', 'not run')} |")
    lines.append("")
    lines.append("## How each system was configured\n")
    for key, r in results.items():
        if "unavailable" in r:
            lines.append(f"- **{SYSTEMS[key][0]}**: not run: {r['unavailable']}")
            continue
        notes = {p.get("note", "") for p in r.get("pipelines", {}).values() if isinstance(p, dict)}
        notes = "; ".join(sorted(n for n in notes if n))
        idle = r.get("idle_cpu_s")
        idle = (f"; **{idle:.1f} CPU s used while waiting for its turn** (background work "
                f"that steals from the others)" if idle and idle > 0.5 else "")
        lines.append(f"- **{SYSTEMS[key][0]}** ({r.get('wall_s', '?')} s of work{idle}): {notes}")
    lines.append("")
    return "\n".join(lines)


def _rate_cpu(results, key, pl):
    p = (results.get(key) or {}).get("pipelines", {}).get(pl) or {}
    return p.get("images_per_s"), p.get("cpu_s_per_image")


# (label, numerator system, denominator system, {pipeline: (target, text)})
RATIOS = [
    ("turboloader threads ÷ NVIDIA DALI CPU", THREADS, "dali",
     {"train": (2.0, "≥ 2"), "val": (2.0, "≥ 2")}),
    ("seekable shards ÷ original shards (thread backend)", "turboloader-seekable", THREADS, {}),
    ("seekable shards ÷ full-decode limit", "turboloader-seekable", LIMIT,
     {"train": (1.8, "≥ 1.8"), "val": (1.3, "≥ 1.3")}),
    ("seekable shards: turboloader's ÷ libjpeg-turbo's Huffman decoder", "turboloader-seekable",
     "turboloader-seekable-stock", {}),
    ("seekable shards, libjpeg-turbo's Huffman decoder ÷ full-decode limit",
     "turboloader-seekable-stock", LIMIT, {}),
    ("original shards ÷ full-decode limit (thread backend)", THREADS, LIMIT,
     {"train": (1.2, "≥ 1.2"), "val": (1.0, "≥ 1.0")}),
    ("original shards: turboloader's ÷ libjpeg-turbo's Huffman decoder", THREADS,
     "turboloader-threads-stock", {}),
    ("cache{}, filling epoch ÷ uncached epoch (thread backend)", "turboloader-cache-fill",
     THREADS, {"train": (0.8, "≥ 0.8")}),
    ("cache{}, epoch from the cache ÷ uncached epoch (thread backend)", "turboloader-cache",
     THREADS, {"train": (5.0, "≥ 5")}),
]


def _ratio_rows(results):
    """RATIOS with one pair of cache rows per cache short side present in ``results``."""
    for label, num, den, targets in RATIOS:
        if num not in CACHE_KEYS:
            yield label, num, den, targets
            continue
        for key in results:
            if key == num or (key.startswith(num + "-s") and key in CACHE_SIDE):
                side = CACHE_SIDE.get(key, 0)
                yield label.format(f" (cache_short_side={side or None})"), key, den, targets


def seekable_pixels(results) -> str:
    """A line saying whether the seekable shards' val output equals the original shards'
    (their 8x8-pooled thumbnails of every image, keyed by label), or ''."""
    a, b = results.get(THREADS, {}), results.get("turboloader-seekable", {})
    if not (a.get("thumbs_file") and b.get("thumbs_file")):
        return ""
    ta, tb = np.load(a["thumbs_file"]), np.load(b["thumbs_file"])
    if ta.shape != tb.shape:
        return f"Seekable vs original shards, val: thumbnails of different shapes {tb.shape} / {ta.shape}.\n"
    d = float(np.nanmax(np.abs(ta - tb))) if ta.size else float("nan")
    verdict = "identical" if d == 0 else f"**differ** (max abs difference {d:.4f})"
    return (f"Seekable vs original shards, val output (every image's 8x8-pooled thumbnail, by "
            f"label): {verdict}.\n")


def ratio_section(results, pipelines):
    """Issue 22's same-run ratios: by images/s (wall) and by CPU time per image (steadier on
    a shared machine: other processes' load moves wall time far more than CPU time)."""
    rows = []
    for label, num, den, targets in _ratio_rows(results):
        if num not in results or den not in results:
            continue
        cells, verdicts = [], []
        for pl in pipelines:
            rn, cn = _rate_cpu(results, num, pl)
            rd, cd = _rate_cpu(results, den, pl)
            if num in ONLY_PIPELINES and pl not in ONLY_PIPELINES[num]:
                cells += ["", ""]
                continue
            r = rn / rd if rn and rd else None
            c = cd / cn if cn and cd else None
            cells += [_fmt(r, ".2f"), _fmt(c, ".2f")]
            if pl in targets and r is not None:
                t, txt = targets[pl]
                verdicts.append(f"{pl} {txt}: {'met' if r >= t else '**not met**'}")
            elif pl in targets:
                verdicts.append(f"{pl} {targets[pl][1]}: not measured")
        rows.append(f"| {label} | " + " | ".join(cells) + f" | {'; '.join(verdicts)} |")
    if not rows:
        return []
    head = " | ".join(f"{pl} (images/s) | {pl} (CPU time)" for pl in pipelines)
    out = ["## Ratios of issue 22 (same run)\n",
           "images/s: the ratio of the two rows' median epochs (wall time); CPU time: the "
           "inverse ratio of their CPU ms per image (whole process tree), which other load on "
           "the machine moves much less. Targets are judged on images/s.\n",
           f"| ratio | {head} | target (images/s) |",
           "|---|" + "---:|" * (2 * len(pipelines)) + "---|", *rows, ""]
    return out


def chart(a, results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pipelines = [p for p in a.pipelines.split(",") if p]
    keys = [k for k, r in results.items() if "unavailable" not in r]
    base = results.get(BASELINE, {}).get("pipelines", {})
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(keys) * len(pipelines) + 1.5))
    ys, labels, vals, colors = [], [], [], []
    y = 0
    for k in reversed(keys):
        for j, pl in enumerate(pipelines):
            if k in ONLY_PIPELINES and pl not in ONLY_PIPELINES[k]:
                continue
            p = results[k].get("pipelines", {}).get(pl, {})
            b = base.get(pl, {}).get("images_per_s")
            v = p.get("images_per_s") / b if (p.get("images_per_s") and b) else 0
            ys.append(y)
            vals.append(v)
            labels.append(f"{SYSTEMS[k][0]} [{pl}]")
            colors.append("tab:blue" if pl == "train" else "tab:orange")
            y += 1
        y += 0.5
    ax.barh(ys, vals, color=colors)
    for yy, v in zip(ys, vals):
        ax.text(v, yy, f" {v:.2f}×" if v else " not run / failed", va="center", fontsize=8)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=8)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("images/s relative to torchvision ImageFolder + v2 + DataLoader (Pillow)")
    ax.set_title(f"{'hires' if a.hires else 'ImageNet-sized'} JPEGs, {a.workers} workers, "
                 f"batch {a.batch} (blue: train, orange: val)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 512 images, 1 warm-up + 1 timed epoch (< 3 min on 2 cores)")
    ap.add_argument("--hires", action="store_true", help="1600-4000 px images instead")
    ap.add_argument("--n", type=int, help="images (default 2048; --quick 512; --hires 256)")
    ap.add_argument("--epochs", type=int, help="timed epochs (default 3; --quick 2)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2, help="worker processes/threads (all systems)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pipelines", default="train,val")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help=f"comma list from: {', '.join(SYSTEMS)}")
    ap.add_argument("--setup-envs", action="store_true",
                    help="create missing venvs first (benchmarks/setup_envs.py)")
    ap.add_argument("--data-root", default=str(HERE / "data"))
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--tag", help="output file stem (default: derived from the options)")
    ap.add_argument("--timeout", type=float, default=120,
                    help="seconds to wait for a system to exit after its last step")
    ap.add_argument("--no-pause", action="store_true",
                    help="let systems run while waiting for their turn (default: each waiting "
                         "system's process group is stopped with SIGSTOP)")
    ap.add_argument("--sequential", action="store_true",
                    help="run systems one after another instead of interleaving their epochs")
    ap.add_argument("--cache-size", default="4GB",
                    help="cache rows: TarDataset(cache=...) per decode thread (default 4GB)")
    ap.add_argument("--cache-short-side", default="0",
                    help="cache rows: TarDataset(cache_short_side=...), a comma list gives a "
                         "pair of rows per value (default 0: full size)")
    ap.add_argument("--cache-epochs", type=int,
                    help="cache rows: timed epochs of each (default: --epochs)")
    a = ap.parse_args(argv)
    if a.n is None:
        a.n = 512 if a.quick else (256 if a.hires else 2048)
        if a.quick and a.hires:
            a.n = 64
    if a.epochs is None:
        a.epochs = 1 if a.quick else 3
    if a.cache_epochs is None:
        a.cache_epochs = a.epochs
    try:
        a.cache_short_sides = [int(x) for x in str(a.cache_short_side).split(",") if x.strip()]
    except ValueError:
        ap.error(f"--cache-short-side: a comma list of ints, not {a.cache_short_side!r}")
    a.cache_short_sides = a.cache_short_sides or [0]
    keys = [k for k in a.systems.split(",") if k]
    unknown = [k for k in keys if k not in SYSTEMS]
    if unknown:
        ap.error(f"unknown systems {unknown}")
    keys = expand_cache_rows(keys, a.cache_short_sides)
    # the baseline first (others are compared with it), the limit last
    keys = ([BASELINE] if BASELINE in keys else []) + [k for k in keys if k not in (BASELINE, LIMIT)] \
        + ([LIMIT] if LIMIT in keys else [])
    t_start = time.time()
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
    cmdline = "python benchmarks/run.py " + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
    mach = machine()
    if a.setup_envs:
        needed = sorted({SYSTEMS[k][2] for k in keys if SYSTEMS[k][2]})
        for v in needed:
            if setup_envs.status(v)[0] == "missing":
                setup_envs.create(v, share=True, force=False)
    data_root = Path(a.data_root).resolve()  # systems run in their work directory
    tagdata = f"bench-n{a.n}-s{a.seed}{'-hires' if a.hires else ''}"
    print(f"preparing data {data_root / tagdata} ...", flush=True)
    data = prepare_data(data_root / tagdata, a.n, a.seed, a.hires, a.workers)
    corrupt = prepare_data(data_root / f"bench-corrupt32-s{a.seed}", 32, a.seed + 1, False,
                           a.workers, corrupt=True)
    data_meta = json.loads((data / "manifest.json").read_text())
    a.unavailable = {}
    a.seekable_meta = None
    if any(k in keys for k in SEEKABLE_KEYS):
        a.seekable_meta = prepare_seekable(data, a.workers)
        if "error" in a.seekable_meta:
            for k in SEEKABLE_KEYS:
                a.unavailable[k] = ("`turboloader convert --seekable` failed: "
                                    + a.seekable_meta["error"])
    tag = a.tag or ("quick" if a.quick else "full") + ("-hires" if a.hires else "")
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    workdir = data_root / f"work-{tag}"
    workdir.mkdir(parents=True, exist_ok=True)
    for f in workdir.glob("*"):
        f.unlink()
    with open(workdir / "log.txt", "w") as log:
        if a.sequential:
            results = {}
            for k in keys:
                results.update(run_lockstep([k], a, data, corrupt, workdir, log))
        else:
            results = run_lockstep(keys, a, data, corrupt, workdir, log)
    for k, r in results.items():
        summary = r.get("unavailable") or r.get("error") or ", ".join(
            f"{pl} {p['images_per_s']:.0f}/s" if "images_per_s" in p else f"{pl} {p.get('error')}"
            for pl, p in r.get("pipelines", {}).items())
        print(f"[{k}] {summary}", flush=True)
    duration = time.time() - t_start
    report = build_report(a, results, mach, cmdline, started, duration, data_meta)
    md = out_dir / f"{tag}.md"
    md.write_text(report + f"\n![ratios]({tag}.png)\n")
    for r in results.values():
        r.pop("thumbs_file", None)
    (out_dir / f"{tag}.json").write_text(json.dumps(
        {"machine": mach, "command": cmdline, "started": started, "duration_s": duration,
         "args": vars(a), "data": data_meta, "results": results}, indent=1, default=str))
    try:
        chart(a, results, out_dir / f"{tag}.png")
    except Exception as exc:  # noqa: BLE001 - the table matters more than the chart
        print(f"chart failed: {exc!r}")
    print(report)
    print(f"wrote {md} ({duration:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
