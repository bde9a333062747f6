"""Plan a Compose of turboloader transforms into one fused native call per sample.

Fusable pipelines (members all turboloader transforms, in this order)::

    [RandomResizedCrop | Resize [CenterCrop | RandomCrop] | CenterCrop | RandomCrop]
    (RandomHorizontalFlip | ColorJitter                  # any order, any number, also
     | RandomApply | RandomChoice | RandomOrder of them)* # nested (<= 2 jitters in all)
    ToTensor | ToImage | PILToTensor
        [ToDtype(torch.float32, scale=...) | ConvertImageDtype(torch.float32)]
    [Normalize]
    # Identity and ToPureTensor anywhere (dropped)

``RandomCrop`` only without padding (``padding=None, pad_if_needed=False``); resizing only
with ``antialias=True`` and bilinear, bicubic or nearest-exact interpolation (torchvision's
``"nearest"`` on tensors is a different rule). The pipeline may be a turboloader or
torchvision ``Compose`` (nested ones are flattened) or an object whose ``__call__`` is exactly
``return self.<attr>(img)`` with such a pipeline in ``<attr>`` (torchvision's classification
presets). Anything else, including a pipeline without a final tensor conversion (torchvision
returns a PIL image there), is not fusable: ``plan`` returns None, :func:`explain` says why
(naming the first member that does not fit) and the dataset runs the transforms one by one,
after one ``UnfusedWarning`` with that text.

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
  ``RandomApply`` / ``RandomChoice`` / ``RandomOrder`` draw their decision, then their
  members' parameters, in call order, as when they are called.
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

"synthetic": ``turboloader.tools.synthetic.synthetic_jpegs`` (photograph-like, 250-700 px,
quality 75-95, 4:2:0), where a 224 output rarely allows any reduction; "hires":
``benchmarks/datasets.py --hires`` photographs, 1600-4000 px, reduced 1/4 or 1/8.
``tests/transforms/test_plan.py`` asserts mean <= 2, per-image mean <= 5, p99 <= 12,
max <= 64. Sharp black/white edges (text, line art) are the worst case: the scaled IDCT
rings differently from the full-size decode's antialiasing, up to 83 levels measured
(``tests/transforms/test_exactness.py`` holds edges to 96 and photographs to 64);
``plan(..., dct_scaling=False)``, also as a dataset's transform, is torchvision's result.
"""

from __future__ import annotations

from typing import Any
import math
import operator

import numpy as np
import torch

from turboloader.decode import executor as _executor
from turboloader.decode.executor import (MAX_COLOUR_OPS, SlotSpec, open_jpeg, out_view,
                                         resample_into_slot)
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS, decode_jpeg
from turboloader.transforms import _batch
from turboloader.transforms._batch import Fused, draw
from turboloader.transforms._draws import KeyDraws, RngDraws
from turboloader.transforms._colour import ColorJitter
from turboloader.transforms._containers import (Compose, Identity, Lambda, RandomApply,
                                                RandomChoice, RandomOrder)
from turboloader.transforms._conversion import (ConvertImageDtype, Normalize, PILToTensor, ToDtype,
                                                ToImage, ToPureTensor, ToTensor)
from turboloader.transforms._geometry import (CenterCrop, RandomCrop, RandomHorizontalFlip,
                                              RandomResizedCrop, Resize, _fused_filter)
from turboloader.transforms._transform import Transform, fused_ops
from turboloader.transforms import _auto_augment, _colour, _containers, _conversion, _geometry, _mixing
from turboloader.transforms._random import _as_u64, current_rng, using_rng

__all__ = ["Plan", "explain", "plan"]

_PACKAGE = __name__.rpartition(".")[0]  # turboloader.transforms (not imported: it imports us)
_CLASS_MODULES = (_geometry, _colour, _auto_augment, _mixing, _containers, _conversion)

