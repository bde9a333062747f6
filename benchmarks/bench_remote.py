"""Remote shards: turboloader from an object store, against the same loader on local shards.

Setup: ``--n`` ImageNet-like JPEGs (``datasets.make_jpegs``) in ``--shards`` WebDataset shards,
uploaded to a local S3 (moto's server) behind a throttling TCP proxy on 127.0.0.1 that adds
``latency`` to every request (each HTTP request line the client sends is held that long) and
caps every connection at ``rate`` (and, with ``--node-mbs``, all connections together): what
one node sees of a cloud store per connection. Both servers run in a separate process, so
their CPU does not count in the loader's process (it does count on the machine).

Rows, each in a fresh process (its own fetch pool, peak RSS of its own, workers included):

- ``turboloader local``: ``TarDataset(local shards)``, ``turboloader.DataLoader(num_workers=W)``.
- ``turboloader remote``: the same ``s3://`` shards through the proxy, streamed (no cache):
  the fetch pool reads them ahead. Construction (counting the samples without
  ``shard_sizes``) is timed apart, then the epochs run.
- ``turboloader + ShardCache cold``: a fresh cache directory; construction included in the
  first epoch's images/s (counting fills the cache); ``warm``: the next epoch.
- ``webdataset``: ``WebDataset(["pipe:curl -s -f <presigned proxy URL>" ...])`` with its
  usual decode and torchvision transforms, torch ``DataLoader(num_workers=W)``, in its own venv
  (``python benchmarks/setup_envs.py webdataset``), local and remote.
- ``mosaicml streaming``: the same images and labels converted once to MDS with streaming's
  own ``MDSWriter`` (a ``bytes`` column holding the same JPEG bytes, an ``int`` label, about
  as many shards as the TARs; cached in the workdir), uploaded to the same bucket and read by
  a ``StreamingDataset`` subclass that decodes with PIL and applies the same torchvision train
  transforms, torch ``DataLoader(num_workers=W)``, in its own venv (``python
  benchmarks/setup_envs.py streaming``): ``local`` reads the MDS folder in place; remote
  reads ``s3://`` through the same proxy (streaming's S3 client takes ``S3_ENDPOINT_URL``)
  into a fresh local cache folder: epoch 1 cold (shards downloaded as the epoch goes, to
  disk), epoch 2 warm (every shard already on disk).

Per setting (``--settings 100:10,40:25``: milliseconds of latency : MB/s per connection) it
prints images/s per epoch, the ratio to turboloader local of the same run, the first batch's
time (from the loader's first ``next``), construction time and peak RSS; then the local
row once more (the machine's drift over the minutes the remote rows took: every ratio is to
the first local row's best epoch), and each turboloader row's CPU and minor page faults per
image per epoch (its process, fetch threads included).

Usage::

    python benchmarks/bench_remote.py                        # 3000 images, 12 shards
    python benchmarks/bench_remote.py --n 600 --shards 6 --settings 100:10
    # more bytes than the fetch pool's buffer (669 MB; 12 shards never fill it: results run 21)
    python benchmarks/bench_remote.py --n 12000 --shards 48 --epochs 2 --store-cpus 1
    # a ShardCache smaller than the dataset (39 of the 48 shards: results run 22)
    python benchmarks/bench_remote.py --n 12000 --shards 48 --epochs 3 --store-cpus 1 \
        --systems cache --cache-bytes 550MB --settings 100:10
    # this machine's speed moves by more than the rows differ: five rounds, each epoch's
    # fastest (results run 24)
    python benchmarks/bench_remote.py --epochs 3 --store-cpus 1 --systems local,remote,cache \
        --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import select
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ")


# -- the servers (their own process) ---------------------------------------------------------

class Bucket:
    """A token bucket of ``rate`` bytes/s (shared by the connections of a node cap)."""

    def __init__(self, rate):
        self.rate = float(rate)
        self.lock = threading.Lock()
        self.t = time.monotonic()

    def take(self, n):
        with self.lock:
            now = time.monotonic()
            self.t = max(self.t, now) + n / self.rate
            wait = self.t - now
        if wait > 0:
            time.sleep(wait)


def _pipe(src, dst, *, latency=0.0, bucket=None, node=None, chunk=256 << 10):
    try:
        while True:
            data = src.recv(chunk)
            if not data:
                break
            if latency and data.startswith(_METHODS):
                time.sleep(latency)  # a request: one round trip to the store
            if bucket is not None:
                bucket.take(len(data))
            if node is not None:
                node.take(len(data))
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def proxy(upstream, *, latency, rate, node_rate=0.0):
    """A TCP proxy on 127.0.0.1: ``latency`` seconds per request, ``rate`` bytes/s per
    connection (downstream), ``node_rate`` for all together (0: none). Returns its port."""
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(256)
    node = Bucket(node_rate) if node_rate else None

    def serve():
        while True:
            client, _ = lsock.accept()
            up = socket.create_connection(upstream)
            for s in (client, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_pipe, args=(client, up), kwargs={"latency": latency},
                             daemon=True).start()
            threading.Thread(target=_pipe, args=(up, client),
                             kwargs={"bucket": Bucket(rate) if rate else None, "node": node},
                             daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return lsock.getsockname()[1]


def serve(args):
    """The server process: moto S3 with the shards uploaded, one proxy per setting."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}", aws_access_key_id="testing",
                      aws_secret_access_key="testing", region_name="us-east-1")
    s3.create_bucket(Bucket="bench")
    for p in sorted(Path(args.data).glob("*.tar")):
        s3.upload_file(str(p), "bench", f"train/{p.name}")
    if args.mds:  # streaming's MDS conversion of the same samples: index.json + shards
        for p in sorted(Path(args.mds).rglob("*")):
            if p.is_file():
                s3.upload_file(str(p), "bench", f"mds/{p.relative_to(args.mds)}")
    ports = {}
    for setting in args.settings.split(","):
        ms, mbs = (float(x) for x in setting.split(":"))
        ports[setting] = proxy((host, port), latency=ms / 1000, rate=mbs * 1e6,
                               node_rate=args.node_mbs * 1e6)
    print(json.dumps({"s3": f"http://{host}:{port}", "proxies": ports}), flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    server.stop()


# -- the rows (a process each) ----------------------------------------------------------------

def _rss_mb():
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + kids) / 1024


