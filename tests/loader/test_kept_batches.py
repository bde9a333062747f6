"""The kept-batch oracle: every batch a loader delivers is kept to the end of two epochs,
then compared bit for bit with decoding each of its samples alone (``helpers.kept.oracle``),
and each epoch must hold every sample exactly once.

Recycled memory and shared readers can hand a user another sample's pixels without any
error; these are the tests that catch it, across dataset kind x loader x collate x wrapper x
start method x concurrent passes, plus a forked child holding a batch. Representative cases
run in the fast subset, the sweep in CI (``slow``).
"""

import gc
import multiprocessing as mp
import threading

import pytest
import torch
import torch.utils.data
from helpers import kept
from helpers.kept import B, N

import turboloader

KINDS = ["tar", "folder", "tbl", "parquet", "manifest"]
ITERABLE = ("tar", "parquet")


@pytest.fixture(scope="module")
def want():
    return kept.oracle()


MANY = 160  # more than a chunk of samples (64) per stream


@pytest.fixture(scope="module")
def want_many():
    return kept.oracle(n=MANY)


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


def dataset(kind, tmp_path):
    return kept.make_dataset(kind, tmp_path)


def loader(ds, how, collate=None, *, batch_size=B, context=None, workers=2):
    """A loader of ``ds``: torch's with 0 or ``workers`` (2) workers (``torch0``, ``torch2``,
    ``persistent``), or turboloader's with 2 threads or 2 processes."""
    fn = kept.COLLATES[collate] if isinstance(collate, str) else collate
    shuffle = None if isinstance(ds, torch.utils.data.IterableDataset) else True
    if how in ("torch0", "torch2", "persistent"):
        workers = 0 if how == "torch0" else workers
        return torch.utils.data.DataLoader(
            ds, batch_size=batch_size, shuffle=shuffle, num_workers=workers, collate_fn=fn,
            persistent_workers=how == "persistent", multiprocessing_context=context)
    backend = "threads" if how == "threads" else "processes"
    return turboloader.DataLoader(ds, batch_size=batch_size, shuffle=shuffle, num_workers=2,
                                  collate_fn=fn, backend=backend)


def epochs(base, dl, n=2):
    """Run ``n`` epochs of ``dl`` (epochs set on ``base``), keeping every batch."""
    out = []
    for e in range(n):
        base.set_epoch(e)
        if isinstance(dl, turboloader.DataLoader):
            dl.set_epoch(e)
        out.append(list(dl))
    return out


def check(want, runs, collate=None, wrapper=None, labels=range(N)):
    """Every kept image equals its sample decoded alone; every epoch has each label once."""
    return _check(want, runs, collate, wrapper, labels)


def _check(want, runs, collate, wrapper, labels):
    bad, where = 0, []
    for e, batches in enumerate(runs):
        seen = []
        for batch in batches:
            images, ys = kept.normalise(batch, collate, wrapper)
            for img, y in zip(images, ys):
                if not torch.equal(img, want[(e, y)]):
                    bad += 1
                    where.append((e, y))
                seen.append(y)
        assert sorted(seen) == sorted(labels), f"epoch {e}: not each sample exactly once"
    assert bad == 0, f"{bad} kept images changed (epoch, sample): {where[:8]}"


# -- dataset kind x loader ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["torch2"] + [
    pytest.param(h, marks=pytest.mark.slow) for h in
    ("torch0", "persistent", "threads", "processes")])
def test_every_kept_batch_is_intact(want, kind, how, tmp_path):
    ds = dataset(kind, tmp_path)
    check(want, epochs(ds, loader(ds, how)))


# -- collate x loader: what a collate_fn returns leaves the worker by torch's pickler ----------


@pytest.mark.parametrize("collate,how", [("view", "torch2"), ("list", "torch2")] + [
    pytest.param(c, h, marks=pytest.mark.slow)
    for c in ("view", "list", "tv") for h in ("persistent", "threads", "processes")
    if (c, h) not in {("view", "torch2"), ("list", "torch2")}] + [
    pytest.param("tv", "torch2", marks=pytest.mark.slow)])
def test_collate_results_are_intact(want, kind, collate, how, tmp_path):
    ds = dataset(kind, tmp_path)
    check(want, epochs(ds, loader(ds, how, collate)), collate)


