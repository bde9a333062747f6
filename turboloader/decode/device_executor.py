"""A fused plan's batch on an accelerator: nvJPEG decodes, torchvision's kernels crop, resize,
flip and normalize there, and the batch is written into a batch tensor on the device.

:class:`DeviceDecode` is the executor ``turboloader.DataLoader(..., decode="gpu")`` gives
its decode threads' streams in place of the CPU's :func:`~turboloader.decode.executor.run_batch`,
with the same contract and the same ``run_batch`` arguments (``Plan.run_batch(...,
executor=)`` calls either): the dataset gathers the bytes, :meth:`Plan.prepare_batch
<turboloader.transforms.Plan.prepare_batch>` reads the headers and draws every row's
parameters (one definition: the same seeds give the same crop windows and flips on both
paths), and :meth:`DeviceDecode.run_batch` writes the rows and returns a
:class:`~turboloader.decode.executor.BatchResult` (row status, typed errors, warnings) that
the dataset's failure policy reads as it reads the CPU's. Per row:

* a JPEG that :func:`turboloader.decode._device.route` sends to the device is decoded there
  at full resolution (no DCT scaling), cropped and resized as ``params.geometry`` (the drawn
  geometry on the source grid) says, with torchvision v2's ``resized_crop`` semantics
  (``Resize`` then a crop for resize-then-crop plans), flipped, and written
  (``x * scale + bias`` for float32 output, the fused plan's ``Normalize``);
* everything else (progressive, CMYK, a truncated file, a file the device decoder refused,
  a decoded array from the cache) runs the CPU's batch call into a staging buffer, copied to
  its row: the same pixels, typed errors and warnings as on the CPU path;
* GENERIC / FAILED rows of the parameters are left to the caller, as on the CPU path
  (``max_pixels`` is the sizes step's rule: rows over it are FAILED in ``params`` already).

The device and the decoder are arguments, so that a CPU stand-in
(``DeviceDecode("cpu", decoder=...)`` with ``torchvision.io.decode_jpeg`` on the CPU) runs
the whole flow where there is no GPU.
"""

from __future__ import annotations

from typing import Any
import contextlib
import threading
import time
import warnings

import numpy as np
import torch

from turboloader.decode._device import (DEVICE_CALL_BYTES, DEVICE_CALL_FILES, as_tensors,
                                        decode_on_device, groups, nvjpeg_decoder, route)
from turboloader.decode._filters import Interpolation
from turboloader.errors import DeviceUnavailableError
from turboloader.decode import executor
from turboloader.decode.executor import JPEG, OK, BatchParams, BatchResult

__all__ = ["DeviceDecode"]


def _modes():
    from torchvision.transforms import InterpolationMode

    return {int(Interpolation.NEAREST): InterpolationMode.NEAREST_EXACT,
            int(Interpolation.BILINEAR): InterpolationMode.BILINEAR,
            int(Interpolation.BICUBIC): InterpolationMode.BICUBIC}


