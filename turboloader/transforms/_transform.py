"""The base class of turboloader's transforms and the argument helpers they share.

Every class works standalone on a PIL image, a torch tensor (CHW, uint8 or float) or a NumPy
HWC uint8 array, and returns the same kind it got: it draws its parameters here and applies
them through :mod:`turboloader.transforms.functional`, which sends arrays to the native
kernels and PIL images and tensors to torchvision v2's functionals. Random parameters come
from :func:`turboloader.transforms._random.current_rng` (a per-sample ``random.Random``
inside a turboloader dataset, torch's global RNG otherwise), never from NumPy's global state.

Unlike torchvision v2, ``make_params`` takes the image size ``(height, width)`` rather than
the flattened inputs, so parameters can be drawn from a JPEG header before anything is
decoded (see :func:`turboloader.transforms.plan`); it also accepts an explicit ``rng``.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
import torch

from turboloader.transforms import functional as F
from turboloader.transforms._draws import coin
from turboloader.transforms._random import current_rng

__all__ = ["Transform", "image_size"]


def _tvf():
    from torchvision.transforms.v2 import functional  # lazy: costs ~0.3 s to import

    return functional


_kind = F._kind


def image_size(img):
    """``(height, width)`` of a PIL image, a ``(..., H, W)`` tensor or an ``(H, W[, C])`` array."""
    kind = _kind(img)
    if kind == "pil":
        return img.height, img.width
    if kind == "tensor":
        if img.ndim < 2:
            raise ValueError(f"a tensor image needs at least 2 dimensions, got {img.ndim}")
        return int(img.shape[-2]), int(img.shape[-1])
    if img.ndim not in (2, 3):
        raise ValueError(f"an array image must be (H, W) or (H, W, C), got shape {img.shape}")
    return int(img.shape[0]), int(img.shape[1])


def _channels(img):
    kind = _kind(img)
    if kind == "ndarray":
        return 1 if img.ndim == 2 else int(img.shape[2])
    if kind == "tensor":
        return int(img.shape[-3]) if img.ndim >= 3 else 1
    return len(img.getbands())


def _contiguous(img):
    """Arrays as the native kernels need them (C-contiguous); other kinds unchanged."""
    if isinstance(img, np.ndarray) and not img.flags.c_contiguous:
        return np.ascontiguousarray(img)
    return img


_array = _contiguous


def _rng(rng):
    return current_rng() if rng is None else rng


def _setup_size(size, error_msg="Please provide only two dimensions (h, w) for size."):
    # torchvision's _setup_size, plus a check that the sizes are positive integers
    if isinstance(size, numbers.Number) and not isinstance(size, bool):
        size = (int(size), int(size))
    elif isinstance(size, Sequence) and len(size) == 1:
        size = (size[0], size[0])
    elif not isinstance(size, Sequence):
        raise TypeError(f"size should be an int or a sequence of ints, got {type(size).__name__}")
    if len(size) != 2:
        raise ValueError(error_msg)
    if not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in size):
        raise TypeError(f"size should contain ints, got {size!r}")
    if size[0] <= 0 or size[1] <= 0:
        raise ValueError(f"size must be positive, got {tuple(size)}")
    return int(size[0]), int(size[1])


def _check_interpolation(interpolation):
    if isinstance(interpolation, (str, F.Interpolation)):
        F._interpolation(interpolation)  # raises ValueError for unknown names
    elif isinstance(interpolation, int) and not isinstance(interpolation, bool):
        # a PIL constant: converted as torchvision's transforms do
        from torchvision.transforms.functional import _interpolation_modes_from_int

        return _interpolation_modes_from_int(interpolation)
    elif not type(interpolation).__module__.startswith("torchvision"):
        raise TypeError("interpolation must be a str or torchvision InterpolationMode, got "
                        f"{type(interpolation).__name__}")
    return interpolation


def _interp_repr(interpolation):
    return getattr(interpolation, "value", interpolation)


def _check_p(p):
    if not isinstance(p, numbers.Real) or isinstance(p, bool) or not (0.0 <= p <= 1.0):
        raise ValueError("`p` should be a floating point value in the interval [0.0, 1.0].")
    return float(p)


def _check_sequence_input(x, name, req_sizes):
    msg = req_sizes[0] if len(req_sizes) < 2 else " or ".join([str(s) for s in req_sizes])
    if not isinstance(x, Sequence):
        raise TypeError(f"{name} should be a sequence of length {msg}.")
    if len(x) not in req_sizes:
        raise ValueError(f"{name} should be a sequence of length {msg}.")


def _setup_angle(x, name, req_sizes=(2,)):
    if isinstance(x, numbers.Number) and not isinstance(x, bool):
        if x < 0:
            raise ValueError(f"If {name} is a single number, it must be positive.")
        x = [-x, x]
    else:
        _check_sequence_input(x, name, req_sizes)
    return [float(d) for d in x]


def _setup_fill(fill):
    """torchvision's ``_setup_fill_arg`` reduced to the image entry: None, a float or a list."""
    if isinstance(fill, dict):
        from torchvision import tv_tensors

        for key in (tv_tensors.Image, torch.Tensor, "others"):
            if key in fill:
                fill = fill[key]
                break
        else:
            fill = None
    if fill is None:
        return None
    if isinstance(fill, numbers.Number) and not isinstance(fill, bool):
        return fill
    if isinstance(fill, (tuple, list)):
        return [float(v) for v in fill]
    raise TypeError("Got inappropriate fill arg, only Numbers, tuples, lists and dicts are allowed.")


