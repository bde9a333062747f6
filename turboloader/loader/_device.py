"""``turboloader.DataLoader(..., decode="gpu")``: what it accepts, and its batch memory.

The decode threads of the thread backend run the dataset as always (gather, draw, failure
policy, order); each enters its stream's context with the executor
(:func:`turboloader.data.reader.reading_as`), so the stream holds a
:class:`~turboloader.decode.device_executor.DeviceDecode` and its batch calls run there; the batch
tensors live on the device (:class:`DevicePool`), so batches come out on the GPU, decoded,
transformed and normalized there. What cannot combine with it is a typed error here, when
the loader is made.
"""

from __future__ import annotations

import torch

from turboloader.loader._pipeline import dataset_plan
from turboloader.loader.protocol import accepts_out, has_worker_streams, yields_batches
from turboloader.decode.device_executor import DeviceDecode
from turboloader.transforms import ColorJitter, Compose, RandomApply, RandomChoice, RandomOrder

__all__ = ["DevicePool", "check_plan", "resolve"]


def resolve(decode, dataset, *, backend, collate_fn, pin_memory, output, iterable):
    """The :class:`DeviceDecode` of ``decode`` (None for ``"cpu"``), after checking that the
    loader's other arguments and the dataset combine with it.

    Raises:
        DeviceUnavailableError: ``"gpu"`` and no CUDA device.
        ValueError / TypeError: an unknown ``decode``; the process backend; a
            ``collate_fn``; ``pin_memory``; ``output="numpy"``; a dataset without the
            thread backend's batch protocol, of whole batches, with the decoded-sample
            cache, or whose transform does not fuse (or has ColorJitter).
    """
    if decode is None or (isinstance(decode, str) and decode == "cpu"):
        return None
    if isinstance(decode, str):
        if decode not in ("gpu", "cuda"):
            raise ValueError(f'decode must be "cpu", "gpu" or a DeviceDecode, got {decode!r}')
        decode = DeviceDecode("cuda")   # DeviceUnavailableError without CUDA
    elif not isinstance(decode, DeviceDecode):
        raise TypeError(f'decode must be "cpu", "gpu" or a DeviceDecode, got '
                        f"{type(decode).__name__}")
    name = type(dataset).__name__
    if backend != "threads":
        raise ValueError("decode='gpu' needs backend='threads': worker processes cannot share "
                         "the GPU's decoder, and their batches would cross to the main process "
                         "through host memory")
    if collate_fn is not None:
        raise ValueError("decode='gpu' writes images into a batch tensor on the device; a "
                         "collate_fn would receive samples instead (leave it None)")
    if pin_memory:
        raise ValueError("pin_memory is for batches in host memory; decode='gpu' makes them "
                         "on the device (leave pin_memory False)")
    if output != "torch":
        raise ValueError("decode='gpu' makes torch tensors on the device; output='numpy' "
                         "needs host memory")
    if yields_batches(dataset):
        raise ValueError(f"decode='gpu' takes a dataset of samples batched by the loader; "
                         f"{name} yields whole batches (.batched() / .bucketed())")
    if (iterable and not has_worker_streams(dataset)) or (not iterable
                                                          and not accepts_out(dataset)):
        raise ValueError(f"decode='gpu' needs a turboloader dataset (TarDataset, ImageFolder, "
                         f"TBLDataset, ...) that decodes batches into the loader's tensors; "
                         f"{name} has no worker_stream / __getitems__(indices, out=, timing=)")
    if getattr(dataset, "cache_bytes", 0):
        raise ValueError("decode='gpu' with the decoded-sample cache: cached images are host "
                         "arrays transformed on the CPU; make the dataset with cache=None")
    check_plan(dataset_plan(dataset))
    return decode


def check_plan(plan, owner="decode='gpu'"):
    """Raise ValueError unless ``plan`` (a :class:`~turboloader.transforms.Plan` or None)
    is one the device executor runs: a fused plan with one output shape and no ColorJitter."""
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


def _has_colour(members) -> bool:
    for t in members:
        if isinstance(t, ColorJitter):
            return True
        if isinstance(t, (RandomApply, RandomChoice, RandomOrder, Compose)) and \
                _has_colour(t.transforms):
            return True
    return False


class DevicePool:
    """Batch tensors on the executor's device, new for every batch: torch's caching
    allocator recycles device memory itself (the attributes are :class:`~turboloader.data.
    _buffers.BufferPool`'s, which the pipeline reads)."""

    def __init__(self, executor, capacity):
        self.executor = executor
        self.capacity = int(capacity)
        self.allocated = self.reused = self.waited = 0

    def get(self, shape, dtype=torch.float32, *, wait=None) -> torch.Tensor:
        self.allocated += 1
        return self.executor.empty(shape, dtype)