def _epochs(loader, epochs, t_start=None, cache=None):
    from turboloader.io.fetch import fetch_pool

    def pool():  # the fetch pool's waits and fresh buffers so far (pools before 2026-11-29 lack the latter)
        st = fetch_pool().stats()
        return st["wait_s"], st.get("new_buffer_bytes") or 0

    def downloads():  # the shard cache's downloads so far (node-wide: this row's only)
        return cache.stats()["misses"] if cache is not None else 0

    out = []
    for e in range(epochs):
        it = iter(loader)
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        (w0, b0), t0, c0 = pool(), time.perf_counter(), time.process_time()
        d0 = downloads()
        first, n = None, 0
        for images, labels in it:
            if first is None:
                first = time.perf_counter() - t0
            n += len(labels)
        dt = time.perf_counter() - t0
        w1, b1 = pool()
        out.append({"n": n, "s": dt, "first_s": first, "cpu_s": time.process_time() - c0,
                    "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0,
                    "wait_s": w1 - w0, "fresh_bytes": b1 - b0})
        if cache is not None:
            out[-1]["downloads"] = downloads() - d0
    return out


def row_turboloader(args):
    import torch

    import turboloader
    from turboloader import transforms as T

    tf = T.Compose([T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip(),
                    T.ToImage(), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
    cache = None
    if args.cache:
        cache = turboloader.ShardCache(args.cache, max_bytes=args.cache_bytes,
                                       prefetch=args.prefetch)
    t0 = time.perf_counter()
    sizes = json.loads(args.sizes) if args.sizes else None
    ds = turboloader.TarDataset(args.urls, tf, shard_cache=cache, seed=0, shard_sizes=sizes)
    construct = time.perf_counter() - t0
    loader = turboloader.DataLoader(ds, batch_size=args.batch, num_workers=args.workers)
    res = {"construct_s": construct, "epochs": _epochs(loader, args.epochs, cache=cache)}
    from turboloader.io.fetch import fetch_pool

    st = fetch_pool().stats()
    res["pool"] = {k: st[k] for k in ("connections", "peak_connections", "requests",
                                      "bytes_fetched", "bytes_ahead", "waits", "wait_s",
                                      "peak_buffered", "cpu_s")}
    res["rss_mb"] = _rss_mb()
    return res


# the peers' scripts (run in their venvs): the same train transforms (torchvision v2, on
# the PIL image each decodes), and the same epoch loop and result line
_PEER_TF = r"""
tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                 v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                 v2.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
"""

_PEER_EPOCHS = r"""
out = []
for e in range(epochs):
    t = time.perf_counter(); first = None; n = 0
    for images, labels in dl:
        if first is None:
            first = time.perf_counter() - t
        n += len(labels)
    out.append({"n": n, "s": time.perf_counter() - t, "first_s": first})
rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
       + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
print("RESULT " + json.dumps({"construct_s": construct, "epochs": out, "rss_mb": rss}))
"""

_WDS = r"""
import json, resource, sys, time
import torch, webdataset as wds
from torchvision.transforms import v2
urls, batch, workers, epochs = json.loads(sys.argv[1])
""" + _PEER_TF + r"""t0 = time.perf_counter()
ds = (wds.WebDataset(urls, shardshuffle=len(urls), workersplitter=wds.split_by_worker,
                     empty_check=False).shuffle(1000).decode("pil").to_tuple("jpg", "cls")
      .map_tuple(tf, int))
dl = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers)
construct = time.perf_counter() - t0
""" + _PEER_EPOCHS


# streaming: the conversion (in its venv, with its own writer) and the row
_MDS_WRITE = r"""
import json, sys, tarfile
from pathlib import Path
from streaming import MDSWriter
shards, out, size_limit = json.loads(sys.argv[1])
n = 0
with MDSWriter(out=out, columns={"jpg": "bytes", "cls": "int"}, size_limit=size_limit) as w:
    for path in sorted(Path(shards).glob("*.tar")):
        sample = {}
        with tarfile.open(path) as tar:
            for m in tar:  # <key>.jpg then <key>.cls, adjacent (datasets.write_shards)
                key, ext = m.name.split(".", 1)
                sample[ext] = tar.extractfile(m).read()
                if "jpg" in sample and "cls" in sample:
                    w.write({"jpg": sample["jpg"], "cls": int(sample["cls"])})
                    sample, n = {}, n + 1
print("RESULT " + json.dumps({"samples": n}))
"""

_STREAMING = r"""
import io, json, resource, sys, time
import torch
from PIL import Image
from streaming import StreamingDataset
from streaming.base.util import clean_stale_shared_memory
from torchvision.transforms import v2
remote, local, batch, workers, epochs = json.loads(sys.argv[1])
""" + _PEER_TF + r"""
class Images(StreamingDataset):
    def __getitem__(self, i):
        obj = super().__getitem__(i)
        img = Image.open(io.BytesIO(obj["jpg"])).convert("RGB")
        return tf(img), obj["cls"]

clean_stale_shared_memory()
t0 = time.perf_counter()
ds = Images(remote=remote, local=local, shuffle=True, batch_size=batch)
dl = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers)
construct = time.perf_counter() - t0
""" + _PEER_EPOCHS


# --store-cpus: the CPUs the rows may use (the others are the store's); None: all
_ROW_CPUS = None


def _pin_row():
    if _ROW_CPUS is not None:
        os.sched_setaffinity(0, _ROW_CPUS)


def _child(argv, env=None, python=None, timeout=1800):
    r = subprocess.run([python or sys.executable, *argv], capture_output=True, text=True,
                       env=env, timeout=timeout, preexec_fn=_pin_row)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    lines = r.stderr.strip().splitlines() or ["no output"]
    # the table keeps the last line; the cause (a traceback, a chained error) goes to stderr
    print(f"bench_remote: {argv[:2]} failed (exit {r.returncode}); its stderr ends:",
          *lines[-40:], sep="\n", file=sys.stderr, flush=True)
    return {"error": lines[-1][:300]}


def _timed(srv, fn, *a, **kw):
    """``fn(*a, **kw)`` with the CPU seconds the server process used meanwhile."""
    c0 = _cpu_s(srv.pid)
    res = fn(*a, **kw)
    res["server_cpu_s"] = _cpu_s(srv.pid) - c0
    return res


def run_row(kind, urls, args, env_extra, cache=None, sizes=None):
    env = dict(os.environ, **env_extra)
    argv = [str(Path(__file__)), "--row", kind, "--urls", json.dumps(urls),
            "--batch", str(args.batch), "--workers", str(args.workers),
            "--epochs", str(args.epochs), "--prefetch", str(args.prefetch),
            "--cache-bytes", str(args.cache_bytes)]
    if cache:
        argv += ["--cache", cache]
    if sizes:
        argv += ["--sizes", json.dumps(sizes)]
    return _child(argv, env=env)


def _venv_env(name):
    """(python, environment) of a peer's venv, or an error row."""
    import setup_envs

    state, detail = setup_envs.status(name)
    if state != "ok":
        return None, {"error": f"{name} venv {state}: {detail}"}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return str(setup_envs.venv_python(name)), env


def run_wds(urls, args):
    python, env = _venv_env("webdataset")
    if python is None:
        return env
    return _child(["-c", _WDS, json.dumps([urls, args.batch, args.workers, args.epochs])],
                  env=env, python=python)


def convert_mds(shards, out, n_shards):
    """``shards`` (TARs) as an MDS folder ``out`` written by streaming's ``MDSWriter``, about
    ``n_shards`` shards; kept: a finished conversion (its ``index.json``) is reused."""
    if (out / "index.json").exists():
        return {"samples": None}
    python, env = _venv_env("streaming")
    if python is None:
        return env
    total = sum(p.stat().st_size for p in shards.glob("*.tar"))
    limit = int(total / n_shards * 1.05)
    subprocess.run(["rm", "-rf", str(out)], check=False)
    return _child(["-c", _MDS_WRITE, json.dumps([str(shards), str(out), limit])], env=env,
                  python=python)


def run_streaming(remote, local, args, extra_env=None):
    python, env = _venv_env("streaming")
    if python is None:
        return env
    env.update(extra_env or {})
    return _child(["-c", _STREAMING,
                   json.dumps([remote, local, args.batch, args.workers, args.epochs])],
                  env=env, python=python)


# -- the table ----------------------------------------------------------------------------------

def _cpu_s(pid):
    """CPU seconds (user + system) process ``pid`` used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def _fmt_row(name, res, local_ips, *, cold_with_construct=False):
    if "error" in res:
        return f"| {name} | not run: {res['error']} | | | | |"
    eps = res["epochs"]
    cells = []
    for i, e in enumerate(eps):
        s = e["s"] + (res["construct_s"] if cold_with_construct and i == 0 else 0.0)
        ips = e["n"] / s
        cells.append(f"{ips:.0f} ({ips / local_ips:.2f}x)" if local_ips else f"{ips:.0f}")
    first = eps[0]["first_s"]
    server = f"{res['server_cpu_s']:.0f} s" if "server_cpu_s" in res else ""
    return (f"| {name} | {' / '.join(cells)} | {first:.2f} s | {res['construct_s']:.1f} s "
            f"| {res['rss_mb']:.0f} MB | {server} |")


_TL_ROWS = ("local", "remote", "cache", "cache-sized")  # turboloader's rows: run each round


def _run_round(args, systems, srv, info, aws, root, local, names, mds, mds_made, *, first):
    """Every row once, in the report's order (local, then per setting remote, cache,
    cache-sized; the peers' rows only in the ``first`` round): {row key: result}."""
    results = {}
    if "local" in systems:
        results["local"] = run_row("turboloader", local, args, {})
    if first and "webdataset" in systems:
        results["webdataset local"] = run_wds(local, args)
    if first and "streaming" in systems:
        if mds_made is not None and "error" in mds_made:
            results["streaming local"] = {"error": f"no MDS conversion: {mds_made['error']}"}
        else:
            results["streaming local"] = run_streaming(None, str(mds), args)
    for setting, port in info["proxies"].items():
        ms, mbs = setting.split(":")
        env = dict(aws, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
        s3urls = f"s3://bench/train/train-{{00000..{len(names) - 1:05d}}}.tar"  # as users write it
        if "remote" in systems:
            results[f"remote {setting}"] = _timed(srv, run_row, "turboloader", [s3urls], args,
                                                  env)
        if "cache" in systems:
            cdir = root / f"cache-{ms}-{mbs}-{time.time_ns()}"
            results[f"cache {setting}"] = _timed(srv, run_row, "turboloader", [s3urls], args,
                                                 env, cache=str(cdir))
            subprocess.run(["rm", "-rf", str(cdir)], check=False)
        if "cache-sized" in systems:  # counts known (a manifest): the pass fills the cache
            per = -(-args.n // args.shards)
            counts = [min(per, args.n - i * per) for i in range(len(names))]
            cdir = root / f"cache-{ms}-{mbs}-{time.time_ns()}"
            results[f"cache-sized {setting}"] = _timed(
                srv, run_row, "turboloader", [s3urls], args, env, cache=str(cdir),
                sizes=counts)
            subprocess.run(["rm", "-rf", str(cdir)], check=False)
        if first and "webdataset" in systems:
            # presigned GETs (the bucket is private, as users' are), through the proxy
            import boto3

            signer = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}",
                                  aws_access_key_id="testing",
                                  aws_secret_access_key="testing", region_name="us-east-1")
            urls = ["pipe:curl -s -f " + shlex.quote(signer.generate_presigned_url(
                "get_object", Params={"Bucket": "bench", "Key": f"train/{n}"},
                ExpiresIn=86400)) for n in names]
            results[f"webdataset {setting}"] = _timed(srv, run_wds, urls, args)
        if first and "streaming" in systems and "error" not in results["streaming local"]:
            cdir = root / f"mds-cache-{ms}-{mbs}-{time.time_ns()}"
            senv = dict(aws, S3_ENDPOINT_URL=f"http://127.0.0.1:{port}")
            results[f"streaming {setting}"] = _timed(
                srv, run_streaming, "s3://bench/mds", str(cdir), args, senv)
            subprocess.run(["rm", "-rf", str(cdir)], check=False)
    if args.rounds == 1 and "local" in results and len(results) > 1:
        # the local row again, after the others: the machine's drift over the run (the
        # ratios are to the first local row's best epoch, minutes earlier)
        results["local again"] = run_row("turboloader", local, args, {})
    return results


def _best_of(runs, *, cold=False):
    """One result from a row's rounds: each epoch the round's epoch that ran fastest (with
    ``cold``, the first epoch counted with its round's construction, which comes with it),
    so the rows compare the machine at its least disturbed; ``rounds`` keeps them all."""
    ok = [r for r in runs if "error" not in r]
    if len(runs) == 1 or not ok:
        return runs[0]
    best = dict(ok[0], rounds=runs, rss_mb=max(r["rss_mb"] for r in ok))
    epochs = []
    for i in range(len(ok[0]["epochs"])):
        pick = min(ok, key=lambda r: r["epochs"][i]["s"] / r["epochs"][i]["n"]
                   + (r["construct_s"] / r["epochs"][0]["n"] if cold and i == 0 else 0.0))
        epochs.append(pick["epochs"][i])
        if i == 0:
            best["construct_s"] = pick["construct_s"]
    best["epochs"] = epochs
    if all("server_cpu_s" in r for r in ok):  # whole-run figures: the median round's
        best["server_cpu_s"] = sorted(r["server_cpu_s"] for r in ok)[len(ok) // 2]
    if all("cpu_s" in r.get("pool", {}) for r in ok):
        best["pool"] = sorted((r["pool"] for r in ok), key=lambda p: p["cpu_s"])[len(ok) // 2]
    return best


def _report(args, results, info, mds):
    """The tables of one run (see the module docstring)."""
    local_ips = None
    if "local" in results and "error" not in results["local"]:
        local_ips = max(e["n"] / e["s"] for e in results["local"]["epochs"])
    if "streaming local" in results and "error" not in results["streaming local"]:
        n_mds = len(list(mds.glob("*.mds")))
        print(f"- MDS copy for streaming: {mds} ({n_mds} shards, "
              f"{sum(p.stat().st_size for p in mds.glob('*.mds')) / 1e6:.0f} MB)")
    if args.rounds > 1:
        print(f"- {args.rounds} rounds, each running every turboloader row in this order (the "
              f"peers' rows in the first only); each epoch's figure is that epoch's fastest "
              f"round (the S3 + proxy and fetch pool CPU: the median round's), the rounds are "
              f"listed after the tables")
    for setting in info["proxies"]:
        ms, mbs = setting.split(":")
        print(f"\n## {ms} ms per request, {mbs} MB/s per connection"
              + (f", node cap {args.node_mbs} MB/s" if args.node_mbs else ""))
        print("| row | images/s per epoch (x local) | first batch | construction | peak RSS "
              "| S3 + proxy CPU |")
        print("|---|---|---|---|---|---|")
        if "local" in results:
            print(_fmt_row("turboloader local", results["local"], local_ips))
        if f"remote {setting}" in results:
            print(_fmt_row("turboloader remote (streamed)", results[f"remote {setting}"],
                           local_ips))
        if f"cache {setting}" in results:
            print(_fmt_row("turboloader + ShardCache (epoch 1 cold, construction "
                           "included; then warm)", results[f"cache {setting}"], local_ips,
                           cold_with_construct=True))
        if f"cache-sized {setting}" in results:
            print(_fmt_row("turboloader + ShardCache, counts given (shard_sizes): epoch 1 "
                           "cold, then warm", results[f"cache-sized {setting}"], local_ips))
        if f"webdataset {setting}" in results:
            wds_local = results.get("webdataset local")
            if wds_local is not None and "error" not in wds_local:
                print(_fmt_row("webdataset local", wds_local, local_ips))
            print(_fmt_row("webdataset remote (pipe:curl)", results[f"webdataset {setting}"],
                           local_ips))
        if "streaming local" in results:
            print(_fmt_row("mosaicml streaming local (MDS, PIL decode)",
                           results["streaming local"], local_ips))
            if f"streaming {setting}" in results:
                print(_fmt_row("mosaicml streaming remote (epoch 1 cold into a fresh cache "
                               "folder, then warm from disk)", results[f"streaming {setting}"],
                               local_ips))
    if "local again" in results:
        print("\n| row | images/s per epoch (x the first local row's best) | first batch "
              "| construction | peak RSS | |")
        print("|---|---|---|---|---|---|")
        print(_fmt_row("turboloader local, again after the remote rows", results["local again"],
                       local_ips))
    cpu = [(name, res) for name, res in results.items()  # turboloader's rows: one process
           if isinstance(res, dict) and res.get("epochs") and "cpu_s" in res["epochs"][0]
           and name.split()[0] in _TL_ROWS]
    if cpu:  # the loader process's own CPU: the client's cost of reading remotely
        print("\n| row | loader CPU ms per image, each epoch | page faults per image, each "
              "epoch | fetch pool threads CPU | readers waiting for bytes, each epoch | "
              "fresh part buffers, each epoch | shards downloaded, each epoch |")
        print("|---|---|---|---|---|---|---|")
        for name, res in cpu:
            eps = res["epochs"]
            per = " / ".join(f"{1000 * e['cpu_s'] / max(e['n'], 1):.2f}" for e in eps)
            flt = " / ".join(f"{e['faults'] / max(e['n'], 1):.1f}" if "faults" in e else "?"
                             for e in eps)
            waits = " / ".join(f"{e.get('wait_s', 0):.2f} s" for e in eps)
            fresh = " / ".join(f"{e.get('fresh_bytes', 0) / 1e6:.0f} MB" for e in eps)
            pool = res.get("pool", {}).get("cpu_s")
            dl = " / ".join(str(e["downloads"]) for e in eps if "downloads" in e)
            print(f"| {name} | {per} | {flt} | {'' if pool is None else f'{pool:.1f} s'} "
                  f"| {waits} | {fresh} | {dl} |")
    if args.rounds > 1:  # every round's images/s: the spread the best-of hides
        print("\n| row | images/s per epoch, each round |")
        print("|---|---|")
        for name, res in results.items():
            if name.split()[0] not in _TL_ROWS or "rounds" not in res:
                continue
            cells = []
            for r in res["rounds"]:
                if "error" in r:
                    cells.append("not run")
                    continue
                cold = name.startswith("cache ")
                cells.append(" / ".join(
                    f"{e['n'] / (e['s'] + (r['construct_s'] if cold and i == 0 else 0)):.0f}"
                    for i, e in enumerate(r["epochs"])))
            print(f"| {name} | {' ; '.join(cells)} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=3000, help="images (default 3000)")
    p.add_argument("--shards", type=int, default=12)
    p.add_argument("--workers", type=int, default=2, help="threads / workers (default 2)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=2, help="ShardCache(prefetch=)")
    p.add_argument("--cache-bytes", default="20GB",
                   help="ShardCache(max_bytes=) of the cache rows (default 20GB: all of it)")
    p.add_argument("--settings", default="100:10,40:25",
                   help="latency_ms:MB_per_s per connection, comma separated")
    p.add_argument("--node-mbs", type=float, default=0.0, help="node bandwidth cap (0: none)")
    p.add_argument("--systems", default="local,remote,cache,cache-sized,webdataset,streaming")
    p.add_argument("--workdir", default=str(HERE / "data"))
    p.add_argument("--store-cpus", type=int, default=0,
                   help="run the S3 server and the proxy on the last N CPUs and every row on "
                        "the others (the store on other machines, as in a cloud; default 0: "
                        "all share every CPU)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every turboloader row this many times, alternating, and report "
                        "each epoch's fastest round (this shared machine's speed moves by "
                        "more than the differences measured; default 1)")
    p.add_argument("--json", help="also write the results here")
    # internal: the server process and the row processes
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--mds", help=argparse.SUPPRESS)
    p.add_argument("--row", help=argparse.SUPPRESS)
    p.add_argument("--urls", help=argparse.SUPPRESS)
    p.add_argument("--cache", help=argparse.SUPPRESS)
    p.add_argument("--sizes", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args)
        return 0
    if args.row:
        args.urls = json.loads(args.urls)
        print("RESULT " + json.dumps(row_turboloader(args)), flush=True)
        return 0

    import datasets

    systems = set(args.systems.split(","))
    root = Path(args.workdir) / f"remote-n{args.n}-s{args.shards}"
    shards = root / "shards"
    if not sorted(shards.glob("*.tar")):
        items = datasets.make_jpegs(args.n, 0)
        datasets.write_shards(shards, items, shard_size=-(-args.n // args.shards),
                              prefix="train")
    local = [str(p) for p in sorted(shards.glob("*.tar"))]
    names = [Path(u).name for u in local]
    mb = sum(os.path.getsize(u) for u in local) / 1e6
    mds, mds_made = root / "mds", None
    if "streaming" in systems:
        mds_made = convert_mds(shards, mds, len(names))
    serve_argv = [sys.executable, str(Path(__file__)), "--serve", "--data", str(shards),
                  "--settings", args.settings, "--node-mbs", str(args.node_mbs)]
    store_cpus = None
    if args.store_cpus:
        cpus = sorted(os.sched_getaffinity(0))
        if args.store_cpus >= len(cpus):
            p.error(f"--store-cpus {args.store_cpus}: only {len(cpus)} CPUs here")
        global _ROW_CPUS
        _ROW_CPUS, store_cpus = set(cpus[:-args.store_cpus]), set(cpus[-args.store_cpus:])
    if (mds / "index.json").exists():
        serve_argv += ["--mds", str(mds)]
    srv = subprocess.Popen(serve_argv,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True,
                           preexec_fn=(None if store_cpus is None else
                                       lambda: os.sched_setaffinity(0, store_cpus)))
    try:
        ready, _, _ = select.select([srv.stdout], [], [], 300)
        if not ready:
            raise RuntimeError("the S3 server did not start in 300 s")
        info = json.loads(srv.stdout.readline())
        aws = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}
        print(f"# bench_remote: {len(local)} shards, {args.n} images, {mb:.0f} MB; "
              f"{args.workers} workers, batch {args.batch}, {args.epochs} epochs")
        print(f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, "
              f"Python {platform.python_version()}, {platform.platform()}; load average "
              f"{os.getloadavg()[0]:.1f} at the start")
        if store_cpus is None:
            print("- the S3 server and the proxy share the machine: their CPU (last column) is "
                  "taken from the loader's")
        else:
            print(f"- the S3 server and the proxy run on CPU {sorted(store_cpus)}, every row "
                  f"(local ones too) on CPU {sorted(_ROW_CPUS)}: the store's CPU is not the "
                  f"loader's, as when it is another machine")
        print(f"- command: `python benchmarks/bench_remote.py "
              f"{' '.join(argv if argv is not None else sys.argv[1:])}`")
        rounds = [_run_round(args, systems, srv, info, aws, root, local, names, mds,
                             mds_made, first=True)]
        for r in range(1, args.rounds):
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            rounds.append(_run_round(args, systems, srv, info, aws, root, local, names, mds,
                                     mds_made, first=False))
        results = {key: (_best_of([rnd[key] for rnd in rounds if key in rnd],
                                  cold=key.startswith("cache "))
                         if key.split()[0] in _TL_ROWS else rounds[0][key])
                   for key in rounds[0]}
        _report(args, results, info, mds)
        print(f"\n- load average {os.getloadavg()[0]:.1f} at the end")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        srv.stdin.close()
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
