"""``PrefetchLoader``: overlap host-to-device copies with compute, normalise on the device."""

from __future__ import annotations

from typing import Any
import torch

from turboloader.data import BufferPool

__all__ = ["PrefetchLoader"]


def _stats(values, name):
    if values is None:
        return None
    t = torch.as_tensor(values, dtype=torch.float32).flatten()
    if t.numel() not in (1, 3):
        raise ValueError(f"{name} must have 1 or 3 values, got {t.numel()}")
    return t


class PrefetchLoader:
    """Wraps a loader of ``[images, labels, ...]`` batches and moves them to ``device``.

    On CUDA, batch ``k + 1`` is copied (``non_blocking``, from pinned memory when the loader
    pins) on a side stream while your step runs on batch ``k``; the main stream waits for
    the copy before it hands the batch over, and each tensor is marked as used by the main
    stream (``record_stream``) so the caching allocator does not recycle it early. A uint8
    image batch is converted on the device to float32 ``x / 255``, then, with
    ``mean``/``std``, to ``(x / 255 - mean) / std``: pair it with a turboloader pipeline
    ending in ``ToImage()``/``PILToTensor()`` (4x less host memory traffic than float32)::

        loader = turboloader.DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True)
        batches = PrefetchLoader(loader, "cuda", mean=(0.485, 0.456, 0.406),
                                 std=(0.229, 0.224, 0.225))

    On a CPU device (or without CUDA) it is a pass-through: batches come back as the loader
    made them, except that uint8 images are converted and normalised the same way, so the
    output does not depend on where it runs. Float images are never rescaled (``mean``/
    ``std`` are then applied only when given).

    Args:
        loader: any iterable of batches (a list/tuple whose first element is the images).
        device: target device (``"cuda"``, ``torch.device("cuda:1")``, ``"cpu"``).
        mean, std: per-channel statistics in [0, 1] units (None: no normalisation).

    ``len``, ``set_epoch``, ``stats`` and ``dataset`` are the wrapped loader's.
    """

    def __init__(self, loader: Any, device: Any, mean: Any = None, std: Any = None) -> None:
        self.loader = loader
        self.device = torch.device(device)
        if (mean is None) != (std is None):
            raise ValueError("pass both mean and std, or neither")
        self.mean, self.std = _stats(mean, "mean"), _stats(std, "std")
        if self.std is not None and bool((self.std == 0).any()):
            raise ValueError("std must not contain zeros")
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self._affines = {}
        # CPU outputs: the batch the caller holds plus the one being made
        self._pool = BufferPool(2)

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):
        if name in ("set_epoch", "stats", "dataset", "batch_size", "sampler"):
            return getattr(self.loader, name)
        raise AttributeError(name)

    def _affine(self, device, uint8):
        """(scale, bias) with ``out = x * scale + bias`` (x in [0, 255] for uint8 input):
        ``(x / 255 - mean) / std`` as one multiply-add, as the fused CPU path computes it."""
        key = (device, uint8)
        got = self._affines.get(key)
        if got is None:
            scale = torch.full((3,), 1.0 / 255.0 if uint8 else 1.0)
            bias = torch.zeros(3)
            if self.mean is not None:
                scale = scale / self.std.expand(3)
                bias = -self.mean.expand(3) / self.std.expand(3)
            got = self._affines[key] = (scale.view(-1, 1, 1).to(device),
                                        bias.view(-1, 1, 1).to(device))
        return got

    def _normalise(self, images):
        uint8 = images.dtype == torch.uint8
        if not uint8 and self.mean is None:
            return images
        if images.dim() < 3 or images.shape[-3] not in (1, 3):
            # not (..., C, H, W) with 1 or 3 channels: the plain formula, broadcast as given
            x = images.float() / 255.0 if uint8 else images
            if self.mean is not None:
                x = (x - self.mean.to(x.device).view(-1, 1, 1)) / self.std.to(x.device).view(-1, 1, 1)
            return x
        scale, bias = self._affine(images.device, uint8)
        if images.device.type == "cpu":
            # a recycled output (fresh memory costs more than the arithmetic here); the
            # loader's tensor is never modified
            out = self._pool.get(tuple(images.shape), torch.float32)
            return out.copy_(images).mul_(scale).add_(bias)
        if uint8:
            return images.float().mul_(scale).add_(bias)  # float() made a new tensor
        return torch.addcmul(bias, images, scale)  # a new tensor: the loader's stays as is

    def _finish(self, batch):
        if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
            out = [self._normalise(batch[0]), *batch[1:]]
            return type(batch)(out) if isinstance(batch, tuple) else out
        return batch

    def _to_device(self, batch):
        if isinstance(batch, torch.Tensor):
            return batch.to(self.device, non_blocking=True)
        if isinstance(batch, (list, tuple)):
            out = [self._to_device(x) for x in batch]
            return type(batch)(out) if isinstance(batch, tuple) else out
        if isinstance(batch, dict):
            return {k: self._to_device(v) for k, v in batch.items()}
        return batch

    def __iter__(self):
        if not self.cuda:
            for batch in self.loader:
                if self.device.type != "cpu":
                    batch = self._to_device(batch)
                yield self._finish(batch)
            return
        yield from self._iter_cuda()

    def _iter_cuda(self):
        stream = torch.cuda.Stream(device=self.device)
        main = torch.cuda.current_stream(self.device)

        def load(batch):
            # The copies and the normalisation run on the side stream. Its allocations come
            # from that stream's pool (never memory the main stream is still using), and a
            # pinned source stays reserved by the host allocator until its copy completes.
            with torch.cuda.stream(stream):
                batch = self._to_device(batch)
                return self._finish(batch)  # normalised on the side stream too

        def mark(x):
            if isinstance(x, torch.Tensor):
                if x.device.type == "cuda":
                    x.record_stream(main)
            elif isinstance(x, (list, tuple)):
                for y in x:
                    mark(y)
            elif isinstance(x, dict):
                for y in x.values():
                    mark(y)

        it = iter(self.loader)
        try:
            nxt = load(next(it))
        except StopIteration:
            return
        for batch in it:
            main.wait_stream(stream)
            ready = nxt
            mark(ready)
            nxt = load(batch)
            yield ready
        main.wait_stream(stream)
        mark(nxt)
        yield nxt
