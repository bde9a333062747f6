"""The Pipeline API: ``TransformConfig`` / ``Pipeline`` / ``start`` / ``next_batch`` / ``stop``."""

from __future__ import annotations

from typing import Any
import enum
import os
import queue
import threading

from turboloader._exit import stop_at_exit
from turboloader.compat.seeds._loader import (SampleBatchLoader, _T, _as_list, _core_loader,
                                              _tar_dataset)
from turboloader.transforms.presets import IMAGENET_MEAN, IMAGENET_STD

__all__ = [
    "Pipeline",
    "ResizeMethod",
    "Sample",
    "TransformConfig",
]


# ---------------------------------------------------------------------------------------
# Pipeline API: TransformConfig / Pipeline / start / next_batch / stop
# ---------------------------------------------------------------------------------------

class ResizeMethod(enum.Enum):
    """Resize filters of :class:`TransformConfig` (antialiased, as torchvision v2)."""

    NEAREST = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


class TransformConfig:
    """Per-sample transforms of a :class:`Pipeline`, set field by field.

    Fields (defaults in brackets): ``enable_resize`` [False], ``resize_width`` and
    ``resize_height`` [224] (the exact output size; the aspect ratio is not kept),
    ``resize_method`` [``ResizeMethod.BILINEAR``], ``enable_normalize`` [False], ``mean``
    and ``std`` [ImageNet's], ``output_float`` [False].

    Output of ``sample.get_image()``: (H, W, 3); float32 ``(x / 255 - mean) / std`` when
    ``enable_normalize``, float32 ``x / 255`` when only ``output_float``, else uint8.
    Setting a field that does not exist raises AttributeError (a misspelt field is not
    silently ignored).

    Example:
        >>> cfg = TransformConfig()
        >>> cfg.enable_resize = True; cfg.resize_width = cfg.resize_height = 224
    """

    __slots__ = ("enable_resize", "resize_width", "resize_height", "resize_method",
                 "enable_normalize", "mean", "std", "output_float")

    def __init__(self):
        self.enable_resize = False
        self.resize_width = 224
        self.resize_height = 224
        self.resize_method = ResizeMethod.BILINEAR
        self.enable_normalize = False
        self.mean = list(IMAGENET_MEAN)
        self.std = list(IMAGENET_STD)
        self.output_float = False

    def __repr__(self):
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"TransformConfig({fields})"

    def to_transform(self):
        """The equivalent :mod:`turboloader.transforms` pipeline (CHW tensor out; fusable)."""
        T = _T()
        steps = []
        if self.enable_resize:
            method = self.resize_method
            method = method.value if isinstance(method, ResizeMethod) else str(method)
            steps.append(T.Resize((int(self.resize_height), int(self.resize_width)),
                                  interpolation=method, antialias=True))
        if self.enable_normalize:
            steps += [T.ToTensor(), T.Normalize(list(self.mean), list(self.std))]
        elif self.output_float:
            steps.append(T.ToTensor())
        else:
            steps.append(T.ToImage())
        return T.Compose(steps)


class Sample:
    """One sample of a :class:`Pipeline` batch."""

    __slots__ = ("image", "label")

    def __init__(self, image: Any, label: Any) -> None:
        self.image = image
        self.label = label

    def get_image(self):
        """The transformed image, an (H, W, 3) ndarray (see :class:`TransformConfig`): a
        transposed view of a C-contiguous CHW buffer, so ``permute(2, 0, 1)`` is free."""
        return self.image

    def get_label(self):
        """The sample's label (its ``.cls`` / ``.json`` member)."""
        return self.label

    def __repr__(self):
        return f"Sample(image={self.image.shape} {self.image.dtype}, label={self.label!r})"


_END = object()


