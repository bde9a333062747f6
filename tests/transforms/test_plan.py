"""plan(): fused pipelines against torchvision v2 on the Pillow-decoded image, same parameters."""

import io
import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from helpers import sweep
import torch
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from turboloader import DecodeError
from turboloader import transforms as T
from turboloader.tools.synthetic import synthetic_jpegs
from turboloader.transforms._random import sample_rng, using_rng

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def jpegs():
    return [b for b, _ in synthetic_jpegs(10, seed=7)]


def _decode(data):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _reference(data, members, rng):
    """torchvision v2 functionals on the Pillow-decoded image, parameters drawn by ours."""
    x = F.pil_to_tensor(Image.open(io.BytesIO(data)).convert("RGB"))
    for t in members:
        if isinstance(t, (T.ToImage, T.PILToTensor)):
            continue
        if isinstance(t, T.ToTensor):
            x = F.to_dtype(x, torch.float32, scale=True)
            continue
        if isinstance(t, T.ToDtype):
            x = F.to_dtype(x, t.dtype, scale=t.scale)
            continue
        if isinstance(t, T.Normalize):
            x = F.normalize(x, t.mean, t.std)
            continue
        p = t.make_params(tuple(x.shape[-2:]), rng=rng)
        if isinstance(t, T.RandomResizedCrop):
            x = F.resized_crop(x, **p, size=list(t.size), interpolation=t.interpolation,
                               antialias=True)
        elif isinstance(t, T.Resize):
            x = F.resize(x, t.size, interpolation=t.interpolation, max_size=t.max_size,
                         antialias=True)
        elif isinstance(t, T.CenterCrop):
            x = F.center_crop(x, list(t.size))
        elif isinstance(t, T.RandomCrop):
            x = F.crop(x, p["top"], p["left"], p["height"], p["width"])
        elif isinstance(t, T.RandomHorizontalFlip):
            x = F.horizontal_flip(x) if p["flip"] else x
        elif isinstance(t, T.ColorJitter):
            kernels = (F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue)
            for i, factor in T.ColorJitter.ops(p):
                x = kernels[i](x, factor)
        else:
            raise AssertionError(t)
    return x


def _diff(a, b):
    return (a.float() - b.float()).abs()


FULL_SCALE = {
    "rrc_uint8": [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToImage()],
    "rrc_norm": [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                 T.Normalize(MEAN, STD)],
    "rrc_bicubic_rect": [T.RandomResizedCrop((96, 160), interpolation="bicubic"),
                         T.PILToTensor(), T.ToDtype(torch.float32, scale=True)],
    "resize_centercrop": [T.Resize(256), T.CenterCrop(224), T.ToImage()],
    "resize_centercrop_norm": [T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                               T.Normalize(MEAN, STD)],
    "resize_randomcrop": [T.Resize(200, max_size=260), T.RandomCrop((128, 170)),
                          T.RandomHorizontalFlip(0.7), T.ToImage()],
    "resize_hw": [T.Resize((123, 77)), T.ToImage()],
    "upscale": [T.Resize(800), T.CenterCrop(300), T.ToImage()],
    "crop_only": [T.CenterCrop(201), T.RandomHorizontalFlip(), T.ToImage()],
    "randomcrop_only": [T.RandomCrop(64), T.ToImage(), T.ToDtype(torch.float32)],
    "no_geometry": [T.ToTensor(), T.Normalize(MEAN, STD)],
}


@pytest.mark.parametrize("name", sweep(sorted(FULL_SCALE), fast=2))
def test_full_scale_matches_torchvision(jpegs, name):
    members = FULL_SCALE[name]
    p = T.plan(T.Compose(members), dct_scaling=False)
    assert p is not None
    for i, data in enumerate(jpegs):
        ours = p.from_jpeg(data, rng=sample_rng(0, 0, i))
        ref = _reference(data, members, sample_rng(0, 0, i))
        assert ours.shape == ref.shape and ours.dtype == ref.dtype == p.output_dtype
        if p.output_shape is not None:
            assert tuple(ours.shape) == p.output_shape
        tol = 0.02 if any(isinstance(t, T.Normalize) for t in members) else 1.0
        if isinstance(members[-1], T.ToDtype) and members[-1].scale:
            tol = 1 / 255 + 1e-6
        assert _diff(ours, ref).max() <= tol, name


