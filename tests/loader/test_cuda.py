"""On a CUDA device: PrefetchLoader's pinned, non-blocking copies on a side stream and its
normalize, and decode="gpu" (nvJPEG + torchvision's CUDA kernels) against the CPU path.

Every test here is marked ``cuda``: skipped, with the reason, where torch sees no CUDA device
(tests/conftest.py); ``benchmarks/gpu_check.sh`` runs them on a GPU machine. Oracles: the CPU
path on the same data and seeds (the fused loader; PrefetchLoader on the CPU), torchvision v2
on the nvJPEG-decoded image with the CPU path's draws, and the per-row CPU fallback bit for
bit."""

import io
import warnings

import pytest
import torch
from PIL import Image

from turboloader import DecodeError, PrefetchLoader
from turboloader import transforms as T
from turboloader.data import TarDataset
from turboloader.errors import DeviceUnavailableError
from turboloader.loader import DataLoader, DeviceDecode
from turboloader.tools.synthetic import synthetic_jpegs
from turboloader.decode.executor import FAILED, OK
from turboloader.transforms._random import SampleRandom, sample_keys

from helpers.images import pixels
from helpers.shards import write_tar

pytestmark = [pytest.mark.cuda,
              pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")]

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
TRAIN = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize(MEAN, STD)])
VAL = T.Compose([T.Resize(72), T.CenterCrop(64), T.ToTensor(), T.Normalize(MEAN, STD)])
UINT8 = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.PILToTensor()])


def encode(arr, **kw):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=90, **kw)
    return buf.getvalue()


@pytest.fixture(scope="module")
def photos():
    return [b for b, _ in synthetic_jpegs(24, seed=9, short_side=(90, 500))]


@pytest.fixture
def shard(tmp_path, photos):
    members = []
    for i, data in enumerate(photos):
        members += [(f"{i:06d}.jpg", data), (f"{i:06d}.cls", str(i).encode())]
    return [write_tar(tmp_path / "p.tar", members)]


def levels(a, b):
    """|a - b| in uint8 levels of the ImageNet-normalized float batches (or uint8 ones)."""
    if a.dtype == torch.uint8:
        return (a.int() - b.int()).abs().float()
    return ((a - b) * torch.tensor(STD, device=a.device).view(1, 3, 1, 1) * 255).abs()


# -- PrefetchLoader ---------------------------------------------------------------------------


def test_pinned_batches_and_non_blocking_copies_equal_the_cpu_normalize(shard):
    loader = DataLoader(TarDataset(shard, UINT8, seed=1), batch_size=8, num_workers=2,
                        pin_memory=True, auto_epoch=False)
    host = []
    for x, y in loader:
        assert x.is_pinned()
        host.append([x.clone(), y.clone()])
    on_cpu = list(PrefetchLoader(host, "cpu", mean=MEAN, std=STD))
    gpu = list(PrefetchLoader(loader, "cuda", mean=MEAN, std=STD))   # the same epoch again
    assert len(gpu) == len(on_cpu) == 4   # 2 streams of 12: 8 + 4 each
    for (xg, yg), (xc, yc) in zip(gpu, on_cpu):
        assert xg.device.type == "cuda" and xg.dtype == torch.float32
        assert torch.equal(yg.cpu(), yc)
        assert float((xg.cpu() - xc).abs().max()) <= 1e-6   # one multiply-add, both


def test_gpu_normalize_equals_the_fused_cpu_normalize(shard):
    """uint8 batches normalized on the GPU = the float32 batches the fused CPU path
    normalizes itself (same draws: the same seed)."""
    fused = list(DataLoader(TarDataset(shard, TRAIN, seed=2), batch_size=8))   # float, unrounded
    raw = DataLoader(TarDataset(shard, T.Compose([T.RandomResizedCrop(64),
                                                  T.RandomHorizontalFlip(), T.ToImage()]),
                                seed=2), batch_size=8, pin_memory=True)
    gpu = list(PrefetchLoader(raw, "cuda", mean=MEAN, std=STD))
    for (xg, yg), (xc, yc) in zip(gpu, fused):
        assert torch.equal(yg.cpu(), yc)
        # the uint8 batch was rounded once before the normalize; the fused float one not
        assert float(levels(xg.cpu(), xc).max()) <= 1.0


def test_side_stream_copies_are_ordered_before_the_step_and_not_recycled_early(shard):
    """Batch k+1 is copied on a side stream while a long kernel on the main stream reads
    batch k: every batch the step sees, and every batch kept, is the loader's."""
    loader = DataLoader(TarDataset(shard, UINT8, seed=3), batch_size=4, num_workers=2,
                        pin_memory=True, auto_epoch=False)
    # the oracle: the same batches (the same epoch again) normalized on the CPU
    expected = [x for x, _ in PrefetchLoader([[x.clone(), y] for x, y in loader], "cpu")]
    big = torch.randn(2048, 2048, device="cuda")
    kept, sums = [], []
    main = torch.cuda.current_stream()
    for x, _ in PrefetchLoader(loader, "cuda"):
        assert torch.cuda.current_stream() == main
        for _ in range(8):
            big = big @ big / 2048.0   # keeps the main stream busy past the next copy
        sums.append((x.sum() + big[0, 0] * 0).item())
        kept.append(x)
    torch.cuda.synchronize()
    assert len(kept) == len(expected)
    for got, want, s in zip(kept, expected, sums):
        assert float((got.cpu() - want).abs().max()) <= 1e-6
        assert abs(s - float(want.sum())) <= 1e-3 * max(1.0, abs(s))


