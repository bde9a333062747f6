"""Mask and boxes fields (``MaskField`` / ``BoxesField``) transformed inside the datasets with
the image's drawn parameters.

The oracle: torchvision v2's own transforms, their ``make_params`` returning the parameters
that turboloader's classes draw from the sample's generator ``sample_rng(seed, epoch, i)``,
applied to the decoded image, the stored mask and the stored boxes. Masks and boxes must be
equal; the image equal to the fused per-sample call (and close to v2's, DCT scaling aside).
"""

import csv
import io
import json
import os

import numpy as np
import pytest
import torch
import torch.utils.data
from helpers.shards import write_tar
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import turboloader
from turboloader import transforms as T
from turboloader.data import BoxesField, MaskField, TarDataset, collate_fields
from turboloader.errors import SampleError
from turboloader.transforms._random import sample_rng

H, W = 48, 64
N = 18
SEED = 5
PALETTE = np.array([(240, 240, 240), (220, 40, 40), (40, 60, 220), (40, 200, 60)], np.uint8)


def sample_arrays(i):
    """``(mask (H, W) uint8, boxes [[x0, y0, x1, y1]], labels)`` of sample ``i``."""
    rng = np.random.default_rng(i)
    mask = np.zeros((H, W), np.uint8)
    boxes, labels = [], []
    for k in range(int(rng.integers(0, 4))):  # 0..3 objects, one per third of the width
        cls = int(rng.integers(1, 4))
        x0 = int(rng.integers(k * W // 3, (k + 1) * W // 3 - 10))
        x1 = int(rng.integers(x0 + 6, (k + 1) * W // 3 + 1))
        y0 = int(rng.integers(0, H - 12))
        y1 = int(rng.integers(y0 + 6, H + 1))
        mask[y0:y1, x0:x1] = cls
        boxes.append([x0, y0, x1, y1])
        labels.append(cls)
    return mask, boxes, labels


def encode(arr, fmt, **kw):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, fmt, **kw)
    return buf.getvalue()


def members(i, *, skip=()):
    mask, boxes, labels = sample_arrays(i)
    key = f"s{i:04d}"
    out = [(f"{key}.jpg", encode(PALETTE[mask], "JPEG", quality=95)),
           (f"{key}.seg.png", encode(mask, "PNG")),
           (f"{key}.json", json.dumps({"boxes": boxes, "labels": labels}).encode()),
           (f"{key}.cls", str(i).encode())]
    return [m for m in out if m[0].split(".", 1)[1] not in skip]


@pytest.fixture
def shards(tmp_path):
    all_members = [m for i in range(N) for m in members(i)]
    third = len(all_members) // 3 // 4 * 4
    return [write_tar(tmp_path / "j-0.tar", all_members[:third]),
            write_tar(tmp_path / "j-1.tar", all_members[third:])]


FIELDS = ("jpg", MaskField("seg.png"), BoxesField("json", key="boxes"), "json", "cls",
          "__key__")


def pipelines():
    """name -> (turboloader pipeline, its torchvision v2 geometric transforms, fuses)."""
    return {
        "rrc_flip": (T.Compose([T.RandomResizedCrop(24, scale=(0.3, 1.0)),
                                T.RandomHorizontalFlip(), T.ToTensor()]),
                     [v2.RandomResizedCrop(24, scale=(0.3, 1.0)), v2.RandomHorizontalFlip()]),
        "resize_center_flip": (T.Compose([T.Resize(30), T.CenterCrop(28),
                                           T.RandomHorizontalFlip(), T.ToTensor()]),
                                [v2.Resize(30), v2.CenterCrop(28), v2.RandomHorizontalFlip()]),
        # colour draws between the geometric ones, and members that leave annotations alone
        "rrc_jitter_normalize": (T.Compose([T.RandomResizedCrop(24, scale=(0.3, 1.0)),
                                            T.ColorJitter(0.3, 0.3), T.RandomHorizontalFlip(),
                                            T.ToImage(), T.ToDtype(torch.float32, scale=True),
                                            T.Normalize((0.5,) * 3, (0.25,) * 3)]),
                                 [v2.RandomResizedCrop(24, scale=(0.3, 1.0)), None,
                                  v2.RandomHorizontalFlip()]),
        "affine": (T.Compose([T.RandomAffine(15, translate=(0.1, 0.1), scale=(0.8, 1.1)),
                              T.RandomCrop(40), T.ToTensor()]),
                   [v2.RandomAffine(15, translate=(0.1, 0.1), scale=(0.8, 1.1)),
                    v2.RandomCrop(40)]),
    }


def v2_reference(name, i, epoch, *, seed=SEED, short_side=None):
    """torchvision v2's ``(image float, mask, boxes)`` of sample ``i`` with the parameters
    turboloader's classes draw from ``sample_rng(seed, epoch, i)``; ``short_side``: the
    full-size inputs first through ``v2.Resize(short_side)`` (an image the cache stores at
    ``cache_short_side``, transformed as stored)."""
    ours, tvs = pipelines()[name]
    mask, boxes, _ = sample_arrays(i)
    img = tv_tensors.Image(torch.from_numpy(np.array(Image.open(io.BytesIO(
        members(i)[0][1])).convert("RGB"))).permute(2, 0, 1))
    inputs = (img, tv_tensors.Mask(torch.from_numpy(mask)),
              tv_tensors.BoundingBoxes(torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
                                       format="XYXY", canvas_size=(H, W)))
    if short_side is not None:
        inputs = v2.Resize(short_side)(*inputs)
    rng = sample_rng(seed, epoch, i)
    for t, tv in zip(ours.transforms, tvs):
        params = t.make_params(tuple(inputs[0].shape[-2:]), rng=rng)
        if tv is None:  # a colour transform: its draws only
            continue
        if isinstance(t, (T.RandomHorizontalFlip, T.RandomVerticalFlip)):
            flip = params.get("flip", params.get("apply"))
            tv = type(tv)(p=1.0 if flip else 0.0)
        else:
            tv.make_params = lambda flat, p=params: dict(p)
        inputs = tv(*inputs)
    img, m, b = inputs
    return img.float() / 255, m, b


def check(sample, name, epoch, *, seed=SEED):
    image, mask, boxes, target, cls, key = sample
    i = int(key[1:])
    assert cls == i and target["labels"] == sample_arrays(i)[2]
    ref_img, ref_mask, ref_boxes = v2_reference(name, i, epoch, seed=seed)
    assert type(mask) is tv_tensors.Mask or mask.ndim == 2
    assert torch.equal(torch.as_tensor(mask), torch.as_tensor(ref_mask)), key
    assert isinstance(boxes, tv_tensors.BoundingBoxes)
    assert boxes.canvas_size == ref_boxes.canvas_size == tuple(image.shape[-2:])
    assert boxes.format == tv_tensors.BoundingBoxFormat.XYXY
    assert torch.allclose(boxes.as_subclass(torch.Tensor), ref_boxes.as_subclass(torch.Tensor),
                          atol=1e-4), key
    assert image.shape == ref_img.shape
    if "jitter" not in name:  # (the image oracle there: the fused per-sample call)
        assert (image - ref_img).abs().mean() < 6 / 255  # fused with DCT scaling


@pytest.mark.filterwarnings("ignore::turboloader.errors.UnfusedWarning")
@pytest.mark.parametrize("name", ["rrc_flip", "resize_center_flip", "rrc_jitter_normalize",
                                  "affine"])
def test_mask_and_boxes_equal_torchvision_v2(shards, name):
    pipe = pipelines()[name][0]
    fuses = T.plan(pipe) is not None
    assert fuses == (name != "affine")
    ds = TarDataset(shards, pipe, fields=FIELDS, seed=SEED)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        got = list(ds)
        assert sorted(s[-1] for s in got) == [f"s{i:04d}" for i in range(N)]
        for s in got:
            check(s, name, epoch)
            if fuses:  # the image is the fused per-sample call's, bit for bit
                i = int(s[-1][1:])
                assert torch.equal(s[0], T.plan(pipe).from_jpeg(members(i)[0][1],
                                                                 rng=sample_rng(SEED, epoch, i)))


def test_masks_line_up_with_the_image(shards):
    ds = TarDataset(shards, pipelines()["rrc_flip"][0], fields=FIELDS, seed=SEED)
    pal = torch.from_numpy(PALETTE).float() / 255
    agree = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        for image, mask, *_ in ds:
            nearest = ((image.permute(1, 2, 0)[..., None, :] - pal) ** 2).sum(-1).argmin(-1)
            agree.append(float((nearest == mask).float().mean()))
    # a mask that missed its image's crop or flip agrees on far fewer pixels; class edges
    # blur in a 24-pixel JPEG crop
    assert min(agree) > 0.8 and np.mean(agree) > 0.95


@pytest.mark.parametrize("how", ["torch2", "threads", "processes", "batched"])
def test_every_loader_every_sample_once(shards, how):
    name = "rrc_flip"
    ds = TarDataset(shards, pipelines()[name][0], fields=FIELDS, seed=SEED)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        if how == "torch2":
            dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2,
                                             collate_fn=collate_fields)
        elif how in ("threads", "processes"):
            dl = turboloader.DataLoader(ds, batch_size=4, num_workers=2, backend=how,
                                        collate_fn=collate_fields if how == "processes"
                                        else None)
            dl.set_epoch(epoch)
        else:
            dl = torch.utils.data.DataLoader(ds.batched(4), batch_size=None, num_workers=2)
        batches = list(dl)  # all kept to the end: no buffer was rewritten under them
        keys = []
        for images, masks, boxes, targets, cls, bkeys in batches:
            assert images.shape[1:] == (3, 24, 24) and masks.shape[1:] == (24, 24)
            assert isinstance(boxes, list) and len(boxes) == len(bkeys)
            for k in range(len(bkeys)):
                # JSON of one shape is collated as default_collate does (transposed lists)
                target = {"labels": [int(t[k]) for t in targets["labels"]]} \
                    if isinstance(targets, dict) else targets[k]
                check((images[k], masks[k], boxes[k], target, int(cls[k]), bkeys[k]),
                      name, epoch)
            keys += list(bkeys)
        assert sorted(keys) == [f"s{i:04d}" for i in range(N)]  # exactly once per epoch


def test_with_the_decoded_cache(shards):
    name = "rrc_flip"
    ds = TarDataset(shards, pipelines()[name][0], fields=FIELDS, seed=SEED, cache="4MB")
    for epoch in (0, 1, 2):
        ds.set_epoch(epoch)
        got = list(ds)
        assert len(got) == N
        for s in got:
            image, mask, boxes, target, cls, key = s
            _, ref_mask, ref_boxes = v2_reference(name, int(key[1:]), epoch)
            assert torch.equal(torch.as_tensor(mask), torch.as_tensor(ref_mask))
            assert torch.allclose(boxes.as_subclass(torch.Tensor),
                                  ref_boxes.as_subclass(torch.Tensor), atol=1e-4)
    assert ds.stats()["cache_hits"] > 0


@pytest.mark.filterwarnings("ignore::turboloader.errors.UnfusedWarning")
def test_cache_short_side_with_a_pipeline_that_does_not_fuse(shards):
    """#30 finding 4: with ``cache_short_side`` and a pipeline that does not fuse, the image
    is transformed as the cache stores it (smaller) while masks and boxes are in the
    original's coordinates: every mask was a SampleError and boxes came out at the wrong
    scale. The oracle: torchvision v2 on the full-size image, mask and boxes, through
    ``v2.Resize(cache_short_side)`` (the stored scale) and then the pipeline with the same
    parameters; masks equal, boxes equal, the image close (its downscale is the cache's)."""
    name, short = "affine", 40
    pipe = pipelines()[name][0]
    assert T.plan(pipe) is None
    ds = TarDataset(shards, pipe, fields=FIELDS, seed=SEED, cache="4MB", cache_short_side=short)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        got = list(ds)
        assert sorted(s[-1] for s in got) == [f"s{i:04d}" for i in range(N)]
        for image, mask, boxes, target, cls, key in got:
            i = int(key[1:])
            ref_img, ref_mask, ref_boxes = v2_reference(name, i, epoch, short_side=short)
            assert torch.equal(torch.as_tensor(mask), torch.as_tensor(ref_mask)), key
            assert boxes.canvas_size == ref_boxes.canvas_size == tuple(image.shape[-2:])
            assert torch.allclose(boxes.as_subclass(torch.Tensor),
                                  ref_boxes.as_subclass(torch.Tensor), atol=1e-3), key
            assert image.shape == ref_img.shape
            assert (image - ref_img).abs().mean() < 6 / 255, key
    assert ds.stats()["cache_hits"] > 0


def test_xywh_boxes_and_a_bare_list(tmp_path):
    mask, boxes, _ = sample_arrays(3)
    xywh = [[x0, y0, x1 - x0, y1 - y0] for x0, y0, x1, y1 in boxes]
    path = write_tar(tmp_path / "b.tar", [
        ("a.jpg", members(3)[0][1]), ("a.boxes.json", json.dumps(xywh).encode())])
    pipe = T.Compose([T.CenterCrop(40), T.RandomHorizontalFlip(), T.ToTensor()])
    ds = TarDataset(path, pipe, fields=("jpg", BoxesField("boxes.json", format="XYWH")),
                    seed=SEED, shuffle=False)
    ds.set_epoch(0)
    (image, got), = list(ds)
    flip = pipe.transforms[1].make_params((40, 40), rng=_after(pipe, 1, (H, W), 0))
    ref = tv_tensors.BoundingBoxes(torch.tensor(xywh, dtype=torch.float32).reshape(-1, 4),
                                   format="XYWH", canvas_size=(H, W))
    ref = v2.CenterCrop(40)(ref)
    ref = v2.RandomHorizontalFlip(p=1.0 if flip.get("flip", flip.get("apply")) else 0.0)(ref)
    assert got.format == tv_tensors.BoundingBoxFormat.XYWH and got.canvas_size == (40, 40)
    assert torch.allclose(got.as_subclass(torch.Tensor), ref.as_subclass(torch.Tensor))


def _after(pipe, k, size, epoch):
    """The sample generator after the draws of the first ``k`` transforms."""
    rng = sample_rng(SEED, epoch, 0)
    for t in pipe.transforms[:k]:
        t.make_params(size, rng=rng)
    return rng


@pytest.mark.parametrize("bad, match", [
    ("no_mask", r"s0002.*seg\.png"),
    ("bad_json", r"s0002.*not valid JSON"),
    ("bad_shape", r"s0002.*N x 4"),
    ("no_key", r"s0002.*'boxes'"),
    ("small_mask", r"s0002.*MaskField.*size"),
    ("bad_mask", r"s0002.*MaskField.*does not decode"),
])
def test_bad_annotations_are_typed_errors_or_counted_skips(tmp_path, bad, match):
    rows = []
    for i in range(6):
        ms = members(i, skip=("seg.png",) if (i == 2 and bad == "no_mask") else ())
        if i == 2:
            ms = [list(m) for m in ms]
            for m in ms:
                if m[0].endswith(".json") and bad == "bad_json":
                    m[1] = b"{boxes: [1, 2"
                elif m[0].endswith(".json") and bad == "bad_shape":
                    m[1] = json.dumps({"boxes": [[1, 2, 3]], "labels": [1]}).encode()
                elif m[0].endswith(".json") and bad == "no_key":
                    m[1] = json.dumps({"bbox": [], "labels": []}).encode()
                elif m[0].endswith(".seg.png") and bad == "small_mask":
                    m[1] = encode(np.zeros((10, 10), np.uint8), "PNG")
                elif m[0].endswith(".seg.png") and bad == "bad_mask":
                    m[1] = m[1][:40]
            ms = [tuple(m) for m in ms]
        rows += ms
    path = write_tar(tmp_path / "bad.tar", rows)
    pipe = pipelines()["rrc_flip"][0]
    with pytest.raises(SampleError, match=match) as info:
        list(TarDataset(path, pipe, fields=FIELDS, shuffle=False))
    assert "bad.tar" in "\n".join(getattr(info.value, "__notes__", [])) + str(info.value)
    ds = TarDataset(path, pipe, fields=FIELDS, shuffle=False, on_error="skip", max_failures=1)
    got = list(ds)
    assert len(got) == 6 and "s0002" not in [s[-1] for s in got]  # replaced, as any failure
    assert ds.stats()["failures"] == 1 and ds.stats()["skipped"][0]["key"] == "s0002"


def test_spec_errors(shards):
    pipe = pipelines()["rrc_flip"][0]
    with pytest.raises(ValueError, match="turboloader transform"):
        TarDataset(shards, v2.RandomResizedCrop(24), fields=("jpg", MaskField("seg.png")))
    with pytest.raises(ValueError, match="torch's global generator"):
        TarDataset(shards, T.Compose([T.RandomResizedCrop(24), v2.RandomRotation(10),
                                      T.ToTensor()]), fields=("jpg", MaskField("seg.png")))
    with pytest.raises(TypeError, match="RandAugment"):
        TarDataset(shards, T.Compose([T.RandAugment(), T.RandomResizedCrop(24), T.ToTensor()]),
                   fields=("jpg", MaskField("seg.png")))
    # colour transforms draw for the image alone and leave masks alone: accepted
    TarDataset(shards, T.Compose([T.ColorJitter(0.4), T.RandomResizedCrop(24), T.ToTensor()]),
               fields=("jpg", MaskField("seg.png")))
    with pytest.raises(ValueError, match="format"):
        BoxesField("json", format="XYZW")
    with pytest.raises(ValueError, match="MaskField"):
        MaskField("")
    with pytest.raises(ValueError, match="no image entry"):
        TarDataset(shards, pipe, fields=(MaskField("seg.png"), "cls"))
    assert MaskField("png") == MaskField("png") and repr(BoxesField("json", key="b")) == \
        "BoxesField('json', key='b', format='XYXY')"
    # no transform: the annotations as stored, boxes on the image's canvas
    ds = TarDataset(shards, None, fields=("jpg", MaskField("seg.png"), BoxesField(
        "json", key="boxes"), "__key__"), shuffle=False)
    img, mask, boxes, key = next(iter(ds))
    assert mask.shape == (H, W) and boxes.canvas_size == (H, W)
    assert boxes.tolist() == [list(map(float, b)) for b in sample_arrays(int(key[1:]))[1]]


# -- ManifestDataset: columns as fields ---------------------------------------------------------


def write_manifest(root, fmt, n=N):
    """Images, masks and boxes as files under ``root`` and a manifest naming them."""
    os.makedirs(os.path.join(root, "img"), exist_ok=True)
    rows = []
    for i in range(n):
        jpg, png, js, _ = (m[1] for m in members(i))
        for name, data in ((f"img/{i:04d}.jpg", jpg), (f"img/{i:04d}.png", png)):
            with open(os.path.join(root, name), "wb") as f:
                f.write(data)
        obj = json.loads(js)
        rows.append({"path": f"img/{i:04d}.jpg", "mask": f"img/{i:04d}.png",
                     "boxes": obj["boxes"], "labels": obj["labels"], "caption": f"c{i}"})
    path = os.path.join(root, f"list.{fmt}")
    with open(path, "w") as f:
        if fmt == "jsonl":
            f.write("\n".join(json.dumps(r) for r in rows) + "\n")
        else:  # CSV: the boxes a JSON string
            w = csv.writer(f)
            w.writerow(["path", "mask", "boxes", "caption"])
            for r in rows:
                w.writerow([r["path"], r["mask"], json.dumps(r["boxes"]), r["caption"]])
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("how", ["direct", "torch2", "threads"])
def test_manifest_mask_and_boxes_fields(tmp_path, fmt, how):
    from turboloader.data import ManifestDataset

    path = write_manifest(str(tmp_path), fmt)
    name = "rrc_flip"
    ds = ManifestDataset(path, transform=pipelines()[name][0], seed=SEED, fields=(
        "path", MaskField("mask"), BoxesField("boxes"), "caption", "__key__"))
    ds.set_epoch(1)
    if how == "direct":
        rows = [ds[i] for i in range(N)]
    else:
        if how == "torch2":
            dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, shuffle=True,
                                             collate_fn=collate_fields)
        else:  # the thread backend lists the boxes without a collate_fn
            dl = turboloader.DataLoader(ds, batch_size=4, num_workers=2, shuffle=True)
            dl.set_epoch(1)
        rows = [(b[0][k], b[1][k], b[2][k], b[3][k], b[4][k]) for b in list(dl)
                for k in range(len(b[4]))]
    assert sorted(r[4] for r in rows) == [f"img/{i:04d}.jpg" for i in range(N)]
    for image, mask, boxes, caption, key in rows:
        i = int(key[4:8])
        assert caption == f"c{i}"
        check((image, mask, boxes, {"labels": sample_arrays(i)[2]}, i, f"s{i:04d}"), name, 1)


def test_manifest_field_errors(tmp_path):
    from turboloader.data import ManifestDataset

    path = write_manifest(str(tmp_path), "jsonl", n=4)
    os.remove(os.path.join(str(tmp_path), "img/0002.png"))
    pipe = pipelines()["rrc_flip"][0]
    ds = ManifestDataset(path, transform=pipe, fields=("path", MaskField("mask")))
    with pytest.raises(SampleError, match=r"0002.*MaskField\('mask'\).*cannot read") as info:
        [ds[i] for i in range(4)]
    assert "row 2" in "\n".join(info.value.__notes__)
    ds = ManifestDataset(path, transform=pipe, fields=("path", MaskField("mask")),
                         on_error="skip", max_failures=1)
    assert len([ds[i] for i in range(4)]) == 4 and ds.stats()["failures"] == 1
    with pytest.raises(ValueError, match="image column"):
        ManifestDataset(path, transform=pipe, fields=("mask", "caption"))
    with pytest.raises(SampleError, match="'nothere' column"):
        ManifestDataset(path, transform=pipe, fields=("path", "nothere"))[0]


# -- ParquetDataset: columns as fields -----------------------------------------------------------


def parquet_table(n=N):
    pa = pytest.importorskip("pyarrow")
    cols = {"image": [], "mask": [], "boxes": [], "labels": [], "caption": [], "id": []}
    for i in range(n):
        jpg, png, js, _ = (m[1] for m in members(i))
        obj = json.loads(js)
        cols["image"].append(jpg)
        cols["mask"].append(png)
        cols["boxes"].append([[float(v) for v in b] for b in obj["boxes"]])
        cols["labels"].append(obj["labels"])
        cols["caption"].append(f"c{i}")
        cols["id"].append(f"s{i:04d}")
    return pa.table(cols)


PQ_FIELDS = ("image", MaskField("mask"), BoxesField("boxes"), "labels", "caption", "__key__")


def check_parquet_rows(rows, name, epoch):
    assert sorted(r[5] for r in rows) == [f"s{i:04d}" for i in range(N)]
    for image, mask, boxes, labels, caption, key in rows:
        i = int(key[1:])
        want = sample_arrays(i)[2]
        assert caption == f"c{i}" and (labels is None or list(labels) == want)
        check((image, mask, boxes, {"labels": want}, i, key), name, epoch)


@pytest.mark.parametrize("how", ["direct", "torch2", "threads", "processes"])
def test_parquet_mask_and_boxes_fields(tmp_path, how):
    import pyarrow.parquet as pq

    from turboloader.data import ParquetDataset

    path = str(tmp_path / "j.parquet")
    pq.write_table(parquet_table(), path, row_group_size=7)
    name = "rrc_flip"
    ds = ParquetDataset(path, pipelines()[name][0], seed=SEED, key_column="id",
                        fields=PQ_FIELDS)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        if how == "direct":
            rows = list(ds)
        else:
            if how == "torch2":
                dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2,
                                                 collate_fn=collate_fields)
            else:
                dl = turboloader.DataLoader(ds, batch_size=4, num_workers=2, backend=how,
                                            collate_fn=collate_fields)
                dl.set_epoch(epoch)
            # (labels: lists collated as default_collate does, transposed or listed)
            rows = [(b[0][k], b[1][k], b[2][k], None, b[4][k], b[5][k]) for b in list(dl)
                    for k in range(len(b[5]))]
        check_parquet_rows(rows, name, epoch)