def _uniform(rng, a, b):
    return float(rng.uniform(a, b))


def _randint_below(rng, n):
    """An int in [0, n) (torch.randint(n) under TorchRandom)."""
    return int(rng.randint(0, n - 1))


def _seed_from(rng):
    """A 63-bit seed drawn from ``rng`` for noise that needs a torch generator."""
    if isinstance(rng, torch.Generator):
        return int(torch.randint(0, 2 ** 63 - 1, (), generator=rng))
    return int(rng.randint(0, 2 ** 63 - 2))


class Transform:
    """Base class: ``__call__(img)`` = ``transform(img, make_params(image_size(img)))``.

    Subclasses override :meth:`make_params` (draw from ``rng``, default
    :func:`~turboloader.transforms._random.current_rng`) and :meth:`transform` (apply the
    drawn parameters through :mod:`turboloader.transforms.functional`; no randomness there).
    ``__call__`` hands ``transform`` NumPy arrays C-contiguous, and passes through untouched
    the image kinds a subclass does not change (``_kinds``, e.g. ``PILToTensor`` leaves
    tensors alone, as torchvision's does).
    """

    _uses_size = False
    # whether this transform moves pixels (so annotations must follow it); see _transform_other
    _geometric = False
    # the image kinds this transform changes; others pass through untouched (torchvision's
    # ``_transformed_types``); None: all three
    _kinds: tuple[str, ...] | None = None

    def make_params(self, size, *, rng=None):
        """Draw this call's parameters for an image of ``size = (height, width)``; a dict."""
        return {}

    def transform(self, img, params):
        """Apply the transform with ``params`` (from :meth:`make_params`) to ``img``."""
        raise NotImplementedError

    def __call__(self, *inputs):
        if len(inputs) == 1 and not _is_structured(inputs[0]):
            img = inputs[0]
            if self._kinds is not None and _kind(img) not in self._kinds:
                return img
            img = _contiguous(img)
            size = image_size(img) if self._uses_size else None
            return self.transform(img, self.make_params(size))
        return _joint_call(self, inputs)

    def _transform_other(self, inpt, params):
        """Apply the drawn ``params`` to a ``tv_tensors`` annotation (``Mask``,
        ``BoundingBoxes``, ``KeyPoints``) of a joint sample, through torchvision v2's
        functionals (masks nearest, boxes transformed and clamped as torchvision does).
        Transforms that leave geometry alone pass it through; geometric ones without this
        override raise TypeError."""
        if self._geometric:
            raise TypeError(f"{type(self).__name__} does not transform "
                            f"{type(inpt).__name__} yet; use torchvision.transforms.v2."
                            f"{type(self).__name__} for such samples")
        return inpt

    def _extra_repr(self):
        return ""

    def __repr__(self):
        return f"{type(self).__name__}({self._extra_repr()})"


