"""The native batch call (_fused.run_batch / read_headers) and its thread pool (BatchRunner):
the GIL is released, threads are joined when a runner goes, runners work when shared, not
shared and after fork, and a fuzzed corrupt batch never crashes and gives each row the
per-sample path's outcome."""

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from turboloader import transforms as T
from turboloader._native import _fused
from turboloader.tools.synthetic import synthetic_jpegs
from turboloader.decode.executor import OK, BatchRunner
from turboloader.transforms._random import SampleRandom, sample_keys

REPO = Path(__file__).resolve().parents[2]
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def jpegs():
    return [b for b, _ in synthetic_jpegs(24, seed=5, short_side=(300, 600))]


def _plan(dct=True):
    return T.plan(T.Compose([T.RandomResizedCrop(128), T.RandomHorizontalFlip(),
                             T.ColorJitter(0.2, 0.2), T.ToTensor(), T.Normalize(MEAN, STD)]),
                  dct_scaling=dct)


def _reference(p, sources, keys):
    return torch.stack([p.from_jpeg(s, rng=SampleRandom(int(k))) for s, k in zip(sources, keys)])


def _threads():
    # the runners' pool threads (named by batch_pool.c); other libraries' threads may come
    # and go while the suite runs
    n = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                n += f.read().strip() == "tl-batch"
        except FileNotFoundError:
            pass
    return n


def test_runner_threads_start_and_are_joined():
    gc.collect()   # runners of earlier tests held by reference cycles (tracebacks) go now
    before = _threads()
    runners = [BatchRunner(threads=4) for _ in range(5)]
    assert _threads() == before + 5 * 3   # the calling thread is the 4th
    assert BatchRunner(threads=1).threads == 1 and _threads() == before + 15
    del runners
    gc.collect()
    assert _threads() == before


@pytest.mark.slow
def test_dropped_runners_leak_no_threads(jpegs):
    p = _plan()
    keys = sample_keys(0, 0, np.arange(8))
    params = p.prepare_batch(jpegs[:8], keys)
    gc.collect()
    before = _threads()
    for _ in range(10):
        runner = BatchRunner(threads=3)
        out = torch.empty((8, 3, 128, 128))
        assert (p.run_batch(jpegs[:8], params, out, runner=runner).status == OK).all()
        del runner
    gc.collect()
    assert _threads() == before


def test_gil_is_released_during_the_batch(jpegs):
    p = T.plan(T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()]), dct_scaling=False)
    sources = jpegs * 4
    keys = sample_keys(0, 0, np.arange(len(sources)))
    params = p.prepare_batch(sources, keys)
    out = torch.empty((len(sources), 3, 224, 224))
    stamps = []
    done = threading.Event()

    def spin():
        while not done.is_set():
            stamps.append(time.perf_counter())

    runner = BatchRunner(threads=1)
    p.run_batch(sources, params, out, runner=runner)   # warm the scratch memory
    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.02)
    t0 = time.perf_counter()
    result = p.run_batch(sources, params, out, runner=runner)
    t1 = time.perf_counter()
    done.set()
    t.join()
    assert (result.status == OK).all()
    assert result.nogil_seconds > 0.5 * (t1 - t0)
    during = [s for s in stamps if t0 <= s <= t1]
    # With the GIL held for the batch, the spinning thread would stall for the whole call.
    gaps = np.diff([t0, *during, t1])
    assert gaps.max() < 0.5 * (t1 - t0), (gaps.max(), t1 - t0)