def test_parquet_reads_only_the_named_columns(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from turboloader.data import ParquetDataset

    table = parquet_table().append_column("big", pa.array([b"x" * 1000] * N))
    path = str(tmp_path / "c.parquet")
    pq.write_table(table, path, row_group_size=9)
    read = []
    orig = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group",
                        lambda self, k, columns=None, **kw: read.append(tuple(columns)) or
                        orig(self, k, columns=columns, **kw))
    ds = ParquetDataset(path, pipelines()["rrc_flip"][0], fields=("image", "caption"))
    assert sorted(c for _, c in ds) == sorted(f"c{i}" for i in range(N))
    assert read and all(set(c) == {"image", "caption"} for c in read)
    from turboloader.errors import FormatError

    with pytest.raises(FormatError, match="nothere"):
        ParquetDataset(path, None, fields=("image", "nothere"))
    with pytest.raises(ValueError, match="image column"):
        ParquetDataset(path, None, fields=("caption",))


def test_parquet_fields_from_hf_datasets(tmp_path):
    from helpers.hf import hf_datasets

    with hf_datasets() as datasets:
        _check_hf(datasets, tmp_path)


def _check_hf(datasets, tmp_path):
    from turboloader.data import ParquetDataset

    t = parquet_table()
    hf = datasets.Dataset.from_dict({
        "image": [{"bytes": b, "path": None} for b in t.column("image").to_pylist()],
        "mask": [{"bytes": b, "path": None} for b in t.column("mask").to_pylist()],
        "objects": [{"bbox": b, "category": c} for b, c in
                    zip(t.column("boxes").to_pylist(), t.column("labels").to_pylist())],
        "id": t.column("id").to_pylist()},
        features=datasets.Features({
            "image": datasets.Image(), "mask": datasets.Image(),
            "objects": {"bbox": datasets.Sequence(datasets.Sequence(datasets.Value("float32"),
                                                                    length=4)),
                        "category": datasets.Sequence(datasets.Value("int64"))},
            "id": datasets.Value("string")}))
    path = str(tmp_path / "hf.parquet")
    hf.to_parquet(path)
    name = "resize_center_flip"
    spec = ("image", MaskField("mask"), BoxesField("objects", key="bbox"), "objects", "id")
    for ds in (ParquetDataset(path, pipelines()[name][0], seed=SEED, fields=spec),
               ParquetDataset.from_hf(hf, pipelines()[name][0], seed=SEED, fields=spec,
                                      rows_per_shard=5)):
        ds.set_epoch(3)
        rows = [(img, m, b, o["category"], "", k) for img, m, b, o, k in ds]
        assert sorted(r[5] for r in rows) == [f"s{i:04d}" for i in range(N)]
        for image, mask, boxes, labels, _, key in rows:
            i = int(key[1:])
            check((image, mask, boxes, {"labels": labels}, i, key), name, 3)


