"""The transform classes standalone, against torchvision v2 with the same parameters."""

import random

import numpy as np
import pytest
from helpers.images import as_kind
import torch
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from turboloader import transforms as T
from turboloader.tools.synthetic import synthetic_image
from turboloader.transforms._random import sample_rng, using_rng

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def arr():
    return synthetic_image(np.random.default_rng(3), 157, 211)


def _ref_kind(kind):
    """torchvision passes arrays through untouched: compare arrays with the tensor result."""
    return "tensor" if kind == "ndarray" else kind


def _chw(img):
    """Any image kind -> uint8/float CHW tensor, for comparisons."""
    if isinstance(img, Image.Image):
        return F.pil_to_tensor(img)
    if isinstance(img, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)
    return img


def _diff(a, b):
    return (_chw(a).float() - _chw(b).float()).abs().max().item()


def _same_kind(kind, out):
    expected = {"pil": Image.Image, "tensor": torch.Tensor, "ndarray": np.ndarray}[kind]
    assert isinstance(out, expected)


KINDS = ["pil", "tensor", "ndarray"]


@pytest.mark.parametrize("kind", KINDS)
def test_random_resized_crop_matches_torchvision(arr, kind):
    t = T.RandomResizedCrop((96, 80), scale=(0.2, 0.9))
    img = as_kind(kind, arr)
    for i in range(6):
        with using_rng(sample_rng(0, 0, i)):
            out = t(img)
        params = t.make_params((157, 211), rng=sample_rng(0, 0, i))
        ref = F.resized_crop(as_kind(_ref_kind(kind), arr), **params,
                             size=[96, 80], antialias=True)
        _same_kind(kind, out)
        assert _chw(out).shape == (3, 96, 80)
        assert _diff(out, ref) <= 1


