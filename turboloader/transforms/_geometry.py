"""Geometric transforms with torchvision v2's names, arguments, defaults and semantics:
resizing, crops, flips, padding, the warps (rotation, affine, perspective) and the
multi-size ones (``FiveCrop``, ``TenCrop``, ``ScaleJitter``, ``RandomShortestSize``).

Each draws its parameters in :meth:`make_params` (from the image size and
:func:`~turboloader.transforms._random.current_rng`) and applies them through
:mod:`turboloader.transforms.functional`: PIL images and tensors get torchvision's own
functionals, HWC uint8 arrays turboloader's native kernels (the warps bit for bit equal to
torchvision's uint8 tensor kernels, nearest and bilinear, fills, expand; resizing within one
level, antialiased like Pillow). ``Resize``, ``CenterCrop``, ``RandomCrop``,
``RandomResizedCrop`` and ``RandomHorizontalFlip`` fuse with the decoder (see
:func:`turboloader.transforms.plan`).
"""

from __future__ import annotations

from typing import Any
import math
import numbers
import warnings
from collections.abc import Sequence

import numpy as np
import torch

from turboloader.decode.sizes import resized_sizes
from turboloader.transforms import functional as F
from turboloader._native import _draws
from turboloader.transforms._draws import KeyDraws, RngDraws, bernoulli, coin, one_row
from turboloader.transforms._transform import (
    Transform,
    _check_interpolation,
    _check_sequence_input,
    _interp_repr,
    _RandomApplyTransform,
    _rng,
    _setup_angle,
    _setup_fill,
    _setup_size,
    _tvf,
    _uniform,
)

__all__ = [
    "CenterCrop",
    "FiveCrop",
    "Pad",
    "RandomAffine",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomPerspective",
    "RandomResize",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomShortestSize",
    "RandomVerticalFlip",
    "Resize",
    "ScaleJitter",
    "TenCrop",
]



def _fused_filter(interpolation, antialias):
    """The native filter code for the fused path, or None when it would not match torchvision
    on tensors (``"nearest"`` is torchvision's legacy floor rule; ``antialias=False``)."""
    if antialias is not True:
        return None
    name = getattr(interpolation, "value", interpolation)
    if name in ("bilinear", "bicubic", "nearest-exact"):
        return int(F._interpolation(name))
    return None


class _Resizing(Transform):
    """Base of the resizes: :meth:`make_params` gives ``{"size": ...}`` (an output
    ``(height, width)`` or torchvision's ``[shorter side]``), and the image, masks and boxes
    are resized to it (torchvision v2's functionals for the annotations)."""

    def transform(self, img, params):
        return F.resize(img, list(params["size"]), self.interpolation, antialias=self.antialias)

    def _transform_other(self, inpt, params):
        return _tvf().resize(inpt, list(params["size"]))

    def _extra_repr(self):
        return (f"min_size={self.min_size}, max_size={self.max_size}, "
                f"interpolation={_interp_repr(self.interpolation)!r}, "
                f"antialias={self.antialias}")


class Resize(_Resizing):
    """Resize to ``size``, like ``torchvision.transforms.v2.Resize``.

    Args:
        size: ``(h, w)``; an int or ``[int]`` for the shorter edge (the longer one is
            ``int(size * long / short)``); ``None`` to use ``max_size`` for the longer edge.
        interpolation: ``"bilinear"`` (default), ``"bicubic"``, ``"nearest"``,
            ``"nearest-exact"`` or an ``InterpolationMode``. NumPy arrays support
            bilinear, bicubic and Pillow's nearest (= ``"nearest-exact"``).
        max_size: cap on the longer edge when ``size`` is an int (or None).
        antialias: as torchvision (tensors); arrays are always antialiased, as Pillow.

    Raises:
        ValueError: bad ``size``/``max_size`` combinations (as torchvision).

    Example:
        >>> Resize(256)(img).shape  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, size: int | Sequence[int], interpolation: Any = "bilinear",
                 max_size: int | None = None, antialias: bool | None = True) -> None:
        if isinstance(size, int) and not isinstance(size, bool):
            size = [size]
        elif isinstance(size, Sequence) and len(size) in {1, 2}:
            size = list(size)
        elif size is None:
            if not isinstance(max_size, int):
                raise ValueError(f"max_size must be an integer when size is None, but got "
                                 f"{max_size} instead.")
        else:
            raise ValueError("size can be an integer, a sequence of one or two integers, or "
                             f"None, but got {size} instead.")
        if size is not None:
            if not all(isinstance(s, int) and not isinstance(s, bool) for s in size):
                raise TypeError(f"size must contain ints, got {size!r}")
            if any(s <= 0 for s in size):
                raise ValueError(f"size must be positive, got {size!r}")
            if max_size is not None:
                if len(size) != 1:
                    raise ValueError("max_size should only be passed if size is None or "
                                     "specifies the length of the smaller edge, i.e. size "
                                     "should be an int or a sequence of length 1 in "
                                     "torchscript mode.")
                if max_size <= size[0]:
                    raise ValueError(f"max_size = {max_size} must be strictly greater than "
                                     f"the requested size for the smaller edge size = {size}")
        self.size = size
        self.interpolation = _check_interpolation(interpolation)
        self.max_size = max_size
        self.antialias = antialias

    def output_size(self, size):
        """The resized ``(height, width)`` of an image of ``size``, torchvision's rounding."""
        return F._array._resized_size(self.size, size[0], size[1], self.max_size)

    def _output_sizes(self, sizes):
        """:meth:`output_size` for every row of ``sizes`` (``int64 (n, 2)``)."""
        return resized_sizes(self.size, sizes, self.max_size)

    def make_params(self, size, *, rng=None):
        """No randomness: ``{"size": (height, width)}``, the output size."""
        return {"size": self.output_size(size)}

    def _extra_repr(self):
        return (f"size={self.size}, interpolation={self.interpolation!r}, "
                f"max_size={self.max_size}, antialias={self.antialias}")