def test_gzipped_shards_and_tbl(tmp_path):
    path = write_tar(tmp_path / "z.tar.gz", [m for i in range(6) for m in members(i)])
    name = "rrc_flip"
    ds = TarDataset(path, pipelines()[name][0], fields=FIELDS, seed=SEED)
    ds.set_epoch(2)
    got = list(ds)
    assert len(got) == 6
    for s in got:
        check(s, name, 2)
    from turboloader.data import TBLDataset
    from turboloader.io.tbl import TBLWriter

    tbl = str(tmp_path / "x.tbl")
    with TBLWriter(tbl) as w:
        w.write(members(0)[0][1], key="a", label=0)
    with pytest.raises(ValueError, match="TBL record"):
        TBLDataset(tbl, pipelines()[name][0], fields=("jpg", MaskField("png")))


@pytest.mark.filterwarnings("ignore::turboloader.errors.UnfusedWarning")
def test_unfused_pipeline_with_the_cache(shards):
    name = "affine"
    ds = TarDataset(shards, pipelines()[name][0], fields=FIELDS, seed=SEED, cache="4MB")
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        for s in ds:
            check(s, name, epoch)
    # a cache of downscaled images under a pipeline that does not fuse: the draws see the
    # smaller image, and the masks and boxes are moved to it first (the torchvision oracle:
    # test_cache_short_side_with_a_pipeline_that_does_not_fuse)
    rotate = T.Compose([T.RandomRotation(10), T.RandomResizedCrop(16), T.ToTensor()])
    ds = TarDataset(shards, rotate, fields=FIELDS, seed=SEED, cache="4MB", cache_short_side=24)
    got = list(ds)
    assert len(got) == N
    assert all(tuple(s[1].shape) == tuple(s[0].shape[-2:]) == s[2].canvas_size for s in got)


