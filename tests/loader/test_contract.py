"""turboloader.DataLoader keeps torch's DataLoader contract on both backends: positional
arguments, the generator, worker_init_fn, arguments it cannot honour, and state_dict."""

import threading

import pytest
import torch
from helpers.shards import labelled_members, write_tar

import turboloader
from turboloader import transforms as T


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 23

    def __getitem__(self, i):
        return torch.full((2,), float(i)), i


def _labels(loader):
    return [y for _, ys in loader for y in ys.tolist()]


@pytest.fixture
def shards(tmp_path):
    return [write_tar(tmp_path / f"s{k}.tar", labelled_members(range(k * 10, k * 10 + 10)))
            for k in range(3)]


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_positional_arguments_are_torchs(backend):
    loader = turboloader.DataLoader(Squares(), 8, True, backend=backend)
    ref = torch.utils.data.DataLoader(Squares(), 8, True)
    assert loader.batch_size == ref.batch_size == 8
    assert isinstance(loader.sampler.sampler, torch.utils.data.RandomSampler)
    assert len(loader) == len(ref) == 3
    assert sorted(_labels(loader)) == list(range(23))


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_generator_drives_the_shuffle_like_torch(backend):
    ours = turboloader.DataLoader(Squares(), 5, True, generator=torch.Generator().manual_seed(3),
                                  backend=backend)
    theirs = torch.utils.data.DataLoader(Squares(), 5, True,
                                         generator=torch.Generator().manual_seed(3))
    for _ in range(2):  # the generator advances across epochs, as torch's does
        assert _labels(ours) == _labels(theirs)


def test_worker_init_fn_runs_once_per_thread():
    seen, lock = [], threading.Lock()

    def init(worker_id):
        with lock:
            seen.append((worker_id, threading.current_thread().name))

    loader = turboloader.DataLoader(Squares(), 4, num_workers=3, worker_init_fn=init)
    assert sorted(_labels(loader)) == list(range(23))
    assert sorted(w for w, _ in seen) == [0, 1, 2]
    assert all(name.startswith("turboloader-decode-") for _, name in seen)


def test_worker_init_fn_errors_reach_the_caller():
    def init(worker_id):
        raise RuntimeError(f"init {worker_id} failed")

    with pytest.raises(RuntimeError, match="init .* failed"):
        list(turboloader.DataLoader(Squares(), 4, num_workers=2, worker_init_fn=init))


@pytest.mark.parametrize("kwargs", [{"timeout": 5}, {"multiprocessing_context": "spawn"},
                                    {"pin_memory_device": "cuda"}])
def test_thread_backend_rejects_what_it_cannot_honour(kwargs):
    with pytest.raises(ValueError, match="processes"):
        turboloader.DataLoader(Squares(), 4, **kwargs)
    turboloader.DataLoader(Squares(), 4, num_workers=1, backend="processes", **kwargs)


@pytest.mark.parametrize("backend,workers", [("threads", 2), ("processes", 0),
                                             ("processes", 2)])
def test_state_dict_resumes_an_iterable_dataset(shards, backend, workers):
    def make():
        ds = turboloader.TarDataset(shards, T.Compose([T.Resize(8), T.ToTensor()]))
        return turboloader.DataLoader(ds, 4, num_workers=workers, backend=backend)

    loader = make()
    it = iter(loader)
    head = [next(it)[1].tolist() for _ in range(3)]
    state = loader.state_dict()
    tail = [y.tolist() for _, y in it]
    again = make()
    again.load_state_dict(state)
    assert [y.tolist() for _, y in again] == tail
    assert sorted(sum(head + tail, [])) == list(range(30))
    assert again.state_dict()["finished"]
    nxt = make()
    nxt.load_state_dict(again.state_dict())
    assert sorted(_labels(nxt)) == list(range(30)) and nxt.epoch == state["epoch"] + 1


def test_a_state_loaded_after_a_pass_reaches_kept_workers(shards):
    """Worker processes kept across passes (``persistent_workers``, the default with the
    decoded-sample cache and over remote shards) hold the dataset as it was when they
    started: a resume state loaded after a pass still resumes exactly (before, the next
    pass ran the whole epoch again)."""
    ds = turboloader.TarDataset(shards, T.Compose([T.Resize(8), T.ToTensor()]))
    loader = turboloader.DataLoader(ds, 4, num_workers=2, backend="processes",
                                    persistent_workers=True)
    it = iter(loader)
    head = [next(it)[1].tolist() for _ in range(3)]
    state = loader.state_dict()
    tail = [y.tolist() for _, y in it]
    assert sorted(_labels(loader)) == list(range(30))  # the next epoch, same workers
    loader.load_state_dict(state)
    assert [y.tolist() for _, y in loader] == tail
    assert sorted(sum(head + tail, [])) == list(range(30))
    assert sorted(_labels(loader)) == list(range(30))  # and on from there


@pytest.mark.parametrize("backend", ["threads", "processes"])
@pytest.mark.parametrize("with_generator", [False, True])
def test_state_dict_resumes_a_map_style_dataset(backend, with_generator):
    def make():
        gen = torch.Generator().manual_seed(11) if with_generator else None
        return turboloader.DataLoader(Squares(), 4, True, generator=gen, backend=backend)

    loader = make()
    _labels(loader)  # one whole epoch first: the state is taken in the second
    it = iter(loader)
    head = [next(it)[1].tolist() for _ in range(2)]
    state = loader.state_dict()
    tail = [y.tolist() for _, y in it]
    again = make()
    again.load_state_dict(state)
    assert [y.tolist() for _, y in again] == tail
    assert sorted(sum(head + tail, [])) == list(range(23))


@pytest.mark.parametrize("bad", [{"format": "x"}, {"format": "turboloader.DataLoader/1",
                                                   "epoch": -1, "batches": 0},
                                 {"format": "turboloader.DataLoader/1", "epoch": 0,
                                  "batches": 99}])
def test_load_state_dict_rejects_bad_states(bad):
    with pytest.raises(ValueError):
        turboloader.DataLoader(Squares(), 4).load_state_dict(bad)