class CenterCrop(Transform):
    """Crop the centre, like ``torchvision.transforms.v2.CenterCrop``.

    The offsets are ``int(round((H - h) / 2.0))`` (torchvision's rounding). When the crop
    is larger than the image, the image is first zero-padded as torchvision does; the fused
    path then falls back to decoding the whole image and running these classes one by one.

    Args:
        size: ``(h, w)``, or an int (or ``[int]``) for a square.

    Example:
        >>> CenterCrop(224)(img)  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = _setup_size(size)

    def make_params(self, size, *, rng=None):
        """No randomness: the crop ``top, left, height, width`` and the zero ``padding``
        ``[left, top, right, bottom]`` needed first (all zeros unless the crop is larger)."""
        ch, cw = self.size
        h, w = size
        padding = F._array._center_padding((h, w), (ch, cw))
        ph, pw = h + padding[1] + padding[3], w + padding[0] + padding[2]
        p = self._draw_batch(np.array([[ph, pw]], np.int64), RngDraws(_rng(rng)))
        return {"top": int(p["top"][0]), "left": int(p["left"][0]),
                "height": ch, "width": cw, "padding": padding}

    def _draw_batch(self, sizes, d, mask=None):
        """The offsets for every row of ``sizes`` (``int64 (n, 2)``, the padded image):
        ``{"top", "left"}``, ``int64 (n,)``, ``round((H - h) / 2.0)``; no draws."""
        ch, cw = self.size
        return {"top": np.rint((sizes[:, 0] - ch) / 2.0).astype(np.int64),
                "left": np.rint((sizes[:, 1] - cw) / 2.0).astype(np.int64)}

    def transform(self, img, params):
        return F.center_crop(img, list(self.size))

    def _transform_other(self, inpt, params):
        return _tvf().center_crop(inpt, list(self.size))

    def _extra_repr(self):
        return f"size={self.size}"


_PADDING_MODES = ("constant", "edge", "reflect", "symmetric")


class RandomCrop(Transform):
    """Crop at a random place, like ``torchvision.transforms.v2.RandomCrop``.

    Args:
        size: ``(h, w)`` or an int for a square.
        padding: int, or 1, 2 or 4 ints (left/right/top/bottom as torchvision), applied
            before cropping.
        pad_if_needed: pad an image smaller than ``size`` (on both sides).
        fill: constant padding value: a number, or one per channel.
        padding_mode: ``"constant"``, ``"edge"``, ``"reflect"`` or ``"symmetric"``.

    The fused path handles ``padding=None, pad_if_needed=False`` only.

    Raises:
        ValueError: bad padding / padding_mode; at call time, an image smaller than
            ``size`` (after padding). TypeError: bad ``fill``.

    Example:
        >>> RandomCrop(32, padding=4)(img)  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, size: int | Sequence[int], padding: int | Sequence[int] | None = None,
                 pad_if_needed: bool = False, fill: Any = 0, padding_mode: str = "constant"
                ) -> None:
        self.size = _setup_size(size)
        if pad_if_needed or padding is not None:
            if padding is not None:
                msg = f"Padding must be an int or a 1, 2, or 4 element of tuple or list, got {padding}."
                if isinstance(padding, (tuple, list)):
                    if len(padding) not in (1, 2, 4) or not all(isinstance(p, int) for p in padding):
                        raise ValueError(msg)
                elif not isinstance(padding, int):
                    raise ValueError(msg)
            if padding_mode not in _PADDING_MODES:
                raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")
        if fill is not None and not isinstance(fill, (numbers.Number, tuple, list)):
            raise TypeError("Got inappropriate fill arg, only Numbers, tuples and lists are "
                            "supported.")
        if padding:
            if isinstance(padding, int):
                padding = [padding] * 4
            elif len(padding) == 1:
                padding = [padding[0]] * 4
            elif len(padding) == 2:
                padding = [padding[0], padding[0], padding[1], padding[1]]
            else:
                padding = [padding[0], padding[2], padding[1], padding[3]]
            # [left, right, top, bottom], as torchvision stores it
            self.padding: list[int] | None = padding
        else:
            self.padding = None
        self.pad_if_needed = pad_if_needed
        self.fill = fill
        self.padding_mode = padding_mode

    def make_params(self, size, *, rng=None):
        """torchvision's draw: ``top``/``left`` uniform over the (padded) image via
        ``rng.randint``; also ``height``, ``width``, ``needs_crop``, ``needs_pad`` and
        ``padding = [left, top, right, bottom]``. Raises ValueError if the crop does not fit."""
        padded_h, padded_w = size
        if self.padding is not None:
            pad_left, pad_right, pad_top, pad_bottom = self.padding
            padded_h += pad_top + pad_bottom
            padded_w += pad_left + pad_right
        else:
            pad_left = pad_right = pad_top = pad_bottom = 0
        ch, cw = self.size
        if self.pad_if_needed:
            if padded_h < ch:
                diff = ch - padded_h
                pad_top += diff
                pad_bottom += diff
                padded_h += 2 * diff
            if padded_w < cw:
                diff = cw - padded_w
                pad_left += diff
                pad_right += diff
                padded_w += 2 * diff
        if padded_h < ch or padded_w < cw:
            raise ValueError(
                f"Required crop size {(ch, cw)} is larger than "
                f"{'padded ' if self.padding is not None else ''}input image size "
                f"{(padded_h, padded_w)}.")
        padding = [pad_left, pad_top, pad_right, pad_bottom]
        p = self._draw_batch(np.array([[padded_h, padded_w]], np.int64), RngDraws(_rng(rng)))
        top, left = int(p["top"][0]), int(p["left"][0])
        return {"needs_crop": padded_h > ch or padded_w > cw, "top": top, "left": left,
                "height": ch, "width": cw, "needs_pad": any(padding), "padding": padding}

    def _draw_batch(self, sizes, d, mask=None):
        """The draws of :meth:`make_params` for every row of ``sizes`` (``int64 (n, 2)``,
        the padded images, each at least the crop; rows outside ``mask`` draw nothing):
        ``{"top", "left"}``, ``int64 (n,)``: ``randint(0, H - h)`` when ``H > h``, else 0,
        then the same for the width."""
        ch, cw = self.size
        live = np.ones(len(sizes), bool) if mask is None else mask
        ty = live & (sizes[:, 0] > ch)
        top = np.where(ty, d.below(np.where(ty, sizes[:, 0] - ch + 1, 1), ty), 0)
        tx = live & (sizes[:, 1] > cw)
        left = np.where(tx, d.below(np.where(tx, sizes[:, 1] - cw + 1, 1), tx), 0)
        return {"top": top, "left": left}

    def transform(self, img, params):
        if params["needs_pad"]:
            img = F.pad(img, params["padding"], fill=self.fill, padding_mode=self.padding_mode)
        if params["needs_crop"]:
            img = F.crop(img, params["top"], params["left"], params["height"], params["width"])
        return img

    def _transform_other(self, inpt, params):
        tvf = _tvf()
        if params["needs_pad"]:
            # torchvision pads masks with 0 whatever the image fill (its fill dict default)
            inpt = tvf.pad(inpt, params["padding"], fill=0, padding_mode=self.padding_mode)
        if params["needs_crop"]:
            inpt = tvf.crop(inpt, params["top"], params["left"], params["height"],
                            params["width"])
        return inpt

    def _extra_repr(self):
        return (f"size={self.size}, padding={self.padding}, pad_if_needed={self.pad_if_needed}, "
                f"fill={self.fill}, padding_mode={self.padding_mode!r}")


