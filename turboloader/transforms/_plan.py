"""Plan a Compose of turboloader transforms into one fused native call per sample.

Fusable pipelines (members all turboloader transforms, in this order)::

    [RandomResizedCrop | Resize [CenterCrop | RandomCrop] | CenterCrop | RandomCrop]
    (RandomHorizontalFlip | ColorJitter)*            # any order, any number (<= 2 jitters)
    ToTensor | ToImage | PILToTensor [ToDtype(torch.float32, scale=...)]
    [Normalize]

``RandomCrop`` only without padding (``padding=None, pad_if_needed=False``); resizing only
with ``antialias=True`` and bilinear, bicubic or nearest-exact interpolation (torchvision's
``"nearest"`` on tensors is a different rule). Anything else, including a pipeline without a
final tensor conversion (torchvision returns a PIL image there), is not fusable: ``plan``
returns None and the dataset runs the transforms one by one.

Semantics of the fused call, per sample:

* Parameters are drawn in the Compose's order from the generator (``rng`` or
  ``current_rng()``), with the image size read from the JPEG header: the same draws, in the
  same order, as calling the classes on the decoded image.
* ``RandomResizedCrop`` is crop-then-resize: only the window is decoded and the filter is
  clipped at its edges (torchvision's ``resized_crop``). ``Resize`` then a crop is
  resize-then-crop: the decoded window is widened by the filter's support, so the filter
  sees the pixels outside the crop exactly as a full resize followed by a crop does
  (Pillow's ``resize(box=...)``).
* ``RandomHorizontalFlip`` flips the output; ``ColorJitter`` runs on the resized uint8 image
  in its drawn order, i.e. after the geometry (flip commutes with the colour ops).
* ``ToTensor`` / ``ToDtype(float32, scale=True)`` divide by 255, ``Normalize`` is folded
  into the same per-channel multiply-add.
* A crop larger than its (resized) image is the generic path: ``CenterCrop`` zero-pads as
  torchvision does, ``RandomCrop`` raises ValueError as torchvision does.

Tolerances against torchvision v2 on the Pillow-decoded image with the same parameters: with
``dct_scaling=False``, at most 1 uint8 level (0.02 after ImageNet ``Normalize``); a
ColorJitter chain is within 2 levels of torchvision's kernels run on the same resized image
(each kernel is within 1). With DCT scaling (the default), the window is decoded at the
smallest of the scales 1/8, 1/4, 1/2 (those with libjpeg-turbo's SIMD IDCT) that still
leaves it at least the output (resp. resized) size, which acts like a slightly different
antialiasing filter. Measured in uint8 levels, 3 draws per image, ``sample_rng`` seeds:

=====================================  ===========  ==================  ====  ======  ===
pipeline, data                         mean |diff|  worst image's mean  p99   p99.9   max
=====================================  ===========  ==================  ====  ======  ===
RandomResizedCrop(224), 48 synthetic   0.01         1.1                 0     2       33
RandomResizedCrop(128), 48 synthetic   0.70         4.4                 7     11      40
Resize(256)+CenterCrop, 48 synthetic   0.00         0.0                 0     1       2
RandomResizedCrop(224), 12 hires       0.57         1.4                 4     7       23
Resize(256)+CenterCrop, 12 hires       0.62         0.9                 4     6       27
=====================================  ===========  ==================  ====  ======  ===

"synthetic": ``turboloader.synthetic.synthetic_jpegs`` (photograph-like, 250-700 px,
quality 75-95, 4:2:0), where a 224 output rarely allows any reduction; "hires":
``benchmarks/datasets.py --hires`` photographs, 1600-4000 px, reduced 1/4 or 1/8.
``tests/transforms/test_plan.py`` asserts mean <= 2, per-image mean <= 5, p99 <= 12,
max <= 64.
"""

import math
import operator
import warnings

import numpy as np
import torch

from turboloader.errors import DecodeWarning
from turboloader.fused import decode_window
from turboloader.jpeg import window_scale
import turboloader.transforms as T  # the package: members are looked up when a plan is made
from turboloader.transforms._random import current_rng, using_rng

__all__ = ["Plan", "plan"]


def _flatten(transform):
    if isinstance(transform, T.Compose) or _is_torchvision_compose(transform):
        out = []
        for t in transform.transforms:
            out.extend(_flatten(t))
        return out
    return [transform]


def _is_torchvision_compose(t):
    cls = type(t)
    return cls.__name__ == "Compose" and cls.__module__.startswith("torchvision.transforms")


