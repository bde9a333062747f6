"""Video clips as samples: ``VideoDataset`` over TAR shards (webdataset's ``.mp4`` members)
and ``VideoFolder`` over class folders.

Each sample is a clip of ``frames_per_clip`` frames, ``stride`` frames apart, drawn per epoch
from the sample's random stream (``sampling="random"``, train), or ``clips`` evenly spaced
clips (``sampling="uniform"``, eval). Only the clip's frames are decoded, after a seek to the
key frame before it (:mod:`turboloader.decode.video`). The transform runs with **one** set of
drawn parameters for all frames of a clip, as torchvision v2 transforms a video: a turboloader
pipeline that plans runs fused on all frames in one batch call with the same draws (those of
``SampleRandom(key)``, ``key`` the sample generator's next 64 bits), crop, flip, jitter; any
other transform gets the clip as a ``torchvision.tv_tensors.Video`` ``(T, C, H, W)`` uint8
tensor. A sample is ``(clip, label)``: ``clip`` is ``(T, C, H, W)``, or ``(clips, T, C, H,
W)`` for several uniform clips.

Everything else is the underlying dataset's: sharding over ranks and workers, per-epoch
shuffles, exactly-once epochs, resume, statistics and the failure policy (a corrupt or
truncated video, one whose clip is over ``max_pixels`` (its frames x width x height), or one
whose frames cannot be numbered safely, is a ``DecodeError``: raised, or a counted skip under
``on_error="skip"``). Frames are numbered as the decoder outputs them, in presentation order,
whatever the container's timestamps do (edit lists, restarts, repeats, a variable frame
rate); frames after a resolution change are scaled to the stream's size (see
:mod:`turboloader.decode.video`).
"""

from __future__ import annotations

from typing import Any
import os
import time

import numpy as np
import torch
import torchvision.datasets

from turboloader.io.files import read_file
from turboloader.data.map_dataset import MapDataset, gather_file
from turboloader.data.reader import StreamReader
from turboloader.data.tar_dataset import TarDataset
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS
from turboloader.decode.video import VIDEO_EXTENSIONS, clip_indices, decode_clips
from turboloader.decode import executor
from turboloader.decode.executor import GENERIC, OK
from turboloader.transforms import SampleRandom, using_rng

__all__ = ["VideoDataset", "VideoFolder"]


def _frame_key(rng) -> int:
    """A 64-bit key drawn from the sample's generator: the frames' parameters are those of
    ``SampleRandom(key)``."""
    if hasattr(rng, "integers"):
        return int(rng.integers(0, 1 << 63))
    return int(rng.getrandbits(64))


def _get_state(rng):
    return rng.bit_generator.state if hasattr(rng, "bit_generator") else rng.getstate()


def _set_state(rng, state):
    if hasattr(rng, "bit_generator"):
        rng.bit_generator.state = state
    else:
        rng.setstate(state)


