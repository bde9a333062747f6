"""Video clips: VideoDataset against torchcodec and PyAV, each plus torchvision v2, same run.

    python benchmarks/bench_video.py                       # H.264 with B-frames, 24 videos
    python benchmarks/bench_video.py --codec mpeg4 --videos 48 --frames-per-clip 16 --stride 2
    python benchmarks/bench_video.py --long 10             # one 10-minute file: ms and MB per clip
    python benchmarks/setup_envs.py torchcodec             # once: torchcodec's own venv

By default every turboloader clip is its file's first in the process (the timelines are
cleared before each round: a dataset larger than the per-worker timeline cache); ``--warm``
keeps them between rounds (a file seen again by the same worker).

``--long MINUTES`` makes one file that long (kept in the temp folder) and decodes
``--clips`` random clips of it in a fresh process per system, each clip with a new decoder
as a dataset's ``__getitem__`` does: turboloader's ``decode_frames``, PyAV's seek and decode
(below), torchcodec's ``VideoDecoder`` with ``seek_mode="exact"`` (it scans the file) and
``"approximate"`` (it trusts the header's index). Printed: the first clip's ms (where
turboloader builds the file's timeline), the median ms of the others, the peak resident
memory above the memory before the first clip (the file's bytes already read), and the
time ratios.

Every system decodes the same clips (per video and round, the frame indices that
``VideoDataset`` draws: ``clip_indices(n, T, stride, rng=sample_rng(seed, round, video))``)
of the same videos, one thread each, and applies the train recipe at 112 px:
RandomResizedCrop + flip + float + Normalize, one set of parameters per clip.

- ``torchcodec+torchvision``: ``torchcodec.decoders.VideoDecoder(bytes,
  seek_mode="exact", num_ffmpeg_threads=1).get_frames_at(indices)`` -> ``(T, C, H, W)`` uint8
  -> ``torchvision.transforms.v2``. torchcodec runs in its own venv
  (``benchmarks/.venv-torchcodec``, torch shared) as a subprocess started once per round; its
  clock covers only its decode loop. It needs the system's FFmpeg libraries (Debian:
  ``apt-get install ffmpeg``); without the venv its row says so.
- ``pyav+torchvision``: ``av.open`` -> seek to the clip's first frame -> decode forward,
  ``frame.to_ndarray(format="rgb24")`` for the clip's frames -> ``(T, C, H, W)`` -> v2, as a
  PyAV user writes it.
- ``turboloader``: ``turboloader.VideoDataset`` over a TAR shard of the same videos (the peers
  get the bytes from memory), its fused per-frame pipeline with shared draws.
- ``decode only (limit)``: what FFmpeg's decoder alone costs for the clip, the floor of every
  row: open the container, number the frames from its packets, decode the frames the clip
  needs (turboloader's path: the reference frames from the key frame on, and the clip's),
  nothing converted to RGB or transformed.

Checked in the same run, before timing: the decoded uint8 frames (no transform) of every
clip, ours against each peer's (bit-equal frames counted, the largest difference printed), and
after ``Resize(128) + CenterCrop(112)`` (uint8), ours against torchvision v2's antialiased
resize of torchcodec's frames (the largest difference in levels and the share of values
that differ).

The videos are generated (moving gradients and noise): ``--codec h264`` (libx264, 3 B-frames
with x264's B-pyramid, as most camera and web video has) or ``mpeg4`` (MPEG-4 Part 2, no
B-frames), a key frame every ``--gop`` frames. Printed: clips/s, frames/s and the ratio of
each row to each peer (the median of ``--rounds``), with the machine.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
TORCHCODEC_PY = Path(__file__).resolve().parent / ".venv-torchcodec" / "bin" / "python"
MEAN, STD = (0.43, 0.4, 0.37), (0.23, 0.22, 0.22)


def make_video(k, n, w, h, codec="h264", gop=16):
    import av

    buf = io.BytesIO()
    c = av.open(buf, "w", format="mp4")
    if codec == "h264":
        # b-adapt=0: three B-frames between references, as x264 chooses on natural video
        # (on these synthetic gradients its adaptive choice picks almost none)
        s = c.add_stream("libx264", rate=25, options={"bf": "3", "preset": "fast",
                                                      "x264-params": "b-adapt=0"})
    else:
        s = c.add_stream("mpeg4", rate=25)
    s.width, s.height, s.pix_fmt = w, h, "yuv420p"
    s.codec_context.gop_size = gop
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


def v2_train():
    import torch
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomResizedCrop(112, antialias=True), v2.RandomHorizontalFlip(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def v2_resize():
    from torchvision.transforms import v2

    return v2.Compose([v2.Resize(128, antialias=True), v2.CenterCrop(112)])


def read_tar(path):
    with tarfile.open(path) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers()
                if m.name.endswith(".mp4")}


# -- peers ---------------------------------------------------------------------------------

def pyav_clip(data, idx):
    """The clip's frames as PyAV users decode them: seek by time, decode forward."""
    import av
    import torch

    with av.open(io.BytesIO(data)) as c:
        vs = c.streams.video[0]
        rate, tb, start = vs.average_rate, vs.time_base, vs.start_time or 0
        c.seek(start + int(idx[0] / rate / tb), stream=vs, backward=True)
        frames, want = {}, set(idx)
        for f in c.decode(vs):
            i = int(round(float((f.pts - start) * tb * rate)))
            if i in want:
                frames[i] = f.to_ndarray(format="rgb24")
            if i >= idx[-1]:
                break
    return torch.from_numpy(np.stack([frames[i] for i in idx])).permute(0, 3, 1, 2)


