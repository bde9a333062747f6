"""A fused :class:`~turboloader.transforms._plan.Plan`'s batch draws: what the transforms
describe for the one slot executor (:mod:`turboloader.decode.executor`), which decodes.

Python makes every decision once per batch, with NumPy, and one native call without the GIL
runs the whole batch on a :class:`~turboloader.decode.executor.BatchRunner`'s threads::

    keys = sample_keys(seed, epoch, indices)            # np.uint64[n]
    params = plan.prepare_batch(sources, keys)           # sizes, every random draw, windows
    result = plan.run_batch(sources, params, batch)      # decode/resample/colour/flip/CHW
    # result.status[i]: OK (row i of batch written), GENERIC or FAILED (result.errors[i])

:func:`prepare_batch` is the three steps of the executor with the draw between them: the
executor reads the sizes (``read_sizes``: headers, ``max_pixels``), :func:`draw` fills a
:class:`~turboloader.decode.executor.SlotSpec` on them, the executor plans the slots
(``plan_slots``: DCT scale, windows). Row status codes and threads: see
:mod:`turboloader.decode.executor`.

Equivalence (tested bit for bit): row i of ``run_batch`` equals
``plan.from_jpeg(sources[i], rng=SampleRandom(keys[i]))`` (or ``plan.from_array(sources[i],
rng=..., source_size=source_sizes[i])`` for an array). It holds by construction: the
parameters are drawn by one definition, :func:`draw` (each transform's ``_draw_batch``),
which ``Plan._draw`` runs as a batch of one with the sample's generator
(:class:`~turboloader.transforms._draws.RngDraws`) and ``prepare_batch`` runs on the whole
batch with the generators' keys (:class:`~turboloader.transforms._draws.KeyDraws`: the
counter-based :class:`~turboloader.transforms._random.SampleRandom`, draw k of every sample
one NumPy expression); the DCT scale and decode window are the executor's, which the
per-sample path also runs as a batch of one.
"""

from typing import NamedTuple

import numpy as np

from turboloader.decode import executor
from turboloader.decode.executor import SlotSpec
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS
from turboloader.transforms._draws import KeyDraws
from turboloader.transforms._geometry import RandomResizedCrop
from turboloader.transforms._random import _as_u64

__all__ = ["Fused", "Geometry", "draw", "prepare_batch"]

# -- a fused Compose's draws, for a batch of rows: the definition ---------------------------

class Geometry(NamedTuple):
    """A batch's drawn geometry as torchvision applies it to a ``Mask`` or ``BoundingBoxes``
    given with the image (what ``MaskField`` / ``BoxesField`` follow without replaying the
    pipeline). ``axes``: ``int64 (n, 2, 4)``, per row and axis (y, x) ``(origin, offset,
    size, resized)``: source pixel ``j`` of the output along that axis is
    ``origin + min(floor((offset + j) * (size / resized)), size - 1)`` (torch's nearest
    index, float32). ``crop_first``: crop ``[origin, origin + size)`` then resize it to
    ``resized`` (RandomResizedCrop, or a crop alone: ``size == resized``); else resize the
    whole ``size`` to ``resized``, then crop the output from ``offset`` when ``crop``."""

    axes: np.ndarray
    crop_first: bool
    crop: bool


class Fused(NamedTuple):
    """A fused pipeline as the draws and the native calls see it (``Plan._fused``):
    ``[crop | resize [crop]] post... -> output``. ``filter``: the native filter code;
    ``affine``: ``(scale, bias)`` per channel for float32 output, else None;
    ``output_shape``: ``(3, H, W)`` or None when it depends on the image."""

    crop: object
    resize: object
    post: tuple
    filter: int
    affine: object
    dct_scaling: bool
    output_shape: object
    output_dtype: object


