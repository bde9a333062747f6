"""Construction time of ``TarDataset`` on remote shards (no ``shard_sizes``): how long before
the first batch can be asked for.

Setup: ``--n`` ImageNet-like JPEGs (``--distinct`` real ones from ``datasets.make_jpegs``,
repeated: counting reads bytes, it does not decode) in ``--shards`` WebDataset shards in S3
(moto's server) behind the fault proxy of ``tests/helpers/faultproxy.py`` in throttling mode:
``--latency`` seconds added to every request and ``--rate`` MB/s per connection. Server and
proxy run in a child process, so their CPU is not the loader's.

Rows:

- ``one connection, in order``: what construction did before (``count_samples`` shard after
  shard, each read whole over one connection): the baseline.
- ``cold``: ``TarDataset(pattern)`` with an empty node-local count cache and no index:
  counted in parallel.
- ``warm count cache``: the same again (one metadata request per shard).
- ``with an index``: after ``turboloader index`` (its time is printed too).
- ``--many`` tiny shards: with an index, and cold without one.

Usage::

    python benchmarks/bench_remote_counts.py                  # 3000 images, 12 shards, 100 ms, 10 MB/s
    python benchmarks/bench_remote_counts.py --n 600 --shards 6 --many 200
"""
from __future__ import annotations

import argparse
import io
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

_SERVER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from moto.server import ThreadedMotoServer
from helpers.faultproxy import FaultProxy
srv = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
srv.start()
host, port = srv.get_host_and_port()
rate = float(sys.argv[3]) * 1e6 if float(sys.argv[3]) > 0 else None
with FaultProxy(port, latency=float(sys.argv[2]), rate=rate) as proxy:
    print(port, proxy.port, flush=True)
    sys.stdin.read()
srv.stop()
"""


def _shards(root, n, shards, distinct):
    from datasets import make_jpegs

    jpegs = make_jpegs(distinct, seed=0)
    os.makedirs(root)
    per = -(-n // shards)
    paths, k = [], 0
    for s in range(shards):
        path = os.path.join(root, f"train-{s:05d}.tar")
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
            for _ in range(min(per, n - k)):
                data, label = jpegs[k % distinct]
                for name, blob in ((f"{k:07d}.jpg", data), (f"{k:07d}.cls", str(label).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(blob)
                    tf.addfile(info, io.BytesIO(blob))
                k += 1
        paths.append(path)
    return paths


def _tiny(root, many):
    from datasets import make_jpegs

    data = make_jpegs(1, seed=1)[0][0]
    os.makedirs(root)
    paths = []
    for s in range(many):
        path = os.path.join(root, f"tiny-{s:05d}.tar")
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
            for j in range(2):
                for name, blob in ((f"{s:05d}{j}.jpg", data), (f"{s:05d}{j}.cls", b"1")):
                    info = tarfile.TarInfo(name)
                    info.size = len(blob)
                    tf.addfile(info, io.BytesIO(blob))
        paths.append(path)
    return paths


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--shards", type=int, default=12)
    ap.add_argument("--distinct", type=int, default=60, help="distinct JPEGs (repeated)")
    ap.add_argument("--latency", type=float, default=0.1, help="seconds per request")
    ap.add_argument("--rate", type=float, default=10.0, help="MB/s per connection (0: none)")
    ap.add_argument("--many", type=int, default=1000, help="tiny shards (0: skip)")
    args = ap.parse_args(argv)

    import boto3

    tmp = tempfile.mkdtemp(prefix="bench-remote-counts-")
    paths = _shards(os.path.join(tmp, "big"), args.n, args.shards, args.distinct)
    nbytes = sum(os.path.getsize(p) for p in paths)
    tiny = _tiny(os.path.join(tmp, "tiny"), args.many) if args.many else []
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(REPO / "tests"),
                             str(args.latency), str(args.rate)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        s3_port, proxy_port = map(int, proc.stdout.readline().split())
        direct = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{s3_port}",
                              aws_access_key_id="k", aws_secret_access_key="s",
                              region_name="us-east-1")
        direct.create_bucket(Bucket="bench")
        for p in paths:
            direct.upload_file(p, "bench", f"big/{os.path.basename(p)}")
        for p in tiny:
            direct.upload_file(p, "bench", f"tiny/{os.path.basename(p)}")
        os.environ.update({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy_port}",
                           "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                           "AWS_DEFAULT_REGION": "us-east-1",
                           "TURBOLOADER_CACHE": os.path.join(tmp, "cache")})
        from turboloader.data import TarDataset
        from turboloader.io.shards import count_samples
        from turboloader.tools.cli import main as cli

        pattern = f"s3://bench/big/train-{{00000..{args.shards - 1:05d}}}.tar"
        urls = [f"s3://bench/big/train-{s:05d}.tar" for s in range(args.shards)]
        rows = []

        def timed(label, fn):
            t = time.perf_counter()
            out = fn()
            rows.append((label, time.perf_counter() - t))
            return out

        counts = timed("one connection, in order (before)", lambda: [count_samples(u) for u in urls])
        ds = timed("TarDataset cold (parallel, no index)", lambda: TarDataset(pattern))
        assert ds.shard_sizes == counts, (ds.shard_sizes, counts)
        timed("TarDataset, warm count cache", lambda: TarDataset(pattern))
        timed("turboloader index", lambda: cli(["index", pattern]))
        import shutil

        shutil.rmtree(os.path.join(tmp, "cache"), ignore_errors=True)
        ds = timed("TarDataset with an index (cache empty)", lambda: TarDataset(pattern))
        assert ds.shard_sizes == counts
        if tiny:
            tpat = f"s3://bench/tiny/tiny-{{00000..{args.many - 1:05d}}}.tar"
            ds = timed(f"{args.many} tiny shards, cold (parallel, no index)",
                       lambda: TarDataset(tpat))
            assert ds.num_samples == 2 * args.many
            timed(f"{args.many} tiny shards: turboloader index", lambda: cli(["index", tpat]))
            shutil.rmtree(os.path.join(tmp, "cache"), ignore_errors=True)
            ds = timed(f"{args.many} tiny shards, with an index", lambda: TarDataset(tpat))
            assert ds.num_samples == 2 * args.many
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    base = rows[0][1]
    print(f"\n## TarDataset construction on remote shards (no shard_sizes)\n")
    print(f"- {args.n} JPEGs in {args.shards} shards ({nbytes / 1e6:.0f} MB) in moto's S3 behind "
          f"a proxy adding {args.latency * 1e3:.0f} ms per request and {args.rate:g} MB/s per "
          f"connection; {args.many} tiny shards beside them")
    print(f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}")
    print(f"- command: `python benchmarks/bench_remote_counts.py --n {args.n} --shards "
          f"{args.shards} --latency {args.latency} --rate {args.rate} --many {args.many}`\n")
    print("| construction | seconds | vs one connection |")
    print("| --- | ---: | ---: |")
    for label, dt in rows:
        print(f"| {label} | {dt:.2f} | {base / dt:.1f}x |")


if __name__ == "__main__":
    main()
