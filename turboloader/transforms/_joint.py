"""Joint samples with the image part fused: JPEG bytes through a pipeline's fused plan, and
masks / boxes through the same pipeline with the same draws.

A fused plan draws its parameters in the Compose's order from the JPEG header's size, the
same draws as calling the classes on the decoded image (see ``_plan``). So the annotations
replay the pipeline from the generator's state before the image: every member draws the
same parameters from the same size (an annotation's canvas is the image's size) and applies
them with ``_transform_other``; the generator must end in the same state both times, which
is checked.
"""

from __future__ import annotations

from typing import Any
import torch

from turboloader.transforms._plan import plan
from turboloader.transforms._random import TorchRandom, current_rng, using_rng

__all__ = ["transform_jointly"]


def _snapshot(rng):
    if isinstance(rng, TorchRandom):
        return torch.get_rng_state()
    return rng.getstate()


def _restore(rng, state):
    if isinstance(rng, TorchRandom):
        torch.set_rng_state(state)
    else:
        rng.setstate(state)


def _same(a, b):
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def transform_jointly(transform: Any, data: Any, /, *annotations: Any, rng: Any = None,
                      max_pixels: int | None = None):
    """``(image, *annotations)`` transformed with one set of drawn parameters, the image
    part fused when it can be.

    ``data`` is an image's encoded bytes (or a decoded image: PIL, tensor or HWC array);
    ``annotations`` are ``tv_tensors.Mask`` / ``BoundingBoxes`` / ``KeyPoints`` of that
    image (or anything else, passed through). When ``data`` is JPEG bytes and ``transform``
    has a fused plan (:func:`turboloader.transforms.plan`), the image is decoded and
    transformed in one native call (only the drawn window is decoded) and the annotations
    follow the same parameters; otherwise the image is decoded (``decode_image``) and
    ``transform(image, *annotations)`` runs as torchvision v2 would. Either way the result
    equals ``transform(decoded image, *annotations)`` drawn from the same generator (the
    image within the fused path's documented tolerance).

    Args:
        transform: a turboloader pipeline (a ``Compose`` of turboloader transforms).
        data: JPEG/PNG/... bytes, or a decoded image.
        annotations: the sample's masks, boxes, keypoints (the image's size).
        rng: the generator to draw from (e.g. ``sample_rng(seed, epoch, index)``); default
            :func:`~turboloader.transforms.current_rng`.
        max_pixels: refuse larger images (default ``DEFAULT_MAX_PIXELS``).

    Returns:
        a tuple ``(image, *annotations)``.

    Raises:
        ValueError: an annotation's size differs from the image's.
        DecodeError: the bytes do not decode.
        RuntimeError: the annotations drew differently from the fused image (a pipeline
            whose draws depend on more than the image size; report it).

    Example:
        >>> from torchvision import tv_tensors                           # doctest: +SKIP
        >>> t = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor()])
        >>> image, mask = transform_jointly(t, jpeg_bytes, tv_tensors.Mask(mask),
        ...                                 rng=sample_rng(0, epoch, index))
    """
    from turboloader.decode import DEFAULT_MAX_PIXELS, decode_image
    from turboloader.io.codec import Codec, detect_codec, image_size

    if max_pixels is None:
        max_pixels = DEFAULT_MAX_PIXELS
    rng = current_rng() if rng is None else rng
    encoded = isinstance(data, (bytes, bytearray, memoryview))
    fused = plan(transform) if encoded and annotations else None
    if fused is not None and detect_codec(data) == Codec.JPEG:
        w, h = image_size(data, Codec.JPEG)
        for a in annotations:
            size = getattr(a, "canvas_size", None)
            if size is None and type(a).__name__ == "Mask":
                size = tuple(a.shape[-2:])
            if size is not None and tuple(int(v) for v in size) != (h, w):
                raise ValueError(f"an annotation of size {tuple(size)} for an image of size "
                                 f"{(h, w)}")
        before = _snapshot(rng)
        image = fused.from_jpeg(data, rng=rng, max_pixels=max_pixels)
        after = _snapshot(rng)
        _restore(rng, before)
        with using_rng(rng):
            out = transform(*annotations)
        if not _same(_snapshot(rng), after):
            raise RuntimeError(f"the annotations drew other parameters than the fused image "
                               f"through {transform!r}")
        return (image, *(out if len(annotations) > 1 else (out,)))
    if encoded:
        data = decode_image(data, max_pixels=max_pixels)
    with using_rng(rng):
        out = transform(data, *annotations)
    return tuple(out) if annotations else (out,)
