"""WebDataset fields (``TarDataset(fields=...)``) against the stdlib ``tarfile`` oracle."""

import io
import json
import tarfile

import numpy as np
import pytest
import torch
import torch.utils.data
from helpers import kept
from helpers.shards import jpeg, write_tar
from PIL import Image

import turboloader
from turboloader import transforms as T
from turboloader.data import TarDataset
from turboloader.errors import SampleError
from turboloader.transforms._random import sample_rng

TF = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor()])
N = 24


def png_mask(i):
    arr = ((np.arange(48 * 64).reshape(48, 64) + i) % 5).astype(np.uint8)
    img = Image.fromarray(arr, mode="L")
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def members(i):
    key = f"s{i:04d}"
    return [(f"{key}.jpg", jpeg(i)), (f"{key}.txt", f"a photo number {i} ü".encode()),
            (f"{key}.json", json.dumps({"i": i, "tag": "x" * (i % 3)}).encode()),
            (f"{key}.cls", str(i).encode()), (f"{key}.png", png_mask(i))]


@pytest.fixture
def shards(tmp_path):
    all_members = [m for i in range(N) for m in members(i)]
    half = len(all_members) // 2
    return [write_tar(tmp_path / "f-0.tar", all_members[:half]),
            write_tar(tmp_path / "f-1.tar", all_members[half:])]


def oracle(paths):
    """``{key: {ext: bytes}}`` read by the stdlib."""
    out = {}
    for p in paths:
        with tarfile.open(p) as tf:
            for m in tf.getmembers():
                key, _, ext = m.name.partition(".")
                out.setdefault(key, {})[ext] = tf.extractfile(m).read()
    return out


FIELDS = ("jpg", "txt", "__key__", "json", "cls", "png", "__url__")


def check_sample(sample, truth, plan, epoch, seed=0):
    img, text, key, obj, cls, mask, url = sample
    want = truth[key]
    assert text == want["txt"].decode("utf-8")
    assert obj == json.loads(want["json"])
    assert cls == int(want["cls"]) and type(cls) is int
    assert mask.dtype == torch.uint8 and mask.shape == (1, 48, 64)
    assert torch.equal(mask[0], torch.from_numpy(np.array(Image.open(io.BytesIO(want["png"])))))
    assert url.endswith((".tar", ".tar.gz"))
    assert torch.equal(img, plan.from_jpeg(want["jpg"], rng=sample_rng(seed, epoch, cls)))


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"])
def test_fields_in_order_as_webdataset_decodes_them(tmp_path, suffix):
    all_members = [m for i in range(N) for m in members(i)]
    path = write_tar(tmp_path / f"f{suffix}", all_members)
    ds = TarDataset(path, TF, fields=FIELDS, shuffle=False)
    ds.set_epoch(0)
    truth = oracle([path])
    got = list(ds)
    assert [s[2] for s in got] == sorted(truth)
    plan = T.plan(TF)
    for sample in got:
        check_sample(sample, truth, plan, 0)


@pytest.mark.parametrize("how", ["torch2", "threads", "batched"])
def test_fields_batches_every_batch_kept(shards, how):
    ds = TarDataset(shards, TF, fields=FIELDS)
    truth, plan = oracle(shards), T.plan(TF)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        if how == "torch2":
            dl = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=2)
        elif how == "threads":
            dl = turboloader.DataLoader(ds, batch_size=5, num_workers=2)
            dl.set_epoch(epoch)
        else:
            dl = torch.utils.data.DataLoader(ds.batched(5), batch_size=None, num_workers=2)
        batches = list(dl)  # kept to the end
        keys = []
        for b in batches:
            images, texts, bkeys, objs, cls, masks, urls = b
            assert images.shape[1:] == (3, 16, 16) and masks.shape[1:] == (1, 48, 64)
            assert isinstance(texts, (tuple, list)) and isinstance(bkeys, (tuple, list))
            assert isinstance(cls, torch.Tensor) and cls.dtype == torch.int64
            for k in range(len(bkeys)):
                o = {"i": objs["i"][k]}
                sample = (images[k], texts[k], bkeys[k], None, int(cls[k]), masks[k], urls[k])
                check_sample(sample[:3] + (json.loads(truth[bkeys[k]]["json"]),) + sample[4:],
                             truth, plan, epoch)
                assert o["i"] == int(cls[k])
            keys += bkeys
        assert sorted(keys) == sorted(truth)


def test_alternatives_take_the_first_member_the_sample_has(tmp_path):
    path = write_tar(tmp_path / "a.tar", [
        ("a.png", png_mask(0)), ("a.jpg", jpeg(0)), ("a.cls", b"0"),
        ("b.jpg", jpeg(1)), ("b.cls", b"1")])
    ds = TarDataset(path, T.Compose([T.Resize(8), T.CenterCrop(8), T.PILToTensor()]),
                    fields=("png;jpg", "cls"), shuffle=False)
    (a, la), (b, lb) = list(ds)
    assert (la, lb) == (0, 1)
    # a: the grayscale PNG (made RGB for the transform), b: its JPEG
    assert torch.equal(a[0], a[1]) and a.shape == b.shape == (3, 8, 8)