class RandomResizedCrop(Transform):
    """Crop a random area and aspect ratio, then resize it, like
    ``torchvision.transforms.v2.RandomResizedCrop`` (same ``get_params`` algorithm: 10
    attempts, then the centre-crop fallback).

    In a fused pipeline the window is drawn from the JPEG header's size, only the window is
    decoded, at the largest DCT reduction that leaves it at least ``size`` (unless
    ``plan(..., dct_scaling=False)``), and the filter is clipped at the window edges as
    torchvision's ``resized_crop`` does. At full scale the result is within 1 uint8 level
    of torchvision on the Pillow-decoded image; DCT scaling differs like a different
    antialiasing filter (measured on 1600-4000 px photographs at 224 x 224: mean absolute
    difference 0.6 uint8 levels, 99th percentile 4, worst pixel 23; on sharp black/white
    edges up to 83 levels; see ``turboloader.transforms._plan`` and the guide's
    "Accuracy and speed against torchvision").

    Args:
        size: output ``(h, w)`` or an int for a square.
        scale: ``(min, max)`` fraction of the image area.
        ratio: ``(min, max)`` aspect ratio (width / height), positive.
        interpolation: as :class:`Resize`.
        antialias: as :class:`Resize`.

    Raises:
        TypeError: ``scale``/``ratio`` not pairs. ValueError: non-positive ratio or size,
        negative scale. Warns (like torchvision) when a pair is not ``(min, max)``.

    Example:
        >>> t = RandomResizedCrop(224)
        >>> t.make_params((480, 640))  # doctest: +SKIP
        {'top': 31, 'left': 102, 'height': 402, 'width': 371}
    """

    _uses_size = True

    def __init__(self, size: int | Sequence[int], scale: Any = (0.08, 1.0),
                 ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0), interpolation: Any = "bilinear",
                 antialias: bool | None = True) -> None:
        self.size = _setup_size(size)
        if not isinstance(scale, Sequence) or len(scale) != 2:
            raise TypeError("Scale should be a sequence of two floats.")
        if not isinstance(ratio, Sequence) or len(ratio) != 2:
            raise TypeError("Ratio should be a sequence of two floats.")
        if any(not isinstance(v, numbers.Real) for v in (*scale, *ratio)):
            raise TypeError(f"scale and ratio must hold numbers, got {scale!r}, {ratio!r}")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            warnings.warn("Scale and ratio should be of kind (min, max)", stacklevel=2)
        if min(ratio) <= 0:
            raise ValueError(f"ratio values must be positive, got {tuple(ratio)}")
        if min(scale) < 0:
            raise ValueError(f"scale values must be non-negative, got {tuple(scale)}")
        self.scale = scale
        self.ratio = ratio
        self.interpolation = _check_interpolation(interpolation)
        self.antialias = antialias
        self._log_ratio = (math.log(ratio[0]), math.log(ratio[1]))

    def make_params(self, size, *, rng=None):
        """torchvision's ``get_params`` drawn from ``rng``: ``{"top", "left", "height",
        "width"}`` of the crop in an image of ``size = (height, width)``."""
        p = self._draw_batch(np.array([size], np.int64), RngDraws(_rng(rng)))
        return {k: int(v[0]) for k, v in p.items()}

    def _draw_batch(self, sizes, d, mask=None):
        """:meth:`make_params` for every row of ``sizes`` (``int64 (n, 2)``; rows outside
        ``mask`` draw nothing): ``{"top", "left", "height", "width"}``, ``int64 (n,)``.

        The definition (one image is a batch of one): attempt a draws the area fraction
        ``uniform(*scale)`` and the log aspect ratio ``uniform(*log(ratio))``; ``w =
        round(sqrt(area * ratio))``, ``h = round(sqrt(area / ratio))``; if the crop fits,
        ``randint(0, H - h)`` then ``randint(0, W - w)`` and done. After 10 failed attempts
        torchvision's centre-crop fallback. ``math.exp`` as torchvision's Python, IEEE
        ``sqrt``, round-half-even.
        """
        n = len(sizes)
        if type(d) is KeyDraws:   # a batch: the same arithmetic row by row in C
            fast = self._draw_native(sizes, d, mask)
            if fast is not None:
                return fast
        H, W = sizes[:, 0], sizes[:, 1]
        area = H * W
        top, left = np.zeros(n, np.int64), np.zeros(n, np.int64)
        hh, ww = H.copy(), W.copy()
        pending = np.ones(n, bool) if mask is None else np.array(mask, bool)
        for attempt in range(10):
            if not pending.any():
                break
            target = area * d.uniform(self.scale[0], self.scale[1], pending)
            logr = d.uniform(self._log_ratio[0], self._log_ratio[1], pending)
            if attempt == 0:   # every row: math.exp as torchvision's (NumPy's may differ)
                ratio = np.fromiter(map(math.exp, logr.tolist()), np.float64, n)
            else:   # the rows still pending, the others' unused (1.0)
                ratio = np.ones(n)
                ratio[pending] = list(map(math.exp, logr[pending].tolist()))
            w = np.rint(np.sqrt(target * ratio))
            h = np.rint(np.sqrt(target / ratio))
            ok = pending & (w > 0) & (w <= W) & (h > 0) & (h <= H)
            if ok.any():   # (h, w finite: the draws' ranges outside ok are not used)
                hi, wi = h.astype(np.int64), w.astype(np.int64)
                i = d.below(H - hi + 1, ok)
                j = d.below(W - wi + 1, ok)
                for dst, src in ((top, i), (left, j), (hh, hi), (ww, wi)):
                    np.copyto(dst, src, where=ok)
                pending &= ~ok
        if pending.any():
            rows = np.flatnonzero(pending)
            Hm, Wm = H[rows], W[rows]
            Hf, Wf = Hm.astype(np.float64), Wm.astype(np.float64)
            in_ratio = Wf / Hf
            rmin, rmax = min(self.ratio), max(self.ratio)
            fh, fw = Hm.copy(), Wm.copy()
            narrow = in_ratio < rmin
            wide = ~narrow & (in_ratio > rmax)
            fh[narrow] = np.rint(Wf[narrow] / rmin).astype(np.int64)
            fw[wide] = np.rint(Hf[wide] * rmax).astype(np.int64)
            top[rows], left[rows] = (Hm - fh) // 2, (Wm - fw) // 2
            hh[rows], ww[rows] = fh, fw
        return {"top": top, "left": left, "height": hh, "width": ww}

    def _draw_native(self, sizes, d, mask):
        """:meth:`_draw_batch` for a :class:`KeyDraws` batch by its native loop
        (``_native._draws.resized_crop``, the same arithmetic bit for bit:
        ``tests/transforms/test_draws.py``), or None where that loop does not take the
        arguments: bounds that are not Python numbers (``uniform``'s arithmetic then
        differs), sizes outside ``[1, 2**32 - 1)``."""
        bounds = (*self.scale, *self._log_ratio, *self.ratio)
        if not all(type(v) in (int, float) for v in bounds):
            return None
        n = len(sizes)
        live = np.ones(n, np.uint8) if mask is None else np.asarray(mask, bool).view(np.uint8)
        sz = sizes[live.view(bool)]
        if sz.size and (int(sz.min()) < 1 or int(sz.max()) >= 0xFFFFFFFF):
            return None
        (s0, s1), (r0, r1) = self.scale, self._log_ratio
        out = np.empty((n, 4), np.int64)
        _draws.resized_crop(np.ascontiguousarray(d.keys), d.ctr, np.asarray(sizes, np.int64),
                            np.ascontiguousarray(live), out,
                            float(s0), float(s1 - s0), float(r0), float(r1 - r0),
                            float(min(self.ratio)), float(max(self.ratio)))
        return {"top": out[:, 0], "left": out[:, 1], "height": out[:, 2], "width": out[:, 3]}

    def transform(self, img, params):
        return F.resized_crop(img, params["top"], params["left"], params["height"],
                              params["width"], list(self.size), self.interpolation,
                              self.antialias)

    def _transform_other(self, inpt, params):
        return _tvf().resized_crop(inpt, params["top"], params["left"], params["height"],
                                   params["width"], list(self.size))

    def _extra_repr(self):
        return (f"size={self.size}, scale={tuple(self.scale)}, ratio={tuple(self.ratio)}, "
                f"interpolation={self.interpolation!r}, antialias={self.antialias}")