class DeviceDecode:
    """Decode JPEG batches on an accelerator (nvJPEG through ``torchvision.io.decode_jpeg``)
    and run a fused plan's crop, resize, flip and normalize there.

    Made by ``turboloader.DataLoader(..., decode="gpu")``; pass one to ``decode=`` to choose
    the device, the decoder or the size of a decode call.

    Args:
        device: ``"cuda"``, ``"cuda:1"``, a ``torch.device``; ``"cpu"`` only with a
            ``decoder`` (a stand-in that runs the whole flow without a GPU, for tests).
        decoder: ``decoder(list of 1-D uint8 CPU tensors) -> list of (3, H, W) uint8
            tensors on device`` (default: nvJPEG's batched decode, ``torchvision.io.
            decode_jpeg(files, device=device, mode=ImageReadMode.RGB)``).
        max_call_bytes: decoded bytes one decoder call holds at most (default 256 MiB).
        max_call_files: files per decoder call at most (default 256).

    Raises:
        DeviceUnavailableError: a CUDA device and no CUDA (or no such device index): never a
            silent CPU run.
        ValueError / TypeError: a CPU device without a decoder; bad sizes; a decoder that
            is not callable.

    Example:
        >>> loader = turboloader.DataLoader(ds, batch_size=256, num_workers=4,  # doctest: +SKIP
        ...                                 decode="gpu")
        >>> for images, labels in loader: ...   # images: a CUDA tensor, normalized there
    """

    def __init__(self, device: str = "cuda", *, decoder: Any = None,
                 max_call_bytes: Any = DEVICE_CALL_BYTES, max_call_files: Any = DEVICE_CALL_FILES
                ) -> None:
        self.device = torch.device(device)
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise DeviceUnavailableError(
                    f"decode on {self.device} needs CUDA, and torch {torch.__version__} sees "
                    "no CUDA device here (torch.cuda.is_available() is False); use the CPU "
                    "path (decode='cpu', the default), with PrefetchLoader for the copies")
            if self.device.index is not None and self.device.index >= torch.cuda.device_count():
                raise DeviceUnavailableError(
                    f"decode on {self.device}: there are {torch.cuda.device_count()} CUDA "
                    "devices")
        elif decoder is None:
            raise ValueError(f"decode on {self.device.type!r} needs a decoder (a stand-in); "
                             "the default decoder is nvJPEG, on a CUDA device")
        if decoder is not None and not callable(decoder):
            raise TypeError(f"decoder must be callable, got {type(decoder).__name__}")
        if int(max_call_bytes) <= 0 or int(max_call_files) <= 0:
            raise ValueError(f"max_call_bytes and max_call_files must be positive, got "
                             f"{max_call_bytes}, {max_call_files}")
        self.decoder = nvjpeg_decoder(self.device) if decoder is None else decoder
        self.max_call_bytes, self.max_call_files = int(max_call_bytes), int(max_call_files)
        self._lock = threading.Lock()
        self._counts = {"device": 0, "cpu": 0, "device_calls": 0}
        self._reasons = {}
        self._warned = False
        self._streams = threading.local()

    def __repr__(self):
        return (f"DeviceDecode({str(self.device)!r}, max_call_bytes={self.max_call_bytes}, "
                f"max_call_files={self.max_call_files})")

    # -- what it takes -----------------------------------------------------------------

    def empty(self, shape, dtype):
        """A new batch tensor on the device (the caching allocator recycles its memory)."""
        return torch.empty(tuple(int(v) for v in shape), dtype=dtype, device=self.device)

    def stats(self) -> dict:
        """Rows decoded on the device, on the CPU (with the reasons and their counts), and
        the device decoder calls made, since this executor was made."""
        with self._lock:
            return {**self._counts, "cpu_reasons": dict(self._reasons)}

    def _count(self, device_rows, cpu_reasons, calls):
        with self._lock:
            self._counts["device"] += device_rows
            self._counts["cpu"] += len(cpu_reasons)
            self._counts["device_calls"] += calls
            for r in cpu_reasons:
                key = r.split(":", 1)[0]
                self._reasons[key] = self._reasons.get(key, 0) + 1

    def _stream(self):
        s = getattr(self._streams, "stream", None)
        if s is None:
            s = self._streams.stream = torch.cuda.Stream(device=self.device)
        return s

    # -- the batch ---------------------------------------------------------------------

    def run_batch(self, sources, params, out, /, *, dtype, shape=None, affine=None,
                  rows=None, runner=None, strict=False):
        """Decode and transform a planned batch into ``out`` on the device: the contract of
        the CPU's :func:`turboloader.decode.executor.run_batch` (the same arguments, which
        :meth:`Plan.run_batch <turboloader.transforms.Plan.run_batch>` passes), with ``out``
        a ``(N, *shape)`` tensor on this executor's device. The parameters are
        :func:`~turboloader.decode.executor.plan_slots`' (``max_pixels`` was applied there:
        those rows are FAILED already); a row's crop and resize are ``params.geometry``'s,
        the drawn geometry on the source grid. ``runner`` and ``strict`` are the CPU rows'.

        ``strict``: libjpeg's warnings about recoverable corruption are row errors, as in
        :meth:`Plan.run_batch <turboloader.transforms.Plan.run_batch>` (a file with restart
        markers libjpeg warns about never reaches the device: it is decoded on the CPU).

        Returns:
            A :class:`~turboloader.decode.executor.BatchResult`. The work is complete on
            the device when it returns (the caller may hand ``out`` to any stream).

        Raises:
            TypeError / ValueError: a bad ``out``, ``rows`` or ``params`` (a bad sample is a
                row status, never an exception).
        """
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out.device != self.device and not (out.device.type == self.device.type == "cuda"
                                              and self.device.index is None):
            raise ValueError(f"out must be on {self.device}, got {out.device}")
        want = torch.float32 if np.dtype(dtype) == np.float32 else torch.uint8
        if out.dtype is not want:
            raise TypeError(f"out must have dtype {want}, got {out.dtype}")
        shape = tuple(out.shape[1:]) if shape is None else tuple(int(v) for v in shape)
        if out.dim() != 4 or tuple(out.shape[1:]) != shape:
            raise ValueError(f"out must have shape (N, {', '.join(map(str, shape))})"
                             f", got {tuple(out.shape)}")
        rows = executor.batch_rows(sources, params, rows, out.shape[0], distinct=True)
        status = params.status.copy()
        errors = list(params.errors)
        warns = [None] * params.n
        todo = status == OK
        t0 = time.perf_counter()
        jpeg = params.kind == JPEG
        jpeg_rows = np.flatnonzero(todo & jpeg).tolist()
        cpu = {i: "decoded array" for i in np.flatnonzero(todo & ~jpeg).tolist()}
        reasons, sizes = route([sources[i] for i in jpeg_rows])
        dev_rows = []
        for i, why, hw in zip(jpeg_rows, reasons, sizes):
            if why is not None:
                cpu[i] = why
            elif tuple(hw) != tuple(params.source_size[i]):
                cpu[i] = "header size differs"   # cannot happen with one header reader
            elif tuple(params.out_size[i]) != shape[1:]:
                cpu[i] = "output size"   # the CPU's call fails the row, saying why
            else:
                dev_rows.append(i)
        cuda = self.device.type == "cuda"
        ctx = contextlib.nullcontext()
        if cuda:
            stream = self._stream()
            # out (and the memory any new tensor reuses) may still be read by work queued
            # on the allocating stream: this stream starts after it
            stream.wait_stream(torch.cuda.current_stream(self.device))
            ctx = torch.cuda.stream(stream)
        calls = 0
        affine = affine if want is torch.float32 else None
        with ctx:
            refused, calls = self._device_rows(sources, params, out, rows, dev_rows, affine)
            cpu.update(refused)
            if cpu:
                self._cpu_rows(sources, params, out, rows, sorted(cpu), status, errors, warns,
                               dtype=dtype, shape=shape, affine=affine, runner=runner,
                               strict=strict)
        if cuda:
            stream.synchronize()
        self._count(len(dev_rows) - len(refused), list(cpu.values()), calls)
        return BatchResult(status, errors, warns, time.perf_counter() - t0)

    def _device_rows(self, sources, params, out, rows, dev_rows, affine):
        """Decode ``dev_rows`` on the device and write them; returns ``({row: reason} of the
        rows the device refused, decoder calls)``."""
        if not dev_rows:
            return {}, 0
        import torchvision.transforms.v2.functional as F

        mode = _modes()[int(params.filter)]
        if affine is not None:
            scale, bias = affine
            affine = (torch.tensor(scale, dtype=torch.float32).view(3, 1, 1).to(self.device),
                      torch.tensor(bias, dtype=torch.float32).view(3, 1, 1).to(self.device))
        refused, calls = {}, 0
        for group in groups([tuple(params.source_size[i]) for i in dev_rows],
                            max_bytes=self.max_call_bytes, max_files=self.max_call_files):
            idx = [dev_rows[g] for g in group]
            images, batch_error = decode_on_device(as_tensors([sources[i] for i in idx]),
                                                   self.decoder)
            calls += 1 if batch_error is None else 1 + len(idx)
            if batch_error is not None and len(idx) > 1 and \
                    all(isinstance(im, Exception) for im in images):
                self._warn_once(batch_error)
            for i, img in zip(idx, images):
                H, W = (int(v) for v in params.source_size[i])
                if isinstance(img, Exception):
                    refused[i] = f"device decoder: {img}"
                    continue
                if tuple(img.shape) != (3, H, W) or img.dtype != torch.uint8:
                    refused[i] = (f"device decoder: gave {tuple(img.shape)} {img.dtype} for a "
                                  f"{W} x {H} image")
                    continue
                x = _geometry(F, img, i, params, mode)
                dst = out[int(rows[i])]
                if affine is None:
                    dst.copy_(x)
                else:
                    torch.mul(x, affine[0], out=dst)
                    dst.add_(affine[1])
        return refused, calls

    def _cpu_rows(self, sources, params, out, rows, idx, status, errors, warns, *, dtype,
                  shape, affine, runner, strict):
        """Rows ``idx`` on the CPU's batch call into a staging buffer, then to their rows."""
        sub = _take(params, idx)
        pin = self.device.type == "cuda"
        staging = torch.empty((len(idx), *shape), dtype=out.dtype, pin_memory=pin)
        result = executor.run_batch([sources[i] for i in idx], sub, staging, dtype=dtype,
                                    shape=shape, affine=affine, runner=runner, strict=strict)
        done = []
        for j, i in enumerate(idx):
            warns[i] = result.warnings[j]
            if result.status[j] == OK:
                done.append(j)
            else:
                status[i] = result.status[j]
                errors[i] = result.errors[j]
        if done:
            src = staging[done] if len(done) != len(idx) else staging
            dst = torch.as_tensor(rows[[idx[j] for j in done]], device=self.device)
            out.index_copy_(0, dst, src.to(self.device, non_blocking=pin))

    def _warn_once(self, exc):
        with self._lock:
            if self._warned:
                return
            self._warned = True
        warnings.warn(f"turboloader DeviceDecode({self.device}): the device decoder failed on "
                      f"every file of a batch, each decoded on the CPU instead (counted in "
                      f"stats()['cpu']): {type(exc).__name__}: {exc}", RuntimeWarning,
                      stacklevel=4)