def pyav_run(videos, clips, seed):
    import torch

    torch.manual_seed(seed)
    tf = v2_train()
    return sum(tf(pyav_clip(videos[name], idx)).shape[0] for name, idx in clips.items())


def torchcodec_clip(data, idx):
    from torchcodec.decoders import VideoDecoder

    dec = VideoDecoder(data, seek_mode="exact", num_ffmpeg_threads=1,
                       dimension_order="NCHW")
    return dec.get_frames_at(idx).data


def torchcodec_child(job):
    """In torchcodec's venv: ``time`` (decode + v2 on every clip, the loop's seconds) or
    ``frames`` (the decoded uint8 clips, plain and resized, saved for the parent)."""
    import torch

    torch.set_num_threads(1)
    spec = json.loads(Path(job).read_text())
    videos = read_tar(spec["tar"])
    clips = spec["clips"]
    if spec["mode"] == "frames":
        tf = v2_resize()
        plain = {n: torchcodec_clip(videos[n], idx).numpy() for n, idx in clips.items()}
        np.savez(spec["out"], **{f"plain/{n}": a for n, a in plain.items()},
                 **{f"resized/{n}": tf(torch.from_numpy(a)).numpy() for n, a in plain.items()})
        return
    torch.manual_seed(spec["seed"])
    tf = v2_train()
    torchcodec_clip(videos[next(iter(clips))], [0])  # load FFmpeg before the clock
    t = time.perf_counter()
    frames = sum(tf(torchcodec_clip(videos[n], idx)).shape[0] for n, idx in clips.items())
    print(json.dumps({"seconds": time.perf_counter() - t, "frames": frames}))


def torchcodec_call(tmp, spec):
    job = Path(tmp) / "job.json"
    job.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([str(TORCHCODEC_PY), __file__, "--torchcodec-child", str(job)],
                       capture_output=True, text=True, env=env, cwd=tmp)
    if p.returncode:
        raise RuntimeError(f"torchcodec failed: {p.stderr.strip().splitlines()[-1:]}")
    return p.stdout


def torchcodec_status():
    if not TORCHCODEC_PY.exists():
        return "no benchmarks/.venv-torchcodec: run python benchmarks/setup_envs.py torchcodec"
    failed = TORCHCODEC_PY.parent.parent / "FAILED"
    return failed.read_text().strip() if failed.exists() else None


def limit_run(videos, clips):
    """The decoder's limit: open, number the frames, and decode what the clip needs (the
    reference frames from the key frame on and the clip's own), nothing converted or
    transformed; turboloader's decode path without its last two steps."""
    from turboloader.decode import video as V

    frames = 0
    for name, idx in clips.items():
        video = V._Video(videos[name])
        try:
            tl = video.timeline
            want = sorted(set(idx))
            wanted = set(tl.packet_of[want].tolist())
            last, cc = max(wanted), None
            for j, packet in video.packets_from(tl.start(want)):
                if cc is None:
                    cc = video.container.streams.video[0].codec_context
                    cc.thread_count = 1
                cc.skip_frame = "DEFAULT" if j in wanted else "NONREF"
                cc.decode(packet)
                if j >= last:
                    cc.skip_frame = "DEFAULT"
                    cc.decode(None)
                    break
            frames += len(idx)
        finally:
            video.close()
    return frames


