"""Resume of grouped streams (``batched()``, ``bucketed()``): through the loader's
``state_dict`` on both backends, and through the views' own, each checked against the
uninterrupted pass (the oracle: the same batches, pixels and labels, in the same order).
A state of another grouping is refused, never silently ignored."""

import pytest
import torch
import torch.utils.data
from test_buckets import BUCKETS, N, photo  # noqa: F401  (the shards fixture's data)
from test_buckets import shards  # noqa: F401

import turboloader
from turboloader import transforms as T
from turboloader.data import TarDataset

TF = T.Compose([T.RandomResizedCrop(16), T.ToTensor()])


def _pairs(batches):
    return [(x.clone(), y.clone()) for x, y in batches]


def _same(got, want):
    assert len(got) == len(want)
    for (a, la), (b, lb) in zip(got, want):
        assert torch.equal(la, lb) and torch.equal(a, b)

def _resumes_after(make, full, ks):
    """For each k in ``ks``: a loader from ``make()`` stopped after k batches, its state loaded
    into a fresh one, delivers exactly the rest of the uninterrupted pass ``full``."""
    for k in ks:
        loader = make()
        it = iter(loader)
        for _ in range(k):
            next(it)
        state = loader.state_dict()
        del it
        again = make()
        again.load_state_dict(state)
        _same(_pairs(again), full[k:])



def _view(ds, kind):
    return ds.batched(8) if kind == "batched" else ds.bucketed(4, BUCKETS)


@pytest.mark.parametrize("kind", ["batched", "bucketed"])
@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_loader_state_of_a_grouped_view_resumes_exactly(shards, kind, backend):  # noqa: F811
    def make():
        ds = TarDataset(shards, TF if kind == "batched" else None, seed=3)
        loader = turboloader.DataLoader(_view(ds, kind), batch_size=None, num_workers=2,
                                        backend=backend)
        loader.set_epoch(1)
        return loader

    full = _pairs(make())
    assert sorted(i for _, y in full for i in y.tolist()) == list(range(N))
    _resumes_after(make, full, (1, 3, len(full) - 1))


@pytest.mark.parametrize("workers", [0, 2])
def test_bucketed_view_state_under_torchs_dataloader(shards, workers):  # noqa: F811
    def make():
        ds = TarDataset(shards, None, seed=5)
        ds.set_epoch(0)
        buckets = ds.bucketed(4, BUCKETS)
        return buckets, torch.utils.data.DataLoader(buckets, batch_size=None,
                                                    num_workers=workers)

    buckets, loader = make()
    full = _pairs(loader)
    k = 4
    buckets, loader = make()
    for step, _ in enumerate(loader, 1):
        if step == k:
            state = buckets.state_dict(batches=k, num_workers=workers)
            break
    buckets, loader = make()
    buckets.load_state_dict(state)
    _same(_pairs(loader), full[k:])


def test_a_state_of_another_grouping_is_refused(shards):  # noqa: F811
    """The dataset-level recipe on the dataset behind ``bucketed()`` used to be accepted
    and then deliver the whole epoch again."""
    ds = TarDataset(shards, TF, seed=5)
    ds.set_epoch(0)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2)
    for step, _ in enumerate(loader, 1):
        if step == 2:
            state = ds.state_dict(batches=2, batch_size=4, num_workers=2)
            break
    fresh = TarDataset(shards, TF, seed=5)
    fresh.load_state_dict(state)
    fresh.set_epoch(0)
    with pytest.raises(ValueError, match="bucket"):
        list(torch.utils.data.DataLoader(fresh.bucketed(4, BUCKETS), batch_size=None))
    with pytest.raises(ValueError, match="bucket"):
        TarDataset(shards, TF, seed=5).bucketed(4, BUCKETS).load_state_dict(state)
    # and the other way round: a bucket state is not a state of the dataset's samples
    buckets = TarDataset(shards, TF, seed=5).bucketed(4, BUCKETS)
    buckets.dataset.set_epoch(0)
    it = iter(buckets)
    next(it)
    bstate = buckets.state_dict()
    with pytest.raises(ValueError, match="bucket"):
        buckets.dataset.state_dict()
    plain = TarDataset(shards, TF, seed=5)
    plain.load_state_dict(bstate)
    plain.set_epoch(0)
    with pytest.raises(ValueError, match="bucket"):
        list(plain)


