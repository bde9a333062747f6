"""The fused decode -> resized crop -> flip -> normalize path against Pillow + torchvision v2."""

import io
import random
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from helpers import sweep
import torch
from PIL import Image
from torchvision.transforms.v2 import functional as F

import turboloader
from turboloader.transforms import RandomResizedCrop
from turboloader.tools.synthetic import synthetic_jpegs

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def jpegs():
    return [b for b, _ in synthetic_jpegs(12, seed=5)]


def _reference(data, top, left, h, w, size, flip, normalize=True, interpolation="bilinear"):
    img = F.pil_to_tensor(Image.open(io.BytesIO(data)).convert("RGB"))
    mode = {"bilinear": F.InterpolationMode.BILINEAR, "bicubic": F.InterpolationMode.BICUBIC}
    img = F.resized_crop(img, top, left, h, w, list(size), interpolation=mode[interpolation],
                         antialias=True)
    if flip:
        img = F.horizontal_flip(img)
    if not normalize:
        return img.numpy()
    return F.normalize(F.to_dtype(img, torch.float32, scale=True), MEAN, STD).numpy()


def _windows(jpegs, seed=0):
    rng = random.Random(seed)
    for data in jpegs:
        hdr = turboloader.decode_jpeg_header(data)
        p = RandomResizedCrop(224).make_params((hdr.height, hdr.width), rng=rng)
        yield data, (p["top"], p["left"], p["height"], p["width"]), rng.random() < 0.5


@pytest.mark.parametrize("size", sweep([(160, 96), (1, 1), (224, 224), (300, 500)], fast=2))
def test_full_scale_matches_torchvision_resized_crop(jpegs, size):
    for data, (top, left, h, w), flip in _windows(jpegs):
        ours = turboloader.decode_resized_crop(data, top, left, h, w, size, flip=flip, mean=MEAN,
                                               std=STD, dct_scaling=False)
        ref = _reference(data, top, left, h, w, size, flip)
        assert ours.shape == (3, *size) and ours.dtype == np.float32
        assert np.abs(ours - ref).max() <= 0.02


def test_uint8_output_matches_torchvision_and_bicubic_matches_pillow(jpegs):
    for data, (top, left, h, w), flip in _windows(jpegs, seed=1):
        ours = turboloader.decode_resized_crop(data, top, left, h, w, 224, flip=flip,
                                               dtype=np.uint8, dct_scaling=False)
        ref = _reference(data, top, left, h, w, (224, 224), flip, normalize=False)
        assert ours.dtype == np.uint8
        assert np.abs(ours.astype(int) - ref).max() <= 1
        # Bicubic: Pillow's filter, horizontal pass then vertical (torchvision's order;
        # Pillow 13 sometimes runs them the other way round, see tests/native/test_imgproc.py).
        ours = turboloader.decode_resized_crop(data, top, left, h, w, 224, dtype=np.uint8,
                                               dct_scaling=False, interpolation="bicubic")
        window = Image.open(io.BytesIO(data)).convert("RGB").crop((left, top, left + w, top + h))
        pil = window.resize((224, h), Image.BICUBIC).resize((224, 224), Image.BICUBIC)
        assert np.abs(ours.transpose(1, 2, 0).astype(int) - np.asarray(pil)).max() <= 1


def test_dct_scaled_path_stays_close_on_smooth_images():
    # DCT scaling changes the antialiasing filter; on smooth content the effect is small.
    yy, xx = np.mgrid[0:600, 0:800]
    img = np.stack([128 + 100 * np.sin(xx / (17 + 6 * c) + yy / 29) for c in range(3)], -1)
    buf = io.BytesIO()
    Image.fromarray(img.astype(np.uint8)).save(buf, "JPEG", quality=95)
    data = buf.getvalue()
    ours = turboloader.decode_resized_crop(data, 40, 60, 520, 700, 224, dtype=np.uint8)
    ref = _reference(data, 40, 60, 520, 700, (224, 224), False, normalize=False)
    diff = np.abs(ours.astype(int) - ref)
    assert diff.max() <= 6 and diff.mean() < 1.0