class Pipeline:
    """Start/stop pipeline over TAR shards: ``start()``, ``next_batch(n)`` until it returns
    an empty list (end of epoch), ``stop()``; then ``start()`` again for the next epoch.

    A thin adapter: the samples come from :class:`~turboloader.TarDataset` (decoding and the
    transforms of ``transform_config`` fused into one native call per sample) read by the
    core loader's ``num_workers`` workers; ``start()`` launches a thread that keeps up to
    ``queue_size`` samples ready. Each ``start()`` is the next epoch (a new order when
    ``shuffle``). Samples have ``get_image()`` and ``get_label()``; the shards need a label
    member per sample (``key.cls`` or ``key.json``).

    Args:
        tar_paths: list of TAR paths, globs or brace patterns (or one of them).
        num_workers: loader workers.
        queue_size: samples kept ready ahead of ``next_batch``.
        shuffle: shuffle per epoch.
        decode_jpeg: must be True (samples are always decoded images).
        enable_simd_transforms: accepted for compatibility; the native kernels always run
            (with False, the transforms of ``transform_config`` are still applied).
        transform_config: a :class:`TransformConfig` (None: images as decoded, uint8).
        seed: the shuffle's seed.
        backend: passed to the core loader.

    Raises:
        NotImplementedError: ``decode_jpeg=False`` (use :class:`~turboloader.TarIndex` to read
            raw members).

    Example:
        >>> pipeline = Pipeline(tar_paths=["train.tar"], num_workers=4)  # doctest: +SKIP
        >>> pipeline.start()
        >>> while len(batch := pipeline.next_batch(64)):
        ...     images = [s.get_image() for s in batch]
        >>> pipeline.stop()
    """

    def __init__(self, tar_paths: Any, num_workers: int = 4, queue_size: int = 256,
                 shuffle: bool = False, decode_jpeg: bool = True,
                 enable_simd_transforms: bool = True, transform_config: Any = None, *,
                 seed: int = 0, backend: Any = None) -> None:
        if not decode_jpeg:
            raise NotImplementedError(
                "Pipeline(decode_jpeg=False) is not supported: samples are decoded images. "
                "Read raw members with turboloader.TarIndex.")
        if int(queue_size) < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size}")
        if isinstance(tar_paths, (str, os.PathLike)):
            tar_paths = [tar_paths]
        self.tar_paths = [os.fspath(p) for p in tar_paths]
        self.num_workers = int(num_workers)
        self.queue_size = int(queue_size)
        self.shuffle = bool(shuffle)
        self.enable_simd_transforms = bool(enable_simd_transforms)
        self.transform_config = transform_config if transform_config is not None else TransformConfig()
        transform = self.transform_config.to_transform()  # fusable: one native call per JPEG
        self._dataset = _tar_dataset(self.tar_paths, transform, shuffle=self.shuffle,
                                     distributed=False, seed=seed)
        chunk = max(1, min(32, self.queue_size))
        loader = _core_loader(self._dataset, batch_size=chunk, num_workers=self.num_workers,
                              collate_fn=_as_list, backend=backend)
        self._source = SampleBatchLoader(self._dataset, loader, chunk)
        self._queue = None
        self._thread = None
        self._stopping = None
        self._done = False

    def total_samples(self) -> int:
        """Samples per epoch."""
        return len(self._dataset)

    def __len__(self):
        return len(self._dataset)

    @property
    def epoch(self) -> int:
        """The epoch the next ``start()`` begins."""
        return self._source.epoch

    def start(self):
        """Begin the next epoch (no-op while one is running)."""
        if self._thread is not None:
            return
        self._queue = q = queue.Queue(maxsize=self.queue_size)
        self._stopping = stopping = threading.Event()
        self._done = False
        source = self._source.samples()

        def fill():
            try:
                for image, label in source:
                    # HWC as a view of the CHW result: ``torch.from_numpy(a).permute(2, 0, 1)``
                    # is the contiguous CHW tensor again, with no copy either way
                    item = Sample(image.permute(1, 2, 0).numpy(), label)
                    while not stopping.is_set():
                        try:
                            q.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stopping.is_set():
                        return
                item = _END
            except BaseException as exc:  # handed to the consumer, raised there
                item = exc
            finally:
                source.close()
            while not stopping.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return
                except queue.Full:
                    continue

        self._thread = threading.Thread(target=fill, name="turboloader-pipeline", daemon=True)
        stop_at_exit(self, type(self).stop)
        self._thread.start()

    def next_batch(self, batch_size):
        """Up to ``batch_size`` samples; an empty list at the end of the epoch.

        Raises:
            RuntimeError: the pipeline was not started.
            Whatever reading the samples raised (e.g. DecodeError, SampleError).
        """
        if self._thread is None:
            raise RuntimeError("call pipeline.start() before next_batch()")
        batch = []
        while len(batch) < int(batch_size) and not self._done:
            item = self._queue.get()
            if item is _END:
                self._done = True
            elif isinstance(item, BaseException):
                self._done = True
                raise item
            else:
                batch.append(item)
        return batch

    def stop(self):
        """End the current epoch (unread samples are discarded)."""
        if self._thread is None:
            return
        self._stopping.set()
        self._thread.join()
        self._thread = None
        self._queue = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