def test_masks_obey_the_datasets_max_pixels(tmp_path):
    """A mask is decoded under the dataset's max_pixels, as its image: a small image whose
    mask claims many pixels is refused on the mask's header (oracle: the limit named in the
    error), before the mask is decoded; under the limit the same rows load."""
    rows = []
    for i in range(4):
        ms = members(i)
        if i == 2:
            ms = [(name, encode(np.zeros((300, 400), np.uint8), "PNG")
                   if name.endswith(".seg.png") else data) for name, data in ms]
        rows += ms
    path = write_tar(tmp_path / "big-mask.tar", rows)
    pipe = pipelines()["rrc_flip"][0]
    limit = 2 * H * W   # every image fits; sample 2's 400 x 300 mask does not
    with pytest.raises(SampleError, match=r"s0002.*max_pixels") as info:
        list(TarDataset(path, pipe, fields=FIELDS, shuffle=False, max_pixels=limit))
    assert "400 x 300" in str(info.value)
    ds = TarDataset(path, pipe, fields=FIELDS, shuffle=False, max_pixels=limit,
                    on_error="skip", max_failures=1)
    got = list(ds)
    assert len(got) == 4 and "s0002" not in [s[-1] for s in got]   # replaced, as any failure
    assert ds.stats()["failures"] == 1 and ds.stats()["skipped"][0]["key"] == "s0002"