class RandomHorizontalFlip(Transform):
    """Mirror left-right with probability ``p``: flips when ``rng.random() < p``.

    Args:
        p: probability in [0, 1] (default 0.5).

    Raises:
        ValueError: ``p`` outside [0, 1].

    Example:
        >>> RandomHorizontalFlip(p=1.0)(img)  # doctest: +SKIP
    """

    def __init__(self, p: float = 0.5) -> None:
        if not isinstance(p, numbers.Real) or not (0.0 <= p <= 1.0):
            raise ValueError("`p` should be a floating point value in the interval [0.0, 1.0].")
        self.p = p

    def make_params(self, size=None, *, rng=None):
        """``{"flip": bool}``: one ``rng.random()`` draw, even when ``p`` is 0 or 1."""
        return {"flip": bool(self._draw_batch(one_row(size), RngDraws(_rng(rng)))[0])}

    def _draw_batch(self, sizes, d, mask=None):
        """``bool (n,)``: whether each row flips, one ``random() < p`` draw per row (rows
        outside ``mask``: False, nothing drawn)."""
        return bernoulli(d, self.p, mask)

    def _fused_ops(self):   # a fused post-geometry member: flips the output
        return 0

    def _fused_draw(self, d, mask, r):
        r.flip ^= self._draw_batch(r.out, d, mask)   # flips commute with the colour operations

    def transform(self, img, params):
        return F.horizontal_flip(img) if params["flip"] else img

    def _transform_other(self, inpt, params):
        return _tvf().horizontal_flip(inpt) if params["flip"] else inpt

    def _extra_repr(self):
        return f"p={self.p}"


