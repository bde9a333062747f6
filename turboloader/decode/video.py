"""Video clips: the frames of a clip decoded from an encoded video's bytes, with seeking.

Decoding goes through PyAV (FFmpeg inside its wheels: ``pip install
'torch-turboloader[video]'``), chosen over torchcodec because its wheels carry FFmpeg and
install in CI. A clip is a list of frame indices; :func:`decode_frames` seeks to the key frame
before the first one and decodes forward only as far as the last, so one clip never costs
the whole file.
"""

from __future__ import annotations

import io
import math

from turboloader.errors import DecodeError, require

__all__ = ["VIDEO_EXTENSIONS", "clip_indices", "decode_clips", "decode_frames", "video_info"]

#: Member extensions read as videos.
VIDEO_EXTENSIONS = ("mp4", "webm", "mkv", "avi", "mov")


def _av():
    return require("av", extra="video", feature="video decoding")


def _open(data):
    av = _av()
    try:
        container = av.open(io.BytesIO(bytes(data)), mode="r")
    except Exception as exc:  # FFmpeg's errors (InvalidDataError, ...) and PyAV's
        raise DecodeError(f"cannot open video: {exc}") from None
    if not container.streams.video:
        container.close()
        raise DecodeError("the file has no video stream")
    return container


def _rate(vs):
    rate = vs.average_rate or vs.guessed_rate or vs.base_rate
    if not rate:
        raise DecodeError("the video stream has no frame rate")
    return rate


def _frame_count(container, vs, rate):
    n = int(vs.frames or 0)
    if n <= 0:
        if vs.duration is not None and vs.time_base is not None:
            n = int(math.floor(vs.duration * vs.time_base * rate + 1e-6))
        elif container.duration:
            n = int(math.floor(container.duration / 1_000_000 * rate + 1e-6))
    if n <= 0:
        raise DecodeError("cannot tell the number of frames of the video")
    return n


def video_info(data) -> tuple:
    """``(frames, fps)`` of the first video stream of encoded ``data``: the container's
    frame count, or (when it has none) its duration times its rate.

    Raises:
        DecodeError: not a readable video.
    """
    container = _open(data)
    try:
        vs = container.streams.video[0]
        rate = _rate(vs)
        return _frame_count(container, vs, rate), float(rate)
    finally:
        container.close()


def clip_indices(num_frames, frames_per_clip, stride, *, rng=None, sampling="random",
                 clips=1) -> list:
    """Frame indices of the clips to take from a video of ``num_frames`` frames.

    ``sampling="random"``: one clip at a start drawn from ``rng`` (a ``random.Random``
    such as :func:`~turboloader.transforms.sample_rng`'s, or a NumPy ``Generator``);
    ``"uniform"``: ``clips`` clips with evenly spaced starts (the first at 0, the last
    ending at the last frame). A clip spans ``(frames_per_clip - 1) * stride + 1`` frames;
    a video shorter than that repeats its last frame.

    Returns:
        A list of clips, each a list of ``frames_per_clip`` frame indices.

    Example:
        >>> clip_indices(10, 4, 2, sampling="uniform", clips=2)
        [[0, 2, 4, 6], [3, 5, 7, 9]]
    """
    T, s = int(frames_per_clip), int(stride)
    if T < 1 or s < 1 or num_frames < 1:
        raise ValueError(f"need frames_per_clip, stride and num_frames >= 1, got "
                         f"{frames_per_clip}, {stride}, {num_frames}")
    span = (T - 1) * s + 1
    last = max(0, num_frames - span)
    if sampling == "random":
        if rng is None:
            raise ValueError("random clips need rng")
        starts = [int(rng.integers(0, last + 1)) if hasattr(rng, "integers")
                  else rng.randint(0, last)]
    elif sampling == "uniform":
        k = int(clips)
        if k < 1:
            raise ValueError(f"clips must be >= 1, got {clips}")
        starts = [round(i * last / (k - 1)) if k > 1 else last // 2 for i in range(k)]
    else:
        raise ValueError(f'sampling must be "random" or "uniform", got {sampling!r}')
    return [[min(num_frames - 1, a + i * s) for i in range(T)] for a in starts]


def decode_frames(data, indices, /) -> dict:
    """``{index: (H, W, 3) uint8 RGB array}`` for the frame ``indices`` of encoded ``data``,
    seeking to the key frame before the first and decoding forward to the last.

    Raises:
        DecodeError: not a readable video, or frames missing (a truncated or corrupt file).
    """
    container = _open(data)
    try:
        return _frames(container, indices)
    finally:
        container.close()


def decode_clips(data, frames_per_clip, stride, /, *, rng=None, sampling="random",
                 clips=1) -> list:
    """The clips of encoded ``data`` (see :func:`clip_indices`) as lists of ``(H, W, 3)``
    uint8 RGB frames, the container opened once: its frame count, then the frames.

    Raises:
        DecodeError: not a readable video, or frames missing (a truncated or corrupt file).
        ValueError: bad clip arguments.
    """
    container = _open(data)
    try:
        vs = container.streams.video[0]
        n = _frame_count(container, vs, _rate(vs))
        chosen = clip_indices(n, frames_per_clip, stride, rng=rng, sampling=sampling,
                              clips=clips)
        frames = _frames(container, [i for c in chosen for i in c])
        return [[frames[i] for i in c] for c in chosen]
    finally:
        container.close()


def _frames(container, indices):
    want = sorted(set(int(i) for i in indices))
    vs = container.streams.video[0]
    rate = _rate(vs)
    tb = vs.time_base
    start = vs.start_time or 0
    try:
        if want[0] > 0:
            container.seek(start + int(want[0] / rate / tb), stream=vs, backward=True,
                           any_frame=False)
        got = {}
        wanted = set(want)
        for frame in container.decode(vs):
            if frame.pts is None:
                continue
            idx = int(round(float((frame.pts - start) * tb * rate)))
            if idx in wanted:
                got[idx] = frame.to_ndarray(format="rgb24")
            if idx >= want[-1]:
                break
    except Exception as exc:  # FFmpeg's errors mid-stream
        raise DecodeError(f"cannot decode video frames {want[0]}..{want[-1]}: {exc}") from None
    missing = [i for i in want if i not in got]
    if missing:
        raise DecodeError(f"video frames {missing[:4]}{'...' if len(missing) > 4 else ''} "
                          f"are missing (a truncated or corrupt file)")
    return got
