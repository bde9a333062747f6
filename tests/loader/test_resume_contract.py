"""What a loader state depends on is recorded, and a state that cannot be continued exactly
is refused at ``load_state_dict`` (issue: resume with another batch size or sampler silently
duplicated or lost samples)."""

import pytest
import torch
import torch.utils.data
from helpers.shards import jpeg, labelled_members, write_tar

import turboloader
from turboloader import transforms as T
from turboloader.data import ImageFolder, TarDataset

TF = T.Compose([T.Resize(12), T.CenterCrop(12), T.ToTensor()])


@pytest.fixture
def folder(tmp_path):
    for i in range(60):
        d = tmp_path / "f" / f"c{i:03d}"
        d.mkdir(parents=True)
        (d / "x.jpg").write_bytes(jpeg(i))
    return ImageFolder(tmp_path / "f", TF)


def labels(loader, stop=None):
    out = []
    for k, (_, y) in enumerate(loader):
        out.append(y.tolist())
        if stop is not None and k + 1 == stop:
            break
    return out


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_resume_with_another_batch_size_is_refused(folder, backend):
    dl = turboloader.DataLoader(folder, batch_size=16, shuffle=True, backend=backend)
    labels(dl, stop=2)
    state = dl.state_dict()
    assert state["batch_size"] == 16 and state["sampler"] == "RandomSampler"
    for bs in (10, 20):
        other = turboloader.DataLoader(folder, batch_size=bs, shuffle=True, backend=backend)
        with pytest.raises(ValueError, match="batch_size=16"):
            other.load_state_dict(state)


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_a_user_sampler_without_a_generator_is_refused(folder, backend):
    dl = turboloader.DataLoader(folder, batch_size=8, backend=backend,
                                sampler=torch.utils.data.RandomSampler(folder))
    labels(dl, stop=2)
    with pytest.raises(ValueError, match="global RNG"):
        dl.state_dict()


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_a_user_sampler_with_a_generator_resumes_exactly(folder, backend):
    def make():
        g = torch.Generator().manual_seed(7)
        return turboloader.DataLoader(folder, batch_size=8, backend=backend,
                                      sampler=torch.utils.data.RandomSampler(folder, generator=g))

    whole = labels(make())
    dl = make()
    head = labels(dl, stop=3)
    state = dl.state_dict()
    again = make()
    again.load_state_dict(state)
    assert head + labels(again) == whole


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_tar_resume_with_another_worker_count_is_refused_at_load(tmp_path, backend):
    path = write_tar(tmp_path / "s.tar", labelled_members(range(40)))
    ds = TarDataset(path, TF, seed=3)
    dl = turboloader.DataLoader(ds, batch_size=4, num_workers=2, backend=backend)
    labels(dl, stop=3)
    state = dl.state_dict()
    other = turboloader.DataLoader(TarDataset(path, TF, seed=3), batch_size=4, num_workers=1,
                                   backend=backend)
    with pytest.raises(ValueError, match="streams=2"):
        other.load_state_dict(state)