class RandomVerticalFlip(_RandomApplyTransform):
    """Mirror top-bottom with probability ``p`` (flips when ``rng.random() < p``), like
    ``torchvision.transforms.v2.RandomVerticalFlip``.

    Args:
        p: probability in [0, 1] (default 0.5).

    Raises:
        ValueError: ``p`` outside [0, 1].

    Example:
        >>> RandomVerticalFlip(p=1.0)(img)  # doctest: +SKIP
    """

    def _apply(self, img, params):
        return F.vertical_flip(img)

    def _transform_other(self, inpt, params):
        return _tvf().vertical_flip(inpt) if params["apply"] else inpt


class Pad(Transform):
    """Pad the borders, like ``torchvision.transforms.v2.Pad``.

    Args:
        padding: int (all sides), ``(left/right, top/bottom)`` or ``(left, top, right, bottom)``.
        fill: constant value or one per channel (``"constant"`` mode).
        padding_mode: ``"constant"``, ``"edge"``, ``"reflect"`` or ``"symmetric"``.

    Raises:
        TypeError / ValueError: as torchvision for bad padding, fill or mode.

    Example:
        >>> Pad(4, fill=0)(img).shape  # doctest: +SKIP
    """

    def __init__(self, padding: int | Sequence[int], fill: Any = 0, padding_mode: str = "constant"
                ) -> None:
        err = f"Padding must be an int or a 1, 2, or 4 element of tuple or list, got {padding}."
        if isinstance(padding, (tuple, list)):
            if len(padding) not in (1, 2, 4) or not all(isinstance(p, int) for p in padding):
                raise ValueError(err)
        elif not isinstance(padding, int) or isinstance(padding, bool):
            raise ValueError(err)
        if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
            raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")
        self.padding = padding
        self.fill = fill
        self._fill = _setup_fill(fill)
        self.padding_mode = padding_mode

    def transform(self, img, params):
        fill = 0 if self._fill is None else self._fill
        return F.pad(img, self.padding, fill=fill, padding_mode=self.padding_mode)

    def _transform_other(self, inpt, params):
        return _tvf().pad(inpt, self.padding, fill=0, padding_mode=self.padding_mode)

    def _extra_repr(self):
        return f"padding={self.padding}, fill={self.fill}, padding_mode={self.padding_mode!r}"


