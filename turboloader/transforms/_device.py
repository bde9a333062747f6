"""A fused plan's batch on an accelerator: nvJPEG decodes, torchvision's kernels crop, resize,
flip and normalize there, and the batch is written into a batch tensor on the device.

:class:`DeviceDecode` is the executor ``turboloader.DataLoader(..., decode="gpu")`` runs in
its decode threads in place of the CPU's :func:`~turboloader.decode.executor.run_batch`,
with the same contract: the dataset gathers the bytes, :meth:`Plan.prepare_batch
<turboloader.transforms.Plan.prepare_batch>` reads the headers and draws every row's
parameters (one definition: the same seeds give the same crop windows and flips on both
paths), and :meth:`DeviceDecode.run_batch` writes the rows and returns a
:class:`~turboloader.decode.executor.BatchResult` (row status, typed errors, warnings) that
the dataset's failure policy reads as it reads the CPU's. Per row:

* a JPEG that :func:`turboloader.decode._device.route` sends to the device is decoded there
  at full resolution (no DCT scaling), cropped and resized with torchvision v2's
  ``resized_crop`` semantics (``Resize`` then a crop for resize-then-crop plans), flipped,
  and written (``x * scale + bias`` for float32 output, the fused plan's ``Normalize``);
* everything else (progressive, CMYK, a truncated file, a file the device decoder refused,
  a decoded array from the cache) runs the CPU's batch call into a staging buffer, copied to
  its row: the same pixels, typed errors and warnings as on the CPU path;
* GENERIC / FAILED rows of the parameters are left to the caller, as on the CPU path.

The device and the decoder are arguments, so that a CPU stand-in
(``DeviceDecode("cpu", decoder=...)`` with ``torchvision.io.decode_jpeg`` on the CPU) runs
the whole flow where there is no GPU.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings

import numpy as np
import torch

from turboloader.decode._device import (DEVICE_CALL_BYTES, DEVICE_CALL_FILES, as_tensors,
                                        decode_on_device, groups, nvjpeg_decoder, route)
from turboloader.decode._filters import Interpolation
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS, _max_pixels
from turboloader.errors import DeviceUnavailableError
from turboloader.decode import executor
from turboloader.decode.executor import FAILED, OK, BatchParams, BatchResult
from turboloader.transforms._colour import ColorJitter
from turboloader.transforms._containers import Compose, RandomApply, RandomChoice, RandomOrder

__all__ = ["DeviceDecode", "current_device_decode", "decoding_with"]

_local = threading.local()


@contextlib.contextmanager
def decoding_with(executor):
    """Batches decoded by this thread inside the block run on ``executor`` (a
    :class:`DeviceDecode`, or None for the CPU)."""
    prev = getattr(_local, "executor", None)
    _local.executor = executor
    try:
        yield
    finally:
        _local.executor = prev


def current_device_decode():
    """The calling thread's :class:`DeviceDecode` (see :func:`decoding_with`), or None."""
    return getattr(_local, "executor", None)