def plan(transform, *, dct_scaling=True):
    """Plan ``transform`` into one fused native call, or return None if it is not fusable.

    Args:
        transform: a :class:`~turboloader.transforms.Compose` (or a torchvision
            ``Compose`` whose members are all turboloader transforms), or a single transform.
        dct_scaling: decode at a reduced JPEG DCT scale when the output is small enough
            (several times faster; see the module docstring for the tolerance). False gives
            torchvision's result within 1 uint8 level.

    Returns:
        A :class:`Plan`, or None (the pipeline must run as ordinary callables).

    Example:
        >>> p = plan(Compose([RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor()]))
        >>> x = p.from_jpeg(jpeg_bytes, rng=sample_rng(0, 0, 7))  # doctest: +SKIP
    """
    if not callable(transform):
        raise TypeError(f"transform must be callable, got {type(transform).__name__}")
    members = _flatten(transform)
    steps = _parse(members)
    if steps is None:
        return None
    return Plan(members, *steps, dct_scaling=bool(dct_scaling))


def _fusable_crop(t):
    return isinstance(t, T.CenterCrop) or (
        isinstance(t, T.RandomCrop) and t.padding is None and not t.pad_if_needed)


def _parse(members):
    """(resize, crop_or_rrc, post, affine, out_dtype) if the members fit the grammar."""
    i, n = 0, len(members)
    resize = crop = None
    filt = 1
    if i < n and type(members[i]) is T.RandomResizedCrop:
        crop = members[i]
        filt = T._geometry._fused_filter(crop.interpolation, crop.antialias)
        i += 1
    elif i < n and type(members[i]) is T.Resize:
        resize = members[i]
        filt = T._geometry._fused_filter(resize.interpolation, resize.antialias)
        i += 1
        if i < n and type(members[i]) in (T.CenterCrop, T.RandomCrop) and _fusable_crop(members[i]):
            crop = members[i]
            i += 1
    elif i < n and type(members[i]) in (T.CenterCrop, T.RandomCrop) and _fusable_crop(members[i]):
        crop = members[i]
        i += 1
    if filt is None:
        return None
    post = []
    while i < n and type(members[i]) in (T.RandomHorizontalFlip, T.ColorJitter):
        post.append(members[i])
        i += 1
    if sum(isinstance(t, T.ColorJitter) for t in post) > 2:
        return None
    if i < n and type(members[i]) is T.ToTensor:
        out_dtype, scale = torch.float32, 1.0 / 255.0
        i += 1
    elif i < n and type(members[i]) in (T.ToImage, T.PILToTensor):
        out_dtype, scale = torch.uint8, None
        i += 1
        if i < n and type(members[i]) is T.ToDtype and members[i].dtype is torch.float32:
            out_dtype, scale = torch.float32, (1.0 / 255.0 if members[i].scale else 1.0)
            i += 1
    else:
        return None
    mean, std = (0.0,) * 3, (1.0,) * 3
    if i < n and type(members[i]) is T.Normalize and out_dtype is torch.float32:
        norm = members[i]
        if len(norm.mean) not in (1, 3) or len(norm.std) not in (1, 3):
            return None
        mean = tuple(float(v) for v in norm.mean) * (3 if len(norm.mean) == 1 else 1)
        std = tuple(float(v) for v in norm.std) * (3 if len(norm.std) == 1 else 1)
        if any(not math.isfinite(v) or v == 0 for v in std) or not all(map(math.isfinite, mean)):
            return None  # the generic path raises as torchvision does
        i += 1
    if i != n:
        return None
    if out_dtype is torch.float32:
        affine = (tuple(scale / s for s in std), tuple(-m / s for m, s in zip(mean, std)))
    else:
        affine = None
    return resize, crop, filt, post, affine, out_dtype


