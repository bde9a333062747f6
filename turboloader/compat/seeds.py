"""Compatibility adapters: the APIs of other loaders' documentation, over turboloader's core.

Code written against those APIs runs unchanged; every adapter is a thin layer over
:class:`~turboloader.TarDataset`, :mod:`turboloader.transforms`, the decode cache and the
loader, so the pixels, the sharding and the randomness are the core's.

* **Pipeline API** -- :class:`TransformConfig`, :class:`ResizeMethod`, :class:`Pipeline`
  (``start()`` / ``next_batch(n)`` / ``stop()``, samples with ``get_image()``).
* **Sample-dict loader and ``.apply`` transforms** -- :func:`seed001_loader` (what
  ``turboloader.DataLoader("train.tar", ...)`` dispatches to: batches are lists of
  ``{"image": HWC uint8, "label": int}``) and :class:`Compose`, :class:`Resize`,
  :class:`RandomCrop`, :class:`CenterCrop`, :class:`RandomHorizontalFlip`,
  :class:`ColorJitter`, :class:`ImageNetNormalize`, :class:`ToTensor`, :class:`TensorFormat`.
* **Cached map-style dataset** -- :class:`HighPerformanceDataset`, :func:`create_dataloader`
  and ``PrefetchLoader`` (re-exported from :mod:`turboloader.prefetch`).

**Two families of transform classes.** The classes here are the seed documents': sizes as
``(width, height)`` (``Resize(224, 224)``), HWC NumPy arrays through ``.apply(img)``; they are
what ``turboloader.Compose``, ``turboloader.Resize``, ``turboloader.ToTensor`` etc. name at
the top level. The classes of :mod:`turboloader.transforms` are torchvision v2's, exactly
(``Resize(size)`` with ``size=(h, w)`` or a short side, PIL/tensor/array in, same kind out,
``ToTensor`` scales to [0, 1]); use those with the datasets, where they fuse into one native
call per sample. So that no call means one thing here and another in torchvision:

* ``.apply(img)`` (a name torchvision does not have) is the seed contract: an HWC array (a
  PIL image is converted) in, an HWC array out, ``ToTensor().apply`` a CHW array of the same
  dtype (no scaling; the documented pattern is ``torch.from_numpy(img).float() / 255.0``),
  crops larger than the image zero-padded.
* Calling an object (``t(img)``) means what torchvision's class of that name means, on a PIL
  image, a tensor or an HWC array: ``turboloader.ToTensor()(img)`` is a float tensor in
  [0, 1], ``turboloader.Resize(w, h)(img)`` is ``turboloader.transforms.Resize((h, w))(img)``,
  ``turboloader.RandomCrop(224)(img)`` raises for a smaller image as torchvision's does.
* Constructor calls that torchvision reads differently raise a TypeError naming the
  :mod:`turboloader.transforms` class: ``Resize(224)`` (torchvision: shorter side 224; here
  it would be a 224 x 224 square), ``Resize((h, w))``, ``CenterCrop((h, w))``,
  ``RandomCrop((h, w))`` (torchvision's order is (h, w), the seed's (w, h)).
* One seed form is also a valid torchvision call with another meaning: ``RandomCrop(w, h)``
  (torchvision: ``RandomCrop(size=w, padding=h)``). The seed examples use it, so it keeps the
  seed meaning for ``.apply``; calling such an object raises a TypeError instead of guessing.
* Random parameters come from torch's global RNG (``torch.manual_seed`` applies), as with
  torchvision; inside a turboloader dataset from the sample's seeded generator.
"""

from __future__ import annotations

import enum
import math
import os
import queue
import threading

import numpy as np
import torch
import torch.utils.data

from turboloader import loader as _core
from turboloader.transforms.presets import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    imagenet_train_transform,
    imagenet_val_transform,
)

__all__ = [
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "DataLoader",
    "HighPerformanceDataset",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ImageNetNormalize",
    "Pipeline",
    "PrefetchLoader",
    "RandomCrop",
    "RandomHorizontalFlip",
    "Resize",
    "ResizeMethod",
    "Sample",
    "SampleBatchLoader",
    "TensorFormat",
    "ToTensor",
    "TransformConfig",
    "create_dataloader",
    "imagenet_train_transform",
    "imagenet_val_transform",
    "seed001_loader",
]



def _T():
    from turboloader import transforms

    return transforms