def _geometry(F, img, i, params, mode):
    """Row ``i``'s crop, resize and flip of the decoded ``img`` (3, H, W), as
    ``params.geometry`` (the drawn geometry on the source grid, which masks and boxes follow
    too) says, with torchvision v2's semantics: crop then resize (``resized_crop``), or
    resize the whole image then crop."""
    geometry = params.geometry
    (y0, ty, h, rh), (x0, tx, w, rw) = geometry.axes[i].tolist()
    oh, ow = (int(v) for v in params.out_size[i])
    if geometry.crop_first:   # a crop of (h, w) at (y0, x0), resized to (rh, rw)
        x = img[:, y0:y0 + h, x0:x0 + w]
        if (h, w) != (rh, rw):
            x = F.resize(x, [rh, rw], interpolation=mode, antialias=True)
    else:                     # the whole (h, w) resized to (rh, rw), cropped from (ty, tx)
        x = img if (rh, rw) == (h, w) else F.resize(img, [rh, rw], interpolation=mode,
                                                    antialias=True)
        x = x[:, ty:ty + oh, tx:tx + ow]
    if params.flip[i]:
        x = x.flip(-1)
    return x


def _take(params, idx):
    """The rows ``idx`` of a :class:`BatchParams`, as a BatchParams of their own."""
    sub = BatchParams.__new__(BatchParams)
    sel = np.asarray(idx, np.int64)
    for name in BatchParams.__slots__:
        v = getattr(params, name)
        if name == "n":
            v = len(idx)
        elif name == "errors":
            v = [v[i] for i in idx]
        elif isinstance(v, np.ndarray):
            v = v[sel]
        setattr(sub, name, v)
    return sub
