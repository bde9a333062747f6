"""Video clips: the frames of a clip decoded from an encoded video's bytes.

Decoding goes through PyAV (FFmpeg inside its wheels: ``pip install
'torch-turboloader[video]'``), chosen over torchcodec because its wheels carry FFmpeg and
install in CI. A clip is a list of frame indices.

**Numbering.** Frame ``i`` is the ``i``-th frame the decoder outputs, front to back, in
presentation order, whatever the container's timestamps do. It is read from a per-file
*timeline*: one demux of the file keeps each packet's position, size, timestamps and flags
(never its payload). Packets the container marks *discard* (the frames an edit list cuts
away, ``ffmpeg -ss ... -c copy``) are decoded as references but never numbered, as the
decoder never outputs them. Where the decode timestamps go back (concatenated MPEG-TS, a
remux with overlap, a restart) a new *segment* begins: its frames follow the previous
segment's, so repeated timestamps never mix frames of two segments. Within a segment frames
are ordered by presentation timestamp, so a variable frame rate leaves no gaps. Where the
file starts before its first key frame (a capture cut mid-GOP) or that key frame has leading
frames (an open GOP), which of the first frames the decoder outputs is the decoder's choice:
those packets are decoded once, when the timeline is built, and only the frames that come
out are numbered (a decoder that outputs one twice makes the file a ``DecodeError``). A
timeline is built once per file in each process and kept in a bounded LRU
(:data:`TIMELINE_CACHE_FILES` files, :data:`TIMELINE_CACHE_PACKETS` packets in all), keyed
by a fingerprint of the bytes (their length and a hash of samples of them) and what the
container's header says of the stream.

**Decoding a clip** seeks to the key frame before it (for an open GOP's leading frames, the
one before that) and decodes from there to its last frame: its cost is bounded by the clip,
not the file. Every packet read after the seek is checked against the timeline (its byte
position and size), so a seek that lands elsewhere (a format that seeks by timestamp
through repeated timestamps) falls back to reading from the start, and a timeline that does
not match the file is built again, never wrong frames. The clip that builds the timeline of
a file up to :data:`KEEP_PACKETS_BYTES` decodes from the packets that demux read (one pass,
no seek). Each
decoded frame carries its packet's number through the decoder (FFmpeg's ``copy_opaque``),
and the frames must come out in the timeline's order: where they do not, the file cannot be
numbered safely and the clip is a :class:`~turboloader.errors.DecodeError` saying so. On the
way, a frame outside the clip that no other frame refers to (a B-frame) is skipped by the
codec (``skip_frame="NONREF"`` for its packet only), so the clip's frames are bit-identical
to a front-to-back decode. One swscale converter (one thread) turns every frame of the clip
into RGB; a frame after a resolution change is scaled to the stream's size (its header's),
so a clip's frames have one size.

**Memory.** ``max_pixels`` bounds a clip: its frames x width x height (every frame the
sample holds, repeats included), checked against the stream header before anything is
decoded; a decoded frame over ``max_pixels`` on its own (a resolution change upwards) is
refused before it is converted.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections import OrderedDict

import numpy as np

from turboloader.decode.sizes import check_pixels, pixel_limit
from turboloader.errors import DecodeError, require

__all__ = ["KEEP_PACKETS_BYTES", "TIMELINE_CACHE_FILES", "TIMELINE_CACHE_PACKETS",
           "VIDEO_EXTENSIONS", "clear_timelines", "clip_indices", "decode_clips",
           "decode_frames", "video_info"]

#: Member extensions read as videos.
VIDEO_EXTENSIONS = ("mp4", "webm", "mkv", "avi", "mov")

#: Files whose timelines a process keeps (least recently used dropped first).
TIMELINE_CACHE_FILES = 512
#: Packets the kept timelines hold in all (about 40 bytes each: 1M is about 40 MB, some 11
#: hours of 25 fps video).
TIMELINE_CACHE_PACKETS = 1_000_000
#: A file up to this size whose timeline is built for a clip keeps its packets for that clip
#: (one demux, no seek); a larger one seeks, its memory bounded by the clip.
KEEP_PACKETS_BYTES = 8 << 20


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


def _check_clip(frames, width, height, limit):
    """DecodeError when ``frames`` frames of ``width`` x ``height`` are over ``limit``."""
    check_pixels(height, width, limit, what="Video frame")
    if limit and frames * width * height > limit:
        raise DecodeError(f"a clip of {frames} frames of {width} x {height} "
                          f"({frames * width * height} pixels) exceeds the limit of {limit} "
                          f"pixels (max_pixels bounds a clip's frames x width x height)")


_NONE = np.iinfo(np.int64).min  # a missing timestamp in the timeline's arrays


class _Timeline:
    """The packets of the first video stream in decode order (position ``j``), their byte
    positions, sizes, timestamps and flags, and the frames' numbering; no payload is kept
    (the packets themselves go to ``kept``, a list, when one is given).

    * ``rank[j]``: packet ``j``'s place in presentation order (segments one after another,
      each ordered by presentation timestamp);
    * ``frame_of[j]``: the frame index packet ``j`` decodes to, -1 for a discarded one;
    * ``packet_of[i]``: the packet of frame ``i``;
    * ``keys``: the positions of the key frames.

    Raises:
        DecodeError: no frames, unreadable packets, or a truncated file: fewer packets than
            the header's frame count, or (without one) packets that end more than two frames
            before the stream's duration.
    """

    def __init__(self, container, kept=None):
        vs = container.streams.video[0]
        cc = vs.codec_context
        self.width, self.height = int(cc.width or 0), int(cc.height or 0)
        self.rate = _rate(vs)
        pos, size, ts, dts, key, discard = [], [], [], [], [], []
        try:
            for p in container.demux(vs):
                t, d = p.pts, p.dts
                if t is None:
                    t = d
                if t is None or not p.size:
                    continue
                pos.append(p.pos if p.pos is not None else -1)
                size.append(p.size)
                ts.append(t)
                dts.append(_NONE if d is None else d)
                key.append(p.is_keyframe)
                discard.append(p.is_discard)
                if kept is not None:
                    kept.append(p)
        except Exception as exc:  # FFmpeg's errors while demuxing
            raise DecodeError(f"cannot read the video's packets: {exc}") from None
        if not ts:
            raise DecodeError("the video stream has no frames")
        n = len(ts)
        self.pos = np.array(pos, np.int64)
        self.size = np.array(size, np.int64)
        t = np.array(ts, np.int64)
        d = np.array(dts, np.int64)
        self.keys = np.flatnonzero(np.array(key, bool))
        # a segment starts where the decode timestamps go back
        back = np.flatnonzero((d[1:] < d[:-1]) & (d[1:] != _NONE) & (d[:-1] != _NONE)) + 1
        bounds = [0, *back.tolist(), n]
        self.segments = len(bounds) - 1
        rank = np.empty(n, np.int64)
        for a, b in zip(bounds, bounds[1:]):
            order = np.lexsort((np.arange(a, b), t[a:b])) + a  # by pts, then decode order
            rank[order] = np.arange(a, b)
        self.rank = rank
        self.number(~np.array(discard, bool))
        # where the file starts without a key frame (a capture cut mid-GOP), or its first key
        # frame has leading frames (an open GOP), which of the first packets' frames the
        # decoder outputs is the decoder's choice: _Video decodes them once to see
        k0 = int(self.keys[0]) if len(self.keys) else 0
        lead = k0 + 1
        while lead < n and rank[lead] < rank[k0]:
            lead += 1
        self.head = lead if len(self.keys) and (k0 or lead > 1) else 0
        # packets are found again after a seek by their byte position, when it names them
        self.pos_order = np.argsort(self.pos, kind="stable")
        self.pos_sorted = self.pos[self.pos_order]
        self.seekable = bool(self.pos_sorted[0] >= 0
                             and (np.diff(self.pos_sorted) > 0).all())
        self.ts, self.dts = t, d
        header = int(vs.frames or 0)
        # an AVI's frame count includes a dropped frame's empty chunk, which has no packet
        if header and "avi" not in container.format.name.split(","):
            if header > n:
                raise DecodeError(f"the video has {n} of the {header} frames its header "
                                  f"lists (a truncated file)")
        elif self.segments == 1:  # (concatenated streams state no duration to trust)
            self._check_duration(container, vs, t[self.packet_of[-1]])

    def number(self, numbered):
        """Number the packets ``numbered`` (a mask) in presentation order."""
        by_rank = np.argsort(self.rank)
        self.packet_of = by_rank[numbered[by_rank]]
        frame_of = np.full(len(self.rank), -1, np.int64)
        frame_of[self.packet_of] = np.arange(len(self.packet_of))
        self.frame_of = frame_of
        if not len(self.packet_of):
            raise DecodeError("the video stream has no frames (every packet is discarded)")

    def _check_duration(self, container, vs, last):
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
        end = float(int(last) * tb) - start + 1 / float(self.rate)
        if end < duration - 2 / float(self.rate):
            raise DecodeError(f"the video's frames end at {end:.3f} s of its {duration:.3f} s "
                              f"(a truncated file)")

    def __len__(self):
        return len(self.packet_of)

    @property
    def packets(self) -> int:
        return len(self.pos)

    def start(self, want) -> int:
        """The packet to start decoding at for the frames ``want`` (sorted, present
        indices): the last key frame that comes no later than any of their packets in decode
        order and shows no later than the first of them (an open GOP's leading frames follow
        their key frame's packet but refer to the GOP before); the first packet when no key
        frame qualifies."""
        first = int(self.packet_of[want].min())
        lowest = self.rank[self.packet_of[want[0]]]
        keys = self.keys[: np.searchsorted(self.keys, first, side="right")]
        keys = keys[self.rank[keys] <= lowest]
        return int(keys[-1]) if len(keys) else 0

    def seek_point(self, k) -> int:
        """The timestamp to seek to for packet ``k`` (its decode timestamp, as demuxers
        index key frames, or its presentation one)."""
        return int(self.dts[k] if self.dts[k] != _NONE else self.ts[k])


# -- the per-process timelines ------------------------------------------------------------

_timelines: OrderedDict = OrderedDict()
_timelines_lock = threading.Lock()


def _fingerprint(data) -> bytes:
    """A key for ``data``'s timeline: its length and a hash of its bytes (every byte up to
    64 KiB; beyond, the first and last 16 KiB and 64 samples of 512 bytes spread over the
    rest). A timeline found under a colliding key is caught when decoding: the packets read
    must match its byte positions and sizes."""
    view = memoryview(data).cast("B")
    n = len(view)
    h = hashlib.blake2b(n.to_bytes(8, "little"), digest_size=16)
    if n <= 1 << 16:
        h.update(view)
    else:
        h.update(view[: 1 << 14])
        h.update(view[n - (1 << 14):])
        step = n // 65
        for i in range(1, 65):
            h.update(view[i * step: i * step + 512])
    return h.digest()


def _signature(container) -> tuple:
    """What the container's header says of its video stream (format, codec, size, time
    base, frame count, durations, codec extradata): with the fingerprint, the timeline's
    key, so files that differ in their header never share one."""
    vs = container.streams.video[0]
    cc = vs.codec_context
    extra = hashlib.blake2b(cc.extradata or b"", digest_size=8).digest()
    return (container.format.name, cc.name, cc.width, cc.height, str(vs.time_base),
            vs.frames, vs.duration, vs.start_time, container.duration, extra)


def _cached_timeline(key):
    with _timelines_lock:
        tl = _timelines.get(key)
        if tl is not None:
            _timelines.move_to_end(key)
        return tl


def _keep_timeline(key, tl):
    with _timelines_lock:
        _timelines[key] = tl
        total = sum(t.packets for t in _timelines.values())
        while len(_timelines) > 1 and (len(_timelines) > TIMELINE_CACHE_FILES
                                       or total > TIMELINE_CACHE_PACKETS):
            _, old = _timelines.popitem(last=False)
            total -= old.packets


def _drop_timeline(key):
    with _timelines_lock:
        _timelines.pop(key, None)


def clear_timelines() -> None:
    """Forget every kept timeline (benchmarks measure the first clip of a file with it)."""
    with _timelines_lock:
        _timelines.clear()


class _Video:
    """An open video and its timeline: the container (reopened when a seek has to fall back
    to reading from the start) and where its demuxer stands."""

    def __init__(self, data):
        self.data = data
        self.container = _open(data)
        self.key = (_fingerprint(data), _signature(self.container))
        self.timeline = _cached_timeline(self.key)
        self.kept = None  # the packets, when the timeline was built here for a small file
        self.fresh = self.read = self.timeline is None
        if self.fresh:
            try:
                self._build()
            except BaseException:
                self.close()
                raise

    def close(self):
        self.container.close()

    def rebuild(self):
        """After a mismatch between the kept timeline and the file: build it again."""
        _drop_timeline(self.key)
        self.close()
        self.container = _open(self.data)
        self.fresh = self.read = True
        self._build()

    def _build(self):
        self.kept = [] if len(self.data) <= KEEP_PACKETS_BYTES else None
        self.timeline = tl = _Timeline(self.container, self.kept)  # demuxed to the end
        if tl.head:
            try:
                self._probe_head()
            except _Mismatch:
                raise DecodeError(_NOT_DETERMINISTIC) from None
        _keep_timeline(self.key, tl)

    def _probe_head(self):
        """Decode the file's first packets up to its first key frame and that frame's leading
        ones (``timeline.head``), and number only those whose frames the decoder outputs
        (a decoder drops the frames it cannot decode without the references before a cut,
        as H.264's and MPEG-2's do; the decoder decides, as when decoding front to back)."""
        tl = self.timeline
        out, cc = [], None
        try:
            for j, packet in self.packets_from(0):
                if cc is None:
                    cc = self.container.streams.video[0].codec_context
                    cc.thread_count, cc.copy_opaque = 1, True
                packet.opaque = (j,)
                frames = []
                try:
                    frames = cc.decode(packet)
                    if j == tl.head - 1:
                        frames = [*frames, *cc.decode(None)]
                except Exception:  # FFmpeg's errors on a cut-off first packet: no frame
                    pass
                out += [f.opaque[0] for f in frames if isinstance(f.opaque, tuple)]
                if j == tl.head - 1:
                    break
        finally:
            if cc is not None:
                cc.flush_buffers()
        twice = sorted({j for j in out if out.count(j) > 1})
        if twice:
            raise DecodeError(f"the decoder outputs the frame of packet {twice[0]} more than "
                              f"once at the start of the file (cut before its first key "
                              f"frame): its frames cannot be numbered safely")
        numbered = tl.frame_of >= 0
        numbered[[j for j in range(tl.head) if j not in out]] = False
        tl.number(numbered)

    def packets_from(self, k):
        """``(j, packet)`` for the packets from position ``k`` on, each checked against the
        timeline: after a seek to the key frame when the timeline's byte positions name the
        packets, else (or when the seek lands past ``k``) read from the start."""
        tl = self.timeline
        if self.kept is not None:
            yield from zip(range(k, tl.packets), self.kept[k:])
            return
        vs = self.container.streams.video[0]
        if tl.seekable and (k > 0 or self.read):  # (a container just opened is at 0)
            for target in (k, *tl.keys[tl.keys < k][::-1][:2].tolist()):
                try:
                    self.container.seek(tl.seek_point(target), stream=vs, backward=True)
                except Exception:  # a format that cannot seek: read from the start
                    break
                packets = self._demux()
                for packet in packets:
                    j = self._position(packet)
                    if j is None or j < k:
                        continue
                    if j == k:
                        yield from self._checked(k, packet, packets)
                        return
                    break  # landed past k: seek earlier
        if self.read:
            self.close()
            self.container = _open(self.data)
        j = 0
        packets = self._demux()
        for packet in packets:
            if j == k:
                yield from self._checked(k, packet, packets)
                return
            j += 1
        raise _Mismatch

    def _demux(self):
        self.read = True
        vs = self.container.streams.video[0]
        try:
            for p in self.container.demux(vs):
                if p.size and (p.pts is not None or p.dts is not None):
                    yield p
        except Exception as exc:  # FFmpeg's errors while demuxing
            raise DecodeError(f"cannot read the video's packets: {exc}") from None

    def _position(self, packet):
        tl = self.timeline
        j = int(np.searchsorted(tl.pos_sorted, packet.pos)) if packet.pos is not None else -1
        if 0 <= j < len(tl.pos_sorted) and tl.pos_sorted[j] == packet.pos:
            return int(tl.pos_order[j])
        return None

    def _checked(self, j, packet, packets):
        tl = self.timeline
        while True:
            if j >= tl.packets or packet.size != tl.size[j] or (
                    tl.seekable and packet.pos != tl.pos[j]):
                raise _Mismatch
            yield j, packet
            j += 1
            packet = next(packets, None)
            if packet is None:
                return


_NOT_DETERMINISTIC = ("the video's packets differ between two reads of the same file (a "
                      "demuxer that is not deterministic)")


class _Mismatch(Exception):
    """The packets read differ from the kept timeline's."""


