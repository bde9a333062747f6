"""Masks' and boxes' geometry for a whole batch, from the image's drawn :class:`Geometry
<turboloader.transforms._batch.Geometry>`: what torchvision v2 does to a ``Mask`` (nearest
``resize`` / ``crop`` / ``resized_crop``, ``horizontal_flip``) and to ``BoundingBoxes`` (the
same, then clamped) given with the image, as NumPy index maps and torch expressions over all
the batch's rows at once instead of replaying the pipeline sample by sample.

Equality with torchvision (tested against it): the index of output pixel ``j`` is torch's
nearest index ``min(floor(j * (size / resized)), size - 1)`` in float32; the boxes go through
the same float32 operations in the same order as torchvision's kernels
(``crop_bounding_boxes``: subtract, clamp in XYXY; ``resize_bounding_boxes``: multiply by
the float32 ratios; ``horizontal_flip_bounding_boxes``), per row instead of per call.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["boxes_batch", "nearest_maps"]


def _axis(a, n_out):
    # a: (k, 4) (origin, offset, size, resized) of one axis -> int32 (k, n_out) source indices
    origin, offset, size, resized = (a[:, c:c + 1] for c in range(4))
    scale = size.astype(np.float32) / resized.astype(np.float32)   # torch: float(in) / out
    j = (offset + np.arange(n_out)).astype(np.float32)
    idx = np.floor(j * scale).astype(np.int64)
    return (origin + np.minimum(idx, size - 1)).astype(np.int32)


def nearest_maps(geometry, rows, flip, out_hw, /):
    """``(ymap, xmap)``: ``int32 (k, oh)`` and ``(k, ow)``, the stored pixel rows and columns
    each output pixel of a mask comes from, for the batch rows ``rows`` (``int (k,)``)
    flipped where ``flip`` (``bool (k,)``)."""
    a = geometry.axes[rows]
    ymap = _axis(a[:, 0], int(out_hw[0]))
    xmap = _axis(a[:, 1], int(out_hw[1]))
    flip = np.asarray(flip, bool)
    if flip.any():
        xmap[flip] = xmap[flip, ::-1]
    return ymap, xmap


def boxes_batch(boxes, fmt, geometry, rows, flip, out_hw, /):
    """The ``N_i x 4`` float32 tensors ``boxes`` (one per row of ``rows``, in ``fmt``:
    ``"XYXY"``, ``"XYWH"`` or ``"CXCYWH"``) on the output canvas ``out_hw``, as torchvision's
    kernels move them with each row's drawn crop, resize and flip: a list of tensors."""
    from torchvision.transforms.v2.functional import convert_bounding_box_format
    from torchvision.tv_tensors import BoundingBoxFormat

    counts = [len(b) for b in boxes]
    if not sum(counts):
        return [b.clone() for b in boxes]
    fmt = BoundingBoxFormat[fmt]
    xyxy = fmt == BoundingBoxFormat.XYXY
    per = torch.from_numpy(np.repeat(np.arange(len(boxes)), counts))
    a = torch.from_numpy(geometry.axes[rows])[per]          # (M, 2, 4) per box
    b = torch.cat(boxes).to(torch.float32)

    def crop(origin_col, canvas_h, canvas_w):
        nonlocal b
        left = a[:, 1, origin_col].to(torch.float32)
        top = a[:, 0, origin_col].to(torch.float32)
        zero = torch.zeros_like(left)
        sub = torch.stack([left, top, left, top] if xyxy else [left, top, zero, zero], 1)
        b = b - sub
        # torchvision's _clamp_bounding_boxes: in XYXY, then back
        c = convert_bounding_box_format(b.clone(), old_format=fmt,
                                        new_format=BoundingBoxFormat.XYXY, inplace=True)
        c[:, 0::2] = torch.clamp(c[:, 0::2], min=torch.zeros_like(canvas_w)[:, None],
                                 max=canvas_w[:, None])
        c[:, 1::2] = torch.clamp(c[:, 1::2], min=torch.zeros_like(canvas_h)[:, None],
                                 max=canvas_h[:, None])
        b = convert_bounding_box_format(c, old_format=BoundingBoxFormat.XYXY, new_format=fmt,
                                        inplace=True)

    def resize():
        nonlocal b
        size, resized = a[:, :, 2].to(torch.float64), a[:, :, 3].to(torch.float64)
        ratio = (resized / size).to(torch.float32)           # (M, 2): (h, w) ratios
        same = (a[:, :, 2] == a[:, :, 3]).all(1)
        ratio[same] = 1.0                                     # torchvision returns them as is
        w, h = ratio[:, 1], ratio[:, 0]
        b = b.mul(torch.stack([w, h, w, h], 1))

    out_h, out_w = int(out_hw[0]), int(out_hw[1])
    if geometry.crop_first:
        if geometry.crop:
            crop(0, a[:, 0, 2].to(torch.float32), a[:, 1, 2].to(torch.float32))
        resize()
    else:
        resize()
        if geometry.crop:
            crop(1, torch.full((len(b),), float(out_h)), torch.full((len(b),), float(out_w)))
    flip = torch.from_numpy(np.asarray(flip, bool))[per]
    if flip.any():
        f = b.clone()
        if fmt == BoundingBoxFormat.XYXY:
            f[:, 0] = b[:, 2].sub(out_w).neg()
            f[:, 2] = b[:, 0].sub(out_w).neg()
        elif fmt == BoundingBoxFormat.XYWH:
            f[:, 0] = b[:, 0].add(b[:, 2]).sub(out_w).neg()
        else:
            f[:, 0] = b[:, 0].sub(out_w).neg()
        b = torch.where(flip[:, None], f, b)
    return list(torch.split(b, counts))