# ---------------------------------------------------------------------------------------
# The loader underneath every adapter
# ---------------------------------------------------------------------------------------

def _as_list(samples):
    """collate_fn that keeps a batch as the list of samples (picklable: module level)."""
    return list(samples)


def _is_path(x) -> bool:
    if isinstance(x, (str, bytes, os.PathLike)):
        return True
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(
        isinstance(p, (str, os.PathLike)) for p in x)


class DataLoader(_core.DataLoader):
    """``turboloader.DataLoader``: the core loader, which also takes seed 001's path-first form.

    ``DataLoader(dataset, ...)`` with a ``torch.utils.data.Dataset`` is exactly
    :class:`turboloader.loader.DataLoader` (this class adds nothing else; its arguments,
    backends and epochs are documented there), and the result is an instance of this class.

    ``DataLoader(path, batch_size=32, num_workers=4, shuffle=False, ...)`` with a path (a
    ``str``, ``os.PathLike`` or a list of them: TAR shards) is seed 001's API: it returns
    :func:`seed001_loader`'s :class:`SampleBatchLoader`, a different class, whose batches are
    lists of ``{"image": HWC uint8, "label": int}`` dicts.

    Example:
        >>> loader = turboloader.DataLoader(dataset, batch_size=256, num_workers=8)  # doctest: +SKIP
        >>> batches = turboloader.DataLoader("train.tar", batch_size=32)             # doctest: +SKIP
        >>> type(batches).__name__                                                   # doctest: +SKIP
        'SampleBatchLoader'
    """

    def __new__(cls, dataset=None, *args, **kwargs):
        if _is_path(dataset):
            return seed001_loader(dataset, *args, **kwargs)
        return super().__new__(cls)


def _core_loader(dataset, *, batch_size, num_workers, collate_fn=None, shuffle=False,
                 sampler=None, pin_memory=False, drop_last=False, backend=None):
    """turboloader's DataLoader over ``dataset`` (the thread backend unless ``backend``)."""
    kwargs = {"batch_size": batch_size, "shuffle": shuffle, "num_workers": int(num_workers),
              "pin_memory": bool(pin_memory) and torch.cuda.is_available(),
              "drop_last": drop_last}
    if collate_fn is not None:
        kwargs["collate_fn"] = collate_fn
    if sampler is not None:
        kwargs["sampler"] = sampler
        kwargs["shuffle"] = False
    if isinstance(dataset, torch.utils.data.IterableDataset):
        kwargs["shuffle"] = None  # the dataset shuffles itself
    if backend is not None:
        kwargs["backend"] = backend
    return DataLoader(dataset, **kwargs)


def _set_epoch(loader, dataset, epoch):
    """Tell the loader (if it can hear it) or else the dataset and sampler the epoch."""
    if callable(getattr(loader, "set_epoch", None)):
        loader.set_epoch(epoch)
        return
    if callable(getattr(dataset, "set_epoch", None)):
        dataset.set_epoch(epoch)
    sampler = getattr(loader, "sampler", None)
    if callable(getattr(sampler, "set_epoch", None)):
        sampler.set_epoch(epoch)


def _decoded_chw():
    """The transform that makes the dataset return each image as decoded, a CHW uint8
    tensor: a fusable pipeline, so JPEGs are decoded natively straight into it."""
    T = _T()
    return T.Compose([T.ToImage()])


def _tar_dataset(paths, transform, *, shuffle, distributed, seed=0):
    from turboloader.data import TarDataset

    # The seeds build TARs of bare images (``tar -cf train.tar *.jpg``): label those -1.
    kw = dict(shuffle=shuffle, seed=seed, missing_label=-1)
    if distributed:  # rank and world size from torch.distributed (read at iteration time)
        return TarDataset(paths, transform, **kw)
    return TarDataset(paths, transform, rank=0, world_size=1, **kw)