class _ClipDecoder:
    """A stream's decoder for video sources (a :class:`~turboloader.data.step.SampleDecoder`):
    the clip's frames, then the transform with one set of draws for all of them. No plan:
    the sample step runs every row through :meth:`transform_source`."""

    cache = None
    plan = None

    def __init__(self, transform, *, frames_per_clip, stride, sampling, clips,
                 max_pixels=DEFAULT_MAX_PIXELS):
        from turboloader.data.step import get_plan

        self.transform = transform
        self.frame_plan = get_plan(transform)
        self.frames_per_clip, self.stride = int(frames_per_clip), int(stride)
        self.sampling, self.clips = sampling, int(clips)
        self.max_pixels = max_pixels
        clip_indices(1, self.frames_per_clip, self.stride, rng=np.random.default_rng(0),
                     sampling=sampling, clips=self.clips)  # argument checks, at once

    def transform_image(self, img, rng):
        return img

    # no cache of decoded clips (``cache`` is None): the step never asks these
    def cached_array(self, key, data, *, counters=None, extra=None):
        raise TypeError("video clips are not cached")

    def cached_extra(self, key, default=None):
        return default

    def transform_source(self, source, *, rng, source_size=None, counters=None, out=None):
        t = time.perf_counter()
        clips = decode_clips(source, self.frames_per_clip, self.stride, rng=rng,
                             sampling=self.sampling, clips=self.clips,
                             max_pixels=self.max_pixels)
        if counters is not None:
            counters["decode_s"] += time.perf_counter() - t
            t = time.perf_counter()
        state = _get_state(rng)  # every frame (and clip) draws the same parameters
        # one clip is the sample itself (no stack: its frames were written once)
        result = [self._clip(frames, rng, state) for frames in clips]
        # (a plain tensor, as stacking gave, when torchvision's transform returned a Video)
        out = result[0].as_subclass(torch.Tensor) if self.clips == 1 else torch.stack(result)
        if counters is not None:
            counters["transform_s"] += time.perf_counter() - t
        return out

    def _clip(self, frames, rng, state):
        if self.transform is None:  # each frame copied once, straight into its CHW slot
            h, w = frames[0].shape[:2]
            out = torch.empty((len(frames), 3, h, w), dtype=torch.uint8)
            for t, frame in enumerate(frames):
                out[t].copy_(torch.from_numpy(frame).permute(2, 0, 1))
            return out
        plan = self.frame_plan
        if plan is not None and plan.output_shape is not None:
            # every frame the same key: one batch call, one set of draws (those of
            # SampleRandom(key) for each frame), decoded without the GIL
            _set_state(rng, state)
            key = _frame_key(rng)
            keys = np.full(len(frames), key, np.uint64)
            out = torch.empty((len(frames), *plan.output_shape), dtype=plan.output_dtype)
            # the executor's steps, as the sample step runs them (the transforms only draw)
            found = executor.read_sizes(frames)
            spec = plan.draw(found.hw, keys, found.status == OK)
            params = executor.plan_slots(found, spec, filter=plan.filter,
                                         dct_scaling=plan.dct_scaling)
            result = executor.run_batch(frames, params, out, **plan.slot_format())
            for t, status in enumerate(result.status.tolist()):
                if status == GENERIC:  # a frame the batch path cannot do (as datasets do)
                    plan.from_array(frames[t], rng=SampleRandom(key), out=out[t])
                elif status != OK:
                    raise result.errors[t]
            return out
        from torchvision import tv_tensors

        _set_state(rng, state)
        video = tv_tensors.Video(torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2))
        with using_rng(rng):
            return self.transform(video)


def _clip_options(frames_per_clip, stride, sampling, clips):
    if int(frames_per_clip) < 1 or int(stride) < 1:
        raise ValueError(f"frames_per_clip and stride must be >= 1, got {frames_per_clip}, "
                         f"{stride}")
    if sampling not in ("random", "uniform"):
        raise ValueError(f'sampling must be "random" or "uniform", got {sampling!r}')
    if int(clips) < 1 or (sampling == "random" and int(clips) != 1):
        raise ValueError(f"clips must be >= 1 (and 1 for random sampling), got {clips}")
    return {"frames_per_clip": int(frames_per_clip), "stride": int(stride),
            "sampling": sampling, "clips": int(clips)}


