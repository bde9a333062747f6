"""PrefetchLoader: a CPU pass-through here; the CUDA path where CUDA exists."""

import pytest
import torch

from turboloader.prefetch import PrefetchLoader

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def fake_loader(dtype):
    g = torch.Generator().manual_seed(0)
    out = []
    for k in range(3):
        x = torch.randint(0, 256, (4, 3, 5, 5), generator=g, dtype=torch.uint8)
        out.append([x if dtype == torch.uint8 else x.float() / 255, torch.arange(4) + k])
    return out


def reference(images):
    x = images.float() / 255 if images.dtype == torch.uint8 else images
    return (x - torch.tensor(MEAN).view(-1, 1, 1)) / torch.tensor(STD).view(-1, 1, 1)


def test_cpu_pass_through():
    batches = fake_loader(torch.float32)
    got = list(PrefetchLoader(batches, "cpu"))
    assert len(got) == 3
    for (x, y), (gx, gy) in zip(batches, got):
        assert gx is x and gy is y


def test_cpu_uint8_normalised_like_on_device():
    batches = fake_loader(torch.uint8)
    pf = PrefetchLoader(batches, "cpu", mean=MEAN, std=STD)
    assert len(pf) == 3
    for (x, y), (gx, gy) in zip(batches, pf):
        assert gx.dtype == torch.float32
        torch.testing.assert_close(gx, reference(x))
        assert gy is y
    x = list(PrefetchLoader(batches, "cpu"))[0][0]  # uint8 without stats: just / 255
    torch.testing.assert_close(x, batches[0][0].float() / 255)


def test_cpu_outputs_are_recycled_but_never_shared():
    """A caller that keeps every normalised batch gets distinct, correct ones; the loader's
    float batches are never modified."""
    batches = fake_loader(torch.uint8) * 3
    kept = list(PrefetchLoader(batches, "cpu", mean=MEAN, std=STD))
    assert len({x.data_ptr() for x, _ in kept}) == len(kept)
    for (x, _), (gx, _) in zip(batches, kept):
        torch.testing.assert_close(gx, reference(x))
    floats = fake_loader(torch.float32)
    before = [x.clone() for x, _ in floats]
    ptrs = set()
    for (x, _), b in zip(PrefetchLoader(floats * 2, "cpu", mean=MEAN, std=STD), before * 2):
        torch.testing.assert_close(x, reference(b))
        ptrs.add(x.data_ptr())
    assert len(ptrs) <= 2  # dropped outputs were reused
    assert all(torch.equal(x, b) for (x, _), b in zip(floats, before))


def test_arguments():
    with pytest.raises(ValueError, match="both"):
        PrefetchLoader([], "cpu", mean=MEAN)
    with pytest.raises(ValueError, match="zeros"):
        PrefetchLoader([], "cpu", mean=MEAN, std=(1, 0, 1))


@pytest.mark.cuda   # the stream / record_stream path (skipped without CUDA: tests/conftest.py)
def test_cuda_prefetch_matches_cpu():
    batches = [[x.pin_memory(), y] for x, y in fake_loader(torch.uint8)]
    pf = PrefetchLoader(batches, "cuda", mean=MEAN, std=STD)
    got = []
    for x, y in pf:
        assert x.is_cuda and y.is_cuda and x.dtype == torch.float32
        got.append((x * 2).cpu())  # compute on the main stream right after
    for (x, _), g in zip(batches, got):
        torch.testing.assert_close(g, 2 * reference(x))
