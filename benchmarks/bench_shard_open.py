"""What opening a ``.tar`` shard costs per sample: the index, the grouping of members into
samples and the labels, each against the Python definition in the same run.

A stream opens each of its shards once per pass, so on a real data set (hundreds of shards
of ~1000 samples) every sample pays this once per epoch, on the thread that gathers (the
grouping and the labels' parsing hold the GIL). ``bench_hotpath.py`` keeps its shards open
and does not see it.

    python benchmarks/bench_shard_open.py                      # 8 shards x 1000 samples, made in a temp dir
    python benchmarks/bench_shard_open.py --data shards/ --reps 20

Rows (thread CPU time per sample, median of ``--reps``): ``index`` (``TarIndex``: the native
pass over the member headers of an ``mmap``), ``grouping, native`` (``TarShard`` less the
index: ``_tar.group_samples``), ``grouping, Python`` (``split_key`` / ``_group`` per member,
what ``TarShard`` falls back to for non-ASCII names or duplicate members), ``labels, one
call`` (``TarShard.labels``: every ``.cls`` member read at once) and ``labels, per member``
(one read and one ``parse_label`` per label member). The two pairs are the same work, with the
same result (checked), so their ratio is the speed-up.
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import platform
import statistics
import tarfile
import tempfile
import time

import numpy as np

from turboloader.io.shards import TarShard, _group, parse_label
from turboloader.io.tar import TarIndex


def write_shards(root: str, shards: int, samples: int, seed: int = 0) -> list[str]:
    """``shards`` WebDataset shards of ``samples`` samples each: a ``.jpg`` of 60-200 KB
    of random bytes (never decoded here: only headers and labels are read) and a ``.cls``."""
    rng = np.random.default_rng(seed)
    blob = rng.integers(0, 256, 200_000, dtype=np.uint8).tobytes()
    paths = []
    for s in range(shards):
        path = os.path.join(root, f"shard-{s:05d}.tar")
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
            for j in range(samples):
                key = f"{s:05d}{j:06d}"
                for ext, data in (("jpg", blob[:int(rng.integers(60_000, 200_000))]),
                                  ("cls", str(int(rng.integers(1000))).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths


def _python_grouped(shard):
    shard._from_groups(_group(shard._index.names))
    return shard


def _labels_per_member(shard):
    values, index = [None] * len(shard), shard._index
    for j, lb in enumerate(shard._label.tolist()):
        if lb >= 0:
            values[j] = parse_label(index.member(lb), shard._label_ext[j], None)
    return values


def measure(paths: list[str], reps: int) -> dict[str, float]:
    """Median thread CPU µs per sample of each row over ``reps`` passes of ``paths``."""
    for p in paths:   # in the page cache, as a shard read the epoch before is
        with open(p, "rb") as fh:
            while fh.read(1 << 24):
                pass
    n = sum(len(TarShard(p)) for p in paths)
    rows = {"index": [], "grouping, native": [], "grouping, Python": [],
            "labels, one call": [], "labels, per member": []}

    def timed(fn, items=paths):
        t = time.thread_time()
        out = [fn(x) for x in items]
        return (time.thread_time() - t) * 1e6 / n, out

    for _ in range(reps):
        idx, _ = timed(lambda p: TarIndex(p).close())
        shard, shards = timed(TarShard)
        group, py = timed(lambda p: _python_grouped(TarShard(p)))
        rows["index"].append(idx)
        rows["grouping, native"].append(shard - idx)
        rows["grouping, Python"].append(group - shard)   # the native pass is paid first, then redone
        one, got = timed(lambda s: s.labels(None)[0], shards)
        per, want = timed(_labels_per_member, py)
        assert got == want, "the two label reads differ"
        assert [s._keys for s in shards] == [s._keys for s in py], "the groupings differ"
        rows["labels, one call"].append(one)
        rows["labels, per member"].append(per)
        for s in shards + py:
            s.close()
    return {k: statistics.median(v) for k, v in rows.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="a folder of .tar shards (default: made in a temp dir)")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--samples", type=int, default=1000, help="samples per made shard")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        paths = (sorted(glob.glob(os.path.join(a.data, "*.tar"))) if a.data
                 else write_shards(tmp, a.shards, a.samples))
        if not paths:
            raise SystemExit(f"no .tar shards in {a.data!r}")
        res = measure(paths, a.reps)
        n = sum(len(TarShard(p)) for p in paths)
    print(f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{len(paths)} shards, {n} samples, median of {a.reps} passes "
          f"(thread CPU time per sample, us)")
    for key, value in res.items():
        print(f"  {key:22s} {value:8.2f}")
    print(f"  grouping: native {res['grouping, Python'] / max(res['grouping, native'], 1e-9):.1f}x "
          f"faster; labels: one call {res['labels, per member'] / max(res['labels, one call'], 1e-9):.1f}x "
          f"faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