def test_random_resized_crop_params_follow_get_params():
    """Our draw is torchvision's algorithm: same values when fed the same uniforms."""
    t = T.RandomResizedCrop(224)
    for i in range(200):
        rng = random.Random(i)
        p = t.make_params((300, 500), rng=rng)
        assert 0 <= p["top"] and p["top"] + p["height"] <= 300
        assert 0 <= p["left"] and p["left"] + p["width"] <= 500
        assert p["height"] > 0 and p["width"] > 0
        area = p["height"] * p["width"] / (300 * 500)
        assert 0.07 <= area <= 1.0
    # the fallback (no attempt fits): a very wide image and a forced ratio -> centre crop
    t = T.RandomResizedCrop(10, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    assert t.make_params((10, 100), rng=random.Random(0)) == {
        "top": 0, "left": 45, "height": 10, "width": 10}


def test_random_resized_crop_torch_rng_matches_torchvision_draws():
    """Outside a dataset parameters come from torch's RNG, as torchvision's do."""
    ours = T.RandomResizedCrop(224)
    theirs = v2.RandomResizedCrop(224)
    hits = 0
    for seed in range(20):
        torch.manual_seed(seed)
        a = ours.make_params((375, 500))
        torch.manual_seed(seed)
        b = theirs.make_params([torch.zeros(3, 375, 500, dtype=torch.uint8)])
        hits += a == b
    assert hits >= 18  # float64 vs float32 rounding may rarely move a size by one pixel


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("size,max_size", [(64, None), ([70], None), ((50, 90), None),
                                           (64, 80), (None, 100)])
def test_resize_matches_torchvision(arr, kind, size, max_size):
    ours = T.Resize(size, max_size=max_size)(as_kind(kind, arr))
    ref = v2.Resize(size, max_size=max_size)(as_kind(_ref_kind(kind), arr))
    _same_kind(kind, ours)
    assert _chw(ours).shape == _chw(ref).shape
    assert _diff(ours, ref) <= 1


def test_resize_output_size_rounds_like_torchvision():
    for h, w in [(375, 500), (500, 375), (333, 333), (1, 1000), (257, 256)]:
        for size, max_size in [(256, None), (224, 300), (None, 128), ((10, 20), None)]:
            ours = T.Resize(size, max_size=max_size).output_size((h, w))
            ref = F._geometry._compute_resized_output_size(
                (h, w), [size] if isinstance(size, int) else (None if size is None else list(size)),
                max_size)
            assert list(ours) == ref


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("size", [100, (57, 200), (156, 210), (200, 250), (1, 1)])
def test_center_crop_matches_torchvision(arr, kind, size):
    ours = T.CenterCrop(size)(as_kind(kind, arr))
    ref = v2.CenterCrop(size)(as_kind(_ref_kind(kind), arr))
    _same_kind(kind, ours)
    assert _chw(ours).shape == _chw(ref).shape
    assert _diff(ours, ref) == 0


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("kwargs", [{}, {"padding": 4}, {"padding": (1, 2, 3, 4), "fill": 7},
                                    {"padding": [5, 3], "padding_mode": "reflect"},
                                    {"padding": 2, "padding_mode": "edge"},
                                    {"padding": 2, "padding_mode": "symmetric"},
                                    {"pad_if_needed": True, "fill": (1, 2, 3)}])
def test_random_crop_matches_torchvision(arr, kind, kwargs):
    size = (170, 100) if kwargs.get("pad_if_needed") else (64, 100)
    t = T.RandomCrop(size, **kwargs)
    tv = v2.RandomCrop(size, **kwargs)
    for i in range(3):
        with using_rng(sample_rng(1, 0, i)):
            out = t(as_kind(kind, arr))
        params = t.make_params((157, 211), rng=sample_rng(1, 0, i))
        ref = tv.transform(as_kind(_ref_kind(kind), arr), params)
        _same_kind(kind, out)
        assert _chw(out).shape == (3, *size)
        assert _diff(out, ref) == 0


def test_random_crop_draws_differ_and_too_small_raises(arr):
    t = T.RandomCrop(64)
    tops = {t.make_params((157, 211), rng=sample_rng(0, 0, i))["top"] for i in range(20)}
    assert len(tops) > 5
    with pytest.raises(ValueError, match="larger than"):
        T.RandomCrop(200)(arr)


@pytest.mark.parametrize("kind", KINDS)
def test_horizontal_flip_matches_torchvision(arr, kind):
    t = T.RandomHorizontalFlip(p=1.0)
    assert _diff(t(as_kind(kind, arr)), F.horizontal_flip(as_kind("tensor", arr))) == 0
    same = T.RandomHorizontalFlip(p=0.0)(as_kind(kind, arr))
    assert _diff(same, as_kind("tensor", arr)) == 0


def test_flip_draw_is_random_below_p():
    t = T.RandomHorizontalFlip(0.3)
    for i in range(50):
        rng, probe = sample_rng(0, 0, i), sample_rng(0, 0, i)
        assert t.make_params(rng=rng)["flip"] == (probe.random() < 0.3)


@pytest.mark.parametrize("kind", ["tensor", "ndarray", "pil"])
def test_color_jitter_matches_torchvision(arr, kind):
    t = T.ColorJitter(0.4, 0.4, 0.4, 0.1)
    tv = v2.ColorJitter(0.4, 0.4, 0.4, 0.1)
    for i in range(5):
        with using_rng(sample_rng(2, 0, i)):
            out = t(as_kind(kind, arr))
        params = t.make_params(rng=sample_rng(2, 0, i))
        assert sorted(params["fn_idx"]) == [0, 1, 2, 3]
        ref = tv.transform(as_kind(_ref_kind(kind), arr),
                           dict(params, fn_idx=torch.tensor(params["fn_idx"])))
        _same_kind(kind, out)
        assert _diff(out, ref) <= 1


def test_color_jitter_ranges_and_orders():
    t = T.ColorJitter(brightness=(0.5, 0.6), hue=0.2)
    orders = set()
    for i in range(50):
        p = t.make_params(rng=sample_rng(0, 1, i))
        assert 0.5 <= p["brightness_factor"] <= 0.6 and -0.2 <= p["hue_factor"] <= 0.2
        assert p["contrast_factor"] is None and p["saturation_factor"] is None
        orders.add(tuple(p["fn_idx"]))
    assert len(orders) > 10
    assert T.ColorJitter(0, 0, 0, 0).brightness is None


def test_to_tensor_and_friends_match_torchvision(arr):
    pil = Image.fromarray(arr)
    x = T.ToTensor()(pil)
    assert x.dtype == torch.float32 and x.shape == (3, 157, 211)
    ref = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])(pil)
    assert torch.allclose(x, ref, atol=1e-6, rtol=0)
    assert torch.equal(T.ToTensor()(arr), x)
    assert T.ToTensor()(x) is x
    u = T.ToImage()(arr)
    assert type(u) is torch.Tensor and u.dtype == torch.uint8
    assert torch.equal(u, T.PILToTensor()(pil))
    assert T.PILToTensor()(arr) is arr
    f = T.ToDtype(torch.float32, scale=True)(u)
    assert torch.equal(f, ref)
    assert torch.equal(T.ToDtype(torch.float32)(u), u.float())
    assert T.ToDtype(torch.float32)(pil) is pil
    n = T.Normalize(MEAN, STD)(x)
    assert torch.allclose(n, F.normalize(x, MEAN, STD))
    with pytest.raises(TypeError):
        T.Normalize(MEAN, STD)(pil)