def fused_ops(t):
    """How many colour operations ``t`` can add to a fused call as a post-geometry member, or
    None when it is not one.

    A class joins the fused path's post-geometry members (after the crop or resize, before
    the tensor conversion) by declaring, in its own body, ``_fused_ops(self)`` (that count)
    and ``_fused_draw(self, d, mask, r)`` (draw its parameters from ``d`` for the rows in
    ``mask`` and record them in ``r``: ``r.flip`` (bool (n,)), ``r.ops``/``r.factors``/
    ``r.n_ops``, the colour operations of each row in order). Only the class's own
    declaration counts, so a subclass that changes what its parent does is not fused by
    accident: it declares these again if it fuses."""
    fn = vars(type(t)).get("_fused_ops")
    return None if fn is None else fn(t)


_ANNOTATIONS = ("Mask", "BoundingBoxes", "KeyPoints")


def _is_annotation(x) -> bool:
    """A ``tv_tensors`` mask, boxes or keypoints (without importing torchvision)."""
    t = type(x)
    return t.__name__ in _ANNOTATIONS and t.__module__.startswith("torchvision")


def _is_structured(x) -> bool:
    """A joint sample: a tuple/list/dict of inputs, or a lone annotation."""
    return isinstance(x, (tuple, list, dict)) or _is_annotation(x)


def _joint_call(t, inputs):
    """torchvision v2's ``Transform.forward`` for turboloader transforms: flatten the sample,
    draw the parameters once from the image's size, apply them to the image(s) with
    turboloader's own ``transform`` and to masks / boxes with torchvision v2's functionals
    (``_transform_other``); anything else (labels, strings, other tensors) passes through.

    As in torchvision: the images are PIL images, NumPy arrays, ``tv_tensors.Image`` and the
    first plain tensor when the sample holds no other image."""
    import PIL.Image
    from torch.utils._pytree import tree_flatten, tree_unflatten
    from torchvision import tv_tensors

    flat, spec = tree_flatten(inputs if len(inputs) > 1 else inputs[0])
    plain_is_image = not any(isinstance(x, (tv_tensors.Image, tv_tensors.Video,
                                            PIL.Image.Image, np.ndarray)) for x in flat)
    roles = []
    for x in flat:
        if _is_annotation(x):
            roles.append("other")
        elif isinstance(x, (PIL.Image.Image, np.ndarray, tv_tensors.Image)):
            roles.append("image")
        elif isinstance(x, torch.Tensor) and type(x) is torch.Tensor and plain_is_image:
            plain_is_image = False
            roles.append("image")
        else:
            roles.append(None)
    size = None
    if t._uses_size:
        sizes = {image_size(x) for x, r in zip(flat, roles) if r == "image"}
        for x, r in zip(flat, roles):
            if r == "other":
                sizes.add(tuple(int(v) for v in (x.canvas_size if hasattr(x, "canvas_size")
                                                 else x.shape[-2:])))
        if len(sizes) != 1:
            raise ValueError(f"the images, masks and boxes of one sample must have one size, "
                             f"got {sorted(sizes)}" if sizes else
                             "no image, mask or boxes in the sample")
        size = sizes.pop()
    params = t.make_params(size)
    out = []
    for x, r in zip(flat, roles):
        if r == "image":
            if t._kinds is None or _kind(x) in t._kinds:
                x = t.transform(_contiguous(x), params)
        elif r == "other":
            x = t._transform_other(x, params)
        out.append(x)
    return tree_unflatten(out, spec)


class _RandomApplyTransform(Transform):
    """Base for ``p``-gated transforms: one ``rng.random() < p`` draw decides, as torchvision's
    ``_RandomApplyTransform`` (which skips when ``torch.rand(1) >= p``)."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = _check_p(p)

    def make_params(self, size=None, *, rng=None):
        """``{"apply": bool}``: one ``rng.random()`` draw."""
        return {"apply": coin(_rng(rng), self.p)}

    def transform(self, img, params):
        if not params["apply"]:
            return img
        return self._apply(img, params)

    def _apply(self, img, params):
        raise NotImplementedError

    def _extra_repr(self):
        return f"p={self.p}"
