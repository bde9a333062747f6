"""torchvision's detection reference on turboloader's thread backend: the loader its
``train.py`` builds (GroupedBatchSampler over aspect-ratio groups, the reference's
``collate_fn``, the ``hflip`` policy) over ``(image, target)`` pairs, fed to a torchvision
detection model in training mode as ``train_one_epoch`` does."""

import os
import sys

import pytest
import torch

from helpers.detection import (GroupedBatchSampler, aspect_ratios, collate_fn,
                               compute_aspect_ratios, create_aspect_ratio_groups,
                               make_detection_manifest)

import turboloader
from turboloader import BoxesField, ManifestDataset
from turboloader import transforms as T
from turboloader.data import DetectionTargets

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return make_detection_manifest(str(tmp_path_factory.mktemp("detref")), n=12)


def _dataset(manifest):
    hflip = T.Compose([T.RandomHorizontalFlip(0.5), T.ToImage(),
                       T.ToDtype(torch.float32, scale=True)])
    return DetectionTargets(ManifestDataset(manifest, transform=hflip, seed=3,
                                            fields=("path", BoxesField("boxes"), "labels",
                                                    "id")),
                            names=("boxes", "labels", "image_id"))


def _loader(ds, manifest, backend):
    groups = create_aspect_ratio_groups(aspect_ratios(manifest), k=3)
    sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(1))
    return turboloader.DataLoader(ds, batch_sampler=GroupedBatchSampler(sampler, groups, 2),
                                  num_workers=2, collate_fn=collate_fn, backend=backend)


def test_reference_loader_on_threads_matches_processes(manifest):
    ds = _dataset(manifest)
    runs = {b: list(_loader(ds, manifest, b)) for b in ("threads", "processes")}
    assert len(runs["threads"]) == 6
    ids = []
    for (im_a, tg_a), (im_b, tg_b) in zip(runs["threads"], runs["processes"]):
        assert isinstance(im_a, tuple) and isinstance(tg_a, tuple)
        for a, b, ta, tb in zip(im_a, im_b, tg_a, tg_b):
            assert a.dtype == torch.float32 and torch.equal(a, b)
            assert ta["image_id"] == tb["image_id"]
            assert torch.equal(ta["boxes"].as_subclass(torch.Tensor),
                               tb["boxes"].as_subclass(torch.Tensor))
            assert ta["labels"].dtype == torch.int64 and torch.equal(ta["labels"], tb["labels"])
            assert ta["boxes"].shape == (len(ta["labels"]), 4)
            assert tuple(ta["boxes"].canvas_size) == tuple(a.shape[-2:])
            ids.append(ta["image_id"])
    # the sampler's batches, in its order (it tops a group's leftovers up with repeats)
    groups = create_aspect_ratio_groups(aspect_ratios(manifest), k=3)
    want = GroupedBatchSampler(torch.utils.data.RandomSampler(
        ds, generator=torch.Generator().manual_seed(1)), groups, 2)
    assert ids == [i for batch in want for i in batch]


def test_aspect_ratios_without_reading_images(manifest, tmp_path):
    # the reference's compute_aspect_ratios takes get_height_and_width when a dataset has it
    ds = _dataset(manifest)
    assert compute_aspect_ratios(ds) == aspect_ratios(manifest)
    # without width / height columns: the files' headers
    import json

    rows = [json.loads(line) for line in open(manifest)]
    bare = tmp_path / "bare.jsonl"
    bare.write_text("\n".join(json.dumps({k: v for k, v in r.items()
                                          if k not in ("width", "height")}) for r in rows))
    import os

    ds = DetectionTargets(ManifestDataset(str(bare), root=os.path.dirname(manifest),
                                          fields=("path", BoxesField("boxes"), "labels")))
    assert compute_aspect_ratios(ds) == aspect_ratios(manifest)


def test_flipped_boxes_follow_their_image(manifest):
    import json

    rows = [json.loads(line) for line in open(manifest)]
    ds = _dataset(manifest)
    flips = 0
    for i, row in enumerate(rows):
        image, target = ds[i]
        boxes = torch.tensor(row["boxes"], dtype=torch.float32)
        w = row["width"]
        flipped = boxes.clone()
        flipped[:, 0], flipped[:, 2] = w - boxes[:, 2], w - boxes[:, 0]
        got = target["boxes"].as_subclass(torch.Tensor)
        assert torch.equal(got, boxes) or torch.equal(got, flipped)
        flips += torch.equal(got, flipped) and not torch.equal(got, boxes)
    assert 0 < flips < len(rows)  # p=0.5 over 12 images: both happen


@pytest.mark.slow
def test_detection_model_trains_on_the_batches(manifest):
    # train_one_epoch's calls: images and targets to the device, model(images, targets)
    # gives the loss dict, summed and backpropagated
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

    torch.manual_seed(0)
    model = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None,
                                                  num_classes=4, min_size=64, max_size=96)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    for step, (images, targets) in enumerate(_loader(_dataset(manifest), manifest, "threads")):
        images = list(image for image in images)
        targets = [{k: v for k, v in t.items()} for t in targets]
        losses = model(images, targets)
        loss = sum(losses.values())
        assert torch.isfinite(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1:
            break


@pytest.mark.slow
def test_bench_detection_smoke(capsys):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import bench_detection
    finally:
        sys.path.pop(0)
    best = bench_detection.main(["--n", "8", "--workers", "2", "--repeat", "1"])
    out = capsys.readouterr().out
    assert set(best) == {"threads", "processes"} and "| threads |" in out
