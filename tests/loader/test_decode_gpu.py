"""turboloader.DataLoader(decode=...) without a GPU: the typed errors at construction, and the
whole device flow (decode threads, device batch tensors, fallbacks, failure policy, order)
with a CPU stand-in for nvJPEG. Oracle: the same loader with decode="cpu" (labels, order,
skipped samples and errors exactly; pixels within the documented tolerance)."""

import io

import pytest
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg

from turboloader import transforms as T
from turboloader.data import ImageFolder, TarDataset
from turboloader.errors import DecodeError, DeviceUnavailableError
from turboloader.loader import DataLoader, DeviceDecode

from helpers.shards import jpeg, labelled_members, write_tar

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")

FLOAT = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))])
VAL_UINT8 = T.Compose([T.Resize(40), T.CenterCrop(32), T.PILToTensor()])


def standin(files):
    return decode_jpeg(files, mode=ImageReadMode.RGB, device="cpu")


def executor(**kw):
    return DeviceDecode("cpu", decoder=standin, **kw)


def levels(a, b, tf):
    if a.dtype == torch.uint8:
        return (a.int() - b.int()).abs().float()
    std = torch.tensor(tf.transforms[-1].std).view(1, 3, 1, 1)
    return ((a - b) * std * 255).abs()


def assert_close_batches(dev, cpu, tf):
    """Same batches (count, labels, shapes, dtypes), pixels within the plan's tolerance."""
    assert len(dev) == len(cpu)
    for (xd, yd), (xc, yc) in zip(dev, cpu):
        assert torch.equal(yd, yc)
        assert xd.shape == xc.shape and xd.dtype == xc.dtype
        d = levels(xd, xc, tf)
        assert float(d.mean()) <= 2 and float(d.max()) <= 64


# -- construction -----------------------------------------------------------------------------