@pytest.mark.parametrize("shared", [True, False], ids=["shared_runner", "own_runners"])
def test_concurrent_callers(jpegs, shared):
    p = _plan()
    n = 12
    work = [(jpegs[i:i + n], sample_keys(1, 0, np.arange(i, i + n))) for i in range(0, 12, 3)]
    refs = [_reference(p, s, k) for s, k in work]
    runner = BatchRunner(threads=2) if shared else None
    errors = []

    def caller(j):
        try:
            own = runner if shared else (BatchRunner(threads=2) if j % 2 else None)
            for _ in range(3):
                src, keys = work[j]
                out = torch.empty((n, 3, 128, 128))
                result = p.run_batch(src, p.prepare_batch(src, keys), out, runner=own)
                assert (result.status == OK).all()
                assert torch.equal(out, refs[j])
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(j,)) for j in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_read_headers(jpegs):
    from turboloader import DecodeError, decode_jpeg_header

    sources = [jpegs[0], b"", b"garbage", memoryview(jpegs[1]), jpegs[2][:50]]
    h, w, errors = _fused.read_headers(sources, np.array([1, 1, 1, 1, 0], np.uint8))
    for i in (0, 3):
        hdr = decode_jpeg_header(sources[i])
        assert (h[i], w[i]) == (hdr.height, hdr.width) and errors[i] is None
    for i in (1, 2):
        assert isinstance(errors[i], DecodeError) and h[i] == w[i] == 0
        with pytest.raises(DecodeError) as info:
            decode_jpeg_header(sources[i])
        assert str(info.value) == str(errors[i])
    assert errors[4] is None and h[4] == 0   # not asked


def test_native_run_batch_checks_its_arguments(jpegs):
    n = 2
    args = dict(todo=np.ones(n, np.uint8), kind=np.zeros(n, np.uint8),
                rows=np.arange(n, dtype=np.int64), window=np.zeros((n, 4), np.int32),
                full=np.zeros(n, np.uint8), scale_num=np.full(n, 8, np.int32),
                box=np.zeros((n, 4)), flip=np.zeros(n, np.uint8), n_ops=np.zeros(n, np.int32),
                ops=np.zeros((n, 8), np.int32), factors=np.zeros((n, 8)), filter=1)
    out = np.zeros((n, 3, 8, 8), np.uint8)
    runner = BatchRunner()
    with pytest.raises(ValueError):
        _fused.run_batch(runner, jpegs[:3], out, **args)
    with pytest.raises(ValueError):
        _fused.run_batch(runner, jpegs[:2], out, **{**args, "rows": np.array([0, 2])})
    with pytest.raises(TypeError):
        _fused.run_batch(runner, jpegs[:2], np.zeros((n, 3, 8, 8), np.int16), **args)
    with pytest.raises(ValueError):
        _fused.run_batch(runner, jpegs[:2], np.zeros((n, 3, 8, 8), np.float32), **args)
    with pytest.raises(TypeError):
        _fused.run_batch(runner, [np.zeros((4, 4, 3), np.float32)] * 2, out,
                         **{**args, "kind": np.ones(n, np.uint8)})
    # empty windows and boxes outside them are per-row failures, never a crash
    failed, errors, _, _ = _fused.run_batch(runner, jpegs[:2], out, **args)
    assert failed.tolist() == [1, 1] and all(isinstance(e, ValueError) for e in errors)
    box = np.array([[0, 0, 900, 900]] * n, np.float64)
    window = np.array([[0, 0, 16, 16]] * n, np.int32)
    failed, errors, _, _ = _fused.run_batch(runner, jpegs[:2], out,
                                            **{**args, "box": box, "window": window})
    assert failed.tolist() == [1, 1] and "outside" in str(errors[0])
    arr = np.zeros((10, 10, 3), np.uint8)
    window = np.array([[5, 5, 8, 8]] * n, np.int32)
    box = np.array([[0, 0, 8, 8]] * n, np.float64)
    failed, errors, _, _ = _fused.run_batch(runner, [arr, arr], out,
                                            **{**args, "kind": np.ones(n, np.uint8),
                                               "window": window, "box": box})
    assert failed.tolist() == [1, 1] and "outside" in str(errors[0])
    assert (out == 0).all()


