"""Files that shrink while open (a re-sync, a partial copy, a full disk) give typed errors or
counted skips naming the shard, never a SIGBUS crash: every check runs in a child interpreter
whose crash (a signal) or hang fails the check (:class:`helpers.isolated.Interpreter`: one
child for the module's checks, each in a fresh namespace in its own folder; a crashed child
is replaced for the next check, so each check still fails alone)."""

import os
import textwrap

import pytest

from helpers import TESTS
from helpers.isolated import Interpreter

# every check runs in the child (up to 110 s each on the shared machine under load)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PRELUDE = f"""
import os, sys
sys.path.insert(0, {str(TESTS)!r})
import torch
from helpers.shards import labelled_members, write_tar
import turboloader
from turboloader import transforms as T
from turboloader.errors import FormatError, TarFormatError, TurboLoaderError
"""


@pytest.fixture(scope="module")
def interpreter():
    # one child for the module (a fresh interpreter importing torch is seconds of CPU)
    with Interpreter(PRELUDE) as it:
        yield it


@pytest.fixture
def run(interpreter):
    """``run(body, tmp_path)``: ``body`` in the child, in ``tmp_path``; what it printed."""
    def run(body, tmp_path, timeout=120):
        return interpreter.run(f"os.chdir({str(tmp_path)!r})\n" + textwrap.dedent(body),
                               timeout=timeout)
    return run


def test_a_crash_in_a_check_fails_it_and_the_next_check_runs(run, interpreter, tmp_path):
    """The harness the module relies on: a check killed by SIGBUS (what the old mapping of a
    truncated shard did) fails saying so, and the next check runs in a new child."""
    starts = interpreter.starts
    with pytest.raises(AssertionError, match=r"exited with -7 .*killed by a signal"):
        run("import signal; os.kill(os.getpid(), signal.SIGBUS)", tmp_path)
    assert run("print(os.getcwd())", tmp_path).strip() == str(tmp_path)
    assert interpreter.starts == max(starts, 1) + 1


def test_tar_index_member_after_truncation(run, tmp_path):
    out = run("""
        path = write_tar("a.tar", labelled_members(range(20)))
        index = turboloader.TarIndex(path)
        last = len(index) - 1
        os.truncate(path, os.path.getsize(path) // 2)
        assert bytes(index.member(0))  # still there
        try:
            index.member(last)
        except TarFormatError as exc:
            print("TYPED", exc)
        """, tmp_path)
    assert "TYPED" in out and "a.tar" in out and "000019.cls" in out and "truncated" in out


@pytest.mark.parametrize("backend,workers", [("threads", 2), ("processes", 0),
                                             ("processes", 2)])
def test_dataset_truncated_after_init_raises_typed(run, tmp_path, backend, workers):
    out = run(f"""
        paths = [write_tar(f"s{{k}}.tar", labelled_members(range(k * 10, k * 10 + 10)))
                 for k in range(2)]
        ds = turboloader.TarDataset(paths, T.Compose([T.Resize(8), T.ToTensor()]))
        ds.set_epoch(0)
        os.truncate(paths[1], 4096)
        loader = turboloader.DataLoader(ds, 4, num_workers={workers}, backend={backend!r})
        try:
            for _ in loader:
                pass
        except TarFormatError as exc:
            print("TYPED", type(exc).__name__, exc, *getattr(exc, "__notes__", []))
        """, tmp_path)
    assert "TYPED TarFormatError" in out and "s1.tar" in out


@pytest.mark.parametrize("backend,workers", [("threads", 2), ("processes", 2)])
def test_dataset_truncated_after_init_skips_and_counts(run, tmp_path, backend, workers):
    out = run(f"""
        paths = [write_tar(f"s{{k}}.tar", labelled_members(range(k * 10, k * 10 + 10)))
                 for k in range(2)]
        ds = turboloader.TarDataset(paths, T.Compose([T.Resize(8), T.ToTensor()]),
                                    on_error="skip", max_failures=1.0 - 1e-9, shuffle=False)
        size = os.path.getsize(paths[1])
        os.truncate(paths[1], size // 2)
        loader = turboloader.DataLoader(ds, 4, num_workers={workers}, backend={backend!r})
        labels = [y for _, ys in loader for y in ys.tolist()]
        skipped = ds.stats()["skipped"]
        print("N", len(labels), "SKIPPED", len(skipped),
              "SHARDS", sorted({{os.path.basename(s["shard"]) for s in skipped}}))
        assert len(labels) == 20  # replacements keep every batch full
        """, tmp_path)
    n_skipped = int(out.split("SKIPPED")[1].split()[0])
    assert n_skipped >= 1 and "['s1.tar']" in out


def test_torch_dataloader_workers_see_the_typed_error(run, tmp_path):
    out = run("""
        paths = [write_tar("s.tar", labelled_members(range(12)))]
        ds = turboloader.TarDataset(paths, T.Compose([T.Resize(8), T.ToTensor()]))
        os.truncate(paths[0], 2048 + 700)  # inside the first sample's label member
        try:
            list(torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2))
        except TurboLoaderError as exc:
            print("TYPED", type(exc).__name__, exc)
        """, tmp_path)
    assert "TYPED TarFormatError" in out and "s.tar" in out


def test_shard_rewritten_smaller_between_init_and_reading(run, tmp_path):
    out = run("""
        path = write_tar("s.tar", labelled_members(range(10)))
        ds = turboloader.TarDataset([path], T.Compose([T.Resize(8), T.ToTensor()]),
                                    shuffle=False)
        write_tar("s.tar", labelled_members(range(4)))  # replaced by a shorter shard
        try:
            list(ds)
        except TarFormatError as exc:
            print("TYPED", exc)
        """, tmp_path)
    assert "TYPED" in out and "4 samples now" in out and "s.tar" in out


def test_tbl_truncated_while_open(run, tmp_path):
    out = run("""
        from turboloader.io.tbl import TBLFile, write_tbl
        from helpers.shards import jpeg
        write_tbl("d.tbl", ((f"k{i}", jpeg(i), i) for i in range(30)))
        f = TBLFile("d.tbl")
        ds = turboloader.TBLDataset("d.tbl", T.Compose([T.Resize(8), T.ToTensor()]),
                                    on_error="skip", max_failures=1.0 - 1e-9)
        os.truncate("d.tbl", os.path.getsize("d.tbl") // 2)
        try:
            f.data(29)
        except FormatError as exc:
            print("TYPED", exc)
        try:  # the readers (re)open the file: its index is gone with its end
            list(turboloader.DataLoader(ds, 5, num_workers=2))
        except FormatError as exc:
            print("OPEN", exc, *getattr(exc, "__notes__", []))
        """, tmp_path)
    assert "TYPED" in out and "record 29" in out and "truncated" in out
    assert "OPEN incomplete TBL file" in out and "d.tbl" in out


@pytest.mark.parametrize("backend,workers", [("threads", 1), ("processes", 0),
                                             ("processes", 1)])
def test_shard_truncated_mid_epoch_while_open(run, tmp_path, backend, workers):
    """The shard is open (its first batch read) when it shrinks: the old mapping crashed the
    process with SIGBUS here. 400 samples: more than a stream reads ahead (a batch call of
    SAMPLE_CHUNK samples, a batch prefetched), so reading goes on after the truncation."""
    out = run(f"""
        path = write_tar("s.tar", labelled_members(range(400)))
        ds = turboloader.TarDataset([path], T.Compose([T.Resize(8), T.ToTensor()]),
                                    shuffle=False)
        loader = turboloader.DataLoader(ds, 4, num_workers={workers}, backend={backend!r},
                                        prefetch_factor=1 if {workers} else None)
        it = iter(loader)
        next(it)
        os.truncate(path, os.path.getsize(path) // 3)
        try:
            for _ in it:
                pass
        except TarFormatError as exc:
            print("TYPED", exc)
        """, tmp_path)
    assert "TYPED" in out and "s.tar" in out and "truncated or replaced while open" in out


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_a_stream_shard_cut_after_init_is_a_typed_counted_skip(tmp_path, backend):
    """A .tar.gz truncated after the dataset counted it: the sample where the stream broke
    and every later one are TarFormatErrors naming the shard (was an untyped IndexError),
    counted and replaced under the skip policy."""
    import turboloader
    from helpers.shards import labelled_members, write_tar
    from turboloader import transforms as T
    from turboloader.data import TarDataset
    from turboloader.errors import TarFormatError

    path = write_tar(tmp_path / "s.tar.gz", labelled_members(range(64)))
    tf = T.Compose([T.Resize(8), T.CenterCrop(8), T.ToTensor()])
    skip = TarDataset([path], tf, shuffle=False, on_error="skip", max_failures=0.99)
    strict = TarDataset([path], tf, shuffle=False)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    dl = turboloader.DataLoader(skip, batch_size=8, num_workers=1, backend=backend)
    labels = [y for _, ys in dl for y in ys.tolist()]
    st = skip.stats()
    assert len(labels) == 64 and 0 < st["failures"] < 64
    assert len(set(labels)) == 64 - st["failures"]
    assert all(s["reason"].startswith("TarFormatError") for s in st["skipped"])
    with pytest.raises(TarFormatError) as info:
        list(strict)
    assert "s.tar.gz" in str(info.value) + " ".join(getattr(info.value, "__notes__", []))