def test_writes_into_a_batch_slot_only(jpegs):
    batch = np.full((3, 3, 64, 64), 7.0, np.float32)
    data = jpegs[0]
    out = turboloader.decode_resized_crop(data, 0, 0, 100, 100, 64, mean=MEAN, std=STD,
                                          out=batch[1])
    assert out is not None and np.shares_memory(out, batch)
    assert (batch[0] == 7).all() and (batch[2] == 7).all()
    assert np.abs(batch[1] - _reference(data, 0, 0, 100, 100, (64, 64), False)).max() <= 0.5


def test_threads_give_identical_results(jpegs):
    jobs = list(_windows(jpegs * 3, seed=2))

    def run(job):
        data, (top, left, h, w), flip = job
        return turboloader.decode_resized_crop(data, top, left, h, w, 128, flip=flip,
                                               mean=MEAN, std=STD)

    serial = [run(j) for j in jobs]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(run, jobs))
    for a, b in zip(serial, threaded):
        np.testing.assert_array_equal(a, b)


def test_bad_arguments_and_bad_data_raise_typed_errors(jpegs):
    data = jpegs[0]
    hdr = turboloader.decode_jpeg_header(data)
    with pytest.raises(ValueError, match="inside"):
        turboloader.decode_resized_crop(data, 0, 0, hdr.height + 1, 10, 32)
    with pytest.raises(ValueError, match="inside"):
        turboloader.decode_resized_crop(data, -1, 0, 10, 10, 32)
    with pytest.raises(ValueError, match="shape"):
        turboloader.decode_resized_crop(data, 0, 0, 10, 10, 32, out=np.empty((3, 31, 32), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        turboloader.decode_resized_crop(data, 0, 0, 10, 10, 32,
                                        out=np.empty((3, 32, 64), np.float32)[:, :, ::2])
    with pytest.raises(TypeError):
        turboloader.decode_resized_crop(data, 0, 0, 10, 10, 32, out=np.empty((3, 32, 32), np.int16))
    with pytest.raises(ValueError, match="uint8"):
        turboloader.decode_resized_crop(data, 0, 0, 10, 10, 32, dtype=np.uint8, mean=MEAN, std=STD)
    with pytest.raises(turboloader.DecodeError, match="Premature end"):
        turboloader.decode_resized_crop(data[: len(data) // 2], 0, 0, 10, 10, 32)
    with pytest.raises(turboloader.DecodeError):
        turboloader.decode_resized_crop(b"not a jpeg", 0, 0, 10, 10, 32)
    with pytest.raises(turboloader.DecodeError, match="max_pixels"):
        turboloader.decode_resized_crop(data, 0, 0, 10, 10, 32, max_pixels=100)


@pytest.mark.parametrize("dct_scaling", [False, True])
def test_truncation_is_an_error_wherever_the_window_lies(jpegs, dct_scaling):
    # The crop decode stops after the window's last row, but whether a sample is intact
    # must not depend on where RandomResizedCrop put the window this epoch.
    data = jpegs[1]
    hdr = turboloader.decode_jpeg_header(data)
    for cut in (len(data) // 3, len(data) - 100, len(data) - 2):
        for top, height in ((0, 16), (0, hdr.height), (hdr.height - 16, 16)):
            with pytest.raises(turboloader.DecodeError, match="Premature end"):
                turboloader.decode_resized_crop(data[:cut], top, 0, height, hdr.width, 64,
                                                dct_scaling=dct_scaling)
    # the same windows of the intact file decode
    turboloader.decode_resized_crop(data, 0, 0, 16, hdr.width, 64)


def test_warnings_are_reported_and_strict_raises():
    buf = io.BytesIO()
    Image.fromarray(np.full((64, 64, 3), 90, np.uint8)).save(buf, "JPEG")
    data = buf.getvalue()
    # junk between two header segments: libjpeg warns "extraneous bytes before marker"
    sos = data.index(b"\xff\xda")
    bad = data[:sos] + b"\x00\x01\x02" + data[sos:]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        turboloader.decode_resized_crop(bad, 0, 0, 64, 64, 32)
    assert any(issubclass(w.category, turboloader.DecodeWarning) for w in caught)
    with pytest.raises(turboloader.DecodeError, match="extraneous"):
        turboloader.decode_resized_crop(bad, 0, 0, 64, 64, 32, strict=True)