# -- wrappers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["torch2", pytest.param("persistent", marks=pytest.mark.slow),
                                 pytest.param("threads", marks=pytest.mark.slow)])
@pytest.mark.parametrize("collate", ["list", pytest.param("default", marks=pytest.mark.slow)])
def test_a_wrapper_returning_views_gets_intact_samples(want, kind, how, collate, tmp_path):
    ds = dataset(kind, tmp_path)
    wrapped = kept.ViewIter(ds) if kind in ITERABLE else kept.ViewMap(ds)
    if how == "threads" and kind in ITERABLE:  # an opaque iterable: one stream, one thread
        dl = turboloader.DataLoader(wrapped, batch_size=B, num_workers=1,
                                    collate_fn=kept.COLLATES[collate])
    else:
        dl = loader(wrapped, how, collate)
    check(want, epochs(ds, dl), collate, "view")


@pytest.mark.parametrize("kind", ["folder", pytest.param("tbl", marks=pytest.mark.slow)])
@pytest.mark.parametrize("how", ["torch2", pytest.param("threads", marks=pytest.mark.slow)])
def test_subset_and_concat_get_intact_samples(want, kind, how, tmp_path):
    ds = dataset(kind, tmp_path)
    odd = torch.utils.data.Subset(ds, list(range(1, N, 2)))
    check(want, epochs(ds, loader(odd, how)), labels=range(1, N, 2))
    halves = torch.utils.data.ConcatDataset([torch.utils.data.Subset(ds, range(N // 2)),
                                             torch.utils.data.Subset(ds, range(N // 2, N))])
    check(want, epochs(ds, loader(halves, how)))


@pytest.mark.parametrize("kind", ["folder", pytest.param("tbl", marks=pytest.mark.slow)])
@pytest.mark.parametrize("view", [True, False])
def test_whole_batches_from_ds_list_are_intact(want, kind, view, tmp_path):
    ds = dataset(kind, tmp_path)
    sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(ds), B, False)
    src = kept.ViewBatch(ds) if view else ds
    dl = torch.utils.data.DataLoader(src, sampler=sampler, batch_size=None, num_workers=2)
    check(want, epochs(ds, dl), wrapper="view" if view else None)


@pytest.mark.parametrize("how", ["torch2", pytest.param("persistent", marks=pytest.mark.slow)])
@pytest.mark.parametrize("kind", ITERABLE)
def test_tar_batched_is_intact(want, kind, how, tmp_path):
    ds = dataset(kind, tmp_path)
    dl = torch.utils.data.DataLoader(ds.batched(B), batch_size=None, num_workers=2,
                                     persistent_workers=how == "persistent")
    check(want, epochs(ds, dl))


# -- start methods -----------------------------------------------------------------------------


FORKSERVER_PRELOAD = ["torch", "torchvision", "turboloader", "turboloader.data.tar_dataset",
                      "turboloader.data.folder", "turboloader.data.tbl_dataset",
                      "turboloader.data.parquet_dataset", "turboloader.data.manifest",
                      "helpers.kept"]


# forkserver: every kind x collate. spawn: every kind and every collate, paired (each collate
# with an iterable and a map-style kind) rather than crossed; see the test's docstring
START_CASES = [pytest.param(context, kind, collate, id=f"{kind}-{collate}-{context}")
               for kind in KINDS for collate in ("default", "view")
               for context in ("spawn", "forkserver")
               if context == "forkserver" or (kind, collate) in {
                   ("tar", "default"), ("folder", "view"), ("tbl", "default"),
                   ("parquet", "view"), ("manifest", "default")}]


@pytest.mark.slow
@pytest.mark.timeout(900)   # fresh worker interpreters: up to 165 s on the shared machine under load
@pytest.mark.parametrize("context,kind,collate", START_CASES)
def test_start_methods_keep_batches_intact(want, kind, context, collate, tmp_path):
    """Workers that do not fork the test process (spawn, forkserver) deliver intact batches.

    What a start method changes is how a worker begins: it is handed the dataset and the
    collate_fn pickled (both methods) and starts as a fresh interpreter (spawn) or a fork of
    the preloaded fork server. Inside it the two concerns do not meet: the dataset kind
    decides how the dataset unpickles and reads its samples, and every kind yields the
    same ``(image tensor, int label)`` samples; the collate (``helpers.kept.COLLATES``:
    torch's default, or its result permuted to a view) then sees only that list, whatever
    the kind, and its batch leaves the worker through torch's pickler. So the forkserver
    cases cross all kinds with both collates, and spawn, whose fresh interpreter per worker
    costs seconds of CPU each, runs every kind once and every collate with both an iterable
    and a map-style kind (``START_CASES``): each kind still unpickles and runs in a fresh
    interpreter, each collate's batch still leaves one, and every kind x collate pair
    still runs under a start method that pickles both.
    """
    if context == "forkserver":
        # the fork server imports torch, torchvision and the datasets' modules once, so each
        # worker forked from it starts with them (every worker still gets the dataset pickled,
        # as the start method does; the spawn cases start every worker as a fresh
        # interpreter). Unpickling a dataset imports its module, and an ImageFolder's (and a
        # manifest's) imports torchvision, whose import is seconds of CPU: preloaded once
        # here instead of in each of the 4 workers a case starts
        mp.set_forkserver_preload(FORKSERVER_PRELOAD)
    ds = dataset(kind, tmp_path)
    # spawn: one persistent worker, started once for both epochs (a fresh interpreter imports
    # torch: seconds of CPU each), so epoch 0's kept batches must survive epoch 1 run by the
    # same worker (two workers' interleaving is the forkserver cases' and the fork cases');
    # forkserver: two new workers each epoch, so the batches must survive their workers' exit
    if context == "spawn":
        dl = loader(ds, "persistent", collate, context=context, workers=1)
    else:
        dl = loader(ds, "torch2", collate, context=context)
    check(want, epochs(ds, dl), collate)


# -- concurrent passes over one dataset object -------------------------------------------------


@pytest.mark.parametrize("how", ["torch0", pytest.param("torch2", marks=pytest.mark.slow),
                                 "threads", pytest.param("processes", marks=pytest.mark.slow)])
def test_two_passes_at_once_over_one_dataset(want_many, kind, how, tmp_path):
    """Two loaders over the same dataset object, iterated in lockstep (an eval pass while
    the train iterator is paused does the same): each gets every sample intact. More
    samples than a reader's chunk, so the passes interleave inside a stream."""
    ds = kept.make_dataset(kind, tmp_path, MANY)
    want = want_many
    runs_a, runs_b = [], []
    for e in range(2):
        ds.set_epoch(e)
        a, b = loader(ds, how), loader(ds, how)
        for dl in (a, b):
            if isinstance(dl, turboloader.DataLoader):
                dl.set_epoch(e)
        got_a, got_b = [], []
        ia, ib = iter(a), iter(b)
        for x in ia:
            got_a.append(x)
            got_b.append(next(ib))
        got_b.extend(ib)
        runs_a.append(got_a)
        runs_b.append(got_b)
    check(want, runs_a, labels=range(MANY))
    check(want, runs_b, labels=range(MANY))


def test_two_threads_iterating_in_process(want_many, kind, tmp_path):
    ds = kept.make_dataset(kind, tmp_path, MANY)
    want = want_many
    ds.set_epoch(0)
    results, errors = [None, None], []
    start = threading.Barrier(2)

    def run(k):
        try:
            start.wait()
            results[k] = list(torch.utils.data.DataLoader(
                ds, batch_size=B, shuffle=None if kind in ITERABLE else True))
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for got in results:
        check(want, [got], labels=range(MANY))


# -- a forked child ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tar", pytest.param("folder", marks=pytest.mark.slow)])
def test_a_forked_child_keeps_its_batches(kind, tmp_path):
    """A batch handed to a forked child stays intact after the parent drops it and its
    workers run on (the parent's release would let a worker rewrite it)."""
    ds = dataset(kind, tmp_path)
    dl = loader(ds, "persistent")
    ds.set_epoch(0)
    batches = list(dl)
    ctx = mp.get_context("fork")
    go, result = ctx.Event(), ctx.Queue()
    child = ctx.Process(target=kept.hold_in_child, args=(batches, go, result))
    child.start()
    del batches
    gc.collect()
    for e in (1, 2):
        ds.set_epoch(e)
        for _ in dl:  # batches dropped at once: their blocks are recycled
            pass
    go.set()
    bad = result.get(timeout=120)
    child.join(30)
    assert bad == 0


# -- masks and boxes fields: annotations kept with their images ---------------------------------


@pytest.mark.parametrize("joint_kind,how", [
    ("tar", "torch2"), ("tar", "threads"), ("tar", "processes"), ("tar", "batched"),
    ("parquet", "torch2"), ("manifest", "threads"),
    pytest.param("parquet", "threads", marks=pytest.mark.slow),
    pytest.param("manifest", "torch2", marks=pytest.mark.slow),
    pytest.param("manifest", "processes", marks=pytest.mark.slow)])
def test_mask_and_boxes_fields_kept_batches(want, joint_kind, how, tmp_path):
    from turboloader.data import collate_fields

    ds = kept.make_joint_dataset(tmp_path, kind=joint_kind)
    if how == "batched":
        dl = torch.utils.data.DataLoader(ds.batched(B), batch_size=None, num_workers=2)
    else:
        dl = loader(ds, how, collate_fields if how != "threads" else None)
    runs = epochs(ds, dl)
    ann = kept.joint_oracle()
    gc.collect()
    bad = []
    for e, batches in enumerate(runs):
        seen = []
        for images, masks, boxes, ys in batches:
            assert isinstance(boxes, list)
            for img, mask, box, y in zip(images, masks, boxes, ys.tolist()):
                ref_mask, ref_boxes = ann[(e, y)]
                if not (torch.equal(img, want[(e, y)]) and torch.equal(mask, ref_mask)
                        and torch.equal(box, ref_boxes)
                        and box.canvas_size == tuple(img.shape[-2:])):
                    bad.append((e, y))
                seen.append(y)
        assert sorted(seen) == list(range(N)), f"epoch {e}: not each sample exactly once"
    assert not bad, f"kept samples changed (epoch, sample): {bad[:8]}"


# -- the decoded-sample cache -------------------------------------------------------------------


@pytest.fixture(scope="module")
def want_cached():
    return kept.cached_oracle()


@pytest.mark.parametrize("kind", ["tar", pytest.param("folder", marks=pytest.mark.slow),
                                  pytest.param("parquet", marks=pytest.mark.slow)])
@pytest.mark.parametrize("how", ["threads", pytest.param("persistent", marks=pytest.mark.slow)])
@pytest.mark.parametrize("fits", ["all", "part"])
def test_cached_batches_are_intact(want, want_cached, kind, how, fits, tmp_path):
    """Three epochs with the cache on, every batch kept: a sample is its cached image
    transformed alone (admitted) or its bytes decoded alone (not admitted), and each epoch
    holds every sample once. Iterable datasets keep each sample on one stream, so a sample
    goes the same one way in every epoch; a map-style dataset's sampler deals indices to
    whichever worker asks, whose cache may or may not hold it."""
    from helpers.shards import H, W

    size = "1MB" if fits == "all" else 5 * H * W * 3 + 64 * 5   # 5 images per stream
    ds = kept.make_dataset(kind, tmp_path, cache=size, stats_interval=1)
    dl = loader(ds, how)
    runs = epochs(ds, dl, n=3)
    uncached = kept.oracle(epochs=(2,))
    way, hits = {}, 0
    for e, batches in enumerate(runs):
        seen = []
        for batch in batches:
            images, ys = kept.normalise(batch, None)
            for img, y in zip(images, ys):
                is_cached = torch.equal(img, want_cached[(e, y)])
                is_bytes = torch.equal(img, (want if e < 2 else uncached)[(e, y)])
                assert is_cached or is_bytes, \
                    f"epoch {e}: sample {y} is neither its cached nor its decoded image"
                # the fill epoch transforms every admitted sample from the cache; where both
                # ways give the same pixels (no DCT scaling drawn) the epoch says nothing
                hits += e > 0 and is_cached and not is_bytes
                if e > 0 and is_cached != is_bytes and kind in ITERABLE:
                    got = "cached" if is_cached else "bytes"
                    assert way.setdefault(y, got) == got, (e, y)
                seen.append(y)
        assert sorted(seen) == list(range(N)), f"epoch {e}: not each sample exactly once"
    if kind not in ITERABLE:   # (persistent workers' counters lag: the pixels say it)
        assert hits > 0
        return
    cached = N if fits == "all" else 10
    assert sum(w == "cached" for w in way.values()) <= cached
    assert sum(w == "bytes" for w in way.values()) <= N - cached
    st = ds.stats(epoch=2)
    assert st["cache_hits"] == cached and st["cache_hit_rate"] == pytest.approx(cached / N)