def test_bucketed_resume_with_skipped_samples_and_replacements(tmp_path):
    """Failures and their replacements resume too: the position after a replacement
    batch, and before it, continue as the uninterrupted pass does."""
    from helpers.shards import write_tar

    members = sorted([(f"{i:05d}.jpg", photo(i) if i % 9 != 4 else b"\xff\xd8bad" * 9)
                      for i in range(30)] + [(f"{i:05d}.cls", str(i).encode())
                                             for i in range(30)])
    path = write_tar(tmp_path / "bad.tar", members)

    def make():
        ds = TarDataset(path, None, seed=2, on_error="skip", max_failures=5)
        loader = turboloader.DataLoader(ds.bucketed(4, BUCKETS), batch_size=None,
                                        num_workers=2, backend="threads")
        loader.set_epoch(0)
        return loader

    full = _pairs(make())
    got = [i for _, y in full for i in y.tolist()]
    assert len(got) == 30 and set(got) == {i for i in range(30) if i % 9 != 4}
    _resumes_after(make, full, range(1, len(full)))


# -- one checkpoint rule for every grouping (issue 41) ---------------------------------------


def test_a_view_refuses_a_state_of_another_grouping_at_load(shards):  # noqa: F811
    """``batched()`` used to accept a bucket state and refuse it only when its pass started;
    every view now checks the grouping at ``load_state_dict``, as ``bucketed()`` did."""
    buckets = TarDataset(shards, TF, seed=5).bucketed(4, BUCKETS)
    buckets.dataset.set_epoch(0)
    it = iter(buckets)
    next(it)
    bstate = buckets.state_dict()
    del it
    with pytest.raises(ValueError, match="bucket"):
        TarDataset(shards, TF, seed=5).batched(8).load_state_dict(bstate)
    other = TarDataset(shards, TF, seed=5).bucketed(4, BUCKETS, drop_last=True)
    with pytest.raises(ValueError, match="bucket"):
        other.load_state_dict(bstate)
    TarDataset(shards, TF, seed=5).bucketed(4, BUCKETS).load_state_dict(bstate)  # its own


@pytest.mark.parametrize("k", [1, 3])
def test_every_grouping_states_the_same_rule(shards, k):  # noqa: F811
    """A ``batched(B)`` view's state after ``k`` of its batches under torch's DataLoader is
    the dataset's state after ``k`` batches of ``B`` samples (the positions are the same);
    a bucket state has the same fields plus its grouping, and ``delivered`` counts the
    samples its batches delivered (it was None)."""
    B, W = 8, 2
    ds = TarDataset(shards, TF, seed=5)
    ds.set_epoch(0)
    view = ds.batched(B, num_workers=W)
    got = [y for _, (_, y) in zip(range(k), torch.utils.data.DataLoader(
        view, batch_size=None, num_workers=W))]
    state = view.state_dict(batches=k, num_workers=W)
    plain = TarDataset(shards, TF, seed=5)
    plain.set_epoch(0)
    assert state == plain.state_dict(batches=k, batch_size=B, num_workers=W)
    assert state["delivered"] == sum(len(y) for y in got)
    # the rule counts one stream when the number of workers is not given (as len() does)
    one = ds.batched(B).state_dict(batches=k)
    assert one == plain.state_dict(batches=k, batch_size=B, num_workers=1)

    bds = TarDataset(shards, None, seed=5)
    bds.set_epoch(0)
    buckets = bds.bucketed(4, BUCKETS)
    bgot = [y for _, (_, y) in zip(range(k), torch.utils.data.DataLoader(
        buckets, batch_size=None, num_workers=W))]
    bstate = buckets.state_dict(batches=k, num_workers=W)
    assert set(bstate) == set(state) | {"grouping"}
    assert bstate["grouping"] == buckets.key()
    assert bstate["delivered"] == sum(len(y) for y in bgot)
    # the same position named in this process (num_workers=0) counts the same samples
    again = TarDataset(shards, None, seed=5)
    again.set_epoch(0)
    view0 = again.bucketed(4, BUCKETS)
    it = iter(view0)
    n = sum(len(next(it)[1]) for _ in range(k))
    assert view0.state_dict()["delivered"] == n
