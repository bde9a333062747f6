"""ManifestDataset: CSV / TSV / JSON Lines manifests against a Pillow + torchvision oracle,
labels, extra columns, failure policy, both loaders."""

import gzip
import json
import os

import numpy as np
import pytest
import torch
import torch.utils.data
from helpers.shards import jpeg, size_of
from PIL import Image
from torchvision import transforms as tvt

from turboloader import DecodeError, FailureBudgetExceeded, ManifestDataset
from turboloader.errors import ManifestError
from turboloader.io.manifest import read_manifest


@pytest.fixture
def files(tmp_path):
    root = tmp_path / "images"
    names = []
    for i in range(7):
        rel = f"{'ab'[i % 2]}/{i:03d}." + ("png" if i == 3 else "jpg")
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(jpeg(i, fmt="PNG") if i == 3 else jpeg(i))
        names.append(rel)
    return root, names


def _write_csv(path, header, rows, sep=","):
    lines = ([sep.join(header)] if header else []) + [sep.join(map(str, r)) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_read_manifest_formats(tmp_path):
    _write_csv(tmp_path / "a.csv", ["label", "path", "caption"],
               [[1, "x.jpg", "a cat"], [2, "y.jpg", '"a, dog"']])
    assert read_manifest(tmp_path / "a.csv") == [
        {"label": "1", "path": "x.jpg", "caption": "a cat"},
        {"label": "2", "path": "y.jpg", "caption": "a, dog"}]
    _write_csv(tmp_path / "b.csv", None, [["x.jpg", 1, "extra"], ["y.jpg", 2, "more"]])
    assert read_manifest(tmp_path / "b.csv") == [
        {"path": "x.jpg", "label": "1", "col2": "extra"},
        {"path": "y.jpg", "label": "2", "col2": "more"}]
    _write_csv(tmp_path / "c.tsv", ["path", "label"], [["x y.jpg", 3]], sep="\t")
    assert read_manifest(tmp_path / "c.tsv") == [{"path": "x y.jpg", "label": "3"}]
    with gzip.open(tmp_path / "d.jsonl.gz", "wt") as f:
        f.write('{"path": "x.jpg", "label": 4, "boxes": [[1, 2, 3, 4]]}\n\n')
    assert read_manifest(tmp_path / "d.jsonl.gz") == [
        {"path": "x.jpg", "label": 4, "boxes": [[1, 2, 3, 4]]}]
    (tmp_path / "e.json").write_text(json.dumps([{"path": "x.jpg", "label": 5}]))
    assert read_manifest(tmp_path / "e.json")[0]["label"] == 5
    (tmp_path / "bad.jsonl").write_text('{"path": "x.jpg"}\n[1]\n')
    with pytest.raises(ManifestError, match="line 2"):
        read_manifest(tmp_path / "bad.jsonl")
    (tmp_path / "bad2.jsonl").write_text('{"file": "x.jpg"}\n')
    with pytest.raises(ManifestError, match="no 'path'"):
        read_manifest(tmp_path / "bad2.jsonl")
    with pytest.raises(ValueError, match="format"):
        read_manifest(tmp_path / "a.txt")


def test_outputs_match_pillow_and_torchvision(files, tmp_path):
    root, names = files
    manifest = _write_csv(tmp_path / "train.csv", ["path", "label", "caption"],
                          [[n, i * 10, f"image {i}"] for i, n in enumerate(names)])
    t = tvt.Compose([tvt.Resize(32), tvt.CenterCrop(24), tvt.ToTensor()])
    ds = ManifestDataset(manifest, root=root, transform=t, target_transform=lambda y: y + 1)
    assert len(ds) == 7 and ds.targets == [i * 10 for i in range(7)] and ds.classes is None
    assert ds.rows[2]["caption"] == "image 2"
    for i, n in enumerate(names):
        img, y = ds[i]
        ref = t(Image.open(root / n).convert("RGB"))
        assert y == i * 10 + 1 and img.shape == ref.shape == (3, 24, 24)
        assert (img - ref).abs().mean() < 1 / 255, i
    pil, _ = ManifestDataset(manifest, root=root)[0]
    ref = np.asarray(Image.open(root / names[0]).convert("RGB"), np.int16)
    assert np.abs(np.asarray(pil, np.int16) - ref).mean() < 1


def test_fused_plan_matches_torchvision(files, tmp_path):
    from turboloader import transforms as T

    root, names = files
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"path": str(root / n), "label": i}) + "\n"
                                for i, n in enumerate(names)))
    ds = ManifestDataset(manifest, transform=T.Compose([T.Resize(32), T.CenterCrop(24),
                                                        T.ToTensor()]))
    assert ds.root == str(tmp_path)  # absolute paths are used as they are
    ref = tvt.Compose([tvt.Resize(32), tvt.CenterCrop(24), tvt.ToTensor()])
    images, labels = ds[list(range(len(ds)))]
    assert images.shape == (7, 3, 24, 24) and labels.tolist() == list(range(7))
    for i, n in enumerate(names):
        # fused with DCT scaling: within the tolerance turboloader.transforms documents
        assert (images[i] - ref(Image.open(root / n).convert("RGB"))).abs().mean() < 5 / 255