# the native kernel's MAX_OPS: colour operations one fused call can run (the executor's
# SlotSpec holds that many per row)
_MAX_OPS = MAX_COLOUR_OPS


def _flatten(transform):
    """The member list: Compose (ours or torchvision's) and wrappers unrolled, no-ops dropped."""
    if isinstance(transform, (Compose, Plan)) or _is_torchvision_compose(transform):
        out = []
        for t in transform.transforms:
            out.extend(_flatten(t))
        return out
    inner = _wrapped(transform)
    if inner is not None:
        return _flatten(inner)
    if type(transform) in (Identity, ToPureTensor):
        return []  # no-ops on what a fused plan (or the dataset's decoder) produces
    return [transform]


def _is_torchvision_compose(t):
    cls = type(t)
    return cls.__name__ == "Compose" and cls.__module__.startswith("torchvision.transforms")


def _is_pipeline(t):
    return isinstance(t, Compose) or _is_torchvision_compose(t) or _wrapped(t) is not None


def _wrapped(obj):
    """The pipeline ``obj`` hands its input to unchanged, or None.

    That is an object whose class's ``__call__`` is exactly ``return self.<attr>(img)`` with
    ``self.<attr>`` a Compose (or such a wrapper again), as torchvision's classification
    presets (``ClassificationPresetTrain/Eval``) are. Anything else in ``__call__`` could
    change the result, so it is not unwrapped.
    """
    if isinstance(obj, (Transform, Compose)) or _is_torchvision_compose(obj):
        return None
    attr = _delegated_attribute(getattr(type(obj), "__call__", None))
    if attr is None:
        return None
    inner = getattr(obj, attr, None)
    if inner is None or inner is obj or not _is_pipeline(inner):
        return None
    return inner


def _delegated_attribute(func):
    """``attr`` when ``func`` is ``def f(self, x): return self.attr(x)``, else None (read
    from the bytecode, which differs between Python versions only in the opcodes skipped)."""
    import dis
    import types

    if not isinstance(func, types.FunctionType):
        return None
    code = func.__code__
    if (code.co_argcount != 2 or code.co_kwonlyargcount or code.co_flags & 0x0C
            or func.__closure__):
        return None  # not (self, x) exactly: *args / **kwargs / keyword-only / a closure
    self_name, arg_name = code.co_varnames[:2]
    trace = []
    for ins in dis.get_instructions(func):
        op = ins.opname
        if op in ("RESUME", "NOP", "CACHE", "PRECALL", "PUSH_NULL", "KW_NAMES",
                  "EXTENDED_ARG", "NOT_TAKEN"):
            continue
        if op.startswith("LOAD_FAST"):
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            trace += [("load", name) for name in names]
        elif op in ("LOAD_ATTR", "LOAD_METHOD"):
            trace.append(("attr", ins.argval))
        elif op in ("CALL", "CALL_FUNCTION", "CALL_METHOD"):
            trace.append(("call", ins.arg))
        elif op == "RETURN_VALUE":
            trace.append(("return",))
        else:
            return None
    if (len(trace) == 5 and trace[0] == ("load", self_name) and trace[1][0] == "attr"
            and trace[2:] == [("load", arg_name), ("call", 1), ("return",)]):
        return trace[1][1]
    return None


