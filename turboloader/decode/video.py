"""Video clips: the frames of a clip decoded from an encoded video's bytes.

Decoding goes through PyAV (FFmpeg inside its wheels: ``pip install
'torch-turboloader[video]'``), chosen over torchcodec because its wheels carry FFmpeg and
install in CI. A clip is a list of frame indices. The container is demuxed once: its packets
number the frames in presentation order (so a variable frame rate leaves no gaps) and are
kept, so :func:`decode_frames` decodes from them, starting at the key frame before the clip
and stopping at its last frame: one clip never decodes the whole file. On the way, a frame
outside the clip that no other frame refers to (a B-frame) is skipped by the codec
(``skip_frame="NONREF"`` for its packet only), so the clip's frames are bit-identical to a
front-to-back decode. One swscale converter (one thread) turns every frame of the clip into
RGB. Frames over ``max_pixels`` are refused from the stream header, before anything is
decoded.
"""

from __future__ import annotations

import io

from turboloader.decode.sizes import check_pixels, pixel_limit
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
        check_pixels(int(cc.height or 0), int(cc.width or 0), max_pixels, what="Video frame")
        self.rate = _rate(vs)
        # the packets themselves are kept (decode order): a clip decodes from them, so the
        # file is demuxed once, and their key-frame flags say where decoding may start
        packets = self.packets = []
        try:
            for packet in container.demux(vs):
                t = packet.pts if packet.pts is not None else packet.dts
                if t is not None and packet.size:
                    packets.append(packet)
        except Exception as exc:  # FFmpeg's errors while demuxing
            raise DecodeError(f"cannot read the video's packets: {exc}") from None
        if not packets:
            raise DecodeError("the video stream has no frames")
        order = [int(p.pts if p.pts is not None else p.dts) for p in packets]
        pts = self.pts = sorted(order)
        self.index = {t: i for i, t in enumerate(pts)}
        self.position = {t: k for k, t in enumerate(order)}  # frame pts -> its packet
        self.keys = [k for k, p in enumerate(packets) if p.is_keyframe]
        header = int(vs.frames or 0)
        # an AVI's frame count includes a dropped frame's empty chunk, which has no packet
        if header and "avi" not in container.format.name.split(","):
            if header > len(pts):
                raise DecodeError(f"the video has {len(pts)} of the {header} frames its "
                                  f"header lists (a truncated file)")
        else:
            self._check_duration(container, vs)

    def start(self, want):
        """The packet to start decoding at for the frames ``want`` (sorted, present
        indices): the last key frame that comes no later than any of their packets in decode
        order and shows no later than the first of them (an open GOP's leading frames follow
        their key frame's packet but refer to the GOP before); the first packet when no key
        frame qualifies."""
        first = min(self.position[self.pts[i]] for i in want)
        lowest = self.pts[want[0]]
        best = 0
        for k in self.keys:
            if k > first:
                break
            p = self.packets[k]
            if (p.pts if p.pts is not None else p.dts) <= lowest:
                best = k
        return best

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
    (frame ``i``: the ``i``-th in presentation order), decoded from the key frame before the
    first to the last, frames outside them that nothing refers to skipped. The arrays may be
    views of FFmpeg's frame buffers (rows padded only where FFmpeg aligns them).

    Raises:
        DecodeError: not a readable video, frames over ``max_pixels`` (checked against the
            stream header before anything is decoded), or frames missing (a truncated or
            corrupt file).
    """
    limit = pixel_limit(max_pixels)
    container = _open(data)
    try:
        return _frames(_Timeline(container, max_pixels=limit), indices, limit)
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
    limit = pixel_limit(max_pixels)
    container = _open(data)
    try:
        timeline = _Timeline(container, max_pixels=limit)
        chosen = clip_indices(len(timeline), frames_per_clip, stride, rng=rng,
                              sampling=sampling, clips=clips)
        frames = _frames(timeline, [i for c in chosen for i in c], limit)
        return [[frames[i] for i in c] for c in chosen]
    finally:
        container.close()


def _decode_packets(cc, packets, wanted):
    """The frames decoded from ``packets`` (decode order), then the decoder's delayed ones.
    A packet whose frame is not ``wanted`` (a set of timestamps) is decoded with
    ``skip_frame="NONREF"``: the codec skips it when no other frame refers to it (a
    B-frame, H.264/HEVC's non-reference pictures), by its own bitstream rules; every
    reference frame and every wanted frame is decoded in full, so the frames are the
    same as decoding everything."""
    skip = None
    for packet in packets:
        t = packet.pts if packet.pts is not None else packet.dts
        if (t not in wanted) is not skip:  # set only when it changes (a string to parse)
            skip = t not in wanted
            cc.skip_frame = "NONREF" if skip else "DEFAULT"
        yield from cc.decode(packet)
    cc.skip_frame = "DEFAULT"
    yield from cc.decode(None)


def _frames(timeline, indices, limit):
    from av.video.reformatter import VideoReformatter

    want = sorted(set(int(i) for i in indices))
    present = [i for i in want if 0 <= i < len(timeline)]  # the others are missing frames
    wanted = {timeline.pts[i] for i in present}
    cc = timeline.stream.codec_context
    cc.thread_count = 1  # parallelism belongs to the loader (set before the codec opens)
    # one converter for every frame: a new one per frame (PyAV's to_ndarray(format=...))
    # sets up swscale and its slice threads for each frame, more than the decode costs
    # at small sizes; threads=1 converts the same pixels without them
    rgb = VideoReformatter()
    got = {}
    try:
        packets = timeline.packets[timeline.start(present):] if present else []
        for frame in _decode_packets(cc, packets, wanted) if packets else ():
            t = frame.pts if frame.pts is not None else frame.dts
            if t not in wanted:
                continue
            idx = timeline.index[t]
            # a size change mid-stream
            check_pixels(frame.height, frame.width, limit, what="Video frame")
            # a view of the converted frame's pixels (PyAV pads rows only when it must)
            got[idx] = rgb.reformat(frame, format="rgb24", threads=1).to_ndarray()
            if len(got) == len(present):
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
