"""timm: ``timm.data.create_loader`` over a turboloader dataset (it assigns its transform
after construction: an UnfusedWarning says it runs unfused), and
``turboloader.transforms.presets.from_timm``, the fused pipeline of timm's data config,
checked against the transform timm itself builds from the same config."""

import io
import warnings

import numpy as np
import pytest
import torch

timm = pytest.importorskip("timm")
import timm.data  # noqa: E402
import timm.loss  # noqa: E402

import turboloader  # noqa: E402
from turboloader import transforms as T  # noqa: E402
from turboloader.errors import UnfusedWarning  # noqa: E402
from turboloader.transforms.presets import from_timm  # noqa: E402


def _config(name="resnet18", **args):
    model = timm.create_model(name, pretrained=False, num_classes=16)
    return model, timm.data.resolve_data_config(args, model=model)


def _timm_steps(cfg, is_training, **kw):
    tf = timm.data.create_transform(**cfg, is_training=is_training, **kw)
    return {type(t).__name__: t for t in tf.transforms}


def _mine(pipeline):
    return {type(t).__name__: t for t in pipeline.transforms}


@pytest.mark.parametrize("crop_pct,crop_mode", [(0.875, "center"), (0.95, "squash"),
                                                (1.0, "center")])
def test_from_timm_eval_has_timms_parameters(crop_pct, crop_mode):
    _, cfg = _config(input_size=(3, 48, 48), crop_pct=crop_pct, crop_mode=crop_mode)
    want, got = _timm_steps(cfg, False), _mine(from_timm(cfg, is_training=False))
    assert T.plan(from_timm(cfg)) is not None
    assert list(got["Resize"].size if isinstance(got["Resize"].size, (list, tuple))
                else [got["Resize"].size]) == list(
        want["Resize"].size if isinstance(want["Resize"].size, (list, tuple))
        else [want["Resize"].size])
    assert got["Resize"].interpolation.value == want["Resize"].interpolation.value
    assert list(got["CenterCrop"].size) == list(want["CenterCrop"].size)
    assert torch.allclose(torch.as_tensor(got["Normalize"].mean, dtype=torch.float64),
                          torch.as_tensor(want["Normalize"].mean, dtype=torch.float64))
    assert torch.allclose(torch.as_tensor(got["Normalize"].std, dtype=torch.float64),
                          torch.as_tensor(want["Normalize"].std, dtype=torch.float64))


@pytest.mark.parametrize("kw", [{}, {"scale": (0.3, 0.9), "ratio": (0.8, 1.25), "hflip": 0.3,
                                     "color_jitter": 0.2}, {"color_jitter": 0}])
def test_from_timm_train_has_timms_parameters(kw):
    _, cfg = _config(input_size=(3, 48, 48))
    want = _timm_steps(cfg, True, **kw)
    pipeline = from_timm(cfg, is_training=True, **kw)
    got = _mine(pipeline)
    assert T.plan(pipeline) is not None, T.explain(pipeline)
    rrc = want["RandomResizedCropAndInterpolation"]
    assert tuple(got["RandomResizedCrop"].size) == tuple(rrc.size)
    assert tuple(got["RandomResizedCrop"].scale) == tuple(rrc.scale)
    assert np.allclose(got["RandomResizedCrop"].ratio, rrc.ratio)
    assert got["RandomHorizontalFlip"].p == want["RandomHorizontalFlip"].p
    cj = want.get("ColorJitter")
    if cj is not None and cj.brightness is None and cj.contrast is None and \
            cj.saturation is None:
        cj = None  # timm's ColorJitter(0, 0, 0) changes nothing; from_timm leaves it out
    if cj is not None:
        for name in ("brightness", "contrast", "saturation"):
            assert np.allclose(getattr(got["ColorJitter"], name), getattr(want["ColorJitter"],
                                                                          name))
        assert want["ColorJitter"].hue is None
    else:
        assert "ColorJitter" not in got


def test_from_timm_eval_pixels_match_timms(jpegs):
    from PIL import Image

    _, cfg = _config(input_size=(3, 32, 32))
    theirs = timm.data.create_transform(**cfg, is_training=False)
    mine = from_timm(cfg)
    ds_images = []
    for jpeg in jpegs[:4]:
        want = theirs(Image.open(io.BytesIO(jpeg)).convert("RGB"))
        got = T.transform_jointly(mine, jpeg, rng=turboloader.sample_rng(0, 0, 0))
        got = got[0] if isinstance(got, tuple) else got
        assert got.shape == want.shape == (3, 32, 32)
        ds_images.append((got - want).abs().mean().item())
    # the same decode, resize and crop: only the resamplers' rounding differs
    assert max(ds_images) < 0.05, ds_images


def test_create_loader_warns_when_its_transform_cannot_fuse(sources):
    ds = turboloader.ImageFolder(sources["folder"])
    with pytest.warns(UnfusedWarning, match=r"ImageFolder\.transform"):
        loader = timm.data.create_loader(ds, input_size=(3, 32, 32), batch_size=4,
                                         is_training=True, use_prefetcher=False,
                                         num_workers=0, device=torch.device("cpu"))
    images, labels = next(iter(loader))  # still correct, step by step
    assert images.shape == (4, 3, 32, 32)
    # a fused pipeline assigned later says nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnfusedWarning)
        ds.transform = from_timm(timm.data.resolve_data_config({"input_size": (3, 32, 32)}),
                                 is_training=True)


def test_timm_training_loop_on_the_fused_pipeline(sources):
    model, cfg = _config("test_resnet", input_size=(3, 32, 32))  # timm's tiny test model
    assert cfg["mean"] == (0.5, 0.5, 0.5)  # its own statistics, not ImageNet's
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnfusedWarning)
        ds = turboloader.ImageFolder(sources["folder"], from_timm(cfg, is_training=True))
    loader = turboloader.DataLoader(ds, batch_size=4, shuffle=True, drop_last=True,
                                    num_workers=2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = timm.loss.LabelSmoothingCrossEntropy(smoothing=0.1)
    seen = []
    for images, labels in loader:
        assert images.shape == (4, 3, 32, 32) and images.dtype == torch.float32
        loss = loss_fn(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += labels.tolist()
    assert sorted(seen) == list(range(16)) and np.isfinite(loss.item())


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_a_transform_assigned_after_a_pass_is_the_one_used(sources, backend):
    # the readers of the first pass decoded with the first transform; the next pass must use
    # the new one (timm assigns its transform to a dataset that may have been read already)
    ds = turboloader.ImageFolder(sources["folder"], T.Compose([T.Resize((16, 16)),
                                                               T.ToTensor()]))
    loader = turboloader.DataLoader(ds, batch_size=4, num_workers=2, backend=backend)
    assert next(iter(loader))[0].shape == (4, 3, 16, 16)
    ds.transform = T.Compose([T.Resize((24, 24)), T.ToTensor()])
    images, _ = next(iter(loader))
    assert images.shape == (4, 3, 24, 24)
    assert ds[0][0].shape == (3, 24, 24)
    assert ds.stats()["samples"] >= 8  # the first pass's statistics are kept