# -- decode="gpu" --------------------------------------------------------------------------


def test_a_missing_device_index_is_a_typed_error():
    with pytest.raises(DeviceUnavailableError):
        DeviceDecode(f"cuda:{torch.cuda.device_count()}")


@pytest.mark.parametrize("tf", [TRAIN, VAL, UINT8], ids=["train", "val", "uint8"])
def test_decode_gpu_batches_equal_the_cpu_path_within_the_tolerance(shard, photos, tf):
    """The loader's batches: labels and order the CPU loader's exactly; pixels within the
    documented tolerance of the CPU fused path at full resolution (dct_scaling=False, the
    resolution nvJPEG decodes at) with each sample's own draws (sample i: label i)."""
    from turboloader.transforms._random import sample_rng

    ex = DeviceDecode("cuda")
    kw = dict(batch_size=8, num_workers=2)
    cpu = list(DataLoader(TarDataset(shard, tf, seed=4), **kw))
    dev = list(DataLoader(TarDataset(shard, tf, seed=4), decode=ex, **kw))
    assert len(dev) == len(cpu) == 4   # 2 streams of 12: 8 + 4 each
    assert sorted(torch.cat([y for _, y in dev]).tolist()) == list(range(24))
    full = T.plan(tf, dct_scaling=False)
    d = []
    for (xd, yd), (xc, yc) in zip(dev, cpu):
        assert xd.device.type == "cuda" and xd.dtype == xc.dtype and xd.shape == xc.shape
        assert torch.equal(yd, yc)   # labels stay on the host, as torch collates them
        ref = torch.stack([full.from_jpeg(photos[i], rng=sample_rng(4, 0, i))
                           for i in yd.tolist()])
        d.append(levels(xd.cpu(), ref).flatten())
    d = torch.cat(d)
    # the plan module's tolerance (docs/guide/gpu.md gives the values measured on a GPU)
    assert float(d.mean()) <= 2 and float(d.max()) <= 64
    assert float(torch.quantile(d[::5], 0.99)) <= 12
    assert ex.stats()["device"] == 24 and ex.stats()["cpu"] == 0


def test_device_rows_are_torchvision_cuda_kernels_on_nvjpegs_pixels(photos):
    import torchvision.transforms.v2.functional as F
    from torchvision.io import ImageReadMode, decode_jpeg

    plan = T.plan(TRAIN)
    keys = sample_keys(5, 0, range(8))
    params = plan.prepare_batch(photos[:8], keys)
    out = torch.empty((8, 3, 64, 64), device="cuda")
    r = plan.run_batch(photos[:8], params, out, executor=DeviceDecode("cuda"))
    assert (r.status == OK).all()
    scale, bias = (torch.tensor(v, device="cuda").view(3, 1, 1) for v in plan._fused.affine)
    for i, src in enumerate(photos[:8]):
        img = decode_jpeg([torch.frombuffer(bytearray(src), dtype=torch.uint8)],
                          mode=ImageReadMode.RGB, device="cuda")[0]
        H, W = img.shape[1:]
        box, clip, (oh, ow), flip, _ = plan._draw(H, W, SampleRandom(int(keys[i])))
        x0, y0, x1, y1 = box
        ref = F.resized_crop(img, round(y0), round(x0), round(y1 - y0), round(x1 - x0),
                             [oh, ow], antialias=True)
        if flip:
            ref = F.horizontal_flip(ref)
        assert torch.equal(out[i], ref.float() * scale + bias), i


def test_fallbacks_on_the_gpu(photos):
    base = pixels(120, 160, seed=3)
    cmyk = io.BytesIO()
    Image.fromarray(base).convert("CMYK").save(cmyk, "JPEG", quality=90)
    whole = encode(base)
    srcs = [photos[0], encode(base, progressive=True), cmyk.getvalue(),
            whole[: len(whole) * 2 // 3], b"\xff\xd8\xff garbage", encode(base[..., 0].copy()),
            photos[1]]
    plan = T.plan(TRAIN)
    scale, bias = (torch.tensor(v, device="cuda").view(3, 1, 1) for v in plan._fused.affine)
    params = plan.prepare_batch(srcs, sample_keys(1, 0, range(len(srcs))))
    ex = DeviceDecode("cuda")
    dev = torch.zeros((len(srcs), 3, 64, 64), device="cuda")
    cpu = torch.zeros((len(srcs), 3, 64, 64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r_dev = plan.run_batch(srcs, params, dev, executor=ex)
        r_cpu = plan.run_batch(srcs, params, cpu)
    assert r_dev.status.tolist() == r_cpu.status.tolist()
    assert r_dev.status.tolist()[4] == FAILED and isinstance(r_dev.errors[4], DecodeError)
    for i in (1, 2):   # progressive, CMYK: the CPU path's rows exactly
        assert torch.equal(dev[i].cpu(), cpu[i])
    # gray baseline goes to nvJPEG and comes back as 3 equal channels
    assert r_dev.status[5] == OK
    raw = ((dev[5] - bias) / scale).round()
    assert torch.equal(raw[0], raw[1]) and torch.equal(raw[1], raw[2])
    assert ex.stats()["device"] == 3