def plan(transform: Any, *, dct_scaling: bool | None = None):
    """Plan ``transform`` into one fused native call, or return None if it is not fusable.

    A :class:`Plan` is itself a transform: passed as a dataset's ``transform`` it is used
    with its own ``dct_scaling``, so ``TarDataset(urls, T.plan(pipeline,
    dct_scaling=False))`` reads torchvision's pixels (within 1 uint8 level) on the fused
    path.

    Args:
        transform: a :class:`~turboloader.transforms.Compose` (or a torchvision
            ``Compose`` whose members are all turboloader transforms), a single transform,
            an object that wraps one of these (its ``__call__`` is exactly
            ``return self.<attr>(img)``, as torchvision's classification presets), or a
            :class:`Plan`.
        dct_scaling: decode at a reduced JPEG DCT scale when the output is small enough
            (several times faster, but not torchvision's pixels: up to ~80 levels apart
            at sharp edges; see the module docstring). False gives torchvision's result
            within 1 uint8 level. Default: True, or a :class:`Plan`'s own.

    Returns:
        A :class:`Plan`, or None (the pipeline must run as ordinary callables;
        :func:`explain` says why).

    Raises:
        TypeError: ``transform`` is not callable.

    Example:
        >>> p = plan(Compose([RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor()]))
        >>> x = p.from_jpeg(jpeg_bytes, rng=sample_rng(0, 0, 7))  # doctest: +SKIP
    """
    if not callable(transform):
        raise TypeError(f"transform must be callable, got {type(transform).__name__}")
    if dct_scaling is None:
        dct_scaling = transform.dct_scaling if isinstance(transform, Plan) else True
    members = _flatten(transform)
    steps = _parse(members)
    if isinstance(steps, str):
        return None
    return Plan(members, *steps, dct_scaling=bool(dct_scaling))


def explain(transform: Any):
    """Why ``transform`` does not fuse into the decoder, or None when :func:`plan` fuses it.

    The text names the first member that prevents fusion and what would fuse instead; the
    datasets issue it once as an :class:`~turboloader.errors.UnfusedWarning`.

    Args:
        transform: anything :func:`plan` accepts.

    Returns:
        A one-paragraph ``str``, or None.

    Raises:
        TypeError: ``transform`` is not callable.

    Example:
        >>> explain(Compose([RandomResizedCrop(224), RandAugment(), ToTensor()]))  # doctest: +SKIP
        'member 1, RandAugment(...) has no fused kernel, so the whole pipeline runs unfused; ...'
    """
    if not callable(transform):
        raise TypeError(f"transform must be callable, got {type(transform).__name__}")
    steps = _parse(_flatten(transform))
    return steps if isinstance(steps, str) else None


_GRAMMAR = ("fused pipelines are [RandomResizedCrop | Resize [+ CenterCrop | RandomCrop] | "
            "CenterCrop | RandomCrop], then any RandomHorizontalFlip / ColorJitter (also inside "
            "RandomApply / RandomChoice / RandomOrder), then ToTensor | ToImage | PILToTensor "
            "[+ ToDtype(torch.float32) | ConvertImageDtype(torch.float32)] [+ Normalize]; "
            "Identity and ToPureTensor may appear anywhere")


def _short(t, limit=80):
    text = repr(t).replace("\n", " ")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 5] + "...)"


def _is_turboloader(t):
    return type(t).__module__.startswith(_PACKAGE)