@pytest.mark.parametrize("name", sorted(FULL_SCALE))
def test_from_array_equals_from_jpeg_at_full_scale(jpegs, name):
    p = T.plan(T.Compose(FULL_SCALE[name]), dct_scaling=False)
    for i, data in enumerate(jpegs[:4]):
        a = p.from_jpeg(data, rng=sample_rng(1, 0, i))
        b = p.from_array(_decode(data), rng=sample_rng(1, 0, i))
        assert torch.equal(a, b)


def test_color_jitter_is_applied_after_the_geometry_like_torchvision(jpegs):
    jitter = T.ColorJitter(0.4, 0.4, 0.4, 0.1)
    with_cj = T.plan(T.Compose([T.RandomResizedCrop(128), T.RandomHorizontalFlip(), jitter,
                                T.ToImage()]), dct_scaling=False)
    without = T.plan(T.Compose([T.RandomResizedCrop(128), T.RandomHorizontalFlip(),
                                T.ToImage()]), dct_scaling=False)
    kernels = (F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue)
    for i, data in enumerate(jpegs):
        rng = sample_rng(2, 0, i)
        ours = with_cj.from_jpeg(data, rng=rng)
        # the same geometry draws, then torchvision's kernels with our jitter draw
        rng = sample_rng(2, 0, i)
        x = without.from_jpeg(data, rng=rng)
        params = jitter.make_params(rng=rng)
        # exactly our standalone ColorJitter on the same resized image ...
        hwc = np.ascontiguousarray(x.permute(1, 2, 0).numpy())
        assert torch.equal(ours, T.ToImage()(jitter.transform(hwc, params)))
        # ... which is torchvision's: each kernel within one level, so up to 2 over a chain
        for op, factor in T.ColorJitter.ops(params):
            x = kernels[op](x, factor)
        assert _diff(ours, x).max() <= 2
        assert (_diff(ours, x) > 0).float().mean() <= 0.01
        # end to end: the one-level resize difference is amplified by the factors
        ref = _reference(data, with_cj.transforms, sample_rng(2, 0, i))
        assert _diff(ours, ref).max() <= 8
        assert _diff(ours, ref).mean() <= 0.1


def test_jitter_flip_order_and_repeats_are_fused(jpegs):
    members = [T.RandomResizedCrop(64), T.ColorJitter(brightness=0.5),
               T.RandomHorizontalFlip(), T.ColorJitter(hue=0.2), T.RandomHorizontalFlip(),
               T.ToTensor()]
    p = T.plan(T.Compose(members), dct_scaling=False)
    assert p is not None
    x = p.from_jpeg(jpegs[0], rng=sample_rng(0, 0, 0))
    ref = _reference(jpegs[0], members, sample_rng(0, 0, 0))
    assert _diff(x, ref).max() <= 6 / 255


# Measured on synthetic_jpegs (see _plan.py): DCT scaling acts like a different antialias
# filter. Bounds a little above the measurement, in uint8 levels.
DCT_MEAN, DCT_IMAGE_MEAN, DCT_P99, DCT_MAX = 2.0, 5.0, 12.0, 64.0


@pytest.mark.parametrize("members", [
    [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToImage()],
    [T.Resize(256), T.CenterCrop(224), T.ToImage()],
    [T.RandomResizedCrop(112), T.ToImage()],
], ids=["rrc224", "resize256_cc224", "rrc112"])
def test_dct_scaling_tolerance(jpegs, members):
    p = T.plan(T.Compose(members))
    assert p.dct_scaling
    diffs = []
    for i, data in enumerate(jpegs):
        for epoch in range(2):
            ours = p.from_jpeg(data, rng=sample_rng(3, epoch, i))
            d = _diff(ours, _reference(data, members, sample_rng(3, epoch, i)))
            assert d.mean() <= DCT_IMAGE_MEAN
            diffs.append(d.flatten())
    d = torch.cat(diffs)
    assert d.mean() <= DCT_MEAN
    assert torch.quantile(d[::7], 0.99) <= DCT_P99
    assert d.max() <= DCT_MAX


def test_dct_scaling_after_normalize(jpegs):
    members = [T.RandomResizedCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)]
    p = T.plan(T.Compose(members))
    for i, data in enumerate(jpegs):
        d = _diff(p.from_jpeg(data, rng=sample_rng(4, 0, i)),
                  _reference(data, members, sample_rng(4, 0, i)))
        assert d.mean() <= DCT_IMAGE_MEAN / 255 / 0.224


