"""TarDataset with turboloader transforms: the fused path, the cached path, per-sample seeds."""

import pytest
import torch
import torch.utils.data
from helpers.shards import jpeg, write_tar

from turboloader import TarDataset, decode_jpeg
from turboloader import transforms as T
from turboloader.transforms._random import sample_rng


def _pipeline():
    return T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])


def _outputs(ds, **loader_kw):
    if loader_kw:
        loader = torch.utils.data.DataLoader(ds, batch_size=3, **loader_kw)
        return {int(y): x for xs, ys in loader for x, y in zip(xs, ys)}
    return {y: x for x, y in ds}


def test_fused_outputs_are_per_sample_and_worker_independent(make_shards):
    paths = make_shards([5, 5])  # even: no pad repeat across 2 ranks
    pipe = _pipeline()
    plan = T.plan(pipe)
    assert plan is not None
    ds = TarDataset(paths, pipe, seed=3)
    ds.set_epoch(2)
    main = _outputs(ds)
    workers = _outputs(ds, num_workers=2)
    assert sorted(main) == sorted(workers) == list(range(10))
    for g, x in main.items():
        assert x.shape == (3, 32, 32)
        assert torch.equal(x, workers[g])
        # the sample's parameters come from sample_rng(seed, epoch, global index)
        assert torch.equal(x, plan.from_jpeg(jpeg(g), rng=sample_rng(3, 2, g)))
    ds.set_epoch(3)
    assert any(not torch.equal(main[g], x) for g, x in _outputs(ds).items())
    # two ranks see the same per-sample augmentation as one
    ranks = {}
    for r in range(2):
        rank = TarDataset(paths, pipe, seed=3, rank=r, world_size=2)
        rank.set_epoch(0)
        ranks.update(_outputs(rank))
    one = TarDataset(paths, pipe, seed=3)
    one.set_epoch(0)
    one = _outputs(one)
    assert all(torch.equal(ranks[g], one[g]) for g in one)


def test_cached_path_uses_from_array(make_shards):
    paths = make_shards([6])
    pipe = _pipeline()
    plan = T.plan(pipe)
    ds = TarDataset(paths, pipe, seed=5, cache="1MB")
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        for g, x in _outputs(ds).items():
            ref = plan.from_array(decode_jpeg(jpeg(g)), rng=sample_rng(5, epoch, g))
            assert torch.equal(x, ref)
    st = ds.stats(epoch=1)
    assert st["cache_hits"] == 6 and st["cache_misses"] == 0
    small = TarDataset(paths, pipe, seed=5, cache="1MB", cache_short_side=24)
    out = _outputs(small)
    assert all(x.shape == (3, 32, 32) for x in out.values())


def test_non_jpeg_goes_through_the_generic_path(tmp_path):
    path = write_tar(tmp_path / "png.tar", [("a.png", jpeg(0, fmt="PNG")), ("a.cls", b"0"),
                                            ("b.webp", jpeg(1, fmt="WEBP")), ("b.cls", b"1")])
    ds = TarDataset(path, _pipeline(), shuffle=False)
    ds.set_epoch(0)
    out = _outputs(ds)
    assert sorted(out) == [0, 1] and all(x.shape == (3, 32, 32) for x in out.values())
    # the generic path draws from the sample's generator too: same result on the same pixels
    from PIL import Image
    import io
    from turboloader.transforms._random import using_rng

    with using_rng(sample_rng(0, 0, 0)):
        ref = _pipeline()(Image.open(io.BytesIO(jpeg(0, fmt="PNG"))).convert("RGB"))
    assert torch.equal(ref, out[0])


@pytest.mark.parametrize("short_side", [None, 24])
def test_cached_downscale_keeps_parameters(make_shards, short_side):
    paths = make_shards([4])
    pipe = T.Compose([T.CenterCrop(40), T.ToTensor()])
    full = _outputs(TarDataset(paths, pipe, shuffle=False))
    cached = _outputs(TarDataset(paths, pipe, shuffle=False, cache="1MB",
                                 cache_short_side=short_side))
    for g in full:
        assert full[g].shape == cached[g].shape == (3, 40, 40)
        diff = (full[g] - cached[g]).abs().mean().item()
        assert diff < (1 / 255 if short_side is None else 0.15), diff


def test_a_batch_with_a_png_among_jpegs_takes_each_rows_own_path(tmp_path):
    """The .tar gather tests every row's JPEG marker at once (issue 42: no per-row test in
    the step): a chunk of JPEGs only is marked so; one PNG among them leaves the chunk to the
    step's per-row test, and the PNG row takes the generic path while the JPEG rows stay
    fused, each with its own sample's draws."""
    import io

    from PIL import Image

    from turboloader.data import tar_dataset
    from turboloader.transforms._random import using_rng

    members = []
    for g in range(6):
        members += [(f"{g:02d}.{'png' if g == 4 else 'jpg'}",
                     jpeg(g, fmt="PNG" if g == 4 else "JPEG")), (f"{g:02d}.cls", str(g).encode())]
    path = write_tar(tmp_path / "mixed.tar", members)
    only_jpegs = write_tar(tmp_path / "jpegs.tar", [m for m in members if "04." not in m[0]])
    pipe = _pipeline()
    plan = T.plan(pipe)
    flags = []
    gather = tar_dataset.TarDataset._gather_chunk

    def spy(self, *a, **kw):
        chunk = gather(self, *a, **kw)
        flags.append(chunk.all_jpeg)
        return chunk

    tar_dataset.TarDataset._gather_chunk = spy
    try:
        for p, want in ((only_jpegs, [True]), (path, [False])):
            flags.clear()
            ds = TarDataset(p, pipe, shuffle=False, seed=4)
            ds.set_epoch(1)
            (images, labels), = list(ds.worker_stream(0, 1, batch_size=8))
            assert flags == want
            for i, (x, y) in enumerate(zip(images, labels.tolist())):   # sample i: row i
                if y == 4:
                    with using_rng(sample_rng(4, 1, i)):
                        ref = pipe(Image.open(io.BytesIO(jpeg(4, fmt="PNG"))).convert("RGB"))
                else:
                    ref = plan.from_jpeg(jpeg(y), rng=sample_rng(4, 1, i))
                assert torch.equal(x, ref), y
    finally:
        tar_dataset.TarDataset._gather_chunk = gather
