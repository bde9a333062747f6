"""Single encoded images made in the test."""

import io

import numpy as np
from PIL import Image


def pixels(height, width, *, seed=0):
    """A smooth (JPEG-friendly) ``(height, width, 3)`` uint8 image."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = rng.uniform(0, 255, 3)
    img = (base + 60 * np.sin(x[..., None] / 7.0 + y[..., None] / 11.0 + np.arange(3)))
    return np.clip(img, 0, 255).astype(np.uint8)


def jpeg_bytes(height, width, *, seed=0, quality=90):
    """A JPEG of :func:`pixels`."""
    buf = io.BytesIO()
    Image.fromarray(pixels(height, width, seed=seed)).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def png_bytes(height, width, *, seed=0):
    """``(png, pixels)``: a lossless PNG and the pixels it holds."""
    img = pixels(height, width, seed=seed)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    return buf.getvalue(), img


def as_kind(kind, arr):
    """The (H, W, 3) uint8 array ``arr`` as the input kind a transform test runs on:
    ``"pil"`` (a PIL image), ``"tensor"`` (a contiguous CHW uint8 tensor) or ``"ndarray"``."""
    if kind == "pil":
        return Image.fromarray(arr)
    if kind == "tensor":
        import torch

        return torch.from_numpy(arr).permute(2, 0, 1).contiguous()
    return arr
