"""torchvision's classification reference (``references/classification/train.py``): its
``load_data`` datasets and ``main``'s loaders, made with turboloader's datasets and loader
by the same calls (RandomSampler / SequentialSampler passed as ``sampler=``, pin_memory, the
MixUp/CutMix ``collate_fn``), against torchvision's ImageFolder as the oracle."""

import pytest
import torch
import torchvision
from torch.utils.data.dataloader import default_collate
from torchvision.transforms import v2

import turboloader
from turboloader import transforms as T

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _val(lib, resize=36, crop=32):
    # ClassificationPresetEval(crop_size, resize_size, interpolation=bilinear, backend="PIL")
    return lib.Compose([lib.Resize(resize, antialias=True), lib.CenterCrop(crop),
                        lib.PILToTensor(), lib.ToDtype(torch.float, scale=True),
                        lib.Normalize(MEAN, STD)])


def _train(lib, crop=32):
    # ClassificationPresetTrain(crop_size, hflip_prob=0.5, no auto-augment, no erasing)
    return lib.Compose([lib.RandomResizedCrop(crop, antialias=True),
                        lib.RandomHorizontalFlip(0.5), lib.PILToTensor(),
                        lib.ToDtype(torch.float, scale=True), lib.Normalize(MEAN, STD)])


def test_val_loader_matches_torchvision(sources):
    ours = turboloader.ImageFolder(sources["folder"], _val(T))
    theirs = torchvision.datasets.ImageFolder(sources["folder"], _val(v2))
    assert T.plan(ours.transform) is not None  # the reference's eval preset fuses
    assert ours.classes == theirs.classes and len(ours) == len(theirs) == 16
    kw = dict(batch_size=4, num_workers=2, pin_memory=True)
    got = list(turboloader.DataLoader(ours, sampler=torch.utils.data.SequentialSampler(ours),
                                      **kw))
    want = list(torch.utils.data.DataLoader(
        theirs, sampler=torch.utils.data.SequentialSampler(theirs), **kw))
    assert len(got) == len(want) == 4
    for (x, y), (xt, yt) in zip(got, want):
        assert torch.equal(y, yt) and x.shape == xt.shape
        # the same decode and resize; the resamplers' rounding differs by a grey level or so
        assert (x - xt).abs().mean() < 0.03


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_train_loader_with_mixup_cutmix_collate(sources, backend):
    ds = turboloader.ImageFolder(sources["folder"], _train(T))
    assert T.plan(ds.transform) is not None
    mixup_cutmix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=16),
                                    v2.CutMix(alpha=1.0, num_classes=16)])

    def collate_fn(batch):
        return mixup_cutmix(*default_collate(batch))

    sampler = torch.utils.data.RandomSampler(ds)
    loader = turboloader.DataLoader(ds, batch_size=4, sampler=sampler, num_workers=2,
                                    pin_memory=True, collate_fn=collate_fn, backend=backend)
    seen = 0
    for images, targets in loader:
        assert images.shape == (4, 3, 32, 32) and images.dtype == torch.float32
        assert targets.shape == (4, 16)  # soft labels
        assert torch.allclose(targets.sum(1), torch.ones(4))
        seen += len(images)
    assert seen == 16