class _RefusesMasks(T.Transform):
    """A user's transform that runs on images and raises a ValueError on masks."""

    def transform(self, img, params):
        return img

    def _transform_other(self, inpt, params):
        raise ValueError("this transform cannot move masks")


def test_a_pipeline_that_refuses_masks_is_refused_at_construction(shards):
    """The dataset's pipeline check no longer swallows what the mask probe raises: a
    pipeline whose image call works and whose mask call raises is refused when the dataset
    is built, with the pipeline's own error and a note naming MaskField / BoxesField."""
    pipe = T.Compose([_RefusesMasks(), T.RandomResizedCrop(24), T.ToTensor()])
    with pytest.raises(ValueError, match="cannot move masks") as info:
        TarDataset(shards, pipe, fields=("jpg", MaskField("seg.png")))
    assert any("MaskField" in n for n in getattr(info.value, "__notes__", []))
    TarDataset(shards, pipe, fields=("jpg", "cls"))   # no annotations: nothing to follow


# -- the batch path: masks sampled from their PNG rows, boxes moved per batch (#32) ----------

def _mask_png(mask, kind):
    """``mask`` (H, W) class ids as a PNG of ``kind``, and the values Pillow decodes."""
    from helpers.png import write_png

    if kind == "gray16":
        values = mask.astype(np.int64) * 4099   # beyond 8 bits
        return write_png(values, 0, 16), values
    if kind == "gray1":
        values = (mask > 0).astype(np.int64)
        return write_png(values, 0, 1), values * 255   # Pillow's "1" -> "L": 0 / 255
    if kind == "palette2":
        return write_png(mask.astype(np.int64), 3, 2), mask
    if kind == "interlaced":   # Adam7: not this path's, Pillow's (the replay)
        return write_png(mask.astype(np.int64), 0, 8, interlace=1), mask
    return encode(mask, "PNG"), mask