def _run_isolated(body, timeout=600):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=env)
    assert proc.returncode == 0, (
        f"subprocess exited with {proc.returncode} (negative: a crash)\n--- stdout\n"
        f"{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc.stdout


@pytest.mark.slow
def test_runner_works_in_a_forked_child():
    out = _run_isolated('''
        import os, numpy as np, torch
        from turboloader import transforms as T
        from turboloader.tools.synthetic import synthetic_jpegs
        from turboloader.decode.executor import BatchRunner
        from turboloader.transforms._random import sample_keys
        jpegs = [b for b, _ in synthetic_jpegs(6, seed=1)]
        p = T.plan(T.Compose([T.RandomResizedCrop(64), T.ToImage()]))
        keys = sample_keys(0, 0, np.arange(6))
        runner = BatchRunner(threads=3)
        ref = torch.empty((6, 3, 64, 64), dtype=torch.uint8)
        p.run_batch(jpegs, p.prepare_batch(jpegs, keys), ref, runner=runner)
        pid = os.fork()
        if pid == 0:
            out = torch.empty_like(ref)
            r = p.run_batch(jpegs, p.prepare_batch(jpegs, keys), out, runner=runner)
            ok = bool((r.status == 0).all()) and torch.equal(out, ref)
            names = []
            for t in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{t}/comm") as f:
                    names.append(f.read().strip())
            os._exit(0 if ok and names.count("tl-batch") == 2 else 1)   # the child's own
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    ''', timeout=300)
    assert out.split() == ["0"]


@pytest.mark.slow
def test_fuzzed_corrupt_batches_match_the_per_sample_path():
    out = _run_isolated('''
        import warnings, numpy as np, torch
        from turboloader import DecodeError, DecodeWarning
        from turboloader import transforms as T
        from turboloader.tools.synthetic import synthetic_jpegs
        from turboloader.decode.executor import BatchRunner, OK, FAILED
        from turboloader.transforms._random import SampleRandom, sample_keys
        rng = np.random.default_rng(0)
        base = [b for b, _ in synthetic_jpegs(8, seed=2, short_side=(160, 320))]
        variants = []
        for b in base:
            for _ in range(12):
                d = bytearray(b)
                what = rng.integers(4)
                if what == 0:
                    d = d[:int(rng.integers(0, len(d)))]
                elif what == 1:
                    for _ in range(int(rng.integers(1, 6))):
                        d[int(rng.integers(2, len(d)))] ^= 1 << int(rng.integers(8))
                elif what == 2:
                    i = int(rng.integers(2, len(d)))
                    d[i:i + 64] = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
                variants.append(bytes(d))
        plans = [T.plan(T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip(),
                                    T.ColorJitter(0.3, 0.3, 0.3, 0.05), T.ToTensor()])),
                 T.plan(T.Compose([T.Resize(128), T.CenterCrop(112), T.ToImage()]),
                        dct_scaling=False)]
        counts = {"ok": 0, "failed": 0, "warned": 0}
        runner = BatchRunner(threads=2)
        for p in plans:
            for start in range(0, len(variants), 24):
                src = variants[start:start + 24]
                keys = sample_keys(4, 0, np.arange(start, start + len(src)))
                out = torch.zeros((len(src), *p.output_shape), dtype=p.output_dtype)
                res = p.run_batch(src, p.prepare_batch(src, keys), out, runner=runner)
                for i, s in enumerate(src):
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        try:
                            ref = p.from_jpeg(s, rng=SampleRandom(int(keys[i])))
                        except (DecodeError, ValueError) as e:
                            assert res.status[i] == FAILED, (i, e)
                            assert type(res.errors[i]) is type(e) and str(res.errors[i]) == str(e)
                            counts["failed"] += 1
                            continue
                    assert res.status[i] == OK, (i, res.errors[i])
                    assert torch.equal(ref, out[i]), i
                    msgs = [str(w.message) for w in caught if w.category is DecodeWarning]
                    assert msgs == ([res.warnings[i]] if res.warnings[i] else []), (msgs, res.warnings[i])
                    counts["warned" if msgs else "ok"] += 1
        print(counts["ok"], counts["failed"], counts["warned"])
    ''')
    ok, failed, warned = (int(v) for v in out.split())
    assert ok > 20 and failed > 20 and warned > 5, (ok, failed, warned)
