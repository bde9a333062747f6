"""turboloader.DataLoader: thread backend vs process backend vs torchvision, same run.

    python benchmarks/bench_loader.py                 # 512 ImageNet-sized JPEGs, train pipeline
    python benchmarks/bench_loader.py --n 1024 --epochs 3 --workers 2 --batch 64

Train pipeline for everyone: RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor +
Normalize, float32 N x 3 x 224 x 224, shuffled, labels. Systems:

- threads:     turboloader.DataLoader(TarDataset, backend="threads", num_workers=W)
- processes:   turboloader.DataLoader(TarDataset, backend="processes", num_workers=W)
- torchvision: torchvision.datasets.ImageFolder + transforms.v2 + torch DataLoader(num_workers=W)
- threads-uint8: the fastest recipe: the pipeline ends in ToImage() (uint8 batches) and
  ``PrefetchLoader(loader, device, mean, std)`` normalizes them (on CUDA when there is one,
  else on the CPU): the same float32 normalized output as the others
- threads-uint8-raw: the uint8 batches alone, what the loader hands a GPU to normalize there
  (on a CUDA machine threads-uint8 costs the loader no more than this)

Each system runs in its own subprocess (one at a time); the parent samples the RSS of that
subprocess's whole process tree every 0.2 s and keeps the peak. PSS (which counts pages
shared by forked workers once) is read by the subprocess itself, over its own tree, at the
warm-up epoch's second batch (workers running) and after each epoch, outside the timed
spans: reading PSS walks every page table under the process's memory-map lock (tens of ms
for a 1 GB loader), and read every 50 ms, as this script did before, it took about a tenth
of two cores from the loader (``benchmarks/results/issue42-idle.md``). Reported: median
images/s over the timed epochs (after one warm-up epoch), ratios to torchvision and to the
process backend, peak RSS/PSS, and the thread backend's stage table
(``turboloader.profile``-style) for the last epoch.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SYSTEMS = ("threads", "processes", "torchvision", "threads-uint8", "threads-uint8-raw")


def ensure_data(n, seed) -> Path:
    """``benchmarks/data/bench-n{n}-s{seed}`` with ``shards/`` and ``folder/`` (made if absent)."""
    root = HERE / "data" / f"bench-n{n}-s{seed}"
    if (root / "shards").is_dir() and (root / "folder").is_dir():
        return root
    sys.path.insert(0, str(HERE))
    from datasets import make_jpegs, write_image_folder, write_shards

    items = make_jpegs(n, seed)
    write_shards(root / "shards", items, shard_size=128)
    write_image_folder(root / "folder", items)
    return root


# -- the child: one system ----------------------------------------------------------------

def build(system, root, a):
    import torch

    if system == "torchvision":
        import torchvision
        from torchvision.transforms import v2

        tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                         v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
        ds = torchvision.datasets.ImageFolder(str(root / "folder"), transform=tf)
        return ds, torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True,
                                               num_workers=a.workers,
                                               persistent_workers=a.workers > 0)
    sys.path.insert(0, str(REPO))
    from turboloader import transforms as T
    from turboloader.data import TarDataset
    from turboloader.loader import DataLoader

    head = [T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip()]
    uint8 = system.startswith("threads-uint8")
    tail = [T.ToImage()] if uint8 else [T.ToTensor(), T.Normalize(MEAN, STD)]
    ds = TarDataset(sorted(str(p) for p in (root / "shards").glob("*.tar")),
                    T.Compose(head + tail), seed=a.seed)
    loader = DataLoader(ds, batch_size=a.batch, num_workers=a.workers,
                        backend=system.split("-")[0], persistent_workers=a.workers > 0)
    if system == "threads-uint8":
        from turboloader.prefetch import PrefetchLoader

        device = "cuda" if torch.cuda.is_available() else "cpu"
        return ds, PrefetchLoader(loader, device, mean=MEAN, std=STD)
    return ds, loader


def child(system, root, a):
    import torch

    torch.set_num_threads(1)  # the loaders' parallelism is their workers; no intra-op threads
    ds, loader = build(system, root, a)
    rates, seen, peak_pss = [], [], 0
    for epoch in range(a.epochs + 1):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        n = 0
        t = time.perf_counter()
        labels = []
        for images, lab in loader:
            n += images.shape[0]
            labels.append(lab)
            assert images.dtype == (torch.uint8 if system.endswith("-raw") else torch.float32)
            if epoch == 0 and n == images.shape[0] * 2:  # the warm-up's second batch: untimed
                peak_pss = max(peak_pss, tree_memory(os.getpid())[1])
        dt = time.perf_counter() - t
        peak_pss = max(peak_pss, tree_memory(os.getpid())[1])  # after the timer
        if epoch > 0:
            rates.append(n / dt)
        seen.append(n)
    out = {"system": system, "images_per_s": statistics.median(rates), "epochs": rates,
           "images_per_epoch": seen, "peak_pss": peak_pss}
    if system.startswith("threads"):
        from turboloader.loader import format_stats

        out["stage_table"] = format_stats(loader.stats())
    print("@@RESULT " + json.dumps(out), flush=True)


# -- the parent: memory sampling ------------------------------------------------------------

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


def tree_memory(pid, with_pss=True):
    """(RSS, PSS) in bytes summed over ``pid`` and its descendants (PSS 0 without
    ``with_pss``: RSS is a counter, PSS a walk of every page table)."""
    kids, stack, rss, pss = _children_map(), [pid], 0, 0
    page = os.sysconf("SC_PAGE_SIZE")
    while stack:
        p = stack.pop()
        stack.extend(kids.get(p, ()))
        try:
            rss += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * page
            if not with_pss:
                continue
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError, IndexError):
            continue
    return rss, pss


def run_system(system, root, a):
    cmd = [sys.executable, __file__, "--child", system, "--root", str(root), "--n", str(a.n),
           "--batch", str(a.batch), "--workers", str(a.workers), "--epochs", str(a.epochs),
           "--seed", str(a.seed)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], tree_memory(proc.pid, with_pss=False)[0])
            done.wait(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    done.set()
    th.join()
    for line in out.splitlines():
        if line.startswith("@@RESULT "):
            res = json.loads(line[len("@@RESULT "):])
            res["peak_rss"] = peak[0]  # peak_pss: the child's own reads
            return res
    return {"system": system, "error": (err or out)[-800:]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=512, help="images (default 512)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs after one warm-up")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the systems in turn this many times; report each one's median "
                         "(the machine is shared: interleaving spreads load changes evenly)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child(a.child, Path(a.root), a)
    root = ensure_data(a.n, a.seed)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    print(f"machine: {os.cpu_count()} cores, {cpu}; python {platform.python_version()}")
    print(f"data: {root} ({a.n} JPEGs); train pipeline, batch {a.batch}, {a.workers} workers, "
          f"1 warm-up + {a.epochs} timed epochs (median)")
    runs = {s: [] for s in a.systems.split(",")}
    for _ in range(a.rounds):
        for s in runs:
            r = run_system(s, root, a)
            if "error" in r:
                print(f"{s}: FAILED: {r['error']}")
            else:
                runs[s].append(r)
    results = {}
    for s, rs in runs.items():
        if not rs:
            results[s] = {"error": "failed"}
            continue
        results[s] = dict(rs[-1], images_per_s=statistics.median(r["images_per_s"] for r in rs),
                          rounds=[round(r["images_per_s"], 1) for r in rs],
                          peak_rss=max(r["peak_rss"] for r in rs),
                          peak_pss=max(r["peak_pss"] for r in rs))
    tv = results.get("torchvision", {}).get("images_per_s")
    pr = results.get("processes", {}).get("images_per_s")
    print(f"\n{'system':<14}{'images/s':>10}{'vs torchvision':>16}{'vs processes':>14}"
          f"{'peak RSS MB':>13}{'peak PSS MB':>13}")
    for s, r in results.items():
        if "error" in r:
            continue
        rate = r["images_per_s"]
        print(f"{s:<14}{rate:>10.1f}{(f'{rate / tv:.2f}x' if tv else '-'):>16}"
              f"{(f'{rate / pr:.2f}x' if pr else '-'):>14}{r['peak_rss'] / 2**20:>13.0f}"
              f"{r['peak_pss'] / 2**20:>13.0f}   rounds: {r['rounds']}")
    if "stage_table" in results.get("threads", {}):
        print("\nthread backend, last epoch:\n" + results["threads"]["stage_table"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