class RandomRotation(Transform):
    """Rotate by an angle drawn uniformly from ``degrees``, like
    ``torchvision.transforms.v2.RandomRotation``.

    On arrays the rotation is a native nogil kernel reproducing torchvision's uint8 tensor
    path (inverse affine matrix, float32 grid, ``grid_sample`` taps, fill blend, rounding).

    Args:
        degrees: a number ``d >= 0`` (range ``(-d, d)``) or a ``(min, max)`` pair.
        interpolation: ``"nearest"`` (default) or ``"bilinear"`` (PIL images also accept
            ``"bicubic"``, through torchvision).
        expand: enlarge the output to hold the whole rotated image.
        center: optional ``(x, y)`` centre of rotation in pixels.
        fill: value outside the rotated image: a number, one per channel, or None.

    Raises:
        ValueError / TypeError: as torchvision for bad degrees, center or fill.

    Example:
        >>> t = RandomRotation(30)
        >>> t.make_params((224, 224))  # doctest: +SKIP
        {'angle': -12.7}
    """

    def __init__(self, degrees: float | Sequence[float], interpolation: Any = "nearest",
                 expand: bool = False, center: Sequence[float] | None = None, fill: Any = 0
                ) -> None:
        self.degrees = _setup_angle(degrees, name="degrees", req_sizes=(2,))
        self.interpolation = _check_interpolation(interpolation)
        self.expand = expand
        if center is not None:
            _check_sequence_input(center, "center", req_sizes=(2,))
        self.center = center
        self.fill = fill
        self._fill = _setup_fill(fill)

    def make_params(self, size=None, *, rng=None):
        """``{"angle": float}`` drawn uniformly from ``degrees``."""
        return {"angle": _uniform(_rng(rng), self.degrees[0], self.degrees[1])}

    def transform(self, img, params):
        return F.rotate(img, params["angle"], self.interpolation, expand=self.expand,
                        center=self.center, fill=self._fill)

    def _transform_other(self, inpt, params):
        return _tvf().rotate(inpt, params["angle"], expand=self.expand, center=self.center)

    def _extra_repr(self):
        return (f"degrees={self.degrees}, interpolation={_interp_repr(self.interpolation)!r}, "
                f"expand={self.expand}, center={self.center}, fill={self.fill}")


