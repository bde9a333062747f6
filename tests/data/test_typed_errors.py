"""Typed errors in the dataset path: labels that cannot be batched, and resume states that
would deliver duplicates, are refused with errors naming what is wrong."""

import copy

import pytest
import torch
from helpers.shards import jpeg, labelled_members, size_of, write_tar

import turboloader
from turboloader.errors import SampleError


@pytest.mark.parametrize("label", [b"9223372036854775808", b"-9223372036854775809",
                                   b"1" * 5000, b"12abc"])
def test_bad_cls_is_a_typed_sample_error_naming_the_key(tmp_path, label):
    path = write_tar(tmp_path / "s.tar", labelled_members(range(3)) +
                     [("bad.jpg", jpeg(7)), ("bad.cls", label)])
    ds = turboloader.TarDataset([str(path)], size_of, shuffle=False)
    with pytest.raises(SampleError) as info:
        list(torch.utils.data.DataLoader(ds, batch_size=4))
    text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert "'bad'" in text and "s.tar" in text


def test_bad_cls_is_skipped_and_counted(tmp_path):
    path = write_tar(tmp_path / "s.tar", labelled_members(range(5)) +
                     [("bad.jpg", jpeg(7)), ("bad.cls", b"99999999999999999999")])
    ds = turboloader.TarDataset([str(path)], size_of, shuffle=False, on_error="skip")
    labels = [y for _, ys in torch.utils.data.DataLoader(ds, batch_size=3) for y in ys.tolist()]
    assert len(labels) == 6 and 99999999999999999999 not in labels
    (skip,) = ds.stats()["skipped"]
    assert skip["key"] == "bad" and "int64" in skip["reason"]


def test_int64_extremes_still_work(tmp_path):
    path = write_tar(tmp_path / "s.tar", [("a.jpg", jpeg(1)), ("a.cls", b"9223372036854775807")])
    ds = turboloader.TarDataset([str(path)], size_of)
    assert [y for _, y in ds] == [2**63 - 1]


@pytest.fixture(scope="module")
def _shards_and_state(tmp_path_factory):
    """Two shards and a checkpoint of a pass over them (two worker processes, 2 batches in):
    made once for the module, read by its tests (0.5 s of CPU each time)."""
    root = tmp_path_factory.mktemp("state")
    paths = [write_tar(root / f"s{k}.tar", labelled_members(range(k * 8, k * 8 + 8)))
             for k in range(2)]
    ds = turboloader.TarDataset(paths, size_of)
    ds.set_epoch(1)
    it = iter(torch.utils.data.DataLoader(ds, batch_size=2, num_workers=2))
    next(it), next(it)
    return paths, ds.state_dict(batches=2, batch_size=2, num_workers=2)


@pytest.fixture
def ds_and_state(_shards_and_state):
    """The shards and a copy of the checkpoint, the test's own to spoil."""
    paths, state = _shards_and_state
    return paths, copy.deepcopy(state)


@pytest.mark.parametrize("field,value,match", [
    ("pos", -1, "position"), ("pos", 10**6, "position"), ("failed_pos", [0, 0], "skipped"),
    ("replaced", 5, "replacements"), ("failures", -3, "failures")])
def test_load_state_dict_refuses_impossible_positions(ds_and_state, field, value, match):
    paths, state = ds_and_state
    state["workers"]["0"][field] = value
    with pytest.raises(ValueError, match=match):
        turboloader.TarDataset(paths, size_of).load_state_dict(state)


@pytest.mark.parametrize("change,match", [({"num_workers": -1}, "negative"),
                                          ({"next_worker": 7}, "next_worker"),
                                          ({"workers": {"9": {"pos": 0, "failed_pos": [],
                                                              "replaced": 0, "failures": 0}}},
                                           "worker 9")])
def test_load_state_dict_refuses_bad_topology_fields(ds_and_state, change, match):
    paths, state = ds_and_state
    state.update(change)
    with pytest.raises(ValueError, match=match):
        turboloader.TarDataset(paths, size_of).load_state_dict(state)


def test_resumable_sampler_outside_ddp_and_bad_positions():
    from turboloader.data.tbl_dataset import ResumableSampler

    data = list(range(10))
    sampler = ResumableSampler(data)  # no process group: one replica
    assert sorted(sampler) == data and sampler.num_replicas == 1
    state = sampler.state_dict(batches=2, batch_size=3)
    again = ResumableSampler(data)
    again.load_state_dict(state)
    assert list(again) == list(sampler)[6:]
    for bad in ({"consumed": -1}, {"consumed": 11}, {"epoch": -2}):
        with pytest.raises(ValueError, match="impossible"):
            ResumableSampler(data).load_state_dict({**state, **bad})
