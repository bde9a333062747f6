"""Joint samples: an image with a tv_tensors Mask and BoundingBoxes goes through the same
drawn parameters, equal to torchvision v2's output for those parameters (the oracle: the
torchvision v2 transform with its make_params returning ours)."""

import random

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

from turboloader import transforms as T
from turboloader.transforms import using_rng

H, W = 60, 80


def _sample(seed=0, kind="tensor"):
    g = torch.Generator().manual_seed(seed)
    img = torch.randint(0, 256, (3, H, W), dtype=torch.uint8, generator=g)
    mask = torch.zeros(H, W, dtype=torch.uint8)
    mask[10:40, 20:70] = 1
    mask[45:58, 5:15] = 2
    boxes = tv_tensors.BoundingBoxes([[20, 10, 70, 40], [5, 45, 15, 58], [0, 0, 79, 59]],
                                     format="XYXY", canvas_size=(H, W))
    if kind == "pil":
        img = Image.fromarray(img.permute(1, 2, 0).numpy())
    elif kind == "image":
        img = tv_tensors.Image(img)
    return img, tv_tensors.Mask(mask), boxes


def _cases():
    return [
        (T.RandomResizedCrop(32, scale=(0.2, 1.0)), v2.RandomResizedCrop(32, scale=(0.2, 1.0))),
        (T.RandomResizedCrop((24, 40)), v2.RandomResizedCrop((24, 40))),
        (T.Resize(30), v2.Resize(30)),
        (T.Resize((50, 20)), v2.Resize((50, 20))),
        (T.CenterCrop(40), v2.CenterCrop(40)),
        (T.CenterCrop(100), v2.CenterCrop(100)),  # larger than the image: padded
        (T.RandomCrop(40, padding=4), v2.RandomCrop(40, padding=4)),
        (T.RandomHorizontalFlip(), v2.RandomHorizontalFlip()),
        (T.RandomVerticalFlip(), v2.RandomVerticalFlip()),
        (T.RandomRotation(30), v2.RandomRotation(30)),
        (T.RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2)),
         v2.RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2))),
        (T.Pad(3), v2.Pad(3)),
        (T.RandomPerspective(0.4, p=1.0), v2.RandomPerspective(0.4, p=1.0)),
    ]


def _oracle(tv, ours, params, inputs):
    """torchvision v2's output for ``inputs`` with ``params`` (ours)."""
    if isinstance(ours, (T.RandomHorizontalFlip, T.RandomVerticalFlip)):
        flip = params.get("flip", params.get("apply"))
        tv = type(tv)(p=1.0 if flip else 0.0)
    if isinstance(ours, T.RandomPerspective):  # torchvision draws p in forward
        params = {"coefficients": params["coefficients"]}
    tv.make_params = lambda flat: dict(params)
    return tv(*inputs)


@pytest.mark.parametrize("k", range(len(_cases())))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_same_parameters_as_torchvision(k, seed):
    ours, tv = _cases()[k]
    img, mask, boxes = _sample(seed, kind="image")
    params = ours.make_params((H, W), rng=random.Random(seed))
    with using_rng(random.Random(seed)):
        out_img, out_mask, out_boxes, label = ours(img, mask, boxes, 7)
    ref_img, ref_mask, ref_boxes, ref_label = _oracle(tv, ours, params, (img, mask, boxes, 7))
    assert label == ref_label == 7
    assert type(out_mask) is tv_tensors.Mask and torch.equal(out_mask, ref_mask)
    assert type(out_boxes) is tv_tensors.BoundingBoxes
    assert out_boxes.canvas_size == ref_boxes.canvas_size == tuple(out_img.shape[-2:])
    assert torch.equal(out_boxes, ref_boxes)
    assert out_img.shape == ref_img.shape
    assert (out_img.float() - ref_img.float()).abs().mean() < 1.0
    # masks are resampled nearest: no label value appears that was not there
    assert set(out_mask.unique().tolist()) <= {0, 1, 2}


@pytest.mark.parametrize("kind", ["pil", "tensor"])
def test_dict_samples_and_compose(kind):
    pipeline = T.Compose([T.RandomResizedCrop(48, scale=(0.3, 1.0)), T.RandomHorizontalFlip(),
                          T.ColorJitter(0.3, 0.3), T.ToImage(),
                          T.ToDtype(torch.float32, scale=True)])
    img, mask, boxes = _sample(3, kind=kind)
    sample = {"image": img, "target": {"masks": mask, "boxes": boxes, "labels": [1, 2, 3]},
              "caption": "a cat"}
    torch.manual_seed(0)
    out = pipeline(sample)
    assert out["caption"] == "a cat" and out["target"]["labels"] == [1, 2, 3]
    assert out["image"].shape == (3, 48, 48) and out["image"].dtype == torch.float32
    assert out["target"]["masks"].shape == (48, 48)
    assert out["target"]["boxes"].canvas_size == (48, 48)
    b = out["target"]["boxes"]
    assert (b[:, 0::2] >= 0).all() and (b[:, 0::2] <= 48).all()  # clamped to the canvas
    # the same draws on the mask alone, made an "image": the crop windows agree
    torch.manual_seed(0)
    ref = v2.Compose([v2.RandomResizedCrop(48, scale=(0.3, 1.0)), v2.RandomHorizontalFlip()])
    # turboloader draws from torch's RNG outside a dataset with torchvision's draws
    ref_out = ref({"image": img, "masks": mask, "boxes": boxes})
    assert torch.equal(out["target"]["masks"], ref_out["masks"])
    assert torch.equal(out["target"]["boxes"], ref_out["boxes"])