# -- ours ----------------------------------------------------------------------------------

def ours_run(path, a, epoch, tf="train"):
    import turboloader
    from turboloader import transforms as T

    if tf == "train":
        tf = T.Compose([T.RandomResizedCrop(112), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize(MEAN, STD)])
    ds = turboloader.VideoDataset(path, tf, frames_per_clip=a.frames_per_clip,
                                  stride=a.stride, shuffle=False, seed=a.seed)
    ds.set_epoch(epoch)
    return list(ds)


def clips_of(names, lengths, a, epoch):
    from turboloader.decode.video import clip_indices
    from turboloader.transforms import sample_rng

    return {n: clip_indices(lengths[n], a.frames_per_clip, a.stride,
                            rng=sample_rng(a.seed, epoch, k))[0]
            for k, n in enumerate(names)}


def check(path, videos, names, lengths, a, tmp, have_tc):
    """Decoded frames of the round-0 clips: ours against each peer."""
    from turboloader import transforms as T

    clips = clips_of(names, lengths, a, 0)
    ours = {n: clip.numpy() for n, (clip, _) in zip(names, ours_run(path, a, 0, tf=None))}
    resized = {n: clip.numpy() for n, (clip, _) in zip(
        names, ours_run(path, a, 0, tf=T.Compose([T.Resize(128), T.CenterCrop(112),
                                                  T.PILToTensor()])))}
    lines = []

    def compare(label, peer, mine):
        frames = sum(len(peer[n]) for n in names)
        equal = sum(int(np.array_equal(p, m)) for n in names
                    for p, m in zip(peer[n], mine[n]))
        diff = max(int(np.abs(peer[n].astype(int) - mine[n]).max()) for n in names)
        share = np.mean([np.mean(peer[n] != mine[n]) for n in names])
        lines.append(f"  {label}: {equal}/{frames} frames bit-equal, max |diff| {diff}, "
                     f"{share:.2%} of values differ")

    compare("decoded, ours vs pyav", {n: pyav_clip(videos[n], idx).numpy()
                                      for n, idx in clips.items()}, ours)
    if have_tc:
        out = Path(tmp) / "tc_frames.npz"
        torchcodec_call(tmp, {"tar": path, "clips": clips, "mode": "frames", "out": str(out)})
        z = np.load(out)
        compare("decoded, ours vs torchcodec", {n: z[f"plain/{n}"] for n in names}, ours)
        compare("Resize(128)+CenterCrop(112) uint8, ours vs v2 on torchcodec's frames",
                {n: z[f"resized/{n}"] for n in names}, resized)
    return lines


# -- one long file: per-clip time and memory -----------------------------------------------

LONG_SYSTEMS = ("turboloader", "pyav", "torchcodec-exact", "torchcodec-approximate")