def test_compose_matches_torchvision_compose(arr):
    ours = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ColorJitter(0.3, 0.3),
                      T.ToTensor(), T.Normalize(MEAN, STD)])
    theirs_steps = [v2.RandomResizedCrop(64), v2.RandomHorizontalFlip(), v2.ColorJitter(0.3, 0.3)]
    pil = Image.fromarray(arr)
    for i in range(4):
        with using_rng(sample_rng(3, 0, i)):
            out = ours(pil)
        rng = sample_rng(3, 0, i)
        x = pil
        for t, tv in zip(ours.transforms[:3], theirs_steps):
            params = t.make_params((x.height, x.width), rng=rng)
            if "flip" in params:  # v2's flip decides in forward(), not in transform()
                x = tv.transform(x, params) if params["flip"] else x
            elif "fn_idx" in params:
                x = tv.transform(x, dict(params, fn_idx=torch.tensor(params["fn_idx"])))
            else:
                x = tv.transform(x, params)
        ref = F.normalize(F.to_dtype(F.pil_to_tensor(x), torch.float32, scale=True), MEAN, STD)
        assert torch.allclose(out, ref, atol=1e-5)


def test_compose_accepts_any_callable_and_multiple_inputs(arr):
    c = T.Compose([v2.CenterCrop(50), lambda im: im.rotate(90), T.ToTensor()])
    out = c(Image.fromarray(arr))
    assert out.shape == (3, 50, 50)
    pair = T.Compose([lambda a, b: (b, a)])(1, 2)
    assert pair == (2, 1)
    with pytest.raises(TypeError):
        T.Compose(T.ToTensor())
    with pytest.raises(ValueError):
        T.Compose([])


def test_torch_rng_outside_a_dataset_is_seedable(arr):
    t = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])
    torch.manual_seed(5)
    a = t(arr)
    torch.manual_seed(5)
    b = t(arr)
    torch.manual_seed(6)
    c = t(arr)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_numpy_global_state_is_never_used(arr):
    t = T.Compose([T.RandomResizedCrop(32), T.ColorJitter(0.5, 0.5, 0.5, 0.2), T.ToTensor()])
    state = np.random.get_state()
    with using_rng(random.Random(0)):
        t(arr)
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
               for a, b in zip(state, np.random.get_state()))


@pytest.mark.parametrize("make,exc", [
    (lambda: T.RandomResizedCrop((1, 2, 3)), ValueError),
    (lambda: T.RandomResizedCrop(0), ValueError),
    (lambda: T.RandomResizedCrop("a"), TypeError),
    (lambda: T.RandomResizedCrop(224, scale=0.5), TypeError),
    (lambda: T.RandomResizedCrop(224, ratio=(1.0,)), TypeError),
    (lambda: T.RandomResizedCrop(224, ratio=(0.0, 1.0)), ValueError),
    (lambda: T.RandomResizedCrop(224, scale=(-0.1, 1.0)), ValueError),
    (lambda: T.RandomResizedCrop(224, interpolation="sideways"), ValueError),
    (lambda: T.Resize((1, 2, 3)), ValueError),
    (lambda: T.Resize(None), ValueError),
    (lambda: T.Resize(-3), ValueError),
    (lambda: T.Resize((10, 20), max_size=30), ValueError),
    (lambda: T.Resize(100, max_size=100), ValueError),
    (lambda: T.CenterCrop((1, 2, 3)), ValueError),
    (lambda: T.RandomCrop(10, padding=(1, 2, 3)), ValueError),
    (lambda: T.RandomCrop(10, padding=1, padding_mode="wrap"), ValueError),
    (lambda: T.RandomCrop(10, fill="red"), TypeError),
    (lambda: T.RandomHorizontalFlip(1.5), ValueError),
    (lambda: T.ColorJitter(brightness=-1), ValueError),
    (lambda: T.ColorJitter(hue=0.6), ValueError),
    (lambda: T.ColorJitter(contrast=(1, 2, 3)), TypeError),
    (lambda: T.ColorJitter(saturation=(2.0, 1.0)), ValueError),
    (lambda: T.ToDtype("float32"), ValueError),
])
def test_bad_arguments_raise_like_torchvision(make, exc):
    with pytest.raises(exc):
        make()


def test_reversed_scale_warns_like_torchvision():
    with pytest.warns(UserWarning, match="min, max"):
        T.RandomResizedCrop(224, scale=(1.0, 0.5))


def test_bad_inputs():
    with pytest.raises(TypeError):
        T.RandomResizedCrop(10)("not an image")
    with pytest.raises(ValueError):
        T.CenterCrop(10)(np.zeros((2, 3, 4, 5), np.uint8))


def test_public_names():
    for name in T.__all__:
        assert hasattr(T, name)
    assert {"Compose", "Resize", "CenterCrop", "RandomCrop", "RandomResizedCrop",
            "RandomHorizontalFlip", "ColorJitter", "Normalize", "ToTensor", "ToImage",
            "ToDtype", "PILToTensor", "plan", "Plan", "functional"} <= set(T.__all__)