class SampleBatchLoader:
    """Batches of ``batch_size`` samples, each turned into a seed-API item, with one epoch
    per iteration (``set_epoch`` is called for the user: the seed APIs have none).

    Batching happens here, in the main process, over what the core loader yields, so
    ``drop_last`` drops at most one short batch per epoch and ``len`` is exact, whatever
    the number of workers (an iterable dataset batched inside several workers would leave
    one short batch per worker).
    """

    def __init__(self, dataset, loader, batch_size, *, drop_last=False, make_item=None):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.dataset = dataset
        self.loader = loader
        self.batch_size = int(batch_size)
        self.drop_last = bool(drop_last)
        self.make_item = make_item
        self.epoch = 0

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def set_epoch(self, epoch):
        """Set the epoch of the next iteration (otherwise each iteration is the next epoch)."""
        self.epoch = int(epoch)

    def samples(self):
        """The samples of one epoch, in order (no batching); advances the epoch."""
        _set_epoch(self.loader, self.dataset, self.epoch)
        self.epoch += 1
        make = self.make_item
        for chunk in self.loader:
            for sample in chunk:
                yield make(sample) if make is not None else sample

    def __iter__(self):
        batch = []
        for item in self.samples():
            batch.append(item)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch


# ---------------------------------------------------------------------------------------
# Sample-dict loader: turboloader.DataLoader("train.tar", ...)
# ---------------------------------------------------------------------------------------

def _sample_dict(sample):
    image, label = sample
    return {"image": np.ascontiguousarray(image.permute(1, 2, 0).numpy()), "label": label}