def test_a_missing_field_is_a_sample_error_or_a_counted_skip(tmp_path):
    path = write_tar(tmp_path / "m.tar", [m for i in range(6) for m in members(i)
                                          if not (i == 2 and m[0].endswith(".txt"))])
    with pytest.raises(SampleError, match=r"s0002.*\.txt"):
        list(TarDataset(path, TF, fields=("jpg", "txt"), shuffle=False))
    ds = TarDataset(path, TF, fields=("jpg", "txt"), shuffle=False, on_error="skip",
                    max_failures=1)
    got = list(ds)
    assert len(got) == 6 and ds.stats()["failures"] == 1
    assert "a photo number 2" not in [t for _, t in got]


def test_fields_spec_errors(tmp_path):
    path = write_tar(tmp_path / "e.tar", members(0))
    with pytest.raises(ValueError, match="no image entry"):
        TarDataset(path, TF, fields=("txt", "cls"))
    with pytest.raises(ValueError, match="target_transform"):
        TarDataset(path, TF, target_transform=int, fields=("jpg", "cls"))


def test_a_misspelt_field_is_refused_at_construction(tmp_path):
    # before: every sample failed during iteration ("has no .txtt member")
    path = write_tar(tmp_path / "e.tar", members(0) + members(1))
    with pytest.raises(ValueError, match=r"'txtt' matches no member of shard .*e\.tar.*"
                                         r"cls, jpg, json, png, txt.*did you mean 'txt'"):
        TarDataset(path, TF, fields=("jpg", "txtt"))
    with pytest.raises(ValueError, match="'jpeg;webp' matches no member"):
        TarDataset(path, TF, fields=("jpeg;webp", "txt"))
    # an entry that only some samples have is not misspelt: those samples are SampleErrors
    ds = TarDataset(path, TF, fields=("jpg", "txt;cls", "__key__", "__url__"), shuffle=False)
    assert [k for _, _, k, _ in ds] == ["s0000", "s0001"]


def test_caption_shards_read_without_fields_say_that_fields_exist(tmp_path):
    # webdataset CLIP-style shards: image + caption (+ JSON metadata), no label
    path = write_tar(tmp_path / "c.tar", [
        ("a.jpg", jpeg(0)), ("a.txt", b"a cat"), ("a.json", b'{"caption": "a cat"}'),
        ("b.jpg", jpeg(1)), ("b.txt", b"a dog")])
    with pytest.raises(SampleError, match=r"no key 'label' \(its keys: 'caption'\).*fields="):
        list(TarDataset(path, TF, shuffle=False))
    with pytest.raises(SampleError, match=r"no label member.*missing_label=.*fields=\('jpg'"):
        list(TarDataset(write_tar(tmp_path / "d.tar", [("b.jpg", jpeg(1)), ("b.txt", b"x")]),
                        TF, shuffle=False))
    got = list(TarDataset(path, TF, fields=("jpg", "txt"), shuffle=False))
    assert [t for _, t in got] == ["a cat", "a dog"]


def test_default_is_image_label(shards):
    ds = TarDataset(shards, TF, shuffle=False)
    img, label = next(iter(ds))
    assert isinstance(label, int) and img.shape == (3, 16, 16)
    assert kept.N  # the shared helpers import


@pytest.mark.parametrize("how", ["direct", "torch2", "threads", "batch"])
def test_tbl_fields_image_label_key(tmp_path, how):
    from turboloader.data import TBLDataset
    from turboloader.io.tbl import TBLWriter

    path = str(tmp_path / "f.tbl")
    with TBLWriter(path) as w:
        for i in range(N):
            w.write(jpeg(i), key=f"k{i:03d}", label=i * 10)
    ds = TBLDataset(path, TF, fields=("jpg", "__key__", "cls", "__url__"))
    ds.set_epoch(1)
    plan = T.plan(TF)
    if how == "direct":
        rows = [ds[i] for i in range(N)]
    else:
        if how == "torch2":
            dl = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=2, shuffle=True)
        elif how == "threads":
            dl = turboloader.DataLoader(ds, batch_size=5, num_workers=2, shuffle=True)
            dl.set_epoch(1)
        else:
            sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(ds), 5, False)
            dl = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None, num_workers=2)
        batches = list(dl)  # kept to the end
        rows = [(b[0][k], b[1][k], int(b[2][k]), b[3][k]) for b in batches
                for k in range(len(b[1]))]
    assert sorted(r[1] for r in rows) == [f"k{i:03d}" for i in range(N)]
    for img, key, label, url in rows:
        i = int(key[1:])
        assert label == i * 10 and url == path
        assert torch.equal(img, plan.from_jpeg(jpeg(i), rng=sample_rng(0, 1, i)))
    with pytest.raises(ValueError, match="txt"):
        TBLDataset(path, TF, fields=("jpg", "txt"))