def test_from_array_with_a_downscaled_cache_draws_on_the_source_size(jpegs):
    members = [T.RandomResizedCrop(96), T.RandomHorizontalFlip(), T.ToImage()]
    p = T.plan(T.Compose(members), dct_scaling=False)
    for i, data in enumerate(jpegs):
        full = _decode(data)
        h, w = full.shape[:2]
        small = np.asarray(Image.fromarray(full).resize((w * 5 // 8, h * 5 // 8), Image.BILINEAR))
        a = p.from_jpeg(data, rng=sample_rng(5, 0, i))
        b = p.from_array(np.ascontiguousarray(small), rng=sample_rng(5, 0, i), source_size=(h, w))
        assert a.shape == b.shape
        assert _diff(a, b).mean() <= DCT_IMAGE_MEAN


def test_centercrop_larger_than_image_uses_the_generic_path(jpegs):
    members = [T.Resize(64), T.CenterCrop((80, 100)), T.ToImage()]
    p = T.plan(T.Compose(members), dct_scaling=False)
    assert p is not None and p.output_shape == (3, 80, 100)
    for i, data in enumerate(jpegs[:3]):
        ours = p.from_jpeg(data, rng=sample_rng(0, 0, i))
        ref = _reference(data, members, sample_rng(0, 0, i))
        assert ours.shape == ref.shape == (3, 80, 100)
        assert _diff(ours, ref).max() <= 1
        slot = torch.empty(2, 3, 80, 100, dtype=torch.uint8)
        assert p.from_jpeg(data, rng=sample_rng(0, 0, i), out=slot[1]) is not None
        assert torch.equal(slot[1], ours)
        assert torch.equal(p.from_array(_decode(data), rng=sample_rng(0, 0, i)), ours)
    big = T.plan(T.Compose([T.RandomCrop(5000), T.ToImage()]))
    with pytest.raises(ValueError, match="larger than"):
        big.from_jpeg(jpegs[0])


def test_not_fusable_returns_none_and_generic_path_matches_torchvision(jpegs):
    cases = [
        [T.RandomResizedCrop(64), lambda x: x, T.ToTensor()],
        [v2.RandomResizedCrop(64), T.ToTensor()],
        [T.RandomResizedCrop(64), T.RandomHorizontalFlip()],            # ends in PIL
        [T.ColorJitter(0.4), T.RandomResizedCrop(64), T.ToTensor()],    # jitter first
        [T.RandomHorizontalFlip(), T.RandomResizedCrop(64), T.ToTensor()],
        [T.RandomCrop(64, padding=4), T.ToTensor()],
        [T.RandomCrop(64, pad_if_needed=True), T.ToTensor()],
        [T.Resize(64, interpolation="nearest"), T.ToTensor()],
        [T.Resize(64, antialias=False), T.ToTensor()],
        [T.ToImage(), T.Normalize(MEAN, STD)],                          # uint8 normalize
        [T.ToTensor(), T.Normalize(MEAN, STD), T.Normalize(MEAN, STD)],
        [T.ToTensor(), T.Normalize(MEAN, (0.2, 0.0, 0.2))],
        [T.CenterCrop(64), T.Resize(32), T.ToTensor()],
        [T.ColorJitter(0.1), T.ColorJitter(0.1), T.ColorJitter(0.1), T.ToTensor()],
    ]
    for members in cases:
        assert T.plan(T.Compose(members)) is None, members
    assert T.plan(T.RandomResizedCrop(64)) is None
    assert T.plan(v2.CenterCrop(3)) is None
    # the generic path (our classes on the PIL image) still matches torchvision
    members = [T.ColorJitter(0.4, 0.4), T.RandomResizedCrop(64), T.RandomHorizontalFlip(),
               T.ToTensor()]
    pil = Image.open(io.BytesIO(jpegs[0])).convert("RGB")
    with using_rng(sample_rng(0, 0, 0)):
        ours = T.Compose(members)(pil)
    ref = _reference(jpegs[0], members, sample_rng(0, 0, 0))
    assert _diff(ours, ref).max() <= 1 / 255 + 1e-6


def test_plan_accepts_single_transforms_and_torchvision_compose(jpegs):
    assert T.plan(T.ToTensor()).output_shape is None
    p = T.plan(v2.Compose([T.RandomResizedCrop(32), T.ToTensor()]))
    assert p is not None and p.output_shape == (3, 32, 32) and p.output_dtype is torch.float32
    nested = T.plan(T.Compose([T.Compose([T.Resize(40), T.CenterCrop(32)]), T.ToImage()]))
    assert nested.output_shape == (3, 32, 32) and nested.output_dtype is torch.uint8
    assert T.plan(T.Compose([T.Resize(40), T.ToImage()])).output_shape is None
    assert isinstance(p, T.Plan) and "RandomResizedCrop" in repr(p)
    with pytest.raises(TypeError):
        T.plan(42)


def test_determinism_and_rng_sources(jpegs):
    p = T.plan(T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(),
                          T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.ToTensor()]))
    data = jpegs[1]
    a = p.from_jpeg(data, rng=sample_rng(9, 2, 5))
    assert torch.equal(a, p.from_jpeg(data, rng=sample_rng(9, 2, 5)))
    assert not torch.equal(a, p.from_jpeg(data, rng=sample_rng(9, 2, 6)))
    assert not torch.equal(a, p.from_jpeg(data, rng=sample_rng(9, 3, 5)))
    with using_rng(sample_rng(9, 2, 5)):
        assert torch.equal(a, p.from_jpeg(data))
    torch.manual_seed(0)
    b = p.from_jpeg(data)
    torch.manual_seed(0)
    assert torch.equal(b, p.from_jpeg(data))


def test_out_slots(jpegs):
    p = T.plan(T.Compose([T.RandomResizedCrop((48, 64)), T.ToTensor(), T.Normalize(MEAN, STD)]))
    assert p.output_shape == (3, 48, 64)
    batch = torch.zeros(3, *p.output_shape)
    ret = p.from_jpeg(jpegs[0], out=batch[1], rng=sample_rng(0, 0, 0))
    assert ret is not None and torch.equal(batch[1], p.from_jpeg(jpegs[0], rng=sample_rng(0, 0, 0)))
    assert batch[0].abs().sum() == 0 and batch[2].abs().sum() == 0
    arr = np.zeros((3, 48, 64), np.float32)
    assert p.from_array(_decode(jpegs[0]), out=arr, rng=sample_rng(0, 0, 0)) is arr
    with pytest.raises(ValueError):
        p.from_jpeg(jpegs[0], out=torch.zeros(3, 48, 63))
    with pytest.raises(TypeError):
        p.from_jpeg(jpegs[0], out=torch.zeros(3, 48, 64, dtype=torch.uint8))
    with pytest.raises(ValueError):
        p.from_jpeg(jpegs[0], out=torch.zeros(3, 64, 48).transpose(1, 2))
    with pytest.raises(TypeError):
        p.from_jpeg(jpegs[0], out=[0])


def test_bad_data_raises_decode_error(jpegs):
    p = T.plan(T.Compose([T.RandomResizedCrop(64), T.ToTensor()]))
    for bad in (b"", b"not a jpeg", jpegs[0][: len(jpegs[0]) // 2]):
        with pytest.raises(DecodeError):
            p.from_jpeg(bad, rng=random.Random(0))
    with pytest.raises(DecodeError, match="max_pixels"):
        p.from_jpeg(jpegs[0], max_pixels=100)
    with pytest.raises(TypeError):
        p.from_jpeg("text")
    with pytest.raises(TypeError):
        p.from_array(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ValueError):
        p.from_array(np.zeros((4, 4), np.uint8))


def test_memoryview_input_and_threads(jpegs):
    p = T.plan(T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip(),
                          T.ColorJitter(0.3, 0.3, 0.3), T.ToTensor()]))
    blob = b"".join(jpegs)
    offsets = np.cumsum([0] + [len(d) for d in jpegs])
    views = [memoryview(blob)[offsets[i]:offsets[i + 1]] for i in range(len(jpegs))]
    serial = [p.from_jpeg(v, rng=sample_rng(0, 0, i)) for i, v in enumerate(views)]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda iv: p.from_jpeg(iv[1], rng=sample_rng(0, 0, iv[0])),
                                 list(enumerate(views)) * 3))
    for i, x in enumerate(threaded):
        assert torch.equal(x, serial[i % len(jpegs)])