def _has_colour(members) -> bool:
    for t in members:
        if isinstance(t, ColorJitter):
            return True
        if isinstance(t, (RandomApply, RandomChoice, RandomOrder, Compose)) and \
                _has_colour(t.transforms):
            return True
    return False


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

    def __init__(self, device="cuda", *, decoder=None, max_call_bytes=DEVICE_CALL_BYTES,
                 max_call_files=DEVICE_CALL_FILES):
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

    def check_plan(self, plan, owner="decode='gpu'"):
        """Raise ValueError unless ``plan`` (a :class:`~turboloader.transforms.Plan` or None)
        is one this executor runs: a fused plan with one output shape and no ColorJitter."""
        if plan is None:
            raise ValueError(f"{owner} needs a dataset whose transform fuses into the decoder "
                             "(turboloader.transforms.explain(transform) says why it does "
                             "not); an unfused pipeline runs on the CPU")
        if plan.output_shape is None:
            raise ValueError(f"{owner} needs a transform with one output size for every "
                             "image (a crop, or Resize((h, w))), so that rows batch")
        if _has_colour(plan._fused.post):
            raise ValueError(f"{owner} runs crop, resize, flip and normalize on the device; "
                             "ColorJitter has no device kernel here yet: drop it from the "
                             "dataset's transform or use the CPU path")

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

    def run_batch(self, plan, sources, params, out, /, *, rows=None,
                  max_pixels=DEFAULT_MAX_PIXELS, strict=False):
        """Decode and transform a prepared batch into ``out`` on the device: the contract of
        :meth:`Plan.run_batch <turboloader.transforms.Plan.run_batch>`, with ``out`` a
        ``(N, *output_shape)`` tensor on this executor's device.

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
        fused = plan._fused
        if not isinstance(params, BatchParams):
            raise TypeError(f"params must come from prepare_batch, got {type(params).__name__}")
        n = params.n
        if len(sources) != n:
            raise ValueError(f"params are for {n} sources, got {len(sources)}")
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out.device != self.device and not (out.device.type == self.device.type == "cuda"
                                              and self.device.index is None):
            raise ValueError(f"out must be on {self.device}, got {out.device}")
        if out.dtype is not fused.output_dtype:
            raise TypeError(f"out must have dtype {fused.output_dtype}, got {out.dtype}")
        if out.dim() != 4 or tuple(out.shape[1:]) != tuple(fused.output_shape):
            raise ValueError(f"out must have shape (N, {', '.join(map(str, fused.output_shape))})"
                             f", got {tuple(out.shape)}")
        if rows is None:
            if n > out.shape[0]:
                raise ValueError(f"out has {out.shape[0]} rows for {n} samples")
            rows = np.arange(n, dtype=np.int64)
        else:
            rows = np.asarray(rows)
            if rows.shape != (n,) or rows.dtype.kind not in "iu":
                raise ValueError(f"rows must be an integer array of shape ({n},)")
            rows = rows.astype(np.int64, copy=False)
            if n and (rows.min() < 0 or rows.max() >= out.shape[0]
                      or len(np.unique(rows)) != n):
                raise ValueError(f"rows must be distinct rows of out (0..{out.shape[0] - 1})")
        limit = _max_pixels(max_pixels)
        status = params.status.copy()
        errors = list(params.errors)
        warns = [None] * n
        todo = status == OK
        if limit:
            big = todo & (params.source_size[:, 0] * params.source_size[:, 1] > limit)
            big &= params.kind == executor._JPEG
            for i in np.flatnonzero(big).tolist():
                status[i] = FAILED
                errors[i] = executor._too_large(params.source_size[i], limit)
            todo &= ~big
        t0 = time.perf_counter()
        jpeg_rows = np.flatnonzero(todo & (params.kind == executor._JPEG)).tolist()
        cpu = {i: "decoded array" for i in np.flatnonzero(todo & (params.kind != executor._JPEG)).tolist()}
        reasons, sizes = route([sources[i] for i in jpeg_rows])
        dev_rows = []
        for i, why, hw in zip(jpeg_rows, reasons, sizes):
            if why is not None:
                cpu[i] = why
            elif tuple(hw) != tuple(params.source_size[i]):
                cpu[i] = "header size differs"   # cannot happen with one header reader
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
        with ctx:
            refused, calls = self._device_rows(fused, sources, params, out, rows, dev_rows)
            cpu.update(refused)
            if cpu:
                idx = sorted(cpu)
                self._cpu_rows(fused, sources, params, out, rows, idx, status, errors, warns,
                               strict)
        if cuda:
            stream.synchronize()
        self._count(len(dev_rows) - len(refused), list(cpu.values()), calls)
        return BatchResult(status, errors, warns, time.perf_counter() - t0)

    def _device_rows(self, fused, sources, params, out, rows, dev_rows):
        """Decode ``dev_rows`` on the device and write them; returns ``({row: reason} of the
        rows the device refused, decoder calls)``."""
        if not dev_rows:
            return {}, 0
        import torchvision.transforms.v2.functional as F

        mode = _modes()[int(fused.filter)]
        affine = None
        if fused.output_dtype is torch.float32:
            scale, bias = fused.affine
            affine = (torch.tensor(scale, dtype=torch.float32).view(3, 1, 1).to(self.device),
                      torch.tensor(bias, dtype=torch.float32).view(3, 1, 1).to(self.device))
        resized = None
        clip = params.clip
        if fused.resize is not None and not clip[dev_rows].all():
            resized = fused.resize._output_sizes(params.source_size)
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
                x = self._geometry(F, img, i, params, resized, mode)
                dst = out[int(rows[i])]
                if affine is None:
                    dst.copy_(x)
                else:
                    torch.mul(x, affine[0], out=dst)
                    dst.add_(affine[1])
        return refused, calls

    @staticmethod
    def _geometry(F, img, i, params, resized, mode):
        """Row ``i``'s crop, resize and flip of the decoded ``img`` (3, H, W)."""
        oh, ow = (int(v) for v in params.out_size[i])
        x0, y0, x1, y1 = params.source_box[i].tolist()
        if params.clip[i]:   # crop-then-resize: torchvision's resized_crop
            t, l = int(round(y0)), int(round(x0))
            h, w = int(round(y1)) - t, int(round(x1)) - l
            x = img[:, t:t + h, l:l + w]
            if (h, w) != (oh, ow):
                x = F.resize(x, [oh, ow], interpolation=mode, antialias=True)
        else:                # Resize then a crop: the box is the crop at the float scale
            H, W = img.shape[1:]
            rh, rw = (int(v) for v in resized[i])
            t, l = int(round(y0 * rh / H)), int(round(x0 * rw / W))
            x = img if (rh, rw) == (H, W) else F.resize(img, [rh, rw], interpolation=mode,
                                                        antialias=True)
            x = x[:, t:t + oh, l:l + ow]
        if params.flip[i]:
            x = x.flip(-1)
        return x

    def _cpu_rows(self, fused, sources, params, out, rows, idx, status, errors, warns,
                  strict):
        """Rows ``idx`` on the CPU's batch call into a staging buffer, then to their rows."""
        sub = _take(params, idx)
        pin = self.device.type == "cuda"
        staging = torch.empty((len(idx), *fused.output_shape), dtype=fused.output_dtype,
                              pin_memory=pin)
        dtype = np.float32 if fused.output_dtype == torch.float32 else np.uint8
        result = executor.run_batch([sources[i] for i in idx], sub, staging, dtype=dtype,
                                    shape=fused.output_shape, affine=fused.affine,
                                    strict=strict)
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