def test_class_names_and_missing_labels(files, tmp_path):
    root, names = files
    m = _write_csv(tmp_path / "m.csv", None, [[n, "dog" if i % 2 else "cat"]
                                             for i, n in enumerate(names)])
    ds = ManifestDataset(m, root=root)
    assert ds.classes == ["cat", "dog"] and ds.class_to_idx == {"cat": 0, "dog": 1}
    assert ds.targets == [i % 2 for i in range(7)]
    ds = ManifestDataset(m, root=root, classes=["dog", "cat", "eel"])
    assert ds.targets == [1 - i % 2 for i in range(7)]
    with pytest.raises(ManifestError, match="not one of"):
        ManifestDataset(m, root=root, classes=["dog"])
    m2 = _write_csv(tmp_path / "m2.csv", ["path", "label"], [[names[0], 1], [names[1], ""]])
    with pytest.raises(ManifestError, match="row 1"):
        ManifestDataset(m2, root=root)
    assert ManifestDataset(m2, root=root, missing_label=-1).targets == [1, -1]
    assert ManifestDataset(m2, root=root, label_column=None, missing_label=-1).targets == [-1, -1]


def test_failure_policy(files, tmp_path):
    root, names = files
    data = jpeg(1)
    (root / names[1]).write_bytes(data[: len(data) // 3])
    m = _write_csv(tmp_path / "m.csv", ["path", "label"], [[n, i] for i, n in enumerate(names)])
    with pytest.raises(DecodeError) as info:
        ManifestDataset(m, root=root, transform=size_of)[1]
    assert any(names[1] in note for note in info.value.__notes__)
    ds = ManifestDataset(m, root=root, transform=size_of, on_error="skip", max_failures=1)
    assert ds[1][1] == 2  # the next index that reads
    st = ds.stats()
    assert st["failures"] == 1 and st["skipped"][0]["key"] == names[1]
    # one pass over two bad files with a budget of one
    data4 = jpeg(4)
    (root / names[4]).write_bytes(data4[: len(data4) // 3])
    ds = ManifestDataset(m, root=root, transform=size_of, on_error="skip", max_failures=1)
    with pytest.raises(FailureBudgetExceeded):
        ds.__getitems__(list(range(len(ds))))
    os.remove(root / names[2])
    with pytest.raises(FileNotFoundError):  # a missing file is not a skippable sample
        ManifestDataset(m, root=root, transform=size_of, on_error="skip")[2]


@pytest.mark.parametrize("workers", [0, 2])
def test_under_torch_dataloader(files, tmp_path, workers):
    from turboloader import transforms as T

    root, names = files
    m = _write_csv(tmp_path / "m.csv", ["path", "label"], [[n, i] for i, n in enumerate(names)])
    ds = ManifestDataset(m, root=root, transform=T.Compose([T.RandomResizedCrop(16),
                                                            T.ToTensor()]))
    ds.set_epoch(0)
    loader = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=workers)
    batches = [(x.clone(), y) for x, y in loader]
    assert torch.cat([y for _, y in batches]).tolist() == list(range(7))
    kept = torch.cat([x for x, _ in batches])
    assert kept.shape == (7, 3, 16, 16)
    # the same epoch and seed give the same pixels, sample by sample (the kept-batch oracle)
    for i in range(7):
        assert torch.equal(kept[i], ds[i][0])


def test_thread_backend(files, tmp_path):
    from turboloader import transforms as T
    from turboloader.loader import DataLoader

    root, names = files
    m = _write_csv(tmp_path / "m.csv", ["path", "label"], [[n, i] for i, n in enumerate(names)])
    ds = ManifestDataset(m, root=root, transform=T.Compose([T.Resize(20), T.CenterCrop(16),
                                                            T.ToTensor()]))
    loader = DataLoader(ds, batch_size=4, num_workers=2, backend="threads")
    labels = torch.cat([y for _, y in loader]).tolist()
    assert labels == list(range(7))


@pytest.mark.parametrize("how", ["torch", "batch-sampler", "threads"])
def test_kept_batches_stay_intact(files, tmp_path, how):
    """Batches the consumer keeps are never overwritten by recycled buffers, and equal the
    samples read one by one in the main process (same epoch and index)."""
    from turboloader import transforms as T
    from turboloader.loader import DataLoader

    root, names = files
    m = _write_csv(tmp_path / "m.csv", ["path", "label"], [[n, i] for i, n in enumerate(names)])
    ds = ManifestDataset(m, root=root, transform=T.Compose([T.RandomResizedCrop(16),
                                                            T.RandomHorizontalFlip(),
                                                            T.ToTensor()]), seed=3)
    if how == "torch":
        dl = torch.utils.data.DataLoader(ds, batch_size=3, shuffle=True, num_workers=1,
                                         persistent_workers=True)
    elif how == "batch-sampler":
        sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(ds), 3, False)
        dl = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None, num_workers=1,
                                         persistent_workers=True)
    else:
        dl = DataLoader(ds, batch_size=3, shuffle=True, num_workers=2, backend="threads")
    def begin(epoch):
        ds.set_epoch(epoch)
        if how == "threads":
            dl.set_epoch(epoch)  # the thread backend's own epochs count on otherwise

    for epoch in (0, 1):
        begin(epoch)
        copies = [(x.clone(), y.clone()) for x, y in dl]  # dropped at once: recycled
        begin(epoch)
        kept = list(dl)
        e = ds.epoch
        assert sum(len(y) for _, y in kept) == sum(len(y) for _, y in copies) == 7
        ds.set_epoch(e)
        for a, la in kept + copies:
            for r, y in enumerate(la.tolist()):
                assert torch.equal(a[r], ds[y][0]), (how, epoch, y)


@pytest.mark.parametrize("name, sep, gz", [("bom.csv", ",", False), ("bom.tsv", "\t", False),
                                           ("bom.csv.gz", ",", True), ("bom.jsonl", None, False),
                                           ("bom.json", None, False)])
def test_byte_order_mark_is_not_data(files, tmp_path, name, sep, gz):
    """Excel's "CSV UTF-8" starts the file with a byte-order mark: the header must stay the
    header (not a phantom row), and int labels must stay ints, as csv/json read them from the
    same text without the mark (the oracle)."""
    root, names = files
    rows = [[n, 10 - i] for i, n in enumerate(names)]  # "10" sorts before "4" as a string
    if sep is not None:
        text = "\n".join([sep.join(["path", "label"])] +
                         [sep.join(map(str, r)) for r in rows]) + "\n"
    elif name.endswith(".json"):
        text = json.dumps([{"path": n, "label": y} for n, y in rows])
    else:
        text = "".join(json.dumps({"path": n, "label": y}) + "\n" for n, y in rows)
    data = b"\xef\xbb\xbf" + text.encode("utf-8")
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if gz else data)
    ds = ManifestDataset(path, root=root)
    assert len(ds) == len(names) and ds.classes is None
    assert ds.targets == [y for _, y in rows]
    assert [s[0] for s in ds.samples] == [os.path.join(str(root), n) for n in names]