def rss_bytes() -> int:
    """This process's resident memory now (Linux: /proc/self/statm)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def long_clip(system, data, idx):
    """One clip of ``data`` as ``(T, C, H, W)`` uint8, the way each system's user decodes a
    clip from a file's bytes in a dataset's ``__getitem__`` (a new decoder per clip)."""
    import torch

    if system == "turboloader":
        from turboloader.decode.video import decode_frames

        got = decode_frames(data, idx)
        return torch.from_numpy(np.stack([got[i] for i in idx])).permute(0, 3, 1, 2)
    if system == "pyav":
        return pyav_clip(data, idx)
    from torchcodec.decoders import VideoDecoder

    dec = VideoDecoder(data, seek_mode=system.split("-")[1], num_ffmpeg_threads=1,
                       dimension_order="NCHW")
    return dec.get_frames_at(idx).data


def long_child(job):
    """In a fresh process (torchcodec's in its venv): the file's bytes read, then each clip
    decoded and timed; prints the first clip's seconds (turboloader builds the file's
    timeline there), the median of the others, and the peak resident memory above the
    memory before the first clip."""
    import torch

    torch.set_num_threads(1)
    spec = json.loads(Path(job).read_text())
    if spec["system"] == "turboloader":
        sys.path.insert(0, str(REPO))
    data = Path(spec["path"]).read_bytes()
    import av  # noqa: F401  (loaded before the baseline, as every system's libraries)
    if spec["system"].startswith("torchcodec"):
        import torchcodec.decoders  # noqa: F401
    elif spec["system"] == "turboloader":
        import turboloader.decode.video  # noqa: F401
    base = rss_bytes()
    times = []
    for idx in spec["clips"]:
        t = time.perf_counter()
        clip = long_clip(spec["system"], data, idx)
        times.append(time.perf_counter() - t)
        del clip
    print(json.dumps({"first": times[0], "median": float(np.median(times[1:])),
                      "peak": peak_rss_bytes() - base}))


def long_run(system, path, clips, tmp):
    job = Path(tmp) / f"long-{system}.json"
    job.write_text(json.dumps({"system": system, "path": str(path), "clips": clips}))
    py = str(TORCHCODEC_PY) if system.startswith("torchcodec") else sys.executable
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([py, __file__, "--long-child", str(job)], capture_output=True,
                       text=True, env=env, cwd=tmp)
    if p.returncode:
        raise RuntimeError(f"{system} failed: {p.stderr.strip().splitlines()[-1:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def long_main(a, w, h):
    """``--long MINUTES``: one file of that length (made once, kept in the temp folder),
    ``--clips`` random clips of it decoded by each system in its own process."""
    import av

    from turboloader.decode.video import clip_indices, decode_frames, video_info
    from turboloader.transforms import sample_rng

    frames = int(a.long * 60 * 25)
    path = Path(tempfile.gettempdir()) / (f"bench-video-long-{a.codec}-{w}x{h}-gop{a.gop}-"
                                          f"{frames}.mp4")
    if not path.exists():
        t = time.perf_counter()
        path.write_bytes(make_video(0, frames, w, h, a.codec, a.gop))
        print(f"made {path} in {time.perf_counter() - t:.0f} s")
    data = path.read_bytes()
    n = video_info(data)[0]
    clips = [clip_indices(n, a.frames_per_clip, a.stride, rng=sample_rng(a.seed, 0, k))[0]
             for k in range(a.clips)]
    print(f"machine: {machine()}; one {a.long:g}-minute {w}x{h} {a.codec} video ({n} frames, "
          f"key frame every {a.gop}, {len(data) / 1e6:.1f} MB), {a.clips} random clips of "
          f"{a.frames_per_clip} frames stride {a.stride}, each system in its own process, "
          f"1 thread; FFmpeg: PyAV {av.__version__} ({av.ffmpeg_version_info})")
    checked = clips[:4]
    equal = sum(int(np.array_equal(np.stack([decode_frames(data, c)[i] for i in c]),
                                   pyav_clip(data, c).permute(0, 2, 3, 1).numpy()))
                for c in checked)
    print(f"equality: {equal}/{len(checked)} clips bit-equal, turboloader vs pyav")
    tc_missing = torchcodec_status()
    systems = [s for s in LONG_SYSTEMS if not (tc_missing and s.startswith("torchcodec"))]
    clip_mb = a.frames_per_clip * w * h * 3 / 1e6
    tmp = tempfile.mkdtemp(prefix="bench-video-long-")
    got = {s: long_run(s, path, clips, tmp) for s in systems}
    peers = [s for s in systems if s != "turboloader"]
    print(f"{'system':24s} {'first ms':>9s} {'clip ms':>8s} {'peak MB':>8s} "
          + " ".join(f"{'t vs ' + p:>28s}" for p in peers))
    for s in systems:
        g = got[s]
        print(f"{s:24s} {g['first'] * 1e3:9.1f} {g['median'] * 1e3:8.1f} "
              f"{g['peak'] / 1e6:8.1f} "
              + " ".join(f"{g['median'] / got[p]['median']:28.2f}" for p in peers))
    print(f"(a clip's frames: {clip_mb:.1f} MB; 'first': the first clip, where turboloader "
          f"builds the file's timeline; 'clip': the median of the other {a.clips - 1})")
    if tc_missing:
        print(f"torchcodec: not run ({tc_missing})")


def machine():
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--videos", type=int, default=24)
    ap.add_argument("--frames", type=int, default=64, help="frames per video")
    ap.add_argument("--size", default="320x240")
    ap.add_argument("--codec", choices=("h264", "mpeg4"), default="h264")
    ap.add_argument("--gop", type=int, default=16, help="frames from one key frame to the next")
    ap.add_argument("--frames-per-clip", type=int, default=16)
    ap.add_argument("--stride", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--long", type=float, default=0,
                    help="minutes: per-clip time and memory on one file that long")
    ap.add_argument("--clips", type=int, default=21, help="clips of the long file")
    ap.add_argument("--warm", action="store_true",
                    help="keep each file's timeline between rounds (default: every clip is "
                         "its file's first in the process, as in a dataset larger than "
                         "turboloader's timeline cache)")
    ap.add_argument("--torchcodec-child", help=argparse.SUPPRESS)
    ap.add_argument("--long-child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torchcodec_child:
        return torchcodec_child(a.torchcodec_child)
    if a.long_child:
        return long_child(a.long_child)
    import av

    if a.codec == "h264" and "libx264" not in av.codecs_available:
        ap.error("this PyAV has no libx264 encoder: use --codec mpeg4")
    sys.path.insert(0, str(REPO))
    import torch

    from turboloader.decode.video import clear_timelines, video_info

    torch.set_num_threads(1)
    w, h = (int(v) for v in a.size.split("x"))
    if a.long:
        return long_main(a, w, h)
    names = [f"v{k:04d}.mp4" for k in range(a.videos)]
    videos = {n: make_video(k, a.frames, w, h, a.codec, a.gop) for k, n in enumerate(names)}
    lengths = {n: video_info(d)[0] for n, d in videos.items()}
    tmp = tempfile.mkdtemp(prefix="bench-video-")
    path = os.path.join(tmp, "videos.tar")
    with tarfile.open(path, "w") as tf:
        for k, n in enumerate(names):
            for name, payload in ((n, videos[n]), (f"v{k:04d}.cls", str(k).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload))
    tc_missing = torchcodec_status()
    print(f"machine: {machine()}; {a.videos} videos {w}x{h} {a.codec} (key frame every "
          f"{a.gop}), {a.frames} frames, clips of {a.frames_per_clip} frames stride "
          f"{a.stride}, 1 thread, {a.rounds} rounds (median); turboloader's timelines "
          f"{'kept between rounds' if a.warm else 'cleared before each round (every clip cold)'}")
    print("equality (round 0's clips):")
    for line in check(path, videos, names, lengths, a, tmp, tc_missing is None):
        print(line)
    systems = ["torchcodec+torchvision", "pyav+torchvision", "turboloader",
               "decode only (limit)"]
    if tc_missing:
        systems.remove("torchcodec+torchvision")
    rates = {s: [] for s in systems}
    for r in range(a.rounds):
        clips = clips_of(names, lengths, a, r)
        for name in (systems if r % 2 == 0 else systems[::-1]):
            if name == "torchcodec+torchvision":
                got = json.loads(torchcodec_call(tmp, {"tar": path, "clips": clips,
                                                       "mode": "time", "seed": r}))
                dt, frames = got["seconds"], got["frames"]
            else:
                if not a.warm:  # every clip a file's first in this process (a large dataset)
                    clear_timelines()
                t = time.perf_counter()
                if name == "pyav+torchvision":
                    frames = pyav_run(videos, clips, r)
                elif name == "decode only (limit)":
                    frames = limit_run(videos, clips)
                else:
                    frames = sum(clip.shape[0] for clip, _ in ours_run(path, a, r))
                dt = time.perf_counter() - t
            rates[name].append((a.videos / dt, frames / dt))
    med = {n: (float(np.median([c for c, _ in g])), float(np.median([f for _, f in g])))
           for n, g in rates.items()}
    peers = [p for p in systems if p != "turboloader"]
    print(f"{'system':24s} {'clips/s':>8s} {'frames/s':>9s} "
          + " ".join(f"{'vs ' + p.split('+')[0].split(' ')[0]:>14s}" for p in peers))
    for name in systems:
        c, f = med[name]
        print(f"{name:24s} {c:8.1f} {f:9.1f} "
              + " ".join(f"{c / med[p][0]:14.2f}" for p in peers))
    if tc_missing:
        print(f"torchcodec+torchvision: not run ({tc_missing})")


if __name__ == "__main__":
    main()