class VideoDataset(TarDataset):
    """``(clip, label)`` samples from WebDataset-style TAR shards of videos (a sample's
    ``.mp4``/``.webm``/``.mkv``/``.avi``/``.mov`` member, its ``.cls``/``.json`` label), with
    everything :class:`~turboloader.data.TarDataset` does (see :mod:`turboloader.data.video`).

    Args:
        urls, transform, target_transform: as ``TarDataset``; ``transform`` applies to each
            frame with the same parameters (a turboloader pipeline), or to the whole clip as a
            ``tv_tensors.Video`` (anything else).
        frames_per_clip: frames in a clip (``T``).
        stride: frames between consecutive clip frames (1: consecutive frames).
        sampling: ``"random"`` (a clip at a start drawn per epoch) or ``"uniform"``.
        clips: clips per video with ``"uniform"`` (then samples are ``(clips, T, C, H, W)``).
        **kwargs: ``TarDataset``'s keyword arguments (not ``cache`` or ``fields``);
            ``max_pixels`` bounds a sample's decoded pixels: ``clips`` x ``frames_per_clip``
            x width x height, checked against the stream header before anything is
            decoded (a ``DecodeError``: raised, or a counted skip under
            ``on_error="skip"``).

    Raises:
        MissingDependencyError: PyAV is not installed (when a clip is first decoded).

    Example:
        >>> ds = VideoDataset("clips-{0000..0009}.tar", T.Compose([T.RandomResizedCrop(112),
        ...                   T.RandomHorizontalFlip(), T.ToTensor()]), frames_per_clip=16,
        ...                   stride=2)                                      # doctest: +SKIP
        >>> clip, label = next(iter(ds))  # clip: (16, 3, 112, 112)
    """

    _image_exts = VIDEO_EXTENSIONS

    def __init__(self, urls: Any, transform: Any = None, target_transform: Any = None, *,
                 frames_per_clip: int = 8, stride: int = 1, sampling: str = "random",
                 clips: int = 1, **kwargs: Any) -> None:
        for key in ("cache", "fields", "cache_short_side"):
            if kwargs.get(key) is not None:
                raise ValueError(f"VideoDataset does not take {key}=")
        self._clip = _clip_options(frames_per_clip, stride, sampling, clips)
        super().__init__(urls, transform, target_transform, **kwargs)

    @property
    def frames_per_clip(self) -> int:
        """Frames in a clip (``T``): a sample is ``(T, C, H, W)`` (or ``(clips, T, ...)``)."""
        return self._clip["frames_per_clip"]

    def _decoder(self):
        return _ClipDecoder(self.transform, max_pixels=self.max_pixels, **self._clip)


class VideoFolder(MapDataset, torchvision.datasets.DatasetFolder):
    """``(clip, label)`` samples from class folders of video files, map-style like
    ``ImageFolder`` (same arguments, ``classes``, ``class_to_idx``, ``samples``), the clip
    options of :class:`VideoDataset`, and the map-style failure policy (``max_pixels``
    as there)."""

    def __init__(self, root: Any, transform: Any = None, target_transform: Any = None, *,
                 frames_per_clip: int = 8, stride: int = 1, sampling: str = "random",
                 clips: int = 1, seed: int = 0, on_error: str = "raise",
                 max_failures: float = 0.01, max_pixels: int | None = DEFAULT_MAX_PIXELS,
                 stats_interval: int = 256, extensions: Any = VIDEO_EXTENSIONS) -> None:
        self._clip = _clip_options(frames_per_clip, stride, sampling, clips)
        super().__init__(root, loader=read_file, extensions=tuple(f".{e}" for e in extensions),
                         transform=transform, target_transform=target_transform)
        self._init_reader(transform, target_transform, seed=seed, cache=None,
                          cache_short_side=None, on_error=on_error, max_failures=max_failures,
                          max_pixels=max_pixels, stats_interval=stats_interval)

    def _new_reader(self, name):
        return StreamReader(self, name, flush_failures=True)

    @property
    def frames_per_clip(self) -> int:
        """Frames in a clip (``T``): a sample is ``(T, C, H, W)`` (or ``(clips, T, ...)``)."""
        return self._clip["frames_per_clip"]

    def _decoder(self):
        return _ClipDecoder(self.transform, max_pixels=self.max_pixels, **self._clip)

    def _gather(self, st, chunk, i, slot, epoch, counters):
        path, target = self.samples[i]
        gather_file(st, chunk, path, target, i, slot, epoch, counters)

    def _where(self, st, i):
        path = self.samples[i][0]
        return (f"VideoFolder: file {path!r} (index {i})", path,
                os.path.relpath(path, self.root), 0)
