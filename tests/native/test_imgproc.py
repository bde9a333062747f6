"""Oracle tests for the image kernels: Pillow and torchvision v2 are the references."""

import threading

import numpy as np
import pytest

from turboloader._native import _chw, _colour, _resample
from turboloader.transforms import functional as TF

torch = pytest.importorskip("torch")
F = pytest.importorskip("torchvision.transforms.v2.functional")
Image = pytest.importorskip("PIL.Image")
from torchvision.transforms import InterpolationMode  # noqa: E402

PIL_FILTER = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}
TV_MODE = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC}


def make_image(h, w, c=3, seed=0):
    """Noise in some regions, smooth gradients and flat/saturated patches in others."""
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    ramp = np.stack([xx / max(w - 1, 1), yy / max(h - 1, 1), (xx + yy) / max(h + w - 2, 1)], -1)
    grad = (ramp[..., :c] * 255).round().astype(np.uint8)
    half = h // 2
    img[:half] = grad[:half]
    img[: max(h // 8, 1), : max(w // 8, 1)] = 255
    img[-max(h // 8, 1):, -max(w // 8, 1):] = 0
    return np.ascontiguousarray(img)


def to_tensor(img):
    return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))


def tv_resize(img, size, mode):
    # channels_last input: torch's uint8 antialias kernel asserts on contiguous 1x1 outputs.
    t = to_tensor(img)[None].contiguous(memory_format=torch.channels_last)
    return from_tensor(F.resize(t, list(size), TV_MODE[mode], antialias=True)[0])


def from_tensor(t):
    return t.permute(1, 2, 0).numpy()


def maxdiff(a, b):
    return int(np.abs(np.asarray(a, np.int32) - np.asarray(b, np.int32)).max())


def pil_resize(img, size, mode, box=None):
    """Pillow's resampling with the horizontal pass first.

    Pillow <= 12 and torchvision's antialiased uint8 kernel always run the horizontal pass
    first; Pillow 13 picks the order per call, which moves noisy pixels by more than 1. Each
    single-axis Pillow resize is still the exact reference, so compose two of them.
    """
    h, w = size
    ih, iw = img.shape[:2]
    x0, y0, x1, y1 = (0, 0, iw, ih) if box is None else box
    pil = Image.fromarray(img)
    if mode == "nearest":
        return np.asarray(pil.resize((w, h), PIL_FILTER[mode], box=(x0, y0, x1, y1)))
    if (w, x0, x1) != (iw, 0, iw):
        pil = pil.resize((w, ih), PIL_FILTER[mode], box=(x0, 0, x1, ih))
    if (h, y0, y1) != (ih, 0, ih):
        pil = pil.resize((w, h), PIL_FILTER[mode], box=(0, y0, w, y1))
    return np.asarray(pil)


def smooth_image(h, w, seed=0):
    """Gradients plus mild texture: any pass order agrees within 1 grey level."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    rng = np.random.default_rng(seed)
    f = rng.uniform(0.02, 0.08, 3)
    chans = [127.5 + 120 * np.sin(f[0] * xx + f[1] * yy), 255 * xx / max(w - 1, 1),
             127.5 + 120 * np.cos(f[2] * (xx - yy))]
    return np.ascontiguousarray(np.stack(chans, -1).round().clip(0, 255).astype(np.uint8))


# (in_h, in_w, out_h, out_w): downscale, upscale, mixed, 1-pixel outputs, odd sizes
SIZES = [
    (375, 500, 224, 224),
    (120, 90, 37, 61),
    (31, 47, 97, 13),
    (50, 50, 1, 1),
    (9, 200, 1, 33),
    (64, 64, 64, 32),
    (7, 5, 29, 31),
    (101, 3, 17, 3),
]


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("in_h,in_w,out_h,out_w", SIZES)
def test_resize_matches_pillow_and_torchvision(mode, in_h, in_w, out_h, out_w):
    img = make_image(in_h, in_w, seed=in_h * in_w)
    ours = TF.resize(img, (out_h, out_w), mode)
    assert ours.shape == (out_h, out_w, 3) and ours.dtype == np.uint8
    assert maxdiff(ours, pil_resize(img, (out_h, out_w), mode)) <= 1
    assert maxdiff(ours, tv_resize(img, (out_h, out_w), mode)) <= 1


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("in_h,in_w,out_h,out_w", SIZES)
def test_resize_smooth_matches_pillow_resize_directly(mode, in_h, in_w, out_h, out_w):
    img = smooth_image(in_h, in_w, seed=in_h + out_w)
    direct = np.asarray(Image.fromarray(img).resize((out_w, out_h), PIL_FILTER[mode]))
    assert maxdiff(TF.resize(img, (out_h, out_w), mode), direct) <= 1


@pytest.mark.parametrize("in_h,in_w,out_h,out_w", SIZES)
def test_resize_nearest_matches_pillow_exactly(in_h, in_w, out_h, out_w):
    img = make_image(in_h, in_w, seed=1)
    ours = TF.resize(img, (out_h, out_w), "nearest")
    np.testing.assert_array_equal(ours, pil_resize(img, (out_h, out_w), "nearest"))


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
@pytest.mark.parametrize("box,size", [
    ((10.5, 3.25, 200.75, 90.0), (224, 224)),
    ((0.0, 0.0, 1.5, 2.5), (16, 9)),
    ((296.7, 172.8, 300.0, 175.0), (31, 40)),
    ((0.3, 100.1, 299.9, 174.2), (20, 100)),
    ((17.0, 23.0, 181.0, 150.0), (64, 64)),
])
def test_resize_fractional_box_matches_pillow(mode, box, size):
    img = make_image(175, 300, seed=7)
    ours = TF.resize(img, size, mode, box=box)
    ref = pil_resize(img, size, mode, box=box)
    if mode == "nearest":
        np.testing.assert_array_equal(ours, ref)
    else:
        assert maxdiff(ours, ref) <= 1


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("top,left,height,width,size", [
    (0, 0, 375, 500, (224, 224)),
    (13, 27, 200, 150, (224, 224)),
    (100, 400, 275, 100, (64, 32)),
    (5, 7, 11, 13, (3, 50)),
    (374, 499, 1, 1, (4, 4)),
])
def test_resized_crop_matches_torchvision(mode, top, left, height, width, size):
    img = make_image(375, 500, seed=3)
    ours = TF.resized_crop(img, top, left, height, width, size, TV_MODE[mode])
    tv = F.resized_crop(to_tensor(img), top, left, height, width, list(size), TV_MODE[mode],
                        antialias=True)
    assert maxdiff(ours, from_tensor(tv)) <= 1
    # and Pillow's crop-then-resize
    cropped = np.ascontiguousarray(img[top:top + height, left:left + width])
    assert maxdiff(ours, pil_resize(cropped, size, mode)) <= 1


def test_resize_single_channel_and_2d():
    img = make_image(90, 70, c=1, seed=5)
    ref = np.asarray(Image.fromarray(img[:, :, 0]).resize((33, 41), Image.BILINEAR))
    assert maxdiff(TF.resize(img, (41, 33))[:, :, 0], ref) <= 1
    flat = TF.resize(np.ascontiguousarray(img[:, :, 0]), (41, 33))
    assert flat.shape == (41, 33)
    assert maxdiff(flat, ref) <= 1


def test_resize_shorter_edge_and_out_buffer():
    img = make_image(375, 500, seed=2)
    assert TF.resize(img, 100).shape == (100, 133, 3)
    assert TF.resize(img, [100]).shape == (100, 133, 3)
    batch = np.zeros((2, 50, 60, 3), np.uint8)
    res = TF.resize(img, (50, 60), out=batch[1])
    assert res is batch[1] or np.shares_memory(res, batch)
    np.testing.assert_array_equal(batch[1], TF.resize(img, (50, 60)))
    assert not batch[0].any()


def test_resize_same_size_is_identity():
    img = make_image(40, 30, seed=4)
    np.testing.assert_array_equal(TF.resize(img, (40, 30), "bicubic"), img)
    np.testing.assert_array_equal(TF.resize(img, (40, 30), "bilinear", box=(0, 0, 30, 40)), img)


def test_interpolation_spellings():
    img = make_image(60, 80, seed=9)
    ref = TF.resize(img, (20, 30), "bicubic")
    for mode in ("BICUBIC", InterpolationMode.BICUBIC, TF.Interpolation.BICUBIC):
        np.testing.assert_array_equal(TF.resize(img, (20, 30), mode), ref)
    with pytest.raises(ValueError, match="interpolation"):
        TF.resize(img, (20, 30), "lanczos2")
    with pytest.raises(ValueError):
        TF.resize(img, (20, 30), InterpolationMode.LANCZOS)
    with pytest.raises(TypeError):
        TF.resize(img, (20, 30), 2)


def test_crop_and_flip_exact():
    img = make_image(37, 53, seed=11)
    np.testing.assert_array_equal(TF.crop(img, 3, 5, 20, 31), img[3:23, 5:36])
    np.testing.assert_array_equal(TF.crop(img, 0, 0, 37, 53), img)
    np.testing.assert_array_equal(TF.horizontal_flip(img), img[:, ::-1])
    gray = np.ascontiguousarray(img[:, :, 0])
    np.testing.assert_array_equal(TF.horizontal_flip(gray), gray[:, ::-1])
    np.testing.assert_array_equal(TF.crop(gray, 1, 2, 3, 4), gray[1:4, 2:6])
    inplace = img.copy()
    _resample.hflip_into(inplace, inplace)
    np.testing.assert_array_equal(inplace, img[:, ::-1])
    odd = make_image(5, 1, seed=1)
    np.testing.assert_array_equal(TF.horizontal_flip(odd), odd)


@pytest.mark.parametrize("factor", [0.0, 0.25, 1.0, 1.7, 3.0])
@pytest.mark.parametrize("op", ["brightness", "contrast", "saturation"])
def test_color_matches_torchvision(op, factor):
    img = make_image(67, 91, seed=int(factor * 10) + 1)
    ours = getattr(TF, f"adjust_{op}")(img, factor)
    tv = getattr(F, f"adjust_{op}")(to_tensor(img), factor)
    assert maxdiff(ours, from_tensor(tv)) <= 1
    if factor == 1.0:
        np.testing.assert_array_equal(ours, img)


@pytest.mark.parametrize("factor", [-0.5, -0.31, -0.05, 0.0, 0.1, 0.25, 0.5])
def test_hue_matches_torchvision(factor):
    img = make_image(67, 91, seed=21)
    ours = TF.adjust_hue(img, factor)
    tv = F.adjust_hue(to_tensor(img), factor)
    assert maxdiff(ours, from_tensor(tv)) <= 1


@pytest.mark.parametrize("op,factor", [("brightness", 1.4), ("contrast", 0.5),
                                       ("saturation", 0.3), ("hue", 0.2)])
def test_color_single_channel_and_inplace(op, factor):
    gray = make_image(30, 20, c=1, seed=8)
    ours = getattr(TF, f"adjust_{op}")(gray, factor)
    tv = getattr(F, f"adjust_{op}")(to_tensor(gray), factor)
    assert maxdiff(ours, from_tensor(tv)) <= 1
    img = make_image(30, 20, seed=8)
    expect = getattr(TF, f"adjust_{op}")(img, factor)
    work = img.copy()
    res = getattr(TF, f"adjust_{op}")(work, factor, inplace=True)
    assert res is work
    np.testing.assert_array_equal(work, expect)


def test_color_bad_factors():
    img = make_image(8, 8)
    for op in ("brightness", "contrast", "saturation"):
        with pytest.raises(ValueError, match="non-negative"):
            getattr(TF, f"adjust_{op}")(img, -0.1)
        with pytest.raises(ValueError):
            getattr(TF, f"adjust_{op}")(img, float("nan"))
    for bad in (0.51, -0.6, float("nan")):
        with pytest.raises(ValueError):
            TF.adjust_hue(img, bad)
    with pytest.raises(TypeError):
        TF.adjust_hue(img, "x")


MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("h,w", [(224, 224), (1, 1), (13, 7)])
def test_normalize_matches_torchvision(flip, h, w):
    img = make_image(h, w, seed=h + w)
    t = to_tensor(img)
    if flip:
        t = F.horizontal_flip(t)
    ref = F.normalize(F.to_dtype(t, torch.float32, scale=True), list(MEAN), list(STD)).numpy()
    ours = TF.to_chw_normalized(img, MEAN, STD, flip=flip)
    assert ours.shape == (3, h, w) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-5)


def test_normalize_into_batch_slot():
    img = make_image(20, 30, seed=3)
    batch = np.full((3, 3, 20, 30), -7.0, np.float32)
    res = TF.to_chw_normalized(img, MEAN, STD, out=batch[1])
    assert np.shares_memory(res, batch)
    np.testing.assert_array_equal(batch[1], TF.to_chw_normalized(img, MEAN, STD))
    assert (batch[0] == -7.0).all() and (batch[2] == -7.0).all()


@pytest.mark.parametrize("flip", [False, True])
def test_to_chw_uint8_exact(flip):
    img = make_image(17, 23, seed=6)
    ref = img[:, ::-1] if flip else img
    np.testing.assert_array_equal(TF.to_chw_uint8(img, flip=flip), ref.transpose(2, 0, 1))
    out = np.zeros((2, 3, 17, 23), np.uint8)
    TF.to_chw_uint8(img, flip=flip, out=out[1])
    np.testing.assert_array_equal(out[1], ref.transpose(2, 0, 1))


def test_threads_give_identical_results():
    img = make_image(375, 500, seed=12)
    expect = TF.resized_crop(img, 10, 20, 300, 400, (224, 224), "bicubic")
    expect_n = TF.to_chw_normalized(expect, MEAN, STD, flip=True)
    results, errors = [], []

    def work():
        try:
            for _ in range(10):
                r = TF.resized_crop(img, 10, 20, 300, 400, (224, 224), "bicubic")
                r2 = TF.adjust_hue(TF.adjust_saturation(r, 1.3), 0.1)
                results.append((r, TF.to_chw_normalized(r, MEAN, STD, flip=True), r2))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 40
    expect2 = TF.adjust_hue(TF.adjust_saturation(expect, 1.3), 0.1)
    for r, n, r2 in results:
        np.testing.assert_array_equal(r, expect)
        np.testing.assert_array_equal(n, expect_n)
        np.testing.assert_array_equal(r2, expect2)


# ------------------------------------------------------------------------------- bad inputs

def test_bad_box_and_sizes():
    img = make_image(20, 30)
    for box in [(-1, 0, 10, 10), (0, 0, 31, 10), (0, 0, 10, 21), (5, 0, 5, 10),
                (10, 0, 5, 10), (0, 0, float("inf"), 10), (0, 0, float("nan"), 10)]:
        with pytest.raises(ValueError, match="box"):
            TF.resize(img, (8, 8), box=box)
    with pytest.raises(ValueError):
        TF.resize(img, (8, 8), box=(0, 0, 1))
    for size in [(0, 5), (5, 0), (-1, 3), 0]:
        with pytest.raises(ValueError):
            TF.resize(img, size)
    with pytest.raises(TypeError):
        TF.resize(img, (2.5, 3))
    for window in [(0, 0, 0, 5), (0, 0, 21, 5), (-1, 0, 5, 5), (0, 26, 5, 5)]:
        with pytest.raises(ValueError, match="outside|positive"):
            TF.resized_crop(img, *window, (8, 8))
        with pytest.raises(ValueError, match="outside|positive"):
            TF.crop(img, *window)
    with pytest.raises(TypeError):
        TF.crop(img, 0.5, 0, 3, 3)


def test_bad_arrays():
    img = make_image(20, 30)
    with pytest.raises(TypeError, match="uint8"):
        TF.resize(img.astype(np.float32), (8, 8))
    with pytest.raises(TypeError, match="ndarray"):
        TF.resize(img.tolist(), (8, 8))
    with pytest.raises(ValueError, match="shape"):
        TF.resize(img[None], (8, 8))
    with pytest.raises(ValueError, match="contiguous"):
        TF.resize(img[:, ::2], (8, 8))
    with pytest.raises(ValueError, match="contiguous"):
        TF.horizontal_flip(img[::-1])
    with pytest.raises(ValueError, match="channels"):
        TF.adjust_hue(np.zeros((4, 4, 2), np.uint8), 0.1)
    with pytest.raises(ValueError, match="channels"):
        TF.to_chw_normalized(np.zeros((4, 4, 1), np.uint8), MEAN, STD)
    with pytest.raises(ValueError, match="empty"):
        TF.resize(np.zeros((0, 4, 3), np.uint8), (2, 2))
    with pytest.raises(ValueError, match="shape"):
        TF.to_chw_normalized(img, MEAN, STD, out=np.empty((3, 30, 20), np.float32))
    with pytest.raises(TypeError, match="float32"):
        TF.to_chw_normalized(img, MEAN, STD, out=np.empty((3, 20, 30), np.float64))
    with pytest.raises(ValueError, match="contiguous"):
        TF.to_chw_normalized(img, MEAN, STD, out=np.empty((3, 20, 60), np.float32)[:, :, ::2])
    with pytest.raises(ValueError, match="std"):
        TF.to_chw_normalized(img, MEAN, (0.2, 0.0, 0.2))
    with pytest.raises(ValueError):
        TF.to_chw_normalized(img, (0.1, 0.2), STD)
    with pytest.raises(ValueError, match="shape"):
        TF.resize(img, (8, 8), out=np.empty((8, 9, 3), np.uint8))
    ro = img.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        TF.adjust_brightness(ro, 1.2, inplace=True)
    np.testing.assert_array_equal(TF.adjust_brightness(ro, 1.0), img)  # read-only input is fine


def test_native_entry_points_revalidate():
    """The def wrappers check what their memory safety depends on, whatever Python did."""
    img = make_image(20, 30)
    with pytest.raises(ValueError):
        _resample.resample_into(img[:, ::2], np.empty((4, 4, 3), np.uint8))
    with pytest.raises(ValueError, match="channels"):
        _resample.resample_into(img, np.empty((4, 4, 1), np.uint8))
    with pytest.raises(ValueError):
        _resample.resample_into(img, np.empty((0, 4, 3), np.uint8))
    with pytest.raises(ValueError, match="crop"):
        _resample.resample_into(img, np.empty((4, 4, 3), np.uint8), crop=(15, 0, 10, 10))
    with pytest.raises(ValueError, match="crop"):
        _resample.resample_into(img, np.empty((4, 4, 3), np.uint8), crop=(2**62, 0, 10, 10))
    with pytest.raises(ValueError, match="filter"):
        _resample.resample_into(img, np.empty((4, 4, 3), np.uint8), filter=7)
    with pytest.raises(ValueError, match="outside"):
        _resample.crop_into(img, np.empty((10, 10, 3), np.uint8), top=11, left=0)
    with pytest.raises(ValueError, match="outside"):
        _resample.crop_into(img, np.empty((10, 10, 3), np.uint8), top=2**62, left=0)
    with pytest.raises(ValueError):
        _resample.crop_into(img, np.empty((21, 10, 3), np.uint8), top=0, left=0)
    with pytest.raises(ValueError, match="overlap"):
        _resample.hflip_into(img[1:], img[:-1])
    with pytest.raises(ValueError):
        _chw.normalize_chw_into(img, np.empty((3, 20, 29), np.float32), mean=MEAN, std=STD)
    with pytest.raises(ValueError):
        _chw.chw_into(img, np.empty((3, 30, 20), np.uint8))
    with pytest.raises(ValueError):
        _colour.adjust_hue_(img, 0.7)
    with pytest.raises(ValueError):
        _colour.adjust_brightness_(np.zeros((4, 4, 4), np.uint8), 1.0)
    with pytest.raises(ValueError):  # read-only buffer for an in-place kernel
        ro = img.copy()
        ro.flags.writeable = False
        _colour.adjust_contrast_(ro, 1.0)