def draw(fused, HW, d, live=None):
    """Every parameter of a :class:`Fused` pipeline ``[crop | resize [crop]] post...`` for each row
    of ``HW`` (``int64 (n, 2)`` source (height, width)), drawn from ``d`` (a
    :class:`~turboloader.transforms._draws.KeyDraws` for a batch, an ``RngDraws`` for one
    sample: ``Plan._draw`` is this with n = 1) in Compose order; rows outside ``live`` draw
    nothing. Each transform's sampling is its own ``_draw_batch``.

    The source box ``(x0, y0, x1, y1)`` maps onto the output; ``clip``: the filter stops at
    it (crop-then-resize, or no resize) rather than reading around it (resize-then-crop:
    the crop box in source pixels at the float scale ``W / rw``)."""
    crop, resize = fused.crop, fused.resize
    n = len(HW)
    live = np.ones(n, bool) if live is None else np.array(live, bool)
    r = SlotSpec(n)
    axes = np.zeros((n, 2, 4), np.int64)   # Geometry.axes: (origin, offset, size, resized)
    if isinstance(crop, RandomResizedCrop):
        p = crop._draw_batch(HW, d, live)
        r.box = box = np.empty((n, 4), np.float64)
        box[:, 0], box[:, 1] = p["left"], p["top"]
        box[:, 2], box[:, 3] = p["left"] + p["width"], p["top"] + p["height"]
        r.clip = np.ones(n, bool)
        r.out = np.empty((n, 2), np.int64)
        r.out[:] = crop.size
        axes[:, 0, 0], axes[:, 0, 2], axes[:, 0, 3] = p["top"], p["height"], crop.size[0]
        axes[:, 1, 0], axes[:, 1, 2], axes[:, 1, 3] = p["left"], p["width"], crop.size[1]
    else:
        resized = HW if resize is None else resize._output_sizes(HW)
        rh, rw = resized[:, 0], resized[:, 1]
        if crop is not None:
            ch, cw = crop.size
            r.generic = (ch > rh) | (cw > rw)
            live &= ~r.generic
            p = crop._draw_batch(resized, d, live)
            top, left = p["top"], p["left"]
            r.out = np.empty((n, 2), np.int64)
            r.out[:] = crop.size
        else:
            top = left = 0
            r.out = resized
        box = np.empty((n, 4), np.int64)
        box[:, 0], box[:, 1] = left, top
        box[:, 2], box[:, 3] = left + r.out[:, 1], top + r.out[:, 0]
        if resize is None:
            r.clip = np.ones(n, bool)
            r.box = box.astype(np.float64)
        else:
            r.clip = (rh == HW[:, 0]) & (rw == HW[:, 1])
            with np.errstate(divide="ignore", invalid="ignore"):   # generic rows: unused
                scale = np.tile(HW[:, ::-1] / resized[:, ::-1], 2)
                r.box = np.where(r.clip[:, None], box.astype(np.float64), box * scale)
        if resize is None:   # a crop alone: crop_first with size == resized
            axes[:, 0, 0], axes[:, 1, 0] = top, left
            axes[:, :, 2] = axes[:, :, 3] = r.out
        else:
            axes[:, 0, 1], axes[:, 1, 1] = top, left
            axes[:, :, 2], axes[:, :, 3] = HW, resized
    r.geometry = Geometry(axes, resize is None, crop is not None)
    for t in fused.post:   # each declares its own draw (Transform.fused_ops)
        t._fused_draw(d, live, r)
    r.counter = d.counter if isinstance(d, KeyDraws) else None
    return r


def prepare_batch(fused, sources, keys, /, *, source_sizes=None, max_pixels=DEFAULT_MAX_PIXELS):
    """Draw every parameter of a batch: see :meth:`Plan.prepare_batch`. The executor reads the
    sizes (and applies ``max_pixels``), :func:`draw` describes each slot, the executor plans
    the decode."""
    n = len(sources)
    keys = _as_u64(keys)
    if keys.shape != (n,):
        raise ValueError(f"keys must have shape ({n},), got {keys.shape}")
    sizes = executor.read_sizes(sources, source_sizes=source_sizes, max_pixels=max_pixels)
    spec = draw(fused, sizes.hw, KeyDraws(keys), sizes.status == executor.OK)
    return executor.plan_slots(sizes, spec, filter=fused.filter,
                               dct_scaling=fused.dct_scaling)