def test_decode_gpu_without_cuda_is_a_typed_error_at_construction(shards, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    ds = TarDataset(shards, FLOAT)
    with pytest.raises(DeviceUnavailableError, match="no CUDA device"):
        DataLoader(ds, batch_size=4, decode="gpu")


def test_what_does_not_combine_with_decode_gpu_is_refused(shards, folder, tmp_path):
    ds = TarDataset(shards, FLOAT)
    ex = executor()
    for kw, match in [({"backend": "processes"}, "backend='threads'"),
                      ({"collate_fn": lambda b: b}, "collate_fn"),
                      ({"pin_memory": True}, "pin_memory"),
                      ({"output": "numpy"}, "numpy")]:
        with pytest.raises(ValueError, match=match):
            DataLoader(ds, batch_size=4, decode=ex, **kw)
    with pytest.raises(ValueError, match="decode must be"):
        DataLoader(ds, batch_size=4, decode="tpu")
    with pytest.raises(TypeError, match="decode must be"):
        DataLoader(ds, batch_size=4, decode=object())
    with pytest.raises(ValueError, match="whole batches"):
        DataLoader(ds.batched(4), batch_size=None, decode=ex)
    with pytest.raises(ValueError, match="cache"):
        DataLoader(TarDataset(shards, FLOAT, cache="1MB"), batch_size=4, decode=ex)
    with pytest.raises(ValueError, match="ColorJitter"):
        DataLoader(TarDataset(shards, T.Compose([T.RandomResizedCrop(24), T.ColorJitter(0.4),
                                                 T.ToTensor()])), batch_size=4, decode=ex)
    with pytest.warns(UserWarning):   # UnfusedWarning: the transform runs unfused
        unfused = ImageFolder(str(folder), T.Compose([T.RandomResizedCrop(24),
                                                      T.RandAugment(), T.ToTensor()]))
    with pytest.raises(ValueError, match="fuses"):
        DataLoader(unfused, batch_size=4, decode=ex)
    plain = torch.utils.data.TensorDataset(torch.zeros(4, 3, 8, 8), torch.zeros(4))
    with pytest.raises(ValueError, match="turboloader dataset"):
        DataLoader(plain, batch_size=4, decode=ex)
    # the CPU default stays accepted by name
    DataLoader(ds, batch_size=4, decode="cpu")


# -- the flow -----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers,batch,drop_last", [(0, 4, False), (2, 4, False), (3, 5, True)])
def test_tar_batches_are_the_cpu_paths(shards, workers, batch, drop_last):
    ex = executor()
    for epoch in (0, 1):
        kw = dict(batch_size=batch, num_workers=workers, drop_last=drop_last)
        ds = TarDataset(shards, FLOAT, seed=3)
        ds.set_epoch(epoch)
        cpu = list(DataLoader(ds, **kw))
        ds = TarDataset(shards, FLOAT, seed=3)
        ds.set_epoch(epoch)
        dev = list(DataLoader(ds, decode=ex, **kw))
        assert_close_batches(dev, cpu, FLOAT)
    labels = torch.cat([b[1] for b in dev]).tolist()
    if not drop_last:
        assert sorted(labels) == list(range(26))   # exactly once
    # every sample decoded on the device, both epochs (drop_last drops after decoding)
    assert ex.stats()["device"] == 2 * 26 and ex.stats()["cpu"] == 0


def test_map_style_batches_are_the_cpu_paths(folder):
    ex = executor(max_call_files=3)
    kw = dict(batch_size=4, num_workers=2, shuffle=True, seed=5)
    cpu = list(DataLoader(ImageFolder(str(folder), VAL_UINT8, seed=2), **kw))
    dev = list(DataLoader(ImageFolder(str(folder), VAL_UINT8, seed=2), decode=ex, **kw))
    assert_close_batches(dev, cpu, VAL_UINT8)
    assert sorted(torch.cat([b[1] for b in dev]).tolist()) == sorted(i % 3 for i in range(21))
    assert ex.stats()["device"] == 21


def test_skip_policy_and_errors_are_the_cpu_paths(corrupt_shards):
    kw = dict(batch_size=3, num_workers=2)
    ds_cpu = TarDataset(corrupt_shards, FLOAT, seed=1, on_error="skip", max_failures=2)
    ds_dev = TarDataset(corrupt_shards, FLOAT, seed=1, on_error="skip", max_failures=2)
    cpu = list(DataLoader(ds_cpu, **kw))
    dev = list(DataLoader(ds_dev, decode=executor(), **kw))
    assert_close_batches(dev, cpu, FLOAT)
    labels = torch.cat([b[1] for b in dev]).tolist()
    assert 5 not in labels and len(labels) == 16
    skipped = [(s["key"], s["reason"]) for s in ds_dev.stats()["skipped"]]
    assert skipped == [(s["key"], s["reason"]) for s in ds_cpu.stats()["skipped"]]
    assert len(skipped) == 1 and skipped[0][0] == "000005"
    # on_error="raise": the same typed error, naming the member
    with pytest.raises(DecodeError) as raised:
        list(DataLoader(TarDataset(corrupt_shards, FLOAT), decode=executor(), **kw))
    assert "000005" in "\n".join(getattr(raised.value, "__notes__", []))


def test_files_nvjpeg_does_not_take_are_decoded_on_the_cpu_in_their_rows(tmp_path):
    """A progressive and a CMYK member, and one the device decoder refuses, each decoded
    on the CPU into its own row of the device batch: the CPU loader's batches exactly."""
    members = labelled_members(range(12))
    img = Image.open(io.BytesIO(jpeg(3)))
    prog, cmyk = io.BytesIO(), io.BytesIO()
    img.save(prog, "JPEG", quality=90, progressive=True)
    img.convert("CMYK").save(cmyk, "JPEG", quality=90)
    swap = {"000003.jpg": prog.getvalue(), "000007.jpg": cmyk.getvalue()}
    members = [(n, swap.get(n, d)) for n, d in members]
    path = write_tar(tmp_path / "odd.tar", members)
    refused = jpeg(10)

    def picky(files):
        if any(bytes(f.numpy()) == refused for f in files):
            raise RuntimeError("NVJPEG_STATUS_BAD_JPEG")
        return standin(files)

    ex = DeviceDecode("cpu", decoder=picky)
    kw = dict(batch_size=5, num_workers=2)
    cpu = list(DataLoader(TarDataset([path], VAL_UINT8, seed=4), **kw))
    dev = list(DataLoader(TarDataset([path], VAL_UINT8, seed=4), decode=ex, **kw))
    assert_close_batches(dev, cpu, VAL_UINT8)
    stats = ex.stats()
    assert stats["cpu"] == 3 and stats["device"] == 9
    assert stats["cpu_reasons"] == {"progressive": 1, "4 components (cmyk)": 1,
                                    "device decoder": 1}
    # the fallback rows are the CPU path's pixels exactly
    labels = torch.cat([b[1] for b in dev]).tolist()
    images_dev = torch.cat([b[0] for b in dev])
    images_cpu = torch.cat([b[0] for b in cpu])
    for label in (3, 7, 10):
        r = labels.index(label)
        assert torch.equal(images_dev[r], images_cpu[r])


def test_restart_files_libjpeg_warns_about_warn_as_on_the_cpu(tmp_path):
    """Damaged restart intervals that nvJPEG (and the stand-in) decode silently: the device
    loader issues the CPU loader's DecodeWarnings, each once, and the same batches."""
    import warnings

    import numpy as np

    from turboloader._native import _jpeg
    from turboloader.errors import DecodeWarning

    members = []
    for i in range(8):
        conv = _jpeg.transcode_restart(np.frombuffer(jpeg(i), np.uint8), restart_mcus=1)[0]
        sos = conv.index(b"\xff\xda")
        start = sos + 2 + int.from_bytes(conv[sos + 2:sos + 4], "big")
        rst = conv.index(b"\xff\xd3", start)
        if i % 2:   # odd samples: two bytes before a restart marker (libjpeg warns)
            conv = conv[:rst] + b"\x12\x34" + conv[rst:]
        members += [(f"{i:06d}.jpg", conv), (f"{i:06d}.cls", str(i).encode())]
    path = write_tar(tmp_path / "rst.tar", members)

    def run(**kw):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DecodeWarning)
            batches = list(DataLoader(TarDataset([path], FLOAT, seed=2, shuffle=False),
                                      batch_size=4, num_workers=0, **kw))
        return batches, sorted(str(w.message) for w in caught
                               if issubclass(w.category, DecodeWarning))

    cpu, cpu_warnings = run()
    dev, dev_warnings = run(decode=executor())
    # (a window decode reads only the intervals it needs: not every damaged file warns)
    assert cpu_warnings and all("extraneous bytes" in w for w in cpu_warnings)
    assert dev_warnings == cpu_warnings
    assert_close_batches(dev, cpu, FLOAT)