class RandomAffine(Transform):
    """Random rotation, translation, scale and shear about the centre, like
    ``torchvision.transforms.v2.RandomAffine`` (same draws: angle, then tx, ty rounded to
    ints, scale, shear x, shear y).

    Args:
        degrees: number ``d`` (``(-d, d)``) or ``(min, max)``; 0 for no rotation.
        translate: optional ``(a, b)`` maximum fractions of width and height.
        scale: optional ``(min, max)`` positive scale range.
        shear: optional number ``s`` (x shear in ``(-s, s)``), ``(min, max)`` (x) or 4 values
            (x then y ranges), in degrees.
        interpolation: ``"nearest"`` (default) or ``"bilinear"``.
        fill: value outside the image: a number, one per channel, or None.
        center: optional ``(x, y)`` centre in pixels.

    Raises:
        ValueError / TypeError: as torchvision.

    Example:
        >>> RandomAffine(15, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5)(img)  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, degrees: float | Sequence[float], translate: Sequence[float] | None = None,
                 scale: Any = None, shear: Any = None, interpolation: Any = "nearest",
                 fill: Any = 0, center: Sequence[float] | None = None) -> None:
        self.degrees = _setup_angle(degrees, name="degrees", req_sizes=(2,))
        if translate is not None:
            _check_sequence_input(translate, "translate", req_sizes=(2,))
            for t in translate:
                if not (0.0 <= t <= 1.0):
                    raise ValueError("translation values should be between 0 and 1")
        self.translate = translate
        if scale is not None:
            _check_sequence_input(scale, "scale", req_sizes=(2,))
            for s in scale:
                if s <= 0:
                    raise ValueError("scale values should be positive")
        self.scale = scale
        self.shear = None if shear is None else _setup_angle(shear, name="shear", req_sizes=(2, 4))
        self.interpolation = _check_interpolation(interpolation)
        self.fill = fill
        self._fill = _setup_fill(fill)
        if center is not None:
            _check_sequence_input(center, "center", req_sizes=(2,))
        self.center = center

    def make_params(self, size, *, rng=None):
        """``{"angle", "translate": (tx, ty) ints, "scale", "shear": (sx, sy)}`` for an image
        of ``size = (height, width)``."""
        rng = _rng(rng)
        height, width = size
        angle = _uniform(rng, self.degrees[0], self.degrees[1])
        if self.translate is not None:
            max_dx = float(self.translate[0] * width)
            max_dy = float(self.translate[1] * height)
            translate = (int(round(_uniform(rng, -max_dx, max_dx))),
                         int(round(_uniform(rng, -max_dy, max_dy))))
        else:
            translate = (0, 0)
        scale = _uniform(rng, self.scale[0], self.scale[1]) if self.scale is not None else 1.0
        shear_x = shear_y = 0.0
        if self.shear is not None:
            shear_x = _uniform(rng, self.shear[0], self.shear[1])
            if len(self.shear) == 4:
                shear_y = _uniform(rng, self.shear[2], self.shear[3])
        return {"angle": angle, "translate": translate, "scale": scale, "shear": (shear_x, shear_y)}

    def transform(self, img, params):
        return F.affine(img, params["angle"], list(params["translate"]), params["scale"],
                        list(params["shear"]), self.interpolation, fill=self._fill,
                        center=self.center)

    def _transform_other(self, inpt, params):
        return _tvf().affine(inpt, params["angle"], list(params["translate"]),
                             params["scale"], list(params["shear"]), center=self.center)

    def _extra_repr(self):
        return (f"degrees={self.degrees}, translate={self.translate}, scale={self.scale}, "
                f"shear={self.shear}, interpolation={_interp_repr(self.interpolation)!r}, "
                f"fill={self.fill}, center={self.center}")


class RandomPerspective(_RandomApplyTransform):
    """Random perspective warp with probability ``p``, like
    ``torchvision.transforms.v2.RandomPerspective`` (same corner draws).

    Args:
        distortion_scale: in [0, 1], how far corners may move (default 0.5).
        p: probability (default 0.5).
        interpolation: ``"bilinear"`` (default) or ``"nearest"``.
        fill: value outside the image: a number, one per channel, or None.

    Raises:
        ValueError: distortion_scale or p outside [0, 1].

    Example:
        >>> RandomPerspective(0.3, p=1.0)(img)  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, distortion_scale: float = 0.5, p: float = 0.5,
                 interpolation: Any = "bilinear", fill: Any = 0) -> None:
        super().__init__(p)
        if not (0 <= distortion_scale <= 1):
            raise ValueError("Argument distortion_scale value should be between 0 and 1")
        self.distortion_scale = distortion_scale
        self.interpolation = _check_interpolation(interpolation)
        self.fill = fill
        self._fill = _setup_fill(fill)

    def make_params(self, size, *, rng=None):
        """``{"apply": bool, "coefficients": 8 floats}`` (corners drawn only when applied)."""
        rng = _rng(rng)
        if not coin(rng, self.p):
            return {"apply": False, "coefficients": None}
        height, width = size
        half_height, half_width = height // 2, width // 2
        bound_height = int(self.distortion_scale * half_height) + 1
        bound_width = int(self.distortion_scale * half_width) + 1

        def draw(lo, hi):   # torch.randint(lo, hi): hi excluded
            return int(rng.randint(lo, hi - 1))

        topleft = [draw(0, bound_width), draw(0, bound_height)]
        topright = [draw(width - bound_width, width), draw(0, bound_height)]
        botright = [draw(width - bound_width, width), draw(height - bound_height, height)]
        botleft = [draw(0, bound_width), draw(height - bound_height, height)]
        startpoints = [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]]
        endpoints = [topleft, topright, botright, botleft]
        return {"apply": True,
                "coefficients": F.perspective_coefficients(startpoints, endpoints)}

    def _apply(self, img, params):
        return F.perspective(img, None, None, self.interpolation, fill=self._fill,
                             coefficients=params["coefficients"])

    def _transform_other(self, inpt, params):
        if not params["apply"]:
            return inpt
        return _tvf().perspective(inpt, None, None, coefficients=params["coefficients"])

    def _extra_repr(self):
        return (f"distortion_scale={self.distortion_scale}, p={self.p}, "
                f"interpolation={_interp_repr(self.interpolation)!r}, fill={self.fill}")


class FiveCrop(Transform):
    """The four corners and the centre crop, like ``torchvision.transforms.v2.FiveCrop``:
    returns a tuple ``(top_left, top_right, bottom_left, bottom_right, center)`` of the input's
    kind (a pipeline usually stacks them next, e.g. with a ``Lambda``).

    Args:
        size: ``(h, w)``, or an int (or ``[int]``) for a square.

    Raises:
        ValueError: bad ``size``; at call time, a crop larger than the image.

    Example:
        >>> crops = FiveCrop(224)(img)  # doctest: +SKIP
        >>> batch = torch.stack([ToTensor()(c) for c in crops])  # doctest: +SKIP
    """

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = _setup_size(size)

    def transform(self, img, params):
        return F.five_crop(img, list(self.size))

    def _extra_repr(self):
        return f"size={self.size}"


class TenCrop(Transform):
    """:class:`FiveCrop` of the image and of its mirrored copy (left-right, or top-bottom with
    ``vertical_flip=True``), like ``torchvision.transforms.v2.TenCrop``: a tuple of 10.

    Args:
        size: ``(h, w)``, or an int (or ``[int]``) for a square.
        vertical_flip: flip top-bottom instead of left-right.

    Example:
        >>> len(TenCrop(224)(img))  # doctest: +SKIP
        10
    """

    def __init__(self, size: int | Sequence[int], vertical_flip: bool = False) -> None:
        self.size = _setup_size(size)
        self.vertical_flip = vertical_flip

    def transform(self, img, params):
        return F.ten_crop(img, list(self.size), vertical_flip=self.vertical_flip)

    def _extra_repr(self):
        return f"size={self.size}, vertical_flip={self.vertical_flip}"


