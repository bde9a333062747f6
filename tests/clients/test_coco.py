"""COCO: ``coco_to_manifest`` on a tiny generated ``instances.json`` against torchvision's
``CocoDetection`` wrapped for transforms v2 and pycocotools (the oracles); the detection
reference's policies through the dataset or ``DetectionTargets(transforms=...)``."""

import json
import sys
from collections import defaultdict

import numpy as np
import pytest
import torch
from PIL import Image

from torchvision import tv_tensors
from torchvision.transforms import v2

from turboloader import BoxesField, ManifestDataset, MaskField
from turboloader import transforms as T
from turboloader.data import DetectionTargets
from turboloader.tools.coco import coco_to_manifest, decode_segmentation

pycocotools = pytest.importorskip("pycocotools")
from pycocotools import mask as cocomask  # noqa: E402

NAMES = ("boxes", "labels", "masks", "image_id", "area", "iscrowd")
FIELDS = ("path", BoxesField("boxes"), "labels", MaskField("masks"), "image_id", "area",
          "iscrowd")


def _rect(x0, y0, x1, y1):
    return [x0, y0, x1, y0, x1, y1, x0, y1]


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    """3 images: polygons (one object of two polygons), a compressed RLE, an uncompressed
    crowd RLE, a box that clamps to nothing; objects do not overlap."""
    d = tmp_path_factory.mktemp("coco")
    (d / "images").mkdir()
    rng = np.random.default_rng(0)
    images, anns = [], []
    sizes = [(60, 80), (72, 48), (50, 50)]
    for i, (h, w) in enumerate(sizes, start=1):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
            d / "images" / f"{i:012d}.jpg", quality=95)
        images.append({"id": i, "file_name": f"{i:012d}.jpg", "height": h, "width": w})
    aid = iter(range(1, 100))
    # image 1: a triangle polygon, a two-part object, a box outside the image
    anns.append({"id": next(aid), "image_id": 1, "category_id": 1, "iscrowd": 0,
                 "segmentation": [[5.5, 5.0, 30.0, 8.0, 12.0, 40.5]],
                 "bbox": [5.5, 5.0, 24.5, 35.5], "area": 400.0})
    anns.append({"id": next(aid), "image_id": 1, "category_id": 3, "iscrowd": 0,
                 "segmentation": [_rect(40, 10, 55, 25), _rect(60, 30, 75, 50)],
                 "bbox": [40, 10, 35, 40], "area": 525.0})
    anns.append({"id": next(aid), "image_id": 1, "category_id": 2, "iscrowd": 0,
                 "segmentation": [_rect(90, 10, 99, 20)], "bbox": [90, 10, 9, 10],
                 "area": 90.0})
    # image 2: a compressed RLE and a crowd (uncompressed RLE)
    m = np.zeros((72, 48), np.uint8)
    m[10:30, 5:20] = 1
    m[12:16, 25:40] = 1
    rle = cocomask.encode(np.asfortranarray(m))
    rle["counts"] = rle["counts"].decode()
    anns.append({"id": next(aid), "image_id": 2, "category_id": 2, "iscrowd": 0,
                 "segmentation": rle, "bbox": [5, 10, 35, 20], "area": float(m.sum())})
    crowd = np.zeros((72, 48), np.uint8)
    crowd[40:70, 2:46] = 1
    flat = crowd.T.reshape(-1)
    changes = np.flatnonzero(np.diff(np.concatenate([[0], flat, [2]])) != 0)
    counts = np.diff(np.concatenate([[0], changes])).tolist()
    anns.append({"id": next(aid), "image_id": 2, "category_id": 1, "iscrowd": 1,
                 "segmentation": {"size": [72, 48], "counts": counts},
                 "bbox": [2, 40, 44, 30], "area": float(crowd.sum())})
    # image 3: no annotations
    path = d / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": [
        {"id": k, "name": f"c{k}"} for k in (1, 2, 3)]}))
    out = d / "train.jsonl"
    n = coco_to_manifest(str(path), str(d / "images"), str(out), masks=True)
    assert n == 3
    return {"json": str(path), "images": str(d / "images"), "manifest": str(out)}


def _ours(coco, transform=None, transforms=None):
    transform = transform or T.Compose([T.ToImage(), T.ToDtype(torch.float32, scale=True)])
    return DetectionTargets(ManifestDataset(coco["manifest"], transform=transform,
                                            fields=FIELDS), names=NAMES,
                            transforms=transforms)


def test_samples_match_torchvisions_coco_detection(coco):
    from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2

    theirs = wrap_dataset_for_transforms_v2(
        CocoDetection(coco["images"], coco["json"],
                      transforms=v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32,
                                                                      scale=True)])),
        target_keys={"boxes", "labels", "masks", "image_id", "iscrowd", "area"})
    ours = _ours(coco)
    assert len(ours) == len(theirs) == 3
    for k in range(3):
        (img, tgt), (img_t, tgt_t) = ours[k], theirs[k]
        assert img.shape == img_t.shape
        assert tgt["image_id"] == tgt_t["image_id"]
        if "boxes" not in tgt_t:  # torchvision leaves the keys out of an empty target
            assert tgt["boxes"].shape == (0, 4) and tgt["masks"].shape[0] == 0
            continue
        # torchvision keeps the box outside the image; the manifest clamps boxes to the
        # image and drops the empty ones, as the reference's ConvertCocoPolysToMask does
        clamped = v2.functional.clamp_bounding_boxes(tgt_t["boxes"]).as_subclass(torch.Tensor)
        clamped = clamped.float()
        keep = (clamped[:, 2] > clamped[:, 0]) & (clamped[:, 3] > clamped[:, 1])
        assert int((~keep).sum()) == (1 if k == 0 else 0)
        assert torch.allclose(tgt["boxes"].as_subclass(torch.Tensor), clamped[keep])
        assert tgt["boxes"].format == tv_tensors.BoundingBoxFormat.XYXY
        assert torch.equal(tgt["labels"], tgt_t["labels"][keep])
        assert torch.equal(tgt["iscrowd"], torch.as_tensor(tgt_t["iscrowd"])[keep])
        assert torch.allclose(tgt["area"], torch.as_tensor(tgt_t["area"]).float()[keep])
        assert tgt["masks"].shape == tgt_t["masks"][keep].shape
        assert torch.equal(tgt["masks"].bool(), tgt_t["masks"][keep].bool())


