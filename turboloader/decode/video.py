"""Video clips: the frames of a clip decoded from an encoded video's bytes, with seeking.

Decoding goes through PyAV (FFmpeg inside its wheels: ``pip install
'torch-turboloader[video]'``), chosen over torchcodec because its wheels carry FFmpeg and
install in CI. A clip is a list of frame indices; :func:`decode_frames` seeks to the key frame
before the first one and decodes forward only as far as the last, so one clip never decodes
the whole file. Frames are numbered in presentation order from the stream's packets (read
without decoding), so a variable frame rate leaves no gaps; frames over ``max_pixels`` are
refused from the stream header, before anything is decoded.
"""

from __future__ import annotations

import io

from turboloader.decode.jpeg import _max_pixels
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


def _check_size(width, height, limit):
    """DecodeError when a ``width`` x ``height`` frame is over ``limit`` pixels (0: none)."""
    if limit and width * height > limit:
        raise DecodeError(f"Video frame size {width} x {height} exceeds the limit of {limit} "
                          f"pixels (max_pixels)")


class _Timeline:
    """The frames of the first video stream, numbered in presentation order: frame ``i``
    is the ``i``-th smallest timestamp of the stream's packets (read by demuxing, nothing
    decoded), as torchvision's ``VideoClips`` and torchcodec number them. A variable frame
    rate (dropped frames, phone videos) leaves no gaps in the numbering.

    Raises:
        DecodeError: no frames, a frame over ``max_pixels`` (from the stream header), or
            a truncated file: fewer packets than the header's frame count, or (without
            one) packets that end more than two frames before the stream's duration.
    """

    def __init__(self, container, *, max_pixels=0):
        vs = self.stream = container.streams.video[0]
        cc = vs.codec_context
        _check_size(int(cc.width or 0), int(cc.height or 0), max_pixels)
        self.rate = _rate(vs)
        pts = []
        try:
            for packet in container.demux(vs):
                t = packet.pts if packet.pts is not None else packet.dts
                if t is not None and packet.size:
                    pts.append(int(t))
        except Exception as exc:  # FFmpeg's errors while demuxing
            raise DecodeError(f"cannot read the video's packets: {exc}") from None
        if not pts:
            raise DecodeError("the video stream has no frames")
        pts.sort()
        self.pts = pts
        self.index = {t: i for i, t in enumerate(pts)}
        header = int(vs.frames or 0)
        # an AVI's frame count includes a dropped frame's empty chunk, which has no packet
        if header and "avi" not in container.format.name.split(","):
            if header > len(pts):
                raise DecodeError(f"the video has {len(pts)} of the {header} frames its "
                                  f"header lists (a truncated file)")
        else:
            self._check_duration(container, vs)

    def _check_duration(self, container, vs):
        """Without a frame count to trust: the packets must reach the stream's duration
        (the container's, when the video is its only stream) within two frames."""
        tb = vs.time_base
        if vs.duration is not None and tb is not None:
            duration = float(vs.duration * tb)
        elif container.duration and len(container.streams) == 1:
            duration = container.duration / 1_000_000
        else:
            return
        start = float((vs.start_time or 0) * tb) if tb is not None else 0.0
        end = float(self.pts[-1] * tb) - start + 1 / float(self.rate)
        if end < duration - 2 / float(self.rate):
            raise DecodeError(f"the video's frames end at {end:.3f} s of its {duration:.3f} s "
                              f"(a truncated file)")

    def __len__(self):
        return len(self.pts)


def video_info(data) -> tuple:
    """``(frames, fps)`` of the first video stream of encoded ``data``: the number of its
    frames (counted from its packets, nothing decoded) and its average rate.

    Raises:
        DecodeError: not a readable video, or a truncated one.
    """
    container = _open(data)
    try:
        timeline = _Timeline(container)
        return len(timeline), float(timeline.rate)
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


def decode_frames(data, indices, /, *, max_pixels=None) -> dict:
    """``{index: (H, W, 3) uint8 RGB array}`` for the frame ``indices`` of encoded ``data``
    (frame ``i``: the ``i``-th in presentation order), seeking to the key frame before the
    first and decoding forward to the last.

    Raises:
        DecodeError: not a readable video, frames over ``max_pixels`` (checked against the
            stream header before anything is decoded), or frames missing (a truncated or
            corrupt file).
    """
    limit = _max_pixels(max_pixels)
    container = _open(data)
    try:
        return _frames(container, _Timeline(container, max_pixels=limit), indices, limit)
    finally:
        container.close()


def decode_clips(data, frames_per_clip, stride, /, *, rng=None, sampling="random",
                 clips=1, max_pixels=None) -> list:
    """The clips of encoded ``data`` (see :func:`clip_indices`) as lists of ``(H, W, 3)``
    uint8 RGB frames, the container opened once: its frames numbered, then the clip's
    frames decoded.

    Raises:
        DecodeError: not a readable video, frames over ``max_pixels`` (checked against the
            stream header before anything is decoded), or frames missing (a truncated or
            corrupt file).
        ValueError: bad clip arguments.
    """
    limit = _max_pixels(max_pixels)
    container = _open(data)
    try:
        timeline = _Timeline(container, max_pixels=limit)
        chosen = clip_indices(len(timeline), frames_per_clip, stride, rng=rng,
                              sampling=sampling, clips=clips)
        frames = _frames(container, timeline, [i for c in chosen for i in c], limit)
        return [[frames[i] for i in c] for c in chosen]
    finally:
        container.close()


def _frames(container, timeline, indices, limit):
    want = sorted(set(int(i) for i in indices))
    vs = timeline.stream
    try:
        # the timeline's demuxing read the whole file: always seek back
        target = timeline.pts[want[0]] if want[0] < len(timeline) else timeline.pts[-1]
        container.seek(target, stream=vs, backward=True, any_frame=False)
        got = {}
        wanted = set(want)
        for frame in container.decode(vs):
            t = frame.pts if frame.pts is not None else frame.dts
            idx = timeline.index.get(t)
            if idx is None:
                continue
            if idx in wanted:
                _check_size(frame.width, frame.height, limit)  # a size change mid-stream
                got[idx] = frame.to_ndarray(format="rgb24")
            if idx >= want[-1]:
                break
    except DecodeError:
        raise
    except Exception as exc:  # FFmpeg's errors mid-stream
        raise DecodeError(f"cannot decode video frames {want[0]}..{want[-1]}: {exc}") from None
    missing = [i for i in want if i not in got]
    if missing:
        raise DecodeError(f"video frames {missing[:4]}{'...' if len(missing) > 4 else ''} "
                          f"are missing (a truncated or corrupt file)")
    return got