def seed001_loader(path, batch_size=32, num_workers=4, shuffle=False, enable_distributed=False,
                   drop_last=False, *, seed=0, backend=None, pin_memory=False):
    """Batches of sample dicts from TAR shards: what ``turboloader.DataLoader(path, ...)``
    returns when its first argument is a path (a ``str`` or ``os.PathLike``, or a list of
    them) rather than a Dataset.

    Each batch is a ``list`` of ``{"image": (H, W, 3) uint8 ndarray, "label": int}`` at the
    images' own sizes (apply ``turboloader.Compose(...).apply`` per sample, as the seed
    examples do). Each ``for batch in loader`` is one epoch; with ``shuffle=True`` every
    epoch has a new order (epoch counter kept here, ``set_epoch(e)`` to override).

    Args:
        path: a TAR path, glob, brace pattern (``"train-{0000..0099}.tar"``) or list of them
            (WebDataset layout: ``key.jpg`` + ``key.cls``/``key.json`` per sample).
        batch_size: samples per batch.
        num_workers: loader workers (0: read in the calling thread).
        shuffle: shuffle shards and samples per epoch.
        enable_distributed: split the samples over ``torch.distributed`` ranks (the group
            must be initialised before iterating); every rank gets the same number of
            samples (the epoch is padded with repeats, like ``DistributedSampler``).
            Without it every process reads every sample.
        drop_last: drop the last short batch.
        seed: the shuffle's seed.
        backend, pin_memory: passed to the core loader.

    Returns:
        A :class:`SampleBatchLoader` (iterable, with ``len`` = batches per epoch).

    Raises:
        FileNotFoundError: a shard does not exist. TarFormatError: a shard is malformed.
        SampleError: a sample has no image or no label member (when iterated).

    Example:
        >>> loader = turboloader.DataLoader("train.tar", batch_size=32, shuffle=True)  # doctest: +SKIP
        >>> for batch in loader:
        ...     labels = torch.tensor([s["label"] for s in batch])
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    elif isinstance(path, (list, tuple)):
        path = [os.fspath(p) for p in path]
    dataset = _tar_dataset(path, _decoded_chw(), shuffle=shuffle,
                           distributed=enable_distributed, seed=seed)
    loader = _core_loader(dataset, batch_size=batch_size, num_workers=num_workers,
                          collate_fn=_as_list, pin_memory=pin_memory, backend=backend)
    return SampleBatchLoader(dataset, loader, batch_size, drop_last=drop_last,
                             make_item=_sample_dict)


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

    def __init__(self, image, label):
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

    def __init__(self, tar_paths, num_workers=4, queue_size=256, shuffle=False, decode_jpeg=True,
                 enable_simd_transforms=True, transform_config=None, *, seed=0, backend=None):
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



# ---------------------------------------------------------------------------------------
# .apply(img) transforms on HWC arrays; sizes as (width, height)
# ---------------------------------------------------------------------------------------

class TensorFormat(enum.Enum):
    """Layouts of :class:`ToTensor`."""

    PYTORCH_CHW = "CHW"
    TENSORFLOW_HWC = "HWC"


def _hwc(img):
    if isinstance(img, np.ndarray):
        return img
    if isinstance(img, torch.Tensor):
        raise TypeError("these transforms take HWC NumPy arrays; for tensors use "
                        "turboloader.transforms (torchvision's classes)")
    return np.asarray(img)  # a PIL image


class _Apply:
    """Base: ``apply(img)`` is the seed contract (an HWC array in and out); calling the object
    is torchvision's meaning of the class name: :meth:`torchvision_transform` applied to a PIL
    image, a tensor or an HWC array (see the module docstring)."""

    transform = None  # the turboloader.transforms class that .apply delegates to

    def apply(self, img):
        return self.transform(_hwc(img))

    def torchvision_transform(self):
        """The :mod:`turboloader.transforms` transform that calling this object runs."""
        return self.transform

    def __call__(self, img):
        return self.torchvision_transform()(img)

    def __repr__(self):
        return f"{type(self).__name__}({self.transform!r})"


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _wh(name, width, height, *, square_ok):
    """``(width, height)`` of a seed transform, refusing the calls torchvision reads
    differently (a TypeError naming the torchvision-exact class)."""
    exact = f"turboloader.transforms.{name}"
    if isinstance(width, (tuple, list)):
        raise TypeError(
            f"turboloader.{name}({tuple(width)}): the seed API's {name} takes (width, height) "
            f"as two ints; a size sequence is torchvision's (height, width) order, which is "
            f"{exact}({tuple(width)})")
    if height is None and not square_ok:
        raise TypeError(
            f"turboloader.{name}({width!r}) is ambiguous: the seed API's {name}(width, height) "
            f"needs both sides (turboloader.{name}({width!r}, {width!r}) for a square), while "
            f"torchvision's {name}({width!r}) resizes the shorter side to {width!r}: that is "
            f"{exact}({width!r})")
    if not _is_int(width) or not (height is None or _is_int(height)):
        raise TypeError(f"turboloader.{name}(width, height) takes ints, got {width!r}, "
                        f"{height!r} (torchvision's arguments go to {exact})")
    width = int(width)
    height = width if height is None else int(height)
    if width < 1 or height < 1:
        raise ValueError(f"width and height must be >= 1, got {width}x{height}")
    return width, height


class Resize(_Apply):
    """Resize to exactly ``width`` x ``height``; the aspect ratio is not kept. Equivalent to
    ``turboloader.transforms.Resize((height, width))``, which calling the object runs.

    ``Resize(224)`` (one side) raises TypeError: torchvision's ``Resize(224)`` would resize the
    shorter side, so use ``turboloader.transforms.Resize(224)`` for that, or
    ``Resize(224, 224)`` for the square.

    Example:
        >>> Resize(224, 224).apply(np.zeros((300, 400, 3), np.uint8)).shape
        (224, 224, 3)
    """

    def __init__(self, width, height=None, method=ResizeMethod.BILINEAR):
        self.width, self.height = _wh("Resize", width, height, square_ok=False)
        method = method.value if isinstance(method, ResizeMethod) else method
        self.transform = _T().Resize((self.height, self.width), interpolation=method,
                                     antialias=True)


class CenterCrop(_Apply):
    """Central ``width`` x ``height`` window (zero-padded when larger than the image), i.e.
    ``turboloader.transforms.CenterCrop((height, width))``; ``CenterCrop(224)`` is the
    square, as in torchvision.

    Example:
        >>> CenterCrop(224, 224).apply(np.zeros((256, 256, 3), np.uint8)).shape
        (224, 224, 3)
    """

    def __init__(self, width, height=None):
        self.width, self.height = _wh("CenterCrop", width, height, square_ok=True)
        self.transform = _T().CenterCrop((self.height, self.width))


class RandomCrop(_Apply):
    """A random ``width`` x ``height`` window; for ``.apply`` an image smaller than that is
    zero-padded first (torchvision's ``pad_if_needed=True``).

    Calling the object is torchvision's ``RandomCrop(size, padding=...)`` (no
    ``pad_if_needed``) when only ``width`` is given; ``RandomCrop(w, h)`` objects refuse to be
    called (torchvision reads that as ``RandomCrop(size=w, padding=h)``): use ``.apply``, or
    ``turboloader.transforms.RandomCrop((h, w))``.

    Example:
        >>> RandomCrop(224, 224).apply(np.zeros((256, 256, 3), np.uint8)).shape
        (224, 224, 3)
    """

    def __init__(self, width, height=None, padding=None):
        self._square = height is None
        self.width, self.height = _wh("RandomCrop", width, height, square_ok=True)
        self.padding = padding
        self.transform = _T().RandomCrop((self.height, self.width), padding=padding,
                                         pad_if_needed=True)

    def torchvision_transform(self):
        if not self._square:
            raise TypeError(
                f"turboloader.RandomCrop({self.width}, {self.height}) is the seed API's "
                f"(width, height) crop: use .apply(img). Called like torchvision's "
                f"RandomCrop({self.width}, {self.height}) it would mean padding={self.height}; "
                f"torchvision's crop of that size is "
                f"turboloader.transforms.RandomCrop(({self.height}, {self.width}))")
        return _T().RandomCrop(self.width, padding=self.padding)


class RandomHorizontalFlip(_Apply):
    """Mirror left-right with probability ``p`` (torchvision's ``RandomHorizontalFlip``)."""

    def __init__(self, p=0.5):
        self.p = float(p)
        self.transform = _T().RandomHorizontalFlip(self.p)


class ColorJitter(_Apply):
    """Random brightness, contrast, saturation and hue (torchvision's factors and order)
    on HWC uint8.

    Example:
        >>> ColorJitter(0.2, 0.2, 0.2, 0.1).apply(np.zeros((8, 8, 3), np.uint8)).dtype
        dtype('uint8')
    """

    def __init__(self, brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0):
        self.transform = _T().ColorJitter(brightness or None, contrast or None,
                                          saturation or None, hue or None)


class ImageNetNormalize(_Apply):
    """HWC uint8 (or float in [0, 1]) -> HWC float32 ``(x / 255 - mean) / std``.

    A CHW float input (after :class:`ToTensor`) is normalised along its first axis.

    Args:
        mean, std: per-channel statistics (default ImageNet's).

    Example:
        >>> ImageNetNormalize().apply(np.full((2, 2, 3), 255, np.uint8))[0, 0].round(3)
        array([2.249, 2.429, 2.64 ], dtype=float32)
    """

    def __init__(self, mean=IMAGENET_MEAN, std=IMAGENET_STD):
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self.transform = None

    def __call__(self, img):  # no torchvision class of this name: the seed meaning
        return self.apply(img)

    def apply(self, img):
        from turboloader.transforms import functional as F

        img = _hwc(img)
        if img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3:
            # native HWC -> CHW normalise; hand back an HWC view of the CHW result, so a
            # following ToTensor(PYTORCH_CHW) is a free transpose
            return F.to_chw_normalized(np.ascontiguousarray(img), self.mean, self.std).transpose(1, 2, 0)
        x = img.astype(np.float32) / (255.0 if img.dtype == np.uint8 else 1.0)
        chw = x.ndim == 3 and x.shape[0] == len(self.mean) and x.shape[-1] != len(self.mean)
        shape = (-1, 1, 1) if chw else (1, 1, -1)
        mean = np.asarray(self.mean, np.float32).reshape(shape)
        std = np.asarray(self.std, np.float32).reshape(shape)
        return (x - mean) / std

    def __repr__(self):
        return f"ImageNetNormalize(mean={self.mean}, std={self.std})"


class ToTensor(_Apply):
    """``.apply`` changes the layout: HWC -> CHW for ``PYTORCH_CHW`` (default), unchanged for
    ``TENSORFLOW_HWC``. The dtype is kept (no scaling; see the module docstring) and the
    result is a C-contiguous NumPy array, ready for ``torch.from_numpy``.

    Calling ``ToTensor()`` (or ``ToTensor(PYTORCH_CHW)``) is torchvision's ``ToTensor``: a
    float32 CHW tensor in [0, 1]. ``ToTensor(TENSORFLOW_HWC)``, which torchvision has no
    counterpart of, does the same as ``.apply`` when called.

    Example:
        >>> ToTensor(TensorFormat.PYTORCH_CHW).apply(np.zeros((4, 6, 3), np.uint8)).shape
        (3, 4, 6)
    """

    def __init__(self, format=TensorFormat.PYTORCH_CHW):
        self.format = TensorFormat(format)

    def torchvision_transform(self):
        return _T().ToTensor()

    def __call__(self, img):
        if self.format is TensorFormat.TENSORFLOW_HWC:
            return self.apply(img)
        return self.torchvision_transform()(img)

    def apply(self, img):
        img = _hwc(img)
        if img.ndim == 2:
            img = img[:, :, None]
        if self.format is TensorFormat.PYTORCH_CHW:
            img = img.transpose(2, 0, 1)
        return np.ascontiguousarray(img)

    def __repr__(self):
        return f"ToTensor({self.format})"


class Compose(_Apply):
    """Apply ``transforms`` in order: ``Compose([...]).apply(img)``.

    Members may be the classes of this module (their ``apply`` is called) or any callable,
    e.g. a :mod:`turboloader.transforms` class (called on the array as is). Calling the
    object is torchvision's ``Compose``: each member is called in turn (for the classes of
    this module, their torchvision meaning; see the module docstring).

    Example:
        >>> t = Compose([Resize(32, 32), ImageNetNormalize(), ToTensor()])
        >>> t.apply(np.zeros((48, 64, 3), np.uint8)).shape
        (3, 32, 32)
    """

    def __init__(self, transforms):
        self.transforms = list(transforms)
        for t in self.transforms:
            if not (callable(t) or callable(getattr(t, "apply", None))):
                raise TypeError(f"Compose members must be transforms, got {type(t).__name__}")

    def apply(self, img):
        img = _hwc(img)
        for t in self.transforms:
            apply = getattr(t, "apply", None)
            img = apply(img) if callable(apply) else t(img)
        return img

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img

    def __repr__(self):
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Compose([{inner}])"


# ---------------------------------------------------------------------------------------
# HighPerformanceDataset / create_dataloader / PrefetchLoader
# ---------------------------------------------------------------------------------------

def _count_lru(capacity):
    """The decode cache bounded in images rather than bytes (the seed's ``cache_size``):
    turboloader's thread-safe LRU with every entry counted as one unit."""
    from turboloader.data import ByteLRU

    class CountLRU(ByteLRU):
        def put(self, key, value, nbytes):
            return super().put(key, value, 1)

    return CountLRU(int(capacity))


class _Preloaded(dict):
    """The decode cache of a preloaded dataset: every image, never evicted (picklable, so
    worker processes receive the decoded images)."""

    hits = misses = 0

    def get(self, key):
        return super().get(key)

    def peek(self, key, default=None):
        return super().get(key, default)

    def put(self, key, value, nbytes):
        self[key] = value
        return 0

    def stats(self):
        return {"items": len(self), "preloaded": True}


class HighPerformanceDataset(torch.utils.data.Dataset):
    """Map-style dataset of image files with an LRU cache of decoded images and optional
    preloading: ``dataset[i]`` is ``(transform(image), labels[i])``.

    Images are decoded natively (JPEG by libjpeg-turbo, other formats by Pillow, all RGB).
    When ``transform`` is a :mod:`turboloader.transforms` pipeline with a fused plan, an
    uncached JPEG is decoded and transformed in one native call, a cached one transformed
    from its decoded array; any other callable (e.g. a torchvision ``Compose``) gets a PIL
    RGB image, as with a torchvision dataset. ``transform=None`` returns the decoded
    ``PIL.Image``. Random parameters come from torch's RNG, so DataLoader workers differ
    and every epoch draws new augmentations.

    ``cache_size`` counts images (decoded, before the transform: augmentations stay random)
    per reading process: each worker process of a DataLoader starts with an empty cache of
    its own; a threads backend shares one (the cache is thread-safe). ``preload=True``
    decodes every image in ``__init__`` and keeps them all (``cache_size`` is then unused);
    worker processes receive a copy.

    Args:
        data_paths: image file paths.
        labels: one label per path.
        transform: applied to each image (see above).
        cache_size: images kept in the LRU (0: no cache).
        preload: decode everything up front.

    Raises:
        ValueError: ``data_paths`` and ``labels`` differ in length.
        FileNotFoundError: a path does not exist (at preload or access).
        DecodeError: an image cannot be decoded (the note names the file).

    Example:
        >>> ds = HighPerformanceDataset(paths, labels, imagenet_val_transform(224),  # doctest: +SKIP
        ...                             cache_size=1000)
        >>> image, label = ds[0]
    """

    def __init__(self, data_paths, labels, transform=None, cache_size=1000, preload=False):
        self.data_paths = [os.fspath(p) for p in data_paths]
        self.labels = list(labels)
        if len(self.data_paths) != len(self.labels):
            raise ValueError(f"{len(self.data_paths)} data_paths but {len(self.labels)} labels")
        if int(cache_size) < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        self.transform = transform
        self.cache_size = int(cache_size)
        self.preload = bool(preload)
        self._decoder = self._make_decoder(_Preloaded() if self.preload else None)
        if self.preload:
            for i in range(len(self.data_paths)):
                self._load(i)

    def _make_decoder(self, cache):
        from turboloader.data.cache import Decoder

        decoder = Decoder(self.transform)
        if cache is None and self.cache_size:
            cache = _count_lru(self.cache_size)
        decoder.cache = cache
        return decoder

    def __len__(self):
        return len(self.data_paths)

    def _load(self, i):
        from turboloader.errors import TurboLoaderError

        path = self.data_paths[i]
        cache = self._decoder.cache
        data = None
        if cache is None or i not in cache:
            with open(path, "rb") as f:
                data = f.read()
        try:
            return self._decoder(data, key=i, rng=None)
        except TurboLoaderError as exc:
            exc.add_note(f"HighPerformanceDataset: file {path!r} (index {i})")
            raise

    def __getitem__(self, index):
        n = len(self.data_paths)
        if not -n <= index < n:
            raise IndexError(f"index {index} out of range for {n} samples")
        index %= n
        return self._load(index), self.labels[index]

    def cache_stats(self) -> dict:
        """This process's cache counters (hits, misses, evictions, items), or {} without one."""
        cache = self._decoder.cache
        return cache.stats() if cache is not None else {}

    def __getstate__(self):
        state = self.__dict__.copy()
        decoder = state.pop("_decoder")
        state["_preloaded"] = decoder.cache if self.preload else None
        return state

    def __setstate__(self, state):
        preloaded = state.pop("_preloaded")
        self.__dict__.update(state)
        self._decoder = self._make_decoder(preloaded)


def __getattr__(name):
    if name == "PrefetchLoader":  # seed 004 imports it from here; it lives in prefetch.py
        from turboloader.prefetch import PrefetchLoader

        return PrefetchLoader
    raise AttributeError(f"module 'turboloader.compat.seeds' has no attribute {name!r}")


def create_dataloader(data_paths, labels, batch_size=32, num_workers=4, img_size=224,
                      cache_size=1000, preload=False, augment=True, pin_memory=True,
                      prefetch_device=None):
    """A shuffling DataLoader of ``(images, labels)`` batches over image files.

    The dataset is a :class:`HighPerformanceDataset` with the standard ImageNet pipeline
    at ``img_size`` (``augment=True``: :func:`imagenet_train_transform`, random resized
    crop + flip; ``augment=False``: :func:`imagenet_val_transform`, resize + centre crop;
    both end in ToTensor + ImageNet Normalize): batches are float32
    ``(batch, 3, img_size, img_size)`` and int64 labels. Samples are shuffled every
    epoch, in both modes.

    Args:
        data_paths, labels: image files and their labels.
        batch_size: samples per batch.
        num_workers: loader workers.
        img_size: output side in pixels.
        cache_size: decoded images cached per reading process (0: none).
        preload: decode every image up front.
        augment: training (True) or evaluation (False) transforms.
        pin_memory: pin batches (only when CUDA is available).
        prefetch_device: wrap the loader in ``PrefetchLoader(loader, device)`` so batches
            arrive on that device (None: no wrapper).

    Returns:
        The DataLoader (``turboloader.DataLoader``, or torch's if that is absent), or a
        ``PrefetchLoader`` over it.

    Example:
        >>> loader = create_dataloader(paths, labels, batch_size=64, num_workers=4,  # doctest: +SKIP
        ...                            prefetch_device=torch.device("cuda"))
        >>> for images, labels in loader: ...
    """
    transform = imagenet_train_transform(img_size) if augment else imagenet_val_transform(img_size)
    dataset = HighPerformanceDataset(data_paths, labels, transform, cache_size=cache_size,
                                     preload=preload)
    loader = _core_loader(dataset, batch_size=batch_size, num_workers=num_workers, shuffle=True,
                          pin_memory=pin_memory)
    if prefetch_device is not None:
        from turboloader.prefetch import PrefetchLoader

        loader = PrefetchLoader(loader, prefetch_device)
    return loader