def video_info(data) -> tuple:
    """``(frames, fps)`` of the first video stream of encoded ``data``: the number of its
    frames (numbered from its packets, nothing decoded; see the module) and its average
    rate.

    Raises:
        DecodeError: not a readable video, or a truncated one.
    """
    video = _Video(data)
    try:
        return len(video.timeline), float(video.timeline.rate)
    finally:
        video.close()


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
    (frame ``i``: the ``i``-th the decoder outputs, see the module), decoded from the key
    frame before the first to the last, frames outside them that nothing refers to skipped.
    The arrays may be views of FFmpeg's frame buffers (rows padded only where FFmpeg aligns
    them).

    Raises:
        DecodeError: not a readable video, more pixels than ``max_pixels`` (the distinct
            frames asked for x width x height, checked against the stream header before
            anything is decoded), frames missing (a truncated or corrupt file), or a file
            whose frames cannot be numbered safely.
    """
    limit = pixel_limit(max_pixels)
    video = _Video(data)
    try:
        tl = video.timeline
        _check_clip(len(set(int(i) for i in indices)), tl.width, tl.height, limit)
        return _frames(video, indices, limit)
    finally:
        video.close()


def decode_clips(data, frames_per_clip, stride, /, *, rng=None, sampling="random",
                 clips=1, max_pixels=None) -> list:
    """The clips of encoded ``data`` (see :func:`clip_indices`) as lists of ``(H, W, 3)``
    uint8 RGB frames, the container opened once.

    Raises:
        DecodeError: not a readable video, a sample over ``max_pixels`` (``clips`` x
            ``frames_per_clip`` x width x height, checked against the stream header before
            anything is decoded), frames missing (a truncated or corrupt file), or a file
            whose frames cannot be numbered safely.
        ValueError: bad clip arguments.
    """
    limit = pixel_limit(max_pixels)
    video = _Video(data)
    try:
        tl = video.timeline
        _check_clip(int(frames_per_clip) * int(clips), tl.width, tl.height, limit)
        chosen = clip_indices(len(tl), frames_per_clip, stride, rng=rng,
                              sampling=sampling, clips=clips)
        frames = _frames(video, [i for c in chosen for i in c], limit)
        return [[frames[i] for i in c] for c in chosen]
    finally:
        video.close()


def _frames(video, indices, limit):
    """The frames ``indices`` of an open video; its timeline built again once when the
    packets read disagree with a kept one."""
    try:
        return _decode(video, indices, limit)
    except _Mismatch:
        if video.fresh:
            raise DecodeError(_NOT_DETERMINISTIC) from None
    video.rebuild()
    try:
        return _decode(video, indices, limit)
    except _Mismatch:
        raise DecodeError(_NOT_DETERMINISTIC) from None


def _decode(video, indices, limit):
    from av.video.reformatter import VideoReformatter

    tl = video.timeline
    want = sorted(set(int(i) for i in indices))
    present = [i for i in want if 0 <= i < len(tl)]  # the others are missing frames
    got = {}
    if present:
        wanted = set(tl.packet_of[present].tolist())  # their packets' positions
        last = max(wanted)
        width, height = tl.width, tl.height
        # one converter for every frame: a new one per frame (PyAV's to_ndarray(format=...))
        # sets up swscale and its slice threads for each frame, more than the decode costs
        # at small sizes; threads=1 converts the same pixels without them
        rgb = VideoReformatter()
        cc = None
        seen = -1  # the last frame out of the decoder, in the timeline's numbering
        try:
            for j, packet in video.packets_from(tl.start(present)):
                if cc is None:
                    cc = video.container.streams.video[0].codec_context
                    if not cc.is_open:  # (open when the file's first packets were probed)
                        cc.thread_count = 1  # parallelism belongs to the loader
                        cc.copy_opaque = True  # each frame carries its packet's position
                    skip = None
                if (j not in wanted) is not skip:  # set only when it changes (a string)
                    skip = j not in wanted
                    cc.skip_frame = "NONREF" if skip else "DEFAULT"
                # a new object per packet: PyAV keys opaque values by id(), and a small int
                # is one object shared by every thread (its entry dropped by the first free)
                packet.opaque = (j,)
                frames = cc.decode(packet)
                if j >= last:  # every frame of the clip is in: the decoder's delayed ones
                    cc.skip_frame = "DEFAULT"
                    frames = [*frames, *cc.decode(None)]
                for frame in frames:
                    seen = _take(tl, frame, seen, wanted, got, rgb, width, height, limit)
                if j >= last or len(got) == len(present):
                    break
        except (DecodeError, _Mismatch):
            raise
        except Exception as exc:  # FFmpeg's errors mid-stream
            raise DecodeError(f"cannot decode video frames {want[0]}..{want[-1]}: "
                              f"{exc}") from None
    missing = [i for i in want if i not in got]
    if missing:
        raise DecodeError(f"video frames {missing[:4]}{'...' if len(missing) > 4 else ''} "
                          f"are missing (a truncated or corrupt file)")
    return got


def _take(tl, frame, seen, wanted, got, rgb, width, height, limit) -> int:
    """Keep ``frame`` in ``got`` (by frame index) when its packet is ``wanted``; the frame
    index of the frame, which must come after ``seen``'s (the decoder outputs in the
    timeline's order, or the file cannot be numbered safely)."""
    j = frame.opaque
    j = j[0] if isinstance(j, tuple) else -1
    i = int(tl.frame_of[j]) if 0 <= j < tl.packets else -1
    if i < 0:
        return seen  # a frame the timeline does not number (not output front to back)
    if i <= seen:
        raise DecodeError(
            f"the decoder outputs frame {i} after frame {seen}: the video's timestamps do "
            f"not give its frames' order, so its frames cannot be numbered safely")
    if j in wanted:
        # a size change mid-stream
        check_pixels(frame.height, frame.width, limit, what="Video frame")
        if frame.width != width or frame.height != height:  # scaled to the stream's size
            out = rgb.reformat(frame, format="rgb24", width=width, height=height, threads=1)
        else:
            out = rgb.reformat(frame, format="rgb24", threads=1)
        # a view of the converted frame's pixels (PyAV pads rows only when it must)
        got[i] = out.to_ndarray()
    return i