class ScaleJitter(_Resizing):
    """Resize by a random factor of the scale that fits the image into ``target_size``, like
    ``torchvision.transforms.v2.ScaleJitter`` (Large Scale Jitter, Ghiasi et al.): ``scale``
    uniform in ``scale_range``, ``r = min(target_size[1] / H, target_size[0] / W) * scale``,
    output ``(int(H * r), int(W * r))``, computed in float32 as torchvision does.

    Args:
        target_size: the base size ``(target_size[0], target_size[1])`` as torchvision reads
            it (see the formula above).
        scale_range: ``(min, max)`` of the jitter.
        interpolation, antialias: as :class:`Resize`.

    Example:
        >>> ScaleJitter((1024, 1024), scale_range=(0.1, 2.0))(img)  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, target_size: int | Sequence[int],
                 scale_range: tuple[float, float] = (0.1, 2.0), interpolation: Any = "bilinear",
                 antialias: bool | None = True) -> None:
        self.target_size = target_size
        self.scale_range = scale_range
        self.interpolation = _check_interpolation(interpolation)
        self.antialias = antialias

    def make_params(self, size, *, rng=None):
        """``{"size": (new_height, new_width)}``: one uniform draw of the scale."""
        orig_height, orig_width = size
        # torch.rand(1) is float32 and so is torchvision's arithmetic on it
        u = torch.tensor([_rng(rng).random()], dtype=torch.float32)
        scale = self.scale_range[0] + u * (self.scale_range[1] - self.scale_range[0])
        r = min(self.target_size[1] / orig_height, self.target_size[0] / orig_width) * scale
        return {"size": (int(orig_height * r), int(orig_width * r))}

    def _extra_repr(self):
        return (f"target_size={self.target_size}, scale_range={self.scale_range}, "
                f"interpolation={_interp_repr(self.interpolation)!r}, "
                f"antialias={self.antialias}")


class RandomShortestSize(_Resizing):
    """Resize so the shorter side is one of ``min_size`` (drawn uniformly), the longer side
    at most ``max_size``, like ``torchvision.transforms.v2.RandomShortestSize``:
    ``r = min(min_size / min(H, W), max_size / max(H, W))``, output
    ``(int(H * r), int(W * r))``.

    Args:
        min_size: an int or a sequence of ints to draw from.
        max_size: optional cap on the longer side.
        interpolation, antialias: as :class:`Resize`.

    Example:
        >>> RandomShortestSize([480, 512, 544], max_size=1333)(img)  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, min_size: int | Sequence[int], max_size: int | None = None,
                 interpolation: Any = "bilinear", antialias: bool | None = True) -> None:
        self.min_size = [min_size] if isinstance(min_size, int) else list(min_size)
        if not self.min_size:
            raise ValueError("min_size must hold at least one size")
        self.max_size = max_size
        self.interpolation = _check_interpolation(interpolation)
        self.antialias = antialias

    def make_params(self, size, *, rng=None):
        """``{"size": (new_height, new_width)}``: one uniform pick from ``min_size``."""
        orig_height, orig_width = size
        min_size = self.min_size[_rng(rng).randint(0, len(self.min_size) - 1)]
        r = min_size / min(orig_height, orig_width)
        if self.max_size is not None:
            r = min(r, self.max_size / max(orig_height, orig_width))
        return {"size": (int(orig_height * r), int(orig_width * r))}



class RandomResize(_Resizing):
    """Resize the shorter side to a size drawn uniformly from ``[min_size, max_size)``, like
    ``torchvision.transforms.v2.RandomResize`` (``torch.randint(min_size, max_size)`` under
    torch's RNG); usually followed by a ``RandomCrop``.

    Args:
        min_size: the smallest size (included). max_size: the largest (excluded).
        interpolation, antialias: as :class:`Resize`.

    Raises:
        ValueError: at call time, ``max_size <= min_size`` (as torchvision's draw).

    Example:
        >>> RandomResize(256, 480)(img)  # doctest: +SKIP
    """

    def __init__(self, min_size: int | Sequence[int], max_size: int | None,
                 interpolation: Any = "bilinear", antialias: bool | None = True) -> None:
        self.min_size = min_size
        self.max_size = max_size
        self.interpolation = _check_interpolation(interpolation)
        self.antialias = antialias

    def make_params(self, size=None, *, rng=None):
        """``{"size": [s]}`` with ``min_size <= s < max_size``."""
        if self.max_size <= self.min_size:
            raise ValueError(f"RandomResize needs min_size < max_size, got {self.min_size}, "
                             f"{self.max_size}")
        return {"size": [_rng(rng).randint(self.min_size, self.max_size - 1)]}



# every class here moves pixels: a mask or boxes of a joint sample must follow it, so one
# without a _transform_other refuses them (TypeError) instead of passing them through
for _cls in (Resize, CenterCrop, RandomCrop, RandomResizedCrop, RandomHorizontalFlip,
             RandomVerticalFlip, Pad, RandomRotation, RandomAffine, RandomPerspective, FiveCrop,
             TenCrop, ScaleJitter, RandomShortestSize, RandomResize):
    _cls._geometric = True
del _cls