@pytest.mark.parametrize("kind", ["gray8", "gray16", "gray1", "palette2", "interlaced"])
@pytest.mark.parametrize("name", ["rrc_flip", "resize_center_flip"])
def test_batch_path_masks_and_boxes_equal_torchvision_v2(tmp_path, monkeypatch, kind, name):
    """Every PNG kind through the fused batch call: the masks sampled from their rows and
    the boxes moved per batch (Fields.annotate, the per-sample replay, never runs for
    them), equal to torchvision v2 on Pillow's decode with the drawn parameters."""
    from turboloader.data import fields as fields_mod

    rows, want = [], {}
    for i in range(N):
        mask, boxes, labels = sample_arrays(i)
        png, values = _mask_png(mask, kind)
        want[i] = values
        key = f"s{i:04d}"
        rows += [(f"{key}.jpg", encode(PALETTE[mask], "JPEG", quality=95)),
                 (f"{key}.seg.png", png),
                 (f"{key}.json", json.dumps({"boxes": boxes, "labels": labels}).encode()),
                 (f"{key}.cls", str(i).encode())]
    path = write_tar(tmp_path / "kinds.tar", rows)
    replayed = []
    real = fields_mod.Fields.annotate
    monkeypatch.setattr(fields_mod.Fields, "annotate",
                        lambda self, *a, **k: replayed.append(1) or real(self, *a, **k))
    pipe = pipelines()[name][0]
    ds = TarDataset(path, pipe, fields=FIELDS, seed=SEED)
    ds.set_epoch(1)
    got = list(ds.batched(7))
    assert (len(replayed) == N) == (kind == "interlaced"), len(replayed)
    seen = 0
    for batch in got:
        images, masks, boxes, _, _, keys = batch
        for k, key in enumerate(keys):
            i = int(key[1:])
            _, _, ref_boxes = v2_reference(name, i, 1)
            ref = v2_reference_values(name, i, 1, want[i])   # this kind's stored values
            assert torch.equal(masks[k], ref), (key, kind)
            assert boxes[k].canvas_size == ref_boxes.canvas_size
            assert torch.equal(boxes[k].as_subclass(torch.Tensor),
                               ref_boxes.as_subclass(torch.Tensor)), key
            seen += 1
    assert seen == N