# ------------------------------------------------------------------ wrappers and containers

POST_CASES = {
    "random_apply_jitter": [T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.6)],
    "random_choice": [T.RandomChoice([T.Identity(), T.RandomHorizontalFlip(1.0),
                                      T.ColorJitter(hue=0.2)], p=[1, 1, 2])],
    "random_order": [T.RandomOrder([T.ColorJitter(brightness=0.5), T.RandomHorizontalFlip(),
                                    T.ColorJitter(saturation=0.7)])],
    "nested": [T.RandomApply([T.RandomOrder([T.ColorJitter(contrast=0.5),
                                             T.ColorJitter(hue=0.1)]),
                              T.RandomHorizontalFlip()], p=0.5), T.Identity()],
    "compose_inside": [T.RandomChoice([T.Compose([T.ColorJitter(0.3), T.RandomHorizontalFlip()]),
                                       T.Identity()]), T.ToPureTensor()],
}


@pytest.mark.parametrize("name", sorted(POST_CASES))
def test_containers_fuse_with_the_generic_paths_draws(jpegs, name):
    """Fused: the geometry's draws, then the containers' and members' draws in call order;
    equal to the geometry alone followed by the standalone classes on its output."""
    post = POST_CASES[name]
    fused = T.plan(T.Compose([T.RandomResizedCrop(72)] + post + [T.ToImage()]),
                   dct_scaling=False)
    geometry = T.plan(T.Compose([T.RandomResizedCrop(72), T.ToImage()]), dct_scaling=False)
    assert fused is not None
    outputs = set()
    for i, data in enumerate(jpegs):
        for epoch in range(2):
            ours = fused.from_jpeg(data, rng=sample_rng(6, epoch, i))
            rng = sample_rng(6, epoch, i)
            x = geometry.from_jpeg(data, rng=rng)
            with using_rng(rng):  # the same generator, after the geometry's draws
                y = T.Compose(post)(np.ascontiguousarray(x.permute(1, 2, 0).numpy()))
            assert torch.equal(ours, T.ToImage()(y)), (name, i, epoch)
            assert torch.equal(fused.from_array(_decode(data), rng=sample_rng(6, epoch, i)), ours)
            outputs.add((ours.float() - x.float()).abs().sum().item() > 0)
    assert outputs == {True, False} or name == "random_order"  # both branches were drawn


