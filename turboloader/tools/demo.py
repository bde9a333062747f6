"""``turboloader demo``: the main job, on data generated on the spot.

Generates photograph-like JPEGs, writes them as WebDataset TAR shards and as an
ImageFolder tree, and runs the ImageNet train pipeline (RandomResizedCrop(224), flip,
ToTensor, Normalize; batches with labels) through:

* torchvision ``ImageFolder`` + transforms v2 + ``torch.utils.data.DataLoader`` (baseline),
* ``turboloader.TarDataset`` through the same torch DataLoader (worker processes),
* the same through turboloader's thread backend,
* the thread backend again in a second epoch served by the decoded-sample cache.

It checks samples against torchvision on the same crop parameters, prints images/s with
the ratio to the baseline, the loader's stage table and the dataset's counters.
"""

import os
import platform
import tempfile
import time

import numpy as np

__all__ = ["cpu_model", "run_demo"]

_SIZE = 224


def cpu_model():
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _write_data(root, samples, shard_size):
    """TAR shards (``<key>.jpg`` + ``<key>.cls``) and an ImageFolder tree of the same images."""
    import io
    import tarfile

    shards = []
    for start in range(0, len(samples), shard_size):
        path = os.path.join(root, f"train-{start // shard_size:05d}.tar")
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, (data, label) in enumerate(samples[start:start + shard_size], start):
                for name, payload in ((f"{i:06d}.jpg", data), (f"{i:06d}.cls", str(label).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
        shards.append(path)
    folder = os.path.join(root, "folder")
    for i, (data, label) in enumerate(samples):
        os.makedirs(os.path.join(folder, f"class_{label:02d}"), exist_ok=True)
        with open(os.path.join(folder, f"class_{label:02d}", f"{i:06d}.jpg"), "wb") as f:
            f.write(data)
    return shards, folder


def _epoch(loader, label_of=None):
    """(images/s, labels seen) of one pass."""
    labels = []
    t0 = time.perf_counter()
    for images, target in loader:
        assert images.shape[1:] == (3, _SIZE, _SIZE), images.shape
        labels += target.tolist() if label_of is None else [label_of[t] for t in target.tolist()]
    return len(labels) / (time.perf_counter() - t0), labels


def run_demo(num_images=512, seed=0, workers=None, batch_size=64, epochs=2, print=print):
    """Run the demo and print its report; return 0 on success, 1 if a check failed."""
    import io

    import PIL
    import torch
    import torchvision
    from PIL import Image
    from torchvision.transforms import v2
    from torchvision.transforms.v2 import functional as F

    from turboloader import transforms as T
    from turboloader._version import __version__
    from turboloader.data import TarDataset
    from turboloader.decode import decode_jpeg_header
    from turboloader.loader import DataLoader, format_stats
    from turboloader.tools.synthetic import synthetic_jpegs
    from turboloader.transforms import sample_rng
    from turboloader.transforms.presets import IMAGENET_MEAN as MEAN
    from turboloader.transforms.presets import IMAGENET_STD as STD

    workers = workers or min(os.cpu_count() or 1, 8)
    t0 = time.perf_counter()
    samples = synthetic_jpegs(num_images, seed=seed)
    headers = [decode_jpeg_header(b) for b, _ in samples]
    print(f"turboloader {__version__} demo: {num_images} photograph-like JPEGs "
          f"(mean {sum(h.width for h in headers) / num_images:.0f}x"
          f"{sum(h.height for h in headers) / num_images:.0f}, "
          f"{sum(len(b) for b, _ in samples) / num_images / 1024:.0f} KB), "
          f"generated in {time.perf_counter() - t0:.1f} s")
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; Python {platform.python_version()}, "
          f"Pillow {PIL.__version__}, torch {torch.__version__}, torchvision {torchvision.__version__}")
    print(f"pipeline: RandomResizedCrop({_SIZE}) + RandomHorizontalFlip + ToTensor + Normalize, "
          f"batch {batch_size}, {workers} workers, labels\n")

    ours = T.Compose([T.RandomResizedCrop(_SIZE), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])
    theirs = v2.Compose([v2.RandomResizedCrop(_SIZE), v2.RandomHorizontalFlip(), v2.ToImage(),
                         v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])

    # Agreement first: a fast wrong answer is not a result. Same crop parameters on both
    # sides. turboloader resamples with Pillow's arithmetic; torchvision's uint8 tensor
    # kernel rounds its 16-bit weights differently: within one uint8 level (0.0175
    # normalized) almost everywhere, two at rare pixels.
    exact = T.plan(ours, dct_scaling=False)
    worst = 0.0
    for i in range(min(num_images, 32)):
        data = samples[i][0]
        got = exact.from_jpeg(data, rng=sample_rng(seed, 0, i)).numpy()
        rng = sample_rng(seed, 0, i)  # the same draws, in the Compose's order
        p = ours.transforms[0].make_params((headers[i].height, headers[i].width), rng=rng)
        flip = ours.transforms[1].make_params(rng=rng)["flip"]
        img = F.pil_to_tensor(Image.open(io.BytesIO(data)).convert("RGB"))
        ref = F.resized_crop(img, p["top"], p["left"], p["height"], p["width"], [_SIZE, _SIZE],
                             antialias=True)
        ref = F.horizontal_flip(ref) if flip else ref
        ref = F.normalize(F.to_dtype(ref, torch.float32, scale=True), MEAN, STD).numpy()
        worst = max(worst, float(np.abs(got - ref).max()))
    print(f"check: turboloader vs torchvision v2 on the same crops, max |diff| {worst:.4f} "
          f"(one uint8 level = 0.0175)")
    ok = worst <= 0.036

    rows = []
    with tempfile.TemporaryDirectory(prefix="turboloader-demo-") as root:
        shards, folder = _write_data(root, samples, shard_size=max(1, num_images // 8))

        def timed(name, loader, passes, set_epoch=None, label_of=None):
            rate = 0.0
            for e in range(passes):
                if set_epoch is not None:
                    set_epoch(e)
                rate, labels = _epoch(loader, label_of)
            if sorted(labels) != sorted(label for _, label in samples):
                print(f"FAILED: {name} did not deliver every sample exactly once")
                nonlocal_ok[0] = False
            rows.append((name, rate))
            return loader

        nonlocal_ok = [ok]
        folder_ds = torchvision.datasets.ImageFolder(folder, theirs)
        base = torch.utils.data.DataLoader(folder_ds, batch_size=batch_size, shuffle=True,
                                           num_workers=workers, persistent_workers=True)
        timed("torchvision ImageFolder + v2, torch DataLoader", base, epochs,
              label_of=[int(c.split("_")[1]) for c in folder_ds.classes])

        ds = TarDataset(shards, ours, seed=seed)
        procs = DataLoader(ds, batch_size=batch_size, num_workers=workers,
                           backend="processes", persistent_workers=True)
        timed("turboloader TarDataset, worker processes", procs, epochs, ds.set_epoch)

        ds = TarDataset(shards, ours, seed=seed)
        threads = DataLoader(ds, batch_size=batch_size, num_workers=workers, backend="threads")
        timed("turboloader TarDataset, thread backend", threads, epochs, threads.set_epoch)
        stage_table = format_stats(threads.stats())

        cached = TarDataset(shards, ours, seed=seed, cache="1GB")
        cl = DataLoader(cached, batch_size=batch_size, num_workers=workers, backend="threads")
        timed("turboloader, thread backend, epoch 2 from the cache", cl, 2, cl.set_epoch)
        counters = cached.stats(epoch=1)

    base_rate = rows[0][1]
    width = max(len(r[0]) for r in rows)
    print(f"\n{'loader (last of ' + str(epochs) + ' epochs)':<{width}}  {'images/s':>9}  "
          f"{'vs torchvision':>14}")
    for name, rate in rows:
        print(f"{name:<{width}}  {rate:9.0f}  {rate / base_rate:13.2f}x")
    print(f"\nstage table of the thread backend's last epoch:\n{stage_table}")
    print(f"\nepoch 2 with cache: {counters['samples']} samples, {counters['cache_hits']} cache "
          f"hits, {counters['cache_misses']} misses, {counters['cache_bytes'] / 2**20:.0f} MiB "
          f"held; decode {counters['decode_s']:.2f} s, transform {counters['transform_s']:.2f} s")
    print("\nevery loader delivered every sample exactly once per epoch, with its label"
          if nonlocal_ok[0] else "\nFAILED: see above")
    return 0 if nonlocal_ok[0] else 1
