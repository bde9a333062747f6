"""ImageFolder against torchvision's: attributes, outputs, failure policy, epochs."""

import numpy as np
import pytest
import torch
import torch.utils.data
import torchvision
from helpers.shards import jpeg, size_of
from torchvision import transforms as tvt

from turboloader import DecodeError, FailureBudgetExceeded, ImageFolder
from turboloader.transforms._random import current_rng


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    files = {
        "cat/a.jpg": jpeg(0), "cat/b.JPEG": jpeg(1), "cat/notes.txt": b"not an image",
        "dog.x/c.png": jpeg(2, fmt="PNG"), "dog.x/sub/d.jpg": jpeg(3),
        "dog.x/e.jpg": jpeg(4, mode="CMYK"), "eel/f.jpeg": jpeg(5), "eel/g.jpg": jpeg(6),
    }
    for name, data in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return str(root)


def test_attributes_match_torchvision(tree, tmp_path):
    ours, ref = ImageFolder(tree), torchvision.datasets.ImageFolder(tree)
    assert isinstance(ours, torchvision.datasets.ImageFolder)
    for attr in ("classes", "class_to_idx", "samples", "targets", "imgs"):
        assert getattr(ours, attr) == getattr(ref, attr), attr
    assert len(ours) == len(ref) == 7
    only_jpg = lambda p: p.endswith(".jpg")  # noqa: E731
    assert ImageFolder(tree, is_valid_file=only_jpg).samples == \
        torchvision.datasets.ImageFolder(tree, is_valid_file=only_jpg).samples
    (tmp_path / "root" / "empty").mkdir()
    with pytest.raises(FileNotFoundError):
        torchvision.datasets.ImageFolder(tree)
    with pytest.raises(FileNotFoundError):
        ImageFolder(tree)
    assert ImageFolder(tree, allow_empty=True).classes == \
        torchvision.datasets.ImageFolder(tree, allow_empty=True).classes


def test_outputs_match_torchvision(tree):
    t = tvt.Compose([tvt.Resize(32), tvt.CenterCrop(24), tvt.ToTensor()])
    ours = ImageFolder(tree, t, target_transform=lambda y: y + 10)
    ref = torchvision.datasets.ImageFolder(tree, t, target_transform=lambda y: y + 10)
    for i in range(len(ref)):
        (a, ya), (b, yb) = ours[i], ref[i]
        assert ya == yb and a.shape == b.shape == (3, 24, 24)
        assert (a - b).abs().mean() < 1 / 255, i
    img, y = ImageFolder(tree)[3]
    pil, _ = torchvision.datasets.ImageFolder(tree)[3]
    assert img.mode == "RGB" and img.size == pil.size
    assert np.abs(np.asarray(img, np.int16) - np.asarray(pil, np.int16)).mean() < 1


def test_turboloader_transforms_match_torchvision(tree):
    from turboloader import transforms as T

    ours = ImageFolder(tree, T.Compose([T.Resize(32), T.CenterCrop(24), T.ToTensor()]))
    ref = torchvision.datasets.ImageFolder(
        tree, tvt.Compose([tvt.Resize(32), tvt.CenterCrop(24), tvt.ToTensor()]))
    for i in range(len(ref)):
        a, b = ours[i][0], ref[i][0]
        # fused with DCT scaling: within the tolerance turboloader.transforms documents
        assert a.shape == b.shape and (a - b).abs().mean() < 5 / 255, i


def test_user_loader_is_used(tree):
    calls = []

    def loader(path):
        calls.append(path)
        return torchvision.datasets.folder.default_loader(path)

    ds = ImageFolder(tree, size_of, loader=loader)
    assert ds[0][0].tolist() == [64, 48] and calls == [ds.samples[0][0]]


def test_epochs_and_seeds_drive_randomness(tree):
    ds = ImageFolder(tree, lambda img: current_rng().random(), seed=1)
    auto = [ds[i][0] for i in range(len(ds))]  # no set_epoch: a fresh draw every read
    assert set(auto).isdisjoint(ds[i][0] for i in range(len(ds)))
    ds.set_epoch(0)
    e0 = [ds[i][0] for i in range(len(ds))]
    assert e0 == [ds[i][0] for i in range(len(ds))]
    ds.set_epoch(1)
    e1 = [ds[i][0] for i in range(len(ds))]
    assert len(set(e0) | set(e1)) == 2 * len(ds)
    ds.set_epoch(0)
    assert [ds[i][0] for i in range(len(ds))] == e0
    other = ImageFolder(tree, lambda img: current_rng().random(), seed=2)
    assert other[0][0] != e0[0]


