"""Fresh epochs by default: a swapped-in turboloader dataset under torch's own DataLoader
draws new augmentations (and, for TarDataset, a new order) every epoch without set_epoch,
reproducibly from torch's RNG, as torchvision and WebDataset users expect. set_epoch keeps its
stronger guarantee: the same (seed, epoch) gives the same samples."""

import collections
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import sweep
import torch
import torchvision
from torch.utils.data import DataLoader

import turboloader
from turboloader import transforms as T
from turboloader.tools.synthetic import synthetic_jpegs

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
TF = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("epochs") / "train"
    for i, (blob, label) in enumerate(synthetic_jpegs(24, seed=4, short_side=(64, 96),
                                                      num_classes=3)):
        (root / f"c{label}").mkdir(parents=True, exist_ok=True)
        (root / f"c{label}" / f"{i:03d}.jpg").write_bytes(blob)
    return root


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    import io
    import tarfile

    root = tmp_path_factory.mktemp("epoch-shards")
    samples = synthetic_jpegs(24, seed=5, short_side=(64, 96))
    for s in range(3):
        with tarfile.open(root / f"s-{s}.tar", "w") as tar:
            for i in range(s * 8, s * 8 + 8):
                for name, blob in ((f"{i:04d}.jpg", samples[i][0]),
                                   (f"{i:04d}.cls", str(i).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(blob)
                    tar.addfile(info, io.BytesIO(blob))
    return str(root / "s-{0..2}.tar")


def _epochs(loader, n=2):
    """Per epoch: {label or index: image tensor} and the label order."""
    out = []
    for _ in range(n):
        images, order = {}, []
        for x, y in loader:
            for img, lab in zip(x, y.tolist()):
                images.setdefault(lab, []).append(img)
                order.append(lab)
        out.append((images, order))
    return out


def _identical(a, b):
    """How many samples (matched in order of appearance per label) are bit-identical."""
    same = total = 0
    for lab, imgs in a.items():
        for x, y in zip(imgs, b.get(lab, [])):
            total += 1
            same += bool(torch.equal(x, y))
    return same, total


# ------------------------------------------------------------------ the README, verbatim

def _readme_block(containing):
    blocks = [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if containing in b]
    assert len(blocks) == 1
    return blocks[0]


@pytest.mark.parametrize("workers", sweep([2, 0]))
def test_readme_migration_gives_new_augmentations_every_epoch(folder, workers):
    source = _readme_block("turboloader.ImageFolder(")
    source = source.replace('"imagenet/train"', repr(str(folder)))
    source = source.replace("num_workers=8", f"num_workers={workers}")
    source = source.replace("batch_size=256", "batch_size=8")
    ns = {"__name__": "readme"}
    torch.manual_seed(0)
    exec(compile(source, "<README>", "exec"), ns)
    # sort by (label, file) via the dataset's own index: shuffle=True reorders the batches
    ds, loader = ns["dataset"], ns["loader"]
    assert isinstance(ds, turboloader.ImageFolder)
    (a, order_a), (b, order_b) = _epochs(loader)
    assert sorted(order_a) == sorted(order_b) == sorted(t for _, t in ds.samples)
    # samples of one label come in shuffled order: compare the multisets per label instead
    same = sum(any(torch.equal(x, y) for y in b[lab]) for lab in a for x in a[lab])
    assert same == 0, f"{same} of {len(ds)} samples had the same augmentation in both epochs"


def test_torchvision_oracle_differs_too(folder):
    """The behaviour being matched: torchvision's ImageFolder gives new crops each epoch."""
    from torchvision import transforms as TV

    tf = TV.Compose([TV.RandomResizedCrop(32), TV.RandomHorizontalFlip(), TV.ToTensor()])
    loader = DataLoader(torchvision.datasets.ImageFolder(str(folder), tf), batch_size=8)
    (a, _), (b, _) = _epochs(loader)
    assert _identical(a, b)[0] == 0


# ------------------------------------------------------------------ map-style datasets

@pytest.mark.parametrize("workers,persistent", [(0, False), (2, False), (2, True)])
def test_image_folder_fresh_and_reproducible(folder, workers, persistent):
    ds = turboloader.ImageFolder(str(folder), TF)

    def run(seed):
        torch.manual_seed(seed)
        loader = DataLoader(ds, batch_size=6, num_workers=workers,
                            persistent_workers=persistent)
        return _epochs(loader)

    (a, oa), (b, ob) = run(1)
    assert oa == ob  # no shuffle: same order, new augmentations
    same, total = _identical(a, b)
    assert total == len(ds) and same == 0
    (a2, _), (b2, _) = run(1)  # torch.manual_seed reproduces both epochs
    assert _identical(a, a2) == (total, total) and _identical(b, b2) == (total, total)


def test_image_folder_set_epoch_is_deterministic(folder):
    ds = turboloader.ImageFolder(str(folder), TF)
    loader = DataLoader(ds, batch_size=6)
    ds.set_epoch(3)
    torch.manual_seed(0)
    (a, _), (b, _) = _epochs(loader)
    torch.manual_seed(99)
    (c, _), = _epochs(loader, 1)
    n = len(ds)
    assert _identical(a, b) == (n, n) and _identical(a, c) == (n, n)
    ds.set_epoch(4)
    (d, _), = _epochs(loader, 1)
    assert _identical(a, d)[0] == 0
    assert ds.epoch == 4 and not ds.auto_epochs


# ------------------------------------------------------------------ TarDataset

@pytest.mark.parametrize("workers,persistent", sweep([(0, False), (2, True), (2, False)], fast=2, names=2))
def test_tar_dataset_new_order_and_augmentations(shards, workers, persistent):
    ds = turboloader.TarDataset(shards, TF)

    def run(seed, gen=None):
        torch.manual_seed(seed)
        loader = DataLoader(ds, batch_size=5, num_workers=workers,
                            persistent_workers=persistent, generator=gen)
        return _epochs(loader, 3)

    epochs = run(7)
    for images, order in epochs:  # exactly once per epoch
        assert sorted(order) == list(range(24))
    orders = [tuple(o) for _, o in epochs]
    assert len(set(orders)) == 3, "the order repeated across epochs"
    for (a, _), (b, _) in zip(epochs, epochs[1:]):
        assert _identical(a, b)[0] == 0
    again = run(7)
    assert [o for _, o in again] == [o for _, o in epochs]
    assert _identical(again[2][0], epochs[2][0]) == (24, 24)
    if workers:  # the loader's generator drives the workers' seeds
        g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
        x, y = run(1, g1), run(2, g2)
        assert [o for _, o in x] == [o for _, o in y]


def test_tar_dataset_iterated_directly_differs_each_pass(shards):
    ds = turboloader.TarDataset(shards, T.Compose([T.RandomResizedCrop(16), T.ToTensor()]))
    torch.manual_seed(0)
    a = [y for _, y in ds]
    b = [y for _, y in ds]
    assert sorted(a) == sorted(b) == list(range(24)) and a != b


def test_set_epoch_keeps_its_guarantee_and_mixing_keeps_exactly_once(shards):
    ds = turboloader.TarDataset(shards, TF)
    loader = DataLoader(ds, batch_size=5, num_workers=2)
    (auto1, o1), = _epochs(loader, 1)
    ds.set_epoch(5)
    (e5, o5), (e5b, o5b) = _epochs(loader, 2)
    assert o5 == o5b and _identical(e5, e5b) == (24, 24)
    fresh = turboloader.TarDataset(shards, TF)
    fresh.set_epoch(5)
    (f5, of5), = _epochs(DataLoader(fresh, batch_size=5), 1)
    assert sorted(of5) == sorted(o5) == sorted(o1) == list(range(24))
    assert _identical(e5, f5) == (24, 24)  # same (seed, epoch) -> same samples, any workers


def test_automatic_pass_resumes_mid_epoch_in_the_main_process(shards):
    ds = turboloader.TarDataset(shards, TF)
    torch.manual_seed(3)
    it = iter(DataLoader(ds, batch_size=4))
    first = [next(it) for _ in range(2)]
    state = ds.state_dict(batches=2, batch_size=4, num_workers=0)
    rest = [b for b in it]
    ds2 = turboloader.TarDataset(shards, TF)
    ds2.load_state_dict(state)
    resumed = list(DataLoader(ds2, batch_size=4))
    assert [y.tolist() for _, y in resumed] == [y.tolist() for _, y in rest]
    assert all(torch.equal(a[0], b[0]) for a, b in zip(resumed, rest))
    # the pinned pass is used once; the next pass is a fresh automatic one
    nxt = [y for _, y in DataLoader(ds2, batch_size=4)]
    assert sorted(torch.cat(nxt).tolist()) == list(range(24))
    assert torch.cat(nxt).tolist() != torch.cat([y for _, y in first + rest]).tolist()


def test_state_dict_refuses_to_guess_an_automatic_pass_run_in_workers(shards):
    ds = turboloader.TarDataset(shards, TF)
    list(DataLoader(ds, batch_size=4, num_workers=2))
    with pytest.raises(ValueError, match="set_epoch"):
        ds.state_dict(batches=1, batch_size=4, num_workers=2)


def test_ranks_without_set_epoch_keep_exactly_once(shards):
    """Automatic epochs are not agreed between ranks: each rank keeps its samples and
    reshuffles them, so the union is still every sample exactly once."""
    seen = []
    for rank in range(2):
        torch.manual_seed(100 + rank)  # ranks seeded differently on purpose
        ds = turboloader.TarDataset(shards, TF, rank=rank, world_size=2)
        e1 = [y for _, y in DataLoader(ds, batch_size=4, num_workers=2)]
        e2 = [y for _, y in DataLoader(ds, batch_size=4, num_workers=2)]
        o1, o2 = torch.cat(e1).tolist(), torch.cat(e2).tolist()
        assert sorted(o1) == sorted(o2) and o1 != o2
        seen += o1
    assert sorted(seen) == list(range(24))