def _why_not(i, t):
    """The reason member ``i`` (``t``) stops the grammar where it stands."""
    where = f"member {i}, {_short(t)}"
    if not _is_turboloader(t):
        name = type(t).__name__
        if _is_pipeline(getattr(t, "transforms", None)):
            return (f"{where} holds a pipeline in .transforms, but its __call__ is not exactly "
                    "'return self.transforms(img)', so turboloader cannot tell that calling it "
                    "means calling that pipeline; pass the .transforms Compose itself")
        if type(t).__module__.startswith("torchvision") and any(hasattr(m, name) for m in _CLASS_MODULES):
            return (f"{where} is torchvision's own class; turboloader.transforms.{name} is "
                    "the same transform and fuses")
        return f"{where} is not a turboloader transform (an opaque callable); {_GRAMMAR}"
    if isinstance(t, Lambda):
        return f"{where} is an arbitrary function; {_GRAMMAR}"
    if isinstance(t, RandomCrop) and not _fusable_crop(t):
        return f"{where} pads (padding or pad_if_needed), which the fused path does not"
    if isinstance(t, (Resize, RandomResizedCrop)) and _fused_filter(
            t.interpolation, t.antialias) is None:
        return (f"{where}: only antialias=True with bilinear, bicubic or nearest-exact "
                "interpolation fuses (torchvision's tensor 'nearest' is a different rule)")
    if isinstance(t, (RandomApply, RandomChoice, RandomOrder)):
        return (f"{where}: containers fuse only after the geometry and around "
                f"RandomHorizontalFlip / ColorJitter (at most {_MAX_OPS // 4} ColorJitters in "
                f"all); {_GRAMMAR}")
    if isinstance(t, ColorJitter):
        return (f"{where}: at most {_MAX_OPS // 4} ColorJitters fuse, after the geometry; "
                f"{_GRAMMAR}")
    fusable = (RandomResizedCrop, Resize, CenterCrop, RandomCrop, RandomHorizontalFlip,
               ToTensor, ToImage, PILToTensor, ToDtype, ConvertImageDtype, Normalize)
    if isinstance(t, fusable):
        return f"{where} cannot come at this place; {_GRAMMAR}"
    return (f"{where} has no fused kernel, so the whole pipeline runs unfused; {_GRAMMAR}")


def _fusable_crop(t):
    return isinstance(t, CenterCrop) or (
        isinstance(t, RandomCrop) and t.padding is None and not t.pad_if_needed)


def _dtype_scale(t):
    """(float32, scale) when dtype conversion ``t`` makes float32 of a uint8 image tensor."""
    if type(t) is ConvertImageDtype:
        return (torch.float32, 1.0 / 255.0) if t.dtype is torch.float32 else None
    if type(t) is ToDtype:
        try:
            dtype = t._dtype_for(torch.empty(0, dtype=torch.uint8))
        except ValueError:
            return None
        if dtype is torch.float32:
            return torch.float32, (1.0 / 255.0 if t.scale else 1.0)
    return None