class Plan:
    """A fused pipeline: one native call from JPEG bytes (or a decoded array) to a tensor.

    Made by :func:`plan`. Immutable and thread-safe: every call draws its parameters from
    the ``rng`` it is given (or ``current_rng()``, which is thread-local), and the native
    work runs in one block without the GIL.

    Attributes:
        transforms: the flattened list of member transforms (the generic path).
        output_shape: ``(3, H, W)`` when every sample has the same shape, else None.
        output_dtype: ``torch.float32`` or ``torch.uint8``.
        dct_scaling: whether JPEGs are decoded at a reduced DCT scale when possible.
    """

    def __init__(self, transforms, resize, crop, filt, post, affine, out_dtype, *,
                 dct_scaling=True):
        self.transforms = list(transforms)
        self._resize = resize
        self._crop = crop
        self._filter = filt
        self._post = list(post)
        self._affine = affine
        self.output_dtype = out_dtype
        self.dct_scaling = dct_scaling
        if isinstance(crop, (T.RandomResizedCrop, T.CenterCrop, T.RandomCrop)):
            self.output_shape = (3, *crop.size)
        elif resize is not None and resize.size is not None and len(resize.size) == 2:
            self.output_shape = (3, *resize.size)
        else:
            self.output_shape = None

    def __repr__(self):
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Plan([{inner}], dct_scaling={self.dct_scaling})"

    def __call__(self, img):
        """The generic path: apply the member transforms one by one (any image kind)."""
        for t in self.transforms:
            img = t(img)
        return img

    # -- parameters --------------------------------------------------------------------

    def _draw(self, H, W, rng):
        """Draw every parameter in Compose order for a ``H x W`` source.

        Returns (box, clip_to_box, (out_h, out_w), flip, ops) in source pixels, or None when
        the geometry needs the generic path (a crop larger than its image). ``box`` is the
        float source region (x0, y0, x1, y1) that maps onto the output; with
        ``clip_to_box`` the filter is clipped at the box (an integer crop window), else
        at the image edges.
        """
        crop, resize = self._crop, self._resize
        if isinstance(crop, T.RandomResizedCrop):
            p = crop.make_params((H, W), rng=rng)
            box = (p["left"], p["top"], p["left"] + p["width"], p["top"] + p["height"])
            clip, out = True, crop.size
        else:
            rh, rw = resize.output_size((H, W)) if resize is not None else (H, W)
            if crop is not None:
                ch, cw = crop.size
                if ch > rh or cw > rw:
                    return None
                p = crop.make_params((rh, rw), rng=rng)
                top, left = p["top"], p["left"]
            else:
                ch, cw, top, left = rh, rw, 0, 0
            if resize is None or (rh, rw) == (H, W):
                box, clip = (left, top, left + cw, top + ch), True
            else:
                sx, sy = W / rw, H / rh
                box, clip = (left * sx, top * sy, (left + cw) * sx, (top + ch) * sy), False
            out = (ch, cw)
        flip = False
        ops = []
        for t in self._post:
            params = t.make_params((H, W), rng=rng)
            if isinstance(t, T.RandomHorizontalFlip):
                flip ^= params["flip"]
            else:
                ops.extend(T.ColorJitter.ops(params))
        return box, clip, out, flip, ops

    # -- output --------------------------------------------------------------------------

    def _slot(self, out, shape):
        """(numpy view to write, object to return) for ``out`` (None: allocate)."""
        np_dtype = np.float32 if self.output_dtype is torch.float32 else np.uint8
        if out is None:
            arr = np.empty(shape, np_dtype)
            return arr, torch.from_numpy(arr)
        if isinstance(out, torch.Tensor):
            if out.device.type != "cpu":
                raise ValueError(f"out must be a CPU tensor, got device {out.device}")
            if out.dtype is not self.output_dtype:
                raise TypeError(f"out must have dtype {self.output_dtype}, got {out.dtype}")
            view = out.numpy()
        elif isinstance(out, np.ndarray):
            if out.dtype != np_dtype:
                raise TypeError(f"out must have dtype {np.dtype(np_dtype)}, got {out.dtype}")
            view = out
        else:
            raise TypeError(f"out must be a torch.Tensor or numpy.ndarray, got {type(out).__name__}")
        if view.shape != tuple(shape):
            raise ValueError(f"out must have shape {tuple(shape)}, got {tuple(view.shape)}")
        if not view.flags.c_contiguous or not view.flags.writeable:
            raise ValueError("out must be C-contiguous and writeable (a batch[i] slot is)")
        return view, out

    def _generic(self, img, rng, out):
        with using_rng(rng):
            result = self(img)
        if out is None:
            return result
        view, ret = self._slot(out, tuple(result.shape))
        view[...] = result.numpy()
        return ret

    # -- entry points --------------------------------------------------------------------

    def from_jpeg(self, data, /, *, out=None, rng=None, strict=False, max_pixels=None):
        """Decode JPEG bytes and run the whole pipeline in one native call.

        Args:
            data: the JPEG file: bytes, memoryview (e.g. a slice of an mmap), numpy array.
            out: optional ``(3, H, W)`` CPU tensor or ndarray slot of ``output_dtype``,
                C-contiguous (e.g. ``batch[i]``); written and returned.
            rng: the generator to draw from (``random.Random`` or
                :class:`~turboloader.transforms._random.TorchRandom`); default
                ``current_rng()``.
            strict: make libjpeg's warnings about recoverable corruption errors.
            max_pixels: refuse larger images; default ``turboloader.jpeg.DEFAULT_MAX_PIXELS``.

        Returns:
            A ``torch.Tensor`` (3, H, W) of ``output_dtype`` (``out`` itself when given).

        Raises:
            DecodeError: not a decodable JPEG, truncated, over ``max_pixels``.
            ValueError / TypeError: a bad ``out``; a RandomCrop larger than the image.

        Warns:
            DecodeWarning: libjpeg recovered from corrupt data (when not ``strict``).
        """
        from turboloader._native import _fused, _jpeg
        from turboloader.errors import DecodeError
        from turboloader.jpeg import DEFAULT_MAX_PIXELS, _as_buffer, _read_header, decode_jpeg

        buf = _as_buffer(data)
        if max_pixels is None:
            max_pixels = DEFAULT_MAX_PIXELS
        max_pixels = operator.index(max_pixels)
        if max_pixels <= 0:
            raise ValueError(f"max_pixels must be positive, got {max_pixels}")
        rng = current_rng() if rng is None else rng
        header = _read_header(buf)
        W, H = header.width, header.height
        if W * H > max_pixels:
            raise DecodeError(f"Image size {W} x {H} exceeds the limit of {max_pixels} pixels "
                              "(max_pixels)")
        drawn = self._draw(H, W, rng)
        if drawn is None:
            img = decode_jpeg(buf, strict=strict, max_pixels=max_pixels)
            return self._generic(img, rng, out)
        box, clip, (oh, ow), flip, ops = drawn
        if not self.dct_scaling:
            k = 8
        elif clip:
            k = window_scale(box[2] - box[0], box[3] - box[1], ow, oh)
        else:  # resize-then-crop: the whole image must stay at least the resized size
            k = window_scale(W, H, *self._resize.output_size((H, W))[::-1])
        dw, dh = (W * k + 7) // 8, (H * k + 7) // 8
        wx, wy, ww, wh, inner = decode_window(box, clip, (oh, ow), dw, dh, (k / 8, k / 8),
                                            self._filter)
        view, ret = self._slot(out, (3, oh, ow))
        scale, bias = self._affine or (None, None)
        n_warnings, message = _fused.decode_resample_into(
            buf, view, scale_num=k, full=(ww == dw and wh == dh), win_x=wx, win_y=wy,
            win_w=ww, win_h=wh, box=inner, filter=self._filter, flip=flip, ops=ops,
            mean_scale=scale, bias=bias, flags=_jpeg.STRICT if strict else 0,
            max_pixels=max_pixels)
        if n_warnings:
            more = f" (and {n_warnings - 1} more warnings)" if n_warnings > 1 else ""
            warnings.warn(f"{message}{more}", DecodeWarning, stacklevel=2)
        return ret

    def from_array(self, img, /, *, out=None, rng=None, source_size=None):
        """Run the pipeline on an already decoded ``(H, W, 3)`` uint8 array in one native call.

        Args:
            img: ``(H, W, 3)`` uint8 RGB array (e.g. from the decoded-sample cache); it is
                only read.
            out, rng: as :meth:`from_jpeg`.
            source_size: ``(height, width)`` of the original image when ``img`` is a
                downscaled copy of it: parameters are drawn on the original size and mapped
                onto ``img``, so augmentations are the same with and without the cache (up
                to resampling). Default: ``img``'s own size. (A pipeline that needs the
                generic path, a crop larger than its image, draws on ``img``'s size.)

        Returns:
            A ``torch.Tensor`` (3, H, W) of ``output_dtype`` (``out`` itself when given).

        Raises:
            TypeError / ValueError: a bad ``img``, ``source_size`` or ``out``.
        """
        from turboloader._native import _fused

        if not isinstance(img, np.ndarray) or img.dtype != np.uint8:
            raise TypeError("img must be a uint8 numpy.ndarray")
        if img.ndim != 3 or img.shape[2] != 3 or img.shape[0] == 0 or img.shape[1] == 0:
            raise ValueError(f"img must have shape (H, W, 3), got {img.shape}")
        if not img.flags.c_contiguous:
            img = np.ascontiguousarray(img)
        dh, dw = img.shape[:2]
        if source_size is None:
            H, W = dh, dw
        else:
            H, W = (operator.index(v) for v in source_size)
            if H <= 0 or W <= 0:
                raise ValueError(f"source_size must be positive, got {(H, W)}")
        rng = current_rng() if rng is None else rng
        drawn = self._draw(H, W, rng)
        if drawn is None:
            return self._generic(img, rng, out)
        box, clip, (oh, ow), flip, ops = drawn
        wx, wy, ww, wh, inner = decode_window(box, clip, (oh, ow), dw, dh, (dw / W, dh / H),
                                            self._filter)
        view, ret = self._slot(out, (3, oh, ow))
        scale, bias = self._affine or (None, None)
        _fused.resample_array_into(img, view, win_x=wx, win_y=wy, win_w=ww, win_h=wh,
                                   box=inner, filter=self._filter, flip=flip, ops=ops,
                                   mean_scale=scale, bias=bias)
        return ret