def test_numpy_image_with_mask():
    img, mask, boxes = _sample(4)
    arr = np.ascontiguousarray(img.permute(1, 2, 0).numpy())
    t = T.CenterCrop(40)
    out_arr, out_mask = t(arr, mask)
    assert isinstance(out_arr, np.ndarray) and out_arr.shape == (40, 40, 3)
    assert torch.equal(out_mask, v2.functional.center_crop(mask, [40, 40]))
    assert np.array_equal(out_arr, v2.functional.center_crop(img, [40, 40]).permute(1, 2, 0)
                          .numpy())


def test_single_inputs_unchanged_and_errors():
    img, mask, boxes = _sample(5)
    t = T.RandomResizedCrop(16)
    torch.manual_seed(1)
    a = t(img)
    torch.manual_seed(1)
    b = t((img,))[0]
    assert torch.equal(a, b)
    # a lone mask is transformed as torchvision does (the mask's size drives the draw)
    assert T.CenterCrop(20)(mask).shape == (20, 20)
    with pytest.raises(ValueError, match="one size"):
        T.CenterCrop(20)(img, tv_tensors.Mask(torch.zeros(10, 10, dtype=torch.uint8)))
    with pytest.raises(TypeError, match="FiveCrop"):
        T.FiveCrop(10)(img, mask)
    for t in (T.AutoAugment(), T.RandAugment(), T.TrivialAugmentWide(), T.AugMix()):
        with pytest.raises(TypeError, match=type(t).__name__):
            t(img, mask)
        assert t(img, 3)[1] == 3  # an image with a label is fine
    # colour transforms leave annotations alone
    out_img, out_mask = T.ColorJitter(0.5)(img, mask)
    assert out_mask is mask and out_img.shape == img.shape


def _jpeg_of(mask, palette, quality=95):
    import io

    buf = io.BytesIO()
    Image.fromarray(palette[mask.numpy()]).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


PALETTE = np.array([(240, 240, 240), (220, 40, 40), (40, 60, 220)], np.uint8)


@pytest.mark.parametrize("index", range(4))
def test_transform_jointly_fuses_the_image(index, monkeypatch):
    from turboloader.decode import decode_image
    from turboloader.transforms import _plan, sample_rng, transform_jointly

    _, mask, boxes = _sample(index)
    data = _jpeg_of(mask, PALETTE)
    t = T.Compose([T.RandomResizedCrop(40, scale=(0.3, 1.0)), T.RandomHorizontalFlip(),
                   T.ColorJitter(0.2, 0.2), T.ToTensor()])
    calls = []
    orig = _plan.Plan.from_jpeg
    monkeypatch.setattr(_plan.Plan, "from_jpeg",
                        lambda self, *a, **k: calls.append(1) or orig(self, *a, **k))
    image, out_mask, out_boxes = transform_jointly(t, data, mask, boxes,
                                                   rng=sample_rng(3, 1, index))
    assert calls == [1]  # the image went through the fused plan
    with using_rng(sample_rng(3, 1, index)):
        ref_image, ref_mask, ref_boxes = t(decode_image(data), mask, boxes)
    assert torch.equal(out_mask, ref_mask) and torch.equal(out_boxes, ref_boxes)
    assert out_boxes.canvas_size == (40, 40) and image.shape == ref_image.shape == (3, 40, 40)
    assert (image - ref_image).abs().mean() < 5 / 255  # fused with DCT scaling
    # the mask lines up with the fused image: each pixel's colour is its class's
    pal = torch.from_numpy(PALETTE).float() / 255
    nearest = ((image.permute(1, 2, 0)[..., None, :] - pal) ** 2).sum(-1).argmin(-1)
    assert (nearest == out_mask).float().mean() > 0.8  # (ColorJitter moves the colours)


def test_transform_jointly_falls_back_and_checks_sizes():
    from turboloader.transforms import transform_jointly

    _, mask, boxes = _sample(0)
    data = _jpeg_of(mask, PALETTE)
    t = T.Compose([T.RandomRotation(20), T.ToTensor()])  # does not fuse
    torch.manual_seed(5)
    image, out_mask = transform_jointly(t, data, mask)
    assert image.shape[-2:] == out_mask.shape == (H, W)
    small = tv_tensors.Mask(torch.zeros(10, 10, dtype=torch.uint8))
    with pytest.raises(ValueError, match="size"):
        transform_jointly(T.Compose([T.CenterCrop(8), T.ToTensor()]), data, small)
    (image,) = transform_jointly(T.Compose([T.CenterCrop(8), T.ToTensor()]), data)
    assert image.shape == (3, 8, 8)