def _parse(members):
    """(resize, crop_or_rrc, filter, post, affine, out_dtype) if the members fit the grammar,
    else the reason (a str) naming the first member that does not."""
    i, n = 0, len(members)
    resize = crop = None
    filt = 1
    if i < n and isinstance(members[i], RandomResizedCrop):  # (or a subclass's own draw)
        crop = members[i]
        filt = _fused_filter(crop.interpolation, crop.antialias)
        i += 1
    elif i < n and type(members[i]) is Resize:
        resize = members[i]
        filt = _fused_filter(resize.interpolation, resize.antialias)
        i += 1
        if i < n and type(members[i]) in (CenterCrop, RandomCrop) and _fusable_crop(members[i]):
            crop = members[i]
            i += 1
    elif i < n and type(members[i]) in (CenterCrop, RandomCrop) and _fusable_crop(members[i]):
        crop = members[i]
        i += 1
    if filt is None:
        return _why_not(i - 1, members[i - 1])
    post, n_ops = [], 0
    while i < n and fused_ops(members[i]) is not None:
        n_ops += fused_ops(members[i])
        if n_ops > _MAX_OPS:
            return (f"member {i}, {_short(members[i])}: more than {_MAX_OPS} colour operations "
                    f"(at most {_MAX_OPS // 4} ColorJitters) in one fused call")
        post.append(members[i])
        i += 1
    if i < n and type(members[i]) is ToTensor:
        out_dtype, scale = torch.float32, 1.0 / 255.0
        i += 1
    elif i < n and type(members[i]) in (ToImage, PILToTensor):
        out_dtype, scale = torch.uint8, None
        i += 1
        if i < n and _dtype_scale(members[i]) is not None:
            out_dtype, scale = _dtype_scale(members[i])
            i += 1
    elif i < n:
        return _why_not(i, members[i])
    else:
        return ("the pipeline ends without a tensor conversion (ToTensor, ToImage or "
                "PILToTensor), so it returns a PIL image, which the fused path does not make")
    mean, std = (0.0,) * 3, (1.0,) * 3
    if i < n and type(members[i]) is Normalize and out_dtype is torch.float32:
        norm = members[i]
        if len(norm.mean) not in (1, 3) or len(norm.std) not in (1, 3):
            return f"member {i}, {_short(norm)}: the fused path normalizes 1 or 3 channels"
        mean = tuple(float(v) for v in norm.mean) * (3 if len(norm.mean) == 1 else 1)
        std = tuple(float(v) for v in norm.std) * (3 if len(norm.std) == 1 else 1)
        if any(not math.isfinite(v) or v == 0 for v in std) or not all(map(math.isfinite, mean)):
            # the generic path raises as torchvision does
            return f"member {i}, {_short(norm)}: a zero or non-finite std or mean"
        i += 1
    if i != n:
        t = members[i]
        if type(t) is Normalize:
            return (f"member {i}, {_short(t)}: Normalize fuses once, after a float32 "
                    "conversion (ToTensor, or ToImage + ToDtype(torch.float32))")
        return _why_not(i, t)
    if out_dtype is torch.float32:
        affine = _executor.normalize_affine(mean, std, scale=scale)
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

    def __init__(self, transforms: Any, resize: Any, crop: Any, filt: int, post: Any, affine: Any,
                 out_dtype: Any, *, dct_scaling: bool = True) -> None:
        self.transforms = list(transforms)
        if isinstance(crop, (RandomResizedCrop, CenterCrop, RandomCrop)):
            shape = (3, *crop.size)
        elif resize is not None and resize.size is not None and len(resize.size) == 2:
            shape = (3, *resize.size)
        else:
            shape = None
        # what the draws and the native calls need, per sample or per batch (_batch reads
        # only this, never the Plan)
        self._fused = Fused(crop, resize, tuple(post), filt, affine, bool(dct_scaling), shape,
                            out_dtype)

    @property
    def _np_dtype(self):
        return np.float32 if self.output_dtype is torch.float32 else np.uint8

    @property
    def output_shape(self):
        return self._fused.output_shape

    @property
    def output_dtype(self):
        return self._fused.output_dtype

    @property
    def dct_scaling(self):
        return self._fused.dct_scaling

    @property
    def filter(self) -> int:
        """The native filter code the executor's ``plan_slots`` sizes windows for."""
        return self._fused.filter

    def slot_format(self) -> dict[str, Any]:
        """What the executor's ``run_batch`` needs of this plan's output, as keyword
        arguments: ``dtype`` (NumPy), ``shape`` (``(3, H, W)`` or None) and ``affine`` (the
        normalize fold, or None)."""
        f = self._fused
        return {"dtype": self._np_dtype, "shape": f.output_shape, "affine": f.affine}

    def draw(self, hw: np.ndarray, keys: np.ndarray, live: np.ndarray | None = None
             ) -> SlotSpec:
        """Every random parameter of a batch, drawn once from the samples' keys: what the
        transforms describe for the executor (they draw; the executor decodes).

        Args:
            hw: ``int64 (n, 2)`` source (height, width) of each row (the executor's
                ``read_sizes(...).hw``).
            keys: ``uint64 (n,)``, :func:`~turboloader.transforms.sample_keys`.
            live: ``bool (n,)``: the rows to draw for (the others draw nothing); None: all.

        Returns:
            A :class:`~turboloader.decode.executor.SlotSpec` for the executor's
            ``plan_slots``; row i equals what :meth:`from_jpeg` draws with
            ``rng=SampleRandom(keys[i])``.

        Example:
            >>> sizes = executor.read_sizes(jpegs)                              # doctest: +SKIP
            >>> spec = plan.draw(sizes.hw, keys, sizes.status == executor.OK)   # doctest: +SKIP
            >>> params = executor.plan_slots(sizes, spec, filter=plan.filter)   # doctest: +SKIP
        """
        keys = _as_u64(keys)
        if keys.shape != (len(hw),):
            raise ValueError(f"keys must have shape ({len(hw)},), got {keys.shape}")
        return draw(self._fused, hw, KeyDraws(keys), live)

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
        r = draw(self._fused, np.array([[H, W]], np.int64), RngDraws(rng))
        if r.generic[0]:
            return None
        ops = [(int(a), float(b)) for a, b in zip(r.ops[0, :r.n_ops[0]], r.factors[0, :r.n_ops[0]])]
        return (tuple(r.box[0].tolist()), bool(r.clip[0]), tuple(int(v) for v in r.out[0]),
                bool(r.flip[0]), ops)

    # -- output --------------------------------------------------------------------------

    def _slot(self, out, shape):
        """(numpy view to write, object to return) for ``out`` (None: allocate)."""
        if out is None:
            arr = np.empty(shape, self._np_dtype)
            return arr, torch.from_numpy(arr)
        view = out_view(out, self._np_dtype)
        if view.shape != tuple(shape):
            raise ValueError(f"out must have shape {tuple(shape)}, got {tuple(view.shape)}")
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

    def from_jpeg(self, data, /, *, out=None, rng=None, strict=False,
                  max_pixels=DEFAULT_MAX_PIXELS):
        """Decode JPEG bytes and run the whole pipeline in one native call.

        Args:
            data: the JPEG file: bytes, memoryview (e.g. a slice of an mmap), numpy array.
            out: optional ``(3, H, W)`` CPU tensor or ndarray slot of ``output_dtype``,
                C-contiguous (e.g. ``batch[i]``); written and returned.
            rng: the generator to draw from (a ``random.Random`` such as
                :func:`~turboloader.transforms.sample_rng`'s); default
                :func:`~turboloader.transforms.current_rng`.
            strict: make libjpeg's warnings about recoverable corruption errors.
            max_pixels: refuse larger images (default
                :data:`turboloader.decode.DEFAULT_MAX_PIXELS`); ``None``: no limit, as
                everywhere in turboloader.

        Returns:
            A ``torch.Tensor`` (3, H, W) of ``output_dtype`` (``out`` itself when given).

        Raises:
            DecodeError: not a decodable JPEG, truncated, over ``max_pixels``.
            ValueError / TypeError: a bad ``out``; a RandomCrop larger than the image.

        Warns:
            DecodeWarning: libjpeg recovered from corrupt data (when not ``strict``).
        """
        buf, header, limit = open_jpeg(data, max_pixels=max_pixels)
        rng = current_rng() if rng is None else rng
        W, H = header.width, header.height
        drawn = self._draw(H, W, rng)
        if drawn is None:
            img = decode_jpeg(buf, strict=strict, max_pixels=max_pixels)
            return self._generic(img, rng, out)
        box, clip, (oh, ow), flip, ops = drawn
        view, ret = self._slot(out, (3, oh, ow))
        resample_into_slot((buf, header), view, box=box, clip=clip, filt=self._fused.filter, flip=flip,
                      ops=ops, affine=self._fused.affine, dct_scaling=self.dct_scaling,
                      strict=strict, max_pixels=limit, stacklevel=2)
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
        view, ret = self._slot(out, (3, oh, ow))
        resample_into_slot(img, view, box=box, clip=clip, filt=self._fused.filter, source_size=(H, W),
                      flip=flip, ops=ops, affine=self._fused.affine)
        return ret

    # -- batches (turboloader.transforms._batch) -----------------------------------------

    def prepare_batch(self, sources, keys, /, *, source_sizes=None,
                      max_pixels=DEFAULT_MAX_PIXELS):
        """Draw a whole batch's parameters at once (GIL held, vectorized with NumPy).

        Row i gets exactly what :meth:`from_jpeg` / :meth:`from_array` would draw with
        ``rng=SampleRandom(keys[i])`` (i.e. ``sample_rng(seed, epoch, index)``), and the
        same DCT scale and decode window.

        Args:
            sources: a sequence of n sources: JPEG files (bytes, memoryview, 1-D uint8
                array) and/or decoded ``(H, W, 3)`` uint8 arrays, mixed freely.
            keys: ``uint64[n]`` from :func:`~turboloader.transforms._random.sample_keys`.
            source_sizes: optional ``int[n, 2]`` (height, width) of the full-resolution
                originals of decoded-array rows (``from_array``'s ``source_size``); rows
                with a non-positive entry, and JPEG rows, use their own size. JPEG headers
                are read natively, in one pass without the GIL.
            max_pixels: JPEGs whose header's width * height exceeds it are FAILED rows,
                before anything is sized for them (default
                :data:`turboloader.decode.DEFAULT_MAX_PIXELS`; None: no limit). The one check
                of the batch path (:func:`turboloader.decode.executor.read_sizes`);
                :meth:`run_batch` decodes under the same limit.

        Returns:
            A :class:`~turboloader.decode.executor.BatchParams`: per-row ``status``
            (OK, GENERIC: run the per-sample path for that row, FAILED: ``errors[i]``) and
            the geometry/flip/colour/scale/window arrays :meth:`run_batch` takes.

        Raises:
            TypeError / ValueError: a source that is not a buffer or an (H, W, 3) uint8
                array, or badly shaped ``keys``/``source_sizes`` (bad *data* is a row status).

        Example:
            >>> keys = sample_keys(seed, epoch, indices)                   # doctest: +SKIP
            >>> params = plan.prepare_batch(jpegs, keys)                   # doctest: +SKIP
            >>> result = plan.run_batch(jpegs, params, batch)              # doctest: +SKIP
        """
        return _batch.prepare_batch(self._fused, sources, keys, source_sizes=source_sizes,
                                    max_pixels=max_pixels)

    def run_batch(self, sources, params, out, /, *, rows=None, runner=None, strict=False,
                  executor=None):
        """Decode and transform a prepared batch into ``out`` in one native call without
        the GIL, on ``runner``'s threads.

        Args:
            sources: the same sequence given to :meth:`prepare_batch`.
            params: its :class:`~turboloader.decode.executor.BatchParams`.
            out: ``(N, *output_shape)`` CPU tensor or ndarray of ``output_dtype``,
                C-contiguous (e.g. a recycled batch buffer).
            rows: ``int[n]``: the row of ``out`` each source is written to (default
                ``arange(n)``); distinct for the rows that run.
            runner: a :class:`~turboloader.decode.executor.BatchRunner`; default: a
                1-thread runner private to the calling thread.
            strict: make libjpeg's warnings about recoverable corruption errors.
            executor: what runs the batch: None, the CPU's
                (:func:`turboloader.decode.executor.run_batch`); or an object with the same
                ``run_batch`` (a :class:`~turboloader.loader.DeviceDecode`, whose ``out`` is
                on its device).

        Returns:
            A :class:`~turboloader.decode.executor.BatchResult`: ``status[i]`` OK (row
            ``rows[i]`` written, bit-identical to :meth:`from_jpeg` / :meth:`from_array`
            with ``rng=SampleRandom(keys[i])``), GENERIC or FAILED (not written; the
            exception in ``errors[i]``, never raised), and ``warnings[i]`` (libjpeg's
            recovered-corruption text, for a ``DecodeWarning``).

        Raises:
            TypeError / ValueError: a bad ``out``, ``rows``, ``runner`` or ``params``
                (a bad sample is a row status, never an exception).
        """
        f = self._fused
        run = _executor.run_batch if executor is None else executor.run_batch
        return run(sources, params, out, dtype=self._np_dtype, shape=f.output_shape,
                   affine=f.affine, rows=rows, runner=runner, strict=strict)
