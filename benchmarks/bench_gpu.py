"""The GPU path, measured in one run: the CPU thread backend + PrefetchLoader to the GPU, and
decode="gpu" (nvJPEG + torchvision's CUDA kernels), each alone and feeding a ResNet-50
training step, against the model on batches already on the GPU (its ceiling).

Prints the machine, the data, and one table: images/s, the ratio to the model's ceiling, the
GPU's busy fraction (model-bound images/s over the measured ones: the share of the wall time
the GPU computes the step; and NVML's utilisation sampled every 50 ms, when nvidia-ml-py is
there), the host CPU cores the process kept busy, and where decode="gpu" decoded its rows.
Every loader pass is checked to deliver each sample once (the count of each label).

    python benchmarks/bench_gpu.py                     # on a CUDA machine (gpu_check.sh runs it)
    python benchmarks/bench_gpu.py --dry-run           # anywhere: the CPU stand-in, tiny sizes

``--dry-run`` runs the same code on the CPU: ``DeviceDecode("cpu")`` with
``torchvision.io.decode_jpeg`` on the CPU standing in for nvJPEG, ResNet-18 at 32 px, a few
steps: it checks the script, not the speed. The data are ``benchmarks/datasets.py``'s
ImageNet-like JPEGs made from the photographs inside scikit-image and scikit-learn (nothing is
downloaded), cached under ``benchmarks/data/gpu-n{n}-s{seed}``.
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


# -- data ------------------------------------------------------------------------------------


def _part(args):
    from datasets import make_jpegs

    n, seed, hires, start = args
    return make_jpegs(n, seed, hires, start=start)


def ensure_data(root: Path, n: int, seed: int, hires: bool, procs: int):
    """TAR shards of ``n`` ImageNet-like JPEGs under ``root`` (made in ``procs`` processes
    if absent); returns the shard paths and the count of each label."""
    import json

    shards = root / "shards"
    done = root / "labels.json"
    if not done.exists():
        from datasets import write_shards

        step = max(1, -(-n // max(1, procs)))
        parts = [(min(step, n - k), seed, hires, k) for k in range(0, n, step)]
        if len(parts) == 1:   # one part: made here (a pool process would import it all again)
            items = _part(parts[0])
        else:
            with ProcessPoolExecutor(procs) as pool:
                items = [it for part in pool.map(_part, parts) for it in part]
        write_shards(shards, items, shard_size=256)
        done.write_text(json.dumps([label for _, label in items]))
    labels = json.loads(done.read_text())
    counts = [0] * (max(labels) + 1)
    for v in labels:
        counts[v] += 1
    return sorted(str(p) for p in shards.glob("*.tar")), counts


# -- measuring -------------------------------------------------------------------------------


class Util:
    """NVML's GPU utilisation, sampled every 50 ms in a thread (None without nvidia-ml-py or
    off CUDA)."""

    def __init__(self, device):
        self.samples, self.handle, self.stop = [], None, threading.Event()
        if device.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        except Exception:
            self.handle = None

    def __enter__(self):
        if self.handle is not None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def _run(self):
        while not self.stop.wait(0.05):
            self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

    def __exit__(self, *exc):
        self.stop.set()
        if self.handle is not None:
            self.thread.join()

    def mean(self):
        return sum(self.samples) / len(self.samples) if self.samples else None


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- the two feeds ---------------------------------------------------------------------------


def make_loader(kind, shards, a, device, executor, drop_last=False):
    """Batches of (float32 normalized images, labels) on ``device`` (``drop_last``: each
    decode thread's stream drops its last, partial batch, as torch's workers do)."""
    import turboloader as tl
    from turboloader import transforms as T

    geometry = [T.RandomResizedCrop(a.size), T.RandomHorizontalFlip()]
    if kind == "cpu":   # uint8 batches in pinned memory, copied and normalized on the device
        ds = tl.TarDataset(shards, T.Compose([*geometry, T.PILToTensor()]), seed=a.seed)
        loader = tl.DataLoader(ds, batch_size=a.batch, num_workers=a.workers,
                               pin_memory=device.type == "cuda", drop_last=drop_last)
        return tl.PrefetchLoader(loader, device, mean=MEAN, std=STD)
    ds = tl.TarDataset(shards, T.Compose([*geometry, T.ToTensor(), T.Normalize(MEAN, STD)]),
                       seed=a.seed)
    loader = tl.DataLoader(ds, batch_size=a.batch, num_workers=a.gpu_workers, decode=executor,
                           drop_last=drop_last)
    return tl.PrefetchLoader(loader, device)   # the labels to the device; the images are


def loader_only(feed, device, counts):
    """images/s and host cores busy over one whole pass after a warm-up pass; each pass must
    deliver every sample once (checked by the count of each label)."""
    import torch

    for _ in range(2):
        seen = []
        t, c = time.perf_counter(), cpu_seconds()
        for x, y in feed:
            seen.append(y)
        sync(device)
        wall, cpu = time.perf_counter() - t, cpu_seconds() - c
        got = torch.bincount(torch.cat(seen).cpu(), minlength=len(counts)).tolist()
        if got != counts:
            raise AssertionError(f"a pass delivered labels {got}, the data has {counts}: "
                                 "not every sample exactly once")
    return sum(counts) / wall, cpu / wall


def make_model(a, device):
    import torch
    import torchvision

    model = getattr(torchvision.models, a.model)(weights=None, num_classes=1000)
    model = model.to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step(x, y):
        x = x.contiguous(memory_format=torch.channels_last)
        with amp:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def train(step, batches, device, steps, warmup):
    """images/s, host cores busy and NVML utilisation over ``steps`` timed steps."""
    it = iter(batches)
    done = 0
    for x, y in it:
        step(x, y)
        done += 1
        if done == warmup:
            break
    sync(device)
    n = 0
    with Util(device) as util:
        t, c = time.perf_counter(), cpu_seconds()
        for x, y in it:
            step(x, y)
            n += x.shape[0]
            done += 1
            if done == warmup + steps:
                break
        sync(device)
        wall, cpu = time.perf_counter() - t, cpu_seconds() - c
    return n / wall, cpu / wall, util.mean(), done - warmup


def cycle(make):
    """Batches from ``make()`` pass after pass."""
    while True:
        n = 0
        for batch in make():
            n += 1
            yield batch
        if n == 0:
            raise RuntimeError("a pass gave no full batch: more images (--n) or fewer decode "
                               "threads per batch size")


# -- main ------------------------------------------------------------------------------------


def machine(device):
    import torch
    import torchvision

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none (CPU stand-in)"
    return (f"machine: {os.cpu_count()} cores, {cpu}; GPU: {gpu}; python "
            f"{platform.python_version()}, torch {torch.__version__}, torchvision "
            f"{torchvision.__version__}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (stand-in)")
    p.add_argument("--n", type=int, default=2048, help="images (default 2048)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hires", action="store_true", help="1600-4000 px photographs")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--size", type=int, default=224, help="RandomResizedCrop size")
    p.add_argument("--workers", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)),
                   help="decode threads of the CPU path")
    p.add_argument("--gpu-workers", type=int, default=4, help="decode threads of decode='gpu'")
    p.add_argument("--model", default="resnet50", help="a torchvision.models name")
    p.add_argument("--steps", type=int, default=25, help="timed training steps per row")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--data", default=None, help="data folder (default benchmarks/data/...)")
    p.add_argument("--out", default=None, help="also write the table (markdown) here")
    p.add_argument("--dry-run", action="store_true",
                   help="the CPU stand-in at tiny sizes: checks the script, not the speed")
    a = p.parse_args(argv)
    if a.dry_run:
        a.device, a.n, a.batch, a.size, a.model = "cpu", 24, 4, 32, "resnet18"
        a.steps, a.warmup, a.workers, a.gpu_workers = 2, 1, 2, 1

    import torch

    from turboloader.loader import DeviceDecode

    if a.dry_run:
        # tiny tensors on a CPU: one intra-op thread (more only spin against the decode
        # threads and the other processes of a test run; the dry run checks, never times)
        torch.set_num_threads(1)
    device = torch.device(a.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print("bench_gpu: torch sees no CUDA device (use --dry-run to check the script on "
                  "a CPU)", file=sys.stderr)
            return 2
        executor = DeviceDecode(device)
        torch.backends.cudnn.benchmark = True
    else:
        from torchvision.io import ImageReadMode, decode_jpeg

        def standin(files):
            return decode_jpeg(files, mode=ImageReadMode.RGB, device="cpu")

        executor = DeviceDecode("cpu", decoder=standin)
    import warnings

    warnings.filterwarnings("ignore", "The image decoding", DeprecationWarning)

    root = Path(a.data) if a.data else HERE / "data" / (
        f"gpu-n{a.n}-s{a.seed}" + ("-hires" if a.hires else ""))
    root.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    # (the dry run's 24 images: made in this process, not in a pool of fresh ones)
    shards, counts = ensure_data(root, a.n, a.seed, a.hires,
                                 1 if a.dry_run else os.cpu_count() or 1)
    head = [machine(device),
            f"data: {root} ({a.n} {'hires ' if a.hires else ''}JPEGs, {len(shards)} shards, "
            f"ready in {time.perf_counter() - t:.1f} s); RandomResizedCrop({a.size}) + flip + "
            f"normalize, batch {a.batch}; CPU path {a.workers} decode threads, decode='gpu' "
            f"{a.gpu_workers}; {a.model}, bf16 autocast, channels_last, {a.steps} timed steps "
            f"after {a.warmup}"]
    for line in head:
        print(line, flush=True)

    rows = []
    # the model's ceiling: the same step on one batch already on the device
    step = make_model(a, device)
    x = torch.randn(a.batch, 3, a.size, a.size, device=device)
    y = torch.randint(0, 1000, (a.batch,), device=device)
    ceiling, cores, util, _ = train(step, iter(lambda: (x, y), None), device, a.steps, a.warmup)
    rows.append(("model on device-resident batches", "train", ceiling, cores, 1.0, util, ""))
    for kind, name in (("cpu", f"CPU threads ({a.workers}) + PrefetchLoader"),
                       ("gpu", f"decode='gpu' ({a.gpu_workers} threads)")):
        try:
            before = executor.stats()
            feed = make_loader(kind, shards, a, device, executor)
            rate, cores = loader_only(feed, device, counts)
            where = ""
            if kind == "gpu":
                s = executor.stats()
                where = (f"device {s['device'] - before['device']}, cpu "
                         f"{s['cpu'] - before['cpu']}")
            rows.append((name, "loader only", rate, cores, None, None, where))
            print(f"{name}: loader only {rate:.0f} img/s", flush=True)
            # full batches only: a stream's last partial batch would be a new shape to the model
            feed = make_loader(kind, shards, a, device, executor, drop_last=True)
            r, cores, util, n = train(step, cycle(lambda: iter(feed)), device, a.steps, a.warmup)
            rows.append((name, "train", r, cores, r / ceiling, util, ""))
            print(f"{name}: train {r:.0f} img/s", flush=True)
        except Exception as exc:   # a row that fails is reported, the others still run
            rows.append((name, f"FAILED: {type(exc).__name__}: {exc}", None, None, None, None, ""))
            print(f"{name}: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    table = ["| feed | run | images/s | GPU busy (images/s / model ceiling) | "
             "GPU util (NVML) | host cores busy | rows decoded |",
             "|---|---|---:|---:|---:|---:|---|"]
    for name, run, rate, cores, busy, util, where in rows:
        def f(v, fmt):
            return "-" if v is None else format(v, fmt)
        table.append(f"| {name} | {run} | {f(rate, '.0f')} | "
                     f"{f(busy, '.0%')} | {f(util, '.0f')}{'%' if util is not None else ''} | "
                     f"{f(cores, '.1f')} | {where} |")
    print()
    print("\n".join(table))
    if a.out:
        Path(a.out).write_text("\n".join(head) + "\n\n" + "\n".join(table) + "\n")
    return 1 if any(r[1].startswith("FAILED") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