def test_segmentations_decode_as_pycocotools_does(coco, monkeypatch):
    data = json.load(open(coco["json"]))
    sizes = {im["id"]: (im["height"], im["width"]) for im in data["images"]}
    oracle = []
    for ann in data["annotations"]:
        h, w = sizes[ann["image_id"]]
        seg = ann["segmentation"]
        if isinstance(seg, dict) and isinstance(seg["counts"], str):  # compressed RLE
            want = cocomask.decode({"size": seg["size"], "counts": seg["counts"].encode()})
        else:
            rles = cocomask.frPyObjects(seg, h, w)
            want = cocomask.decode(cocomask.merge(rles) if isinstance(rles, list) else rles)
        assert np.array_equal(decode_segmentation(seg, h, w), want)
        oracle.append((seg, h, w, want))
    monkeypatch.setitem(sys.modules, "pycocotools", None)  # the pure-Python fallback
    for seg, h, w, want in oracle:
        got = decode_segmentation(seg, h, w)
        if isinstance(seg, dict):
            assert np.array_equal(got, want)  # RLE: exact
        else:  # polygons: Pillow's fill, within an edge pixel
            inter = np.logical_and(got, want).sum()
            union = np.logical_or(got, want).sum()
            assert union == got.sum() == want.sum() == 0 or inter / union > 0.8


def test_reference_policies(coco):
    mean = (123.0, 117.0, 104.0)
    tail = [T.ToDtype(torch.float32, scale=True)]
    inside = {
        "hflip": [T.RandomHorizontalFlip(1.0)],
        "multiscale": [T.RandomShortestSize(min_size=(32, 40), max_size=90),
                       T.RandomHorizontalFlip(0.5)],
        "lsj": [T.ScaleJitter(target_size=(64, 64), antialias=True),
                T.RandomCrop((64, 64), pad_if_needed=True), T.RandomHorizontalFlip(0.5)],
    }
    for name, steps in inside.items():
        ds = _ours(coco, T.Compose([T.ToImage(), *steps, *tail]))
        for k in range(3):
            img, tgt = ds[k]
            boxes = tgt["boxes"]
            assert tuple(boxes.canvas_size) == tuple(img.shape[-2:]), name
            assert tgt["masks"].shape[-2:] == img.shape[-2:], name
            assert len(boxes) == len(tgt["labels"]) == tgt["masks"].shape[0], name
    # ssd / ssdlite and SanitizeBoundingBoxes read the whole sample: refused inside the
    # dataset with a ValueError at construction...
    for steps in ([v2.RandomIoUCrop(), T.RandomHorizontalFlip(0.5)],
                  [T.RandomHorizontalFlip(0.5), v2.SanitizeBoundingBoxes()]):
        with pytest.raises(ValueError, match="DetectionTargets"):
            ManifestDataset(coco["manifest"], transform=T.Compose([T.ToImage(), *steps]),
                            fields=FIELDS)
    # ... and work on the (image, target) pairs, as torchvision applies them
    policies = {
        "ssd": v2.Compose([v2.RandomPhotometricDistort(),
                           v2.RandomZoomOut(fill=defaultdict(lambda: mean,
                                                             {tv_tensors.Mask: 0})),
                           v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5),
                           v2.SanitizeBoundingBoxes()]),
        "ssdlite": v2.Compose([v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5),
                               v2.SanitizeBoundingBoxes()]),
    }
    torch.manual_seed(0)
    for name, policy in policies.items():
        ds = _ours(coco, transforms=policy)
        for k in range(2):  # the images with boxes
            img, tgt = ds[k]
            b = tgt["boxes"].as_subclass(torch.Tensor)
            assert len(b) == len(tgt["labels"]) == tgt["masks"].shape[0], name
            assert bool(((b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])).all()), name


def test_sanitize_drops_boxes_with_their_labels(coco):
    # a crop that cuts most objects away: SanitizeBoundingBoxes on the pairs drops the
    # degenerate boxes together with their labels and masks
    ds = _ours(coco, T.Compose([T.ToImage(), T.CenterCrop((10, 10)),
                                T.ToDtype(torch.float32, scale=True)]),
               transforms=v2.SanitizeBoundingBoxes(min_size=2))
    raw = _ours(coco, T.Compose([T.ToImage(), T.CenterCrop((10, 10)),
                                 T.ToDtype(torch.float32, scale=True)]))
    for k in range(2):
        (_, tgt), (_, before) = ds[k], raw[k]
        b = before["boxes"].as_subclass(torch.Tensor)
        keep = ((b[:, 2] - b[:, 0]) >= 2) & ((b[:, 3] - b[:, 1]) >= 2)
        assert torch.equal(tgt["labels"], before["labels"][keep])
        assert tgt["masks"].shape[0] == int(keep.sum())