def _corrupt(tree, rel):
    import os

    path = os.path.join(tree, rel)
    data = jpeg(0)
    with open(path, "wb") as f:
        f.write(data[: len(data) // 3])
    return path


def test_raise_names_the_file(tree):
    path = _corrupt(tree, "cat/b.JPEG")
    ds = ImageFolder(tree, size_of)
    i = [p for p, _ in ds.samples].index(path)
    with pytest.raises(DecodeError) as info:
        ds[i]
    assert any(path in n for n in info.value.__notes__)


def test_skip_replaces_and_records(tree):
    path = _corrupt(tree, "cat/b.JPEG")
    ds = ImageFolder(tree, size_of, on_error="skip", max_failures=2)
    i = [p for p, _ in ds.samples].index(path)
    img, y = ds[i]
    assert y == ds.targets[i + 1]  # the next index that reads
    st = ds.stats()
    assert st["failures"] == 1 and [s["shard"] for s in st["skipped"]] == [path]
    assert st["skipped"][0]["reason"].startswith("DecodeError")
    # a sampler's pass asks for each index once: asking again is a new pass, with its own
    # budget (automatic epochs, repeated passes over one epoch)
    for _ in range(3):
        assert ds[i][1] == ds.targets[i + 1]
    assert ds.stats()["failures"] == 4
    # one pass: each bad sample counts once, however often it is tried as a replacement
    for rel in ("cat/a.jpg", "dog.x/e.jpg"):
        _corrupt(tree, rel)
    ds2 = ImageFolder(tree, size_of, on_error="skip", max_failures=3)
    ds2.__getitems__(list(range(len(ds2))))
    assert ds2.stats()["failures"] == 3
    ds3 = ImageFolder(tree, size_of, on_error="skip", max_failures=2)
    with pytest.raises(FailureBudgetExceeded):
        ds3.__getitems__(list(range(len(ds3))))
    ds3.set_epoch(1)
    assert ds3[i][1] == ds3.targets[i + 1]

    def bad(img):
        raise TypeError("bug")

    with pytest.raises(TypeError):
        ImageFolder(tree, bad, on_error="skip", max_failures=100)[0]


def test_stats_from_workers(tree):
    ds = ImageFolder(tree, size_of, stats_interval=1000)
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=2)
    assert sorted(torch.cat([y for _, y in loader]).tolist()) == sorted(ds.targets)
    st = ds.stats()  # the workers flushed when they exited
    assert st["samples"] == len(ds) and len(st["workers"]) == 2
    assert st["bytes_read"] > 0 and st["decode_s"] > 0


def test_skipped_reaches_stats_from_torch_workers(tree):
    # persistent workers never exit between passes, and a map-style dataset sees no end of
    # pass: the skip must be reported when it happens, not when the worker leaves
    path = _corrupt(tree, "cat/b.JPEG")
    ds = ImageFolder(tree, size_of, on_error="skip", max_failures=2, stats_interval=1000)
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=2,
                                         persistent_workers=True)
    assert len(torch.cat([y for _, y in loader])) == len(ds)
    st = ds.stats()
    assert st["failures"] == 1
    assert [(s["shard"], s["key"], s["epoch"]) for s in st["skipped"]] == \
        [(path, "cat/b.JPEG", 0)]
    assert st["skipped"][0]["reason"].startswith("DecodeError")
    assert st["skipped"][0]["worker"] in ("worker0", "worker1")
    ds.set_epoch(1)
    list(loader)  # the same worker processes, a second pass
    assert [s["epoch"] for s in ds.stats()["skipped"]] == [0, 1]
    assert ds.stats(epoch=1)["failures"] == 1
    del loader  # the workers exit and flush their counters
    import gc

    gc.collect()
    assert ds.stats()["samples"] == 2 * len(ds)


def test_reading_streams_keep_their_own_budget_and_counters(tree):
    import threading

    from turboloader.data.reader import reading_as

    path = _corrupt(tree, "cat/b.JPEG")
    ds = ImageFolder(tree, size_of, on_error="skip", max_failures=1)
    bad = [p for p, _ in ds.samples].index(path)
    start = threading.Barrier(2)
    errors = []

    def read(name, rounds):
        with reading_as(name):
            start.wait()
            try:
                for _ in range(rounds):
                    for i in range(len(ds)):
                        if i != bad:
                            ds[i]
                ds[bad]  # one failure each: within each stream's own budget of 1
            except Exception as exc:  # noqa: BLE001 (reported below)
                errors.append(exc)

    threads = [threading.Thread(target=read, args=(f"rank0-thread{w}", 50)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    st = ds.stats()
    n = 50 * (len(ds) - 1) + 1
    assert set(st["workers"]) == {"rank0-thread0", "rank0-thread1"}
    assert [st["workers"][w]["samples"] for w in sorted(st["workers"])] == [n, n]
    assert st["samples"] == 2 * n and st["failures"] == 2
    assert sorted(s["worker"] for s in st["skipped"]) == ["rank0-thread0", "rank0-thread1"]
    with reading_as("rank0-thread0"):
        ds[bad]  # asked again: that stream's next pass, with a budget of its own
    ds[bad]  # the main process's stream has its own budget
    assert ds.stats()["workers"]["main"]["failures"] == 1
    assert ds.stats()["workers"]["rank0-thread0"]["failures"] == 2