def v2_reference_values(name, i, epoch, values):
    """torchvision v2's mask of ``values`` (sample ``i``'s stored mask values) with the
    parameters turboloader's classes draw from ``sample_rng(SEED, epoch, i)``."""
    ours, tvs = pipelines()[name]
    dtype = torch.int64 if values.max() > 255 else torch.uint8
    m = tv_tensors.Mask(torch.from_numpy(values).to(dtype))
    rng = sample_rng(SEED, epoch, i)
    size = (H, W)
    for t, tv in zip(ours.transforms, tvs):
        params = t.make_params(size, rng=rng)
        if tv is None:
            continue
        if isinstance(t, T.RandomHorizontalFlip):
            tv = type(tv)(p=1.0 if params.get("flip", params.get("apply")) else 0.0)
        else:
            tv.make_params = lambda flat, p=params: dict(p)
        m = tv(m)
        size = tuple(m.shape[-2:])
    return m.as_subclass(torch.Tensor)


def test_corrupt_png_mask_with_good_crcs_is_a_typed_error(tmp_path):
    """A mask whose zlib stream is garbage under valid chunk CRCs: the kernel's status sends
    it to Pillow's decode, which names the problem (a SampleError, or a counted skip)."""
    import struct
    import zlib

    mask, _, _ = sample_arrays(2)
    png = bytearray(encode(mask, "PNG"))
    at = png.index(b"IDAT")
    length = struct.unpack(">I", png[at - 4:at])[0]
    body = bytes(np.random.default_rng(0).integers(0, 256, length, dtype=np.uint8))
    body = b"\x78\x9c" + body[2:]   # a zlib header, then noise
    png[at + 4:at + 4 + length] = body
    png[at + 4 + length:at + 8 + length] = struct.pack(">I", zlib.crc32(b"IDAT" + body))
    rows = []
    for i in range(6):
        rows += [m if not (i == 2 and m[0].endswith(".seg.png")) else (m[0], bytes(png))
                 for m in members(i)]
    path = write_tar(tmp_path / "corrupt.tar", rows)
    pipe = pipelines()["rrc_flip"][0]
    with pytest.raises(SampleError, match=r"s0002.*MaskField.*does not decode"):
        list(TarDataset(path, pipe, fields=FIELDS, shuffle=False))
    ds = TarDataset(path, pipe, fields=FIELDS, shuffle=False, on_error="skip", max_failures=1)
    assert len(list(ds)) == 6 and ds.stats()["failures"] == 1


