"""The per-sample resample-into-slot entry: a source (JPEG bytes or a decoded HWC array) ->
the window of it that is needed -> antialiased resample -> colour ops -> (flip) -> a CHW slot.

One sample at a time goes through :func:`resample_into_slot`: ``decode_resized_crop``,
``Plan.from_jpeg`` / ``Plan.from_array`` (the datasets' per-sample path and their cache) and
the converter. A whole batch goes through ``Plan.run_batch``
(:mod:`turboloader.transforms._batch`), one native call for every row. Both take the DCT
scale and the decoded window from :mod:`turboloader.decode._window` (this module runs it
as a batch of one), so the two entries decode and resample the same pixels. Callers decide
the geometry (the source box) and validate the slot; this module makes the one native call
(no GIL) and reports libjpeg's warnings.
"""

import numpy as np

from turboloader._native import _fused, _jpeg
from turboloader.decode._window import window_of_one
from turboloader.decode.sizes import scaled_dims
from turboloader.decode.jpeg import _window_k, _warn

def _window(box, clip, out_size, decoded_size, scale, filt):
    """``(wx, wy, ww, wh, inner)``: the window maths of :mod:`turboloader.decode._window`
    for one row; see :func:`turboloader.decode.decode_window`."""
    return window_of_one(box, clip, out_size, decoded_size, scale, filt)


def resample_into_slot(src, out, *, box, clip, filt, source_size=None, flip=False, ops=(),
                  affine=None, dct_scaling=True, strict=False, max_pixels=0,
                  stacklevel=1):
    """Write the source region ``box`` of ``src``, resampled to ``out``'s size, into ``out``.

    Args:
        src: ``(buffer, header)`` of a JPEG (from ``jpeg._open``: a 1-D byte view and its
            :class:`JpegHeader`), or an ``(h, w, 3)`` C-contiguous uint8 array.
        out: the validated slot, a C-contiguous ``(3, H, W)`` float32 or uint8 ndarray.
        box: ``(x0, y0, x1, y1)``, the float source region in the coordinates of the
            full-resolution image (``source_size``) that maps onto ``out``.
        clip: True: the filter stops at the box's edges (crop-then-resize, torchvision's
            ``resized_crop``); False: it reads the pixels around the box (a full resize
            followed by a crop).
        filt: native filter code (:class:`Interpolation`).
        source_size: ``(height, width)`` that ``box`` refers to: a JPEG's full size (its
            header's, the default) or, for an array that is a downscaled copy, the
            original's (default: the array's own).
        flip, ops: horizontal flip; colour ops ``(kind, factor)`` run on the resized image.
        affine: ``(scale, bias)`` per channel for float32 output (``pixel * scale + bias``).
        dct_scaling: JPEG only: decode at the smallest fast DCT scale (1/8, 1/4, 1/2) that
            leaves the box at least ``out``'s size.
        strict, max_pixels: JPEG only: libjpeg warnings as errors; the pixel limit (0: none)
            the native decoder re-checks.
        stacklevel: of the DecodeWarning, counted from the caller of this function.

    Raises:
        DecodeError: the JPEG does not decode. ValueError: a bad window or slot.
    """
    oh, ow = out.shape[1], out.shape[2]
    scale, bias = affine or (None, None)
    if isinstance(src, np.ndarray):
        dh, dw = src.shape[:2]
        H, W = (dh, dw) if source_size is None else source_size
        wx, wy, ww, wh, inner = _window(box, clip, (oh, ow), (dh, dw), (dh / H, dw / W), filt)
        _fused.resample_array_into(src, out, win_x=wx, win_y=wy, win_w=ww, win_h=wh,
                                   box=inner, filter=filt, flip=flip, ops=ops,
                                   mean_scale=scale, bias=bias)
        return out
    buf, header = src
    W, H = header.width, header.height
    k = _window_k(box[2] - box[0], box[3] - box[1], ow, oh) if dct_scaling else 8
    dh, dw = scaled_dims((H, W), k)
    wx, wy, ww, wh, inner = _window(box, clip, (oh, ow), (dh, dw), (k / 8, k / 8), filt)
    n_warnings, message = _fused.decode_resample_into(
        buf, out, scale_num=k, full=(ww == dw and wh == dh), win_x=wx, win_y=wy, win_w=ww,
        win_h=wh, box=inner, filter=filt, flip=flip, ops=ops, mean_scale=scale, bias=bias,
        flags=_jpeg.STRICT if strict else 0, max_pixels=max_pixels)
    _warn(n_warnings, message, stacklevel + 1)
    return out
