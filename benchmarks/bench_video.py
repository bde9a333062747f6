"""Video clips: VideoDataset against PyAV alone plus torchvision v2 transforms, same run.

    python benchmarks/bench_video.py                  # 24 generated videos, 320x240, 64 frames
    python benchmarks/bench_video.py --videos 48 --frames-per-clip 16 --stride 2

Both sides decode the same clips (a random start per video, ``frames_per_clip`` frames
``stride`` apart, after a seek to the key frame before the clip) of the same videos, in one
process, and apply the train recipe at 112 px: RandomResizedCrop + flip + float + Normalize,
one set of parameters per clip.

- ``pyav+torchvision``: ``av.open`` -> seek -> decode the frames -> a ``(T, C, H, W)`` uint8
  tensor -> ``torchvision.transforms.v2`` on it (torchvision's video semantics);
- ``turboloader``: ``turboloader.VideoDataset`` over a TAR shard of the same videos (seeking
  decode through PyAV, then the fused per-frame pipeline with shared draws).

The videos are generated (moving gradients and noise, MPEG-4 Part 2, a key frame every 16
frames): no video data ships with the benchmark machines. Printed: clips/s, frames/s and the
ratio, with the machine.
"""
from __future__ import annotations

import argparse
import io
import os
import platform
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
MEAN, STD = (0.43, 0.4, 0.37), (0.23, 0.22, 0.22)


def make_video(k, n, w, h):
    import av

    buf = io.BytesIO()
    c = av.open(buf, "w", format="mp4")
    s = c.add_stream("mpeg4", rate=25)
    s.width, s.height, s.pix_fmt = w, h, "yuv420p"
    s.codec_context.gop_size = 16
    s.bit_rate = 1_500_000
    rng = np.random.default_rng(k)
    yy, xx = np.mgrid[0:h, 0:w]
    noise = rng.integers(0, 40, (h, w, 3))
    for i in range(n):
        arr = np.stack([(xx + 3 * i + k * 7) % 256, (yy + 2 * i) % 256,
                        (xx // 2 + yy // 2 + i * 5) % 256], -1) + noise
        f = av.VideoFrame.from_ndarray(np.clip(arr, 0, 255).astype(np.uint8), format="rgb24")
        for p in s.encode(f):
            c.mux(p)
    for p in s.encode():
        c.mux(p)
    c.close()
    return buf.getvalue()


def baseline(videos, a, seed):
    import av
    import torch
    from torchvision.transforms import v2

    from turboloader.decode.video import clip_indices

    tf = v2.Compose([v2.RandomResizedCrop(112, antialias=True), v2.RandomHorizontalFlip(),
                     v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    rng = np.random.default_rng(seed)
    out = 0
    for data in videos:
        with av.open(io.BytesIO(data)) as c:
            vs = c.streams.video[0]
            n, rate, tb = vs.frames, vs.average_rate, vs.time_base
            (idx,) = clip_indices(n, a.frames_per_clip, a.stride, rng=rng)
            c.seek(int(idx[0] / rate / tb), stream=vs, backward=True)
            frames, want = {}, set(idx)
            for f in c.decode(vs):
                i = int(round(float(f.pts * tb * rate)))
                if i in want:
                    frames[i] = f.to_ndarray(format="rgb24")
                if i >= idx[-1]:
                    break
        clip = torch.from_numpy(np.stack([frames[i] for i in idx])).permute(0, 3, 1, 2)
        out += tf(clip).shape[0]
    return out


def ours(path, a, epoch):
    import turboloader
    from turboloader import transforms as T

    tf = T.Compose([T.RandomResizedCrop(112), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(MEAN, STD)])
    ds = turboloader.VideoDataset(path, tf, frames_per_clip=a.frames_per_clip,
                                  stride=a.stride, shuffle=False)
    ds.set_epoch(epoch)
    return sum(clip.shape[0] for clip, _ in ds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--videos", type=int, default=24)
    ap.add_argument("--frames", type=int, default=64, help="frames per video")
    ap.add_argument("--size", default="320x240")
    ap.add_argument("--frames-per-clip", type=int, default=16)
    ap.add_argument("--stride", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    sys.path.insert(0, str(REPO))
    import torch

    torch.set_num_threads(1)
    w, h = (int(v) for v in a.size.split("x"))
    videos = [make_video(k, a.frames, w, h) for k in range(a.videos)]
    tmp = tempfile.mkdtemp(prefix="bench-video-")
    path = os.path.join(tmp, "videos.tar")
    with tarfile.open(path, "w") as tf:
        for k, data in enumerate(videos):
            for name, payload in ((f"v{k:04d}.mp4", data), (f"v{k:04d}.cls", str(k).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload))
    rates = {"pyav+torchvision": [], "turboloader": []}
    for r in range(a.rounds):
        for name in (rates if r % 2 == 0 else reversed(list(rates))):
            t = time.perf_counter()
            frames = baseline(videos, a, r) if name == "pyav+torchvision" else ours(path, a, r)
            dt = time.perf_counter() - t
            rates[name].append((a.videos / dt, frames / dt))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"{a.videos} videos {w}x{h}, {a.frames} frames, clips of {a.frames_per_clip} "
          f"frames stride {a.stride}, 1 thread, {a.rounds} rounds (median)")
    base = float(np.median([c for c, _ in rates["pyav+torchvision"]]))
    print(f"{'system':18s} {'clips/s':>9s} {'frames/s':>9s} {'ratio':>6s}")
    for name, got in rates.items():
        clips = float(np.median([c for c, _ in got]))
        frames = float(np.median([f for _, f in got]))
        print(f"{name:18s} {clips:9.1f} {frames:9.1f} {clips / base:6.2f}")


if __name__ == "__main__":
    main()