def _png_with_stream(png, stream):
    """``png`` with its IDAT data replaced by ``stream`` (one chunk, its CRC right)."""
    import struct
    import zlib

    pos, out, idat_done = 8, bytearray(png[:8]), False
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        end = pos + 12 + length
        if kind != b"IDAT":
            out += png[pos:end]
        elif not idat_done:
            out += struct.pack(">I", len(stream)) + b"IDAT" + stream + \
                struct.pack(">I", zlib.crc32(b"IDAT" + stream))
            idat_done = True
        pos = end
    return bytes(out)


def _idat(png):
    import struct

    pos, data = 8, b""
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        if kind == b"IDAT":
            data += png[pos + 8:pos + 8 + length]
        pos += 12 + length
    return data


def corrupt_streams(png):
    """CRC-valid variants of a PNG mask whose zlib stream is wrong: one class id changed under
    the original Adler-32 (deflate itself valid), the Adler-32 cut off, and a stream that
    inflates to one row more than the image."""
    import zlib

    stream = _idat(png)
    raw = bytearray(zlib.decompress(stream))
    row = len(raw) // H
    i = (H // 2) * row + 1 + W // 2            # a pixel in the middle row, not a filter byte
    raw[i] = (raw[i] + 1) % 4
    return {"wrong_id": _png_with_stream(png, zlib.compress(bytes(raw))[:-4] + stream[-4:]),
            "no_adler": _png_with_stream(png, stream[:-4]),
            "extra_row": _png_with_stream(png, zlib.compress(zlib.decompress(stream) +
                                                             bytes(row)))}


@pytest.mark.parametrize("how", ["samples", "batched"])
def test_corrupt_zlib_masks_are_refused_by_every_path_as_pillow_refuses_them(tmp_path, how):
    """The batch path's own inflater checks the stream's end and Adler-32, so it refuses what
    zlib (through Pillow, the per-sample path) refuses, and delivers what Pillow delivers."""
    for name, bad in corrupt_streams(members(2)[1][1]).items():
        try:   # the oracle: what Pillow makes of the file
            with Image.open(io.BytesIO(bad)) as im:
                im.load()
            pillow_ok = True
        except OSError:
            pillow_ok = False
        rows = []
        for i in range(6):
            ms = members(i)
            if i == 2:
                ms = [(m[0], bad) if m[0].endswith(".seg.png") else m for m in ms]
            rows += ms
        path = write_tar(tmp_path / f"{name}.tar", rows)
        pipe = pipelines()["rrc_flip"][0]
        ds = TarDataset(path, pipe, fields=FIELDS, shuffle=False, on_error="skip",
                        max_failures=1)
        got = list(ds.batched(3)) if how == "batched" else list(ds)
        keys = [k for b in got for k in b[-1]] if how == "batched" else [s[-1] for s in got]
        assert len(keys) == 6, name
        failures = ds.stats()["failures"]
        if pillow_ok:
            assert failures == 0 and "s0002" in keys, name
        else:
            assert failures == 1 and "s0002" not in keys, name
            assert ds.stats()["skipped"][0]["key"] == "s0002"
            with pytest.raises(SampleError, match=r"s0002.*MaskField"):
                plain = TarDataset(path, pipe, fields=FIELDS, shuffle=False)
                list(plain.batched(3)) if how == "batched" else list(plain)