class _AlwaysFlip(T.Transform):
    """A post-geometry transform written as a user would add one: the class alone declares
    how it fuses (``_fused_ops`` / ``_fused_draw``); nothing in the planner or the batch
    path names it."""

    def make_params(self, size=None, *, rng=None):
        return {}

    def transform(self, img, params):
        return T.functional.horizontal_flip(img)

    def _fused_ops(self):
        return 0

    def _fused_draw(self, d, mask, r):
        r.flip ^= mask


class _FlipSubclass(T.RandomHorizontalFlip):
    """Changes what its parent does without declaring a fused form: must not fuse."""

    def transform(self, img, params):
        return img


def test_a_fusable_post_geometry_class_is_declared_in_the_class_alone(jpegs):
    """Each fusable class declares its post-geometry ops once (the planner and both
    executors read the declaration): a new one fuses, per sample and per batch, with the
    oracle its own unfused call on the geometry's output; a subclass that does not declare
    its own fused form stays unfused."""
    from turboloader.transforms._random import sample_keys

    fused = T.plan(T.Compose([T.RandomResizedCrop(64), _AlwaysFlip(), T.ToImage()]),
                   dct_scaling=False)
    geometry = T.plan(T.Compose([T.RandomResizedCrop(64), T.ToImage()]), dct_scaling=False)
    assert fused is not None
    keys = sample_keys(3, 0, np.arange(len(jpegs)))
    params = fused.prepare_batch(jpegs, keys)
    batch = torch.empty((len(jpegs), 3, 64, 64), dtype=torch.uint8)
    assert (fused.run_batch(jpegs, params, batch).status == 0).all()
    for i, data in enumerate(jpegs):
        x = geometry.from_jpeg(data, rng=sample_rng(3, 0, i))
        want = torch.flip(x, dims=[2])
        assert torch.equal(fused.from_jpeg(data, rng=sample_rng(3, 0, i)), want)
        assert torch.equal(batch[i], want)
    assert T.plan(T.Compose([T.RandomResizedCrop(64), _FlipSubclass(), T.ToImage()])) is None


def test_conversion_spellings_fuse_alike(jpegs):
    geometry = [T.Resize(80), T.CenterCrop(64)]
    reference = T.plan(T.Compose(geometry + [T.ToTensor(), T.Normalize(MEAN, STD)]))
    for tail in ([T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD)],
                 [T.ToImage(), T.ToDtype({"others": torch.float32}, scale=True),
                  T.Normalize(MEAN, STD), T.ToPureTensor()],
                 [T.Identity(), T.ToImage(), T.ToDtype(torch.float32, scale=True),
                  T.Normalize(MEAN, STD)]):
        p = T.plan(T.Compose(geometry + tail))
        assert p is not None and p.output_dtype is torch.float32, tail
        for i, data in enumerate(jpegs[:3]):
            assert torch.equal(p.from_jpeg(data, rng=sample_rng(0, 0, i)),
                               reference.from_jpeg(data, rng=sample_rng(0, 0, i)))
    assert T.plan(T.Compose(geometry + [T.ToImage(), T.ConvertImageDtype(torch.float64)])) is None


class _Preset:
    """The shape of torchvision's classification presets."""

    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        return self.transforms(img)


class _Outer:
    def __init__(self, inner):
        self.pipeline = inner

    def __call__(self, x):
        return self.pipeline(x)


class _Scaled(_Preset):
    def __call__(self, img):
        return self.transforms(img) * 2


class _ExtraArgument(_Preset):
    def __call__(self, img, target=None):
        return self.transforms(img)


class _Varargs(_Preset):
    def __call__(self, *inputs):
        return self.transforms(*inputs)


def test_objects_wrapping_a_compose_fuse(jpegs):
    members = [T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ToTensor(),
               T.Normalize(MEAN, STD)]
    direct = T.plan(T.Compose(members))
    for wrapper in (_Preset(T.Compose(members)), _Outer(_Preset(T.Compose(members))),
                    _Preset(v2.Compose(members))):
        p = T.plan(wrapper)
        assert p is not None and T.explain(wrapper) is None
        for i, data in enumerate(jpegs[:3]):
            assert torch.equal(p.from_jpeg(data, rng=sample_rng(1, 0, i)),
                               direct.from_jpeg(data, rng=sample_rng(1, 0, i)))
    # a __call__ that does anything else is not taken for the pipeline
    for wrapper in (_Scaled(T.Compose(members)), _ExtraArgument(T.Compose(members)),
                    _Varargs(T.Compose(members))):
        assert T.plan(wrapper) is None
        assert "is not exactly 'return self.transforms(img)'" in T.explain(wrapper)
    assert T.plan(_Preset(lambda x: x)) is None
    assert T.plan(_Preset(T.Compose([T.RandAugment(), T.ToTensor()]))) is None


def test_explain_names_the_first_member_and_agrees_with_plan():
    cases = [
        ([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor()], None),
        ([T.RandomResizedCrop(64), T.AutoAugment(), T.ToTensor()], "member 1, AutoAugment("),
        ([v2.RandomResizedCrop(64), T.ToTensor()],
         "torchvision's own class; turboloader.transforms.RandomResizedCrop"),
        ([T.RandomResizedCrop(64)], "ends without a tensor conversion"),
        ([T.RandomCrop(32, padding=4), T.ToTensor()], "member 0, RandomCrop("),
        ([T.Resize(64, interpolation="nearest"), T.ToTensor()], "interpolation"),
        ([T.ToImage(), T.Normalize(MEAN, STD)], "member 1, Normalize("),
        ([T.ColorJitter(0.1)] * 3 + [T.ToTensor()], "more than 8 colour operations"),
        ([T.RandomApply([T.ColorJitter(0.1)] * 3), T.ToTensor()], "more than 8"),
        ([T.RandomApply([T.RandomResizedCrop(64)]), T.ToTensor()], "member 0, RandomApply("),
        ([T.Lambda(lambda x: x), T.ToTensor()], "arbitrary function"),
        ([T.RandomResizedCrop(64), T.ToTensor(), T.RandomErasing()], "member 2, RandomErasing("),
        ([T.ToTensor(), T.Normalize(MEAN, (0.2, 0.0, 0.2))], "zero or non-finite std"),
    ]
    for members, expected in cases:
        c = T.Compose(members)
        reason = T.explain(c)
        assert (T.plan(c) is None) == (reason is not None), members
        if expected is None:
            assert reason is None
        else:
            assert expected in reason, (expected, reason)
    assert "not a turboloader transform" in T.explain(lambda x: x)
    with pytest.raises(TypeError):
        T.explain(42)
