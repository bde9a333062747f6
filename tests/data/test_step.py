"""The one sample step (``turboloader.data.step``): every stream's decoder follows the
declared ``SampleDecoder`` protocol and is supplied by its dataset, never built and then
overwritten (video clips plug in their own)."""

import pytest
from helpers.shards import jpeg, write_tar

from turboloader.data import TarDataset, VideoDataset
from turboloader.data import step as step_module
from turboloader.data.step import SampleDecoder
from turboloader.data.video import _ClipDecoder


def test_every_stream_decoder_is_a_sample_decoder_built_once(tmp_path, monkeypatch):
    built = []
    init = step_module.Decoder.__init__

    def counting(self, *args, **kwargs):
        built.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(step_module.Decoder, "__init__", counting)
    video = write_tar(tmp_path / "v.tar", [("a.mp4", b"\x00" * 64), ("a.cls", b"1")])
    st = VideoDataset(video, None)._lease("probe")
    assert isinstance(st.decoder, _ClipDecoder) and isinstance(st.decoder, SampleDecoder)
    assert built == [] and st.plan is None  # no image Decoder made only to be replaced

    images = write_tar(tmp_path / "i.tar", [("a.jpg", jpeg(0)), ("a.cls", b"1")])
    st = TarDataset(images, None)._lease("probe")
    assert built == [st.decoder] and isinstance(st.decoder, SampleDecoder)


def test_the_protocol_declares_all_the_step_asks_of_a_decoder():
    # what the step and the readers call on a stream's decoder is declared, so a decoder
    # built to the protocol (video's) has all of it
    import ast
    import inspect

    from turboloader.data import (buckets, folder, map_dataset, reader, step, stream,
                                  tar_reader, tbl_dataset)

    used = set()
    for mod in (step, tar_reader, folder, tbl_dataset, stream, reader, map_dataset, buckets):
        for n in ast.walk(ast.parse(inspect.getsource(mod))):
            if isinstance(n, ast.Attribute):
                v = n.value
                if (isinstance(v, ast.Name) and v.id in ("dec", "decoder")) or \
                        (isinstance(v, ast.Attribute) and v.attr == "decoder"):
                    used.add(n.attr)
    declared = {n for n in dir(SampleDecoder) if not n.startswith("_")} | \
        set(SampleDecoder.__annotations__)   # methods, and the annotated attributes
    assert {"cached_array", "transform_source", "plan"} <= used
    assert used <= declared, sorted(used - declared)
    clip = _ClipDecoder(None, frames_per_clip=2, stride=1, sampling="random", clips=1)
    for name in declared:
        assert hasattr(clip, name), name


def test_collate_labels_is_default_collate():
    """A batch's labels as torch's default_collate makes them: int64 tensors for ints (the
    NumPy route, to the int64 limits), bools, floats and strings as it does, and an int
    beyond int64 refused as torch refuses it."""
    import torch
    from torch.utils.data import default_collate

    from turboloader.data.reader import collate_labels

    for labels in ([3, 1, 2], [2**63 - 1, -2**63], [True, False], [1, True], [0.5, 2.0],
                   [1, 2.5], ["a", "b"]):
        got, want = collate_labels(labels), default_collate(labels)
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want), labels
        else:
            assert got == want, labels
    with pytest.raises((ValueError, RuntimeError, OverflowError)):
        collate_labels([2**64])


# -- one sample is the step on a chunk of one ------------------------------------------------

def _folder(root, n=6):
    """A class folder of ``n`` images: JPEGs of several sizes and one PNG (generic path)."""
    import io

    import numpy as np
    from PIL import Image

    rs = np.random.default_rng(7)
    files = []
    for i in range(n):
        d = root / f"c{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        h, w = int(rs.integers(20, 90)), int(rs.integers(20, 90))
        arr = rs.integers(0, 256, (h, w, 3), dtype=np.uint8)
        fmt = "PNG" if i == 3 else "JPEG"
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, fmt)
        path = d / f"{i}.{fmt.lower()}"
        path.write_bytes(buf.getvalue())
        files.append(path)
    return files


def _train(size=24):
    from turboloader import transforms as T

    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(),
                      T.ColorJitter(0.3, 0.3, 0.3), T.ToTensor(),
                      T.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])])


@pytest.mark.parametrize("cache", [None, "8MB"])
def test_one_sample_is_exactly_the_batch_paths_row(tmp_path, cache):
    """``Decoder(tf)(data, seed=, epoch=, slot=)`` gives the very pixels of the row a
    dataset's batch path writes for that seed, epoch and index (the oracle: ImageFolder's
    ``__getitems__``), JPEG rows through the executor, the PNG through the generic
    fallback, with and without the cache (a miss, then a hit)."""
    import torch

    from turboloader.data import ImageFolder
    from turboloader.data.step import Decoder

    _folder(tmp_path)
    ds = ImageFolder(str(tmp_path), _train(), seed=11, cache=cache, cache_short_side=32)
    ds.set_epoch(3)
    n = len(ds)
    batch = [img.clone() for img, _ in ds.__getitems__(list(range(n)))]
    dec = Decoder(_train(), cache=cache, short_side=32)
    for _ in range(2):   # with the cache: every row a miss, then every row a hit
        for i, (path, _) in enumerate(ds.samples):
            with open(path, "rb") as f:
                data = f.read()
            got = dec(data, key=i, seed=11, epoch=3, slot=i)
            assert got.dtype == batch[i].dtype and torch.equal(got, batch[i]), (i, path)
            assert not torch.equal(got, dec(data, key=i, seed=11, epoch=4, slot=i))
    if cache is not None:
        assert dec.cache.stats()["hits"] >= n and dec.cache.stats()["misses"] == n


def test_one_sample_runs_on_the_executor_not_a_per_sample_route(tmp_path, monkeypatch):
    """The per-sample call is the step: a JPEG (and a cached array) that the batch call can
    do goes through the executor's ``run_batch``, never the plan's per-sample entries;
    ``out`` is written and returned; a corrupt file raises its typed error, and a
    transform's TypeError propagates as it is."""
    import numpy as np
    import torch

    from turboloader.data import step
    from turboloader.decode import executor
    from turboloader.errors import DecodeError
    from turboloader.transforms import Plan
    from helpers.shards import jpeg

    def refuse(*a, **k):
        raise AssertionError("a per-sample route ran")

    calls = []
    run_batch = executor.run_batch

    def counting(*a, **k):
        calls.append(len(a[0]))
        return run_batch(*a, **k)

    monkeypatch.setattr(Plan, "from_jpeg", refuse)
    monkeypatch.setattr(Plan, "from_array", refuse)
    monkeypatch.setattr(executor, "run_batch", counting)
    dec = step.Decoder(_train(16), cache="4MB")
    out = torch.empty((3, 16, 16))
    assert dec(jpeg(1), key="a", slot=5, out=out) is out
    again = dec(None, key="a", slot=5)               # the cached array, same draws
    assert torch.equal(again, out) and calls == [1, 1]
    arr = np.full((30, 40, 3), 90, np.uint8)         # decoded pixels (a RAW record)
    assert dec(arr, slot=2).shape == (3, 16, 16) and calls == [1, 1, 1]
    with pytest.raises(DecodeError):
        dec(jpeg(1)[:200], slot=1)

    def bad(img):
        raise TypeError("not an image I take")

    with pytest.raises(TypeError, match="not an image I take"):
        step.Decoder(bad)(jpeg(2), slot=0)


def _protocol_only(inner):
    """A decoder with nothing but what :class:`SampleDecoder` declares, delegating to
    ``inner``: anything else the step read of it would be an AttributeError."""
    from turboloader.data.step import SampleDecoder

    attrs = tuple(SampleDecoder.__annotations__)
    methods = {n for n in dir(SampleDecoder) if not n.startswith("_")} - set(attrs)

    def delegate(name):
        return lambda self, *a, **k: getattr(inner, name)(*a, **k)

    cls = type("OnlyTheProtocol", (), {"__slots__": attrs,
                                        **{m: delegate(m) for m in methods}})
    obj = cls()
    for a in attrs:
        setattr(obj, a, getattr(inner, a))
    return obj


def test_a_decoder_with_only_the_protocol_passes_the_step(tmp_path, make_shards, monkeypatch):
    """What the step (``run``, ``one``) and the gathers use of a decoder is all declared:
    an object with only the protocol's attributes and methods reads map-style batches and
    samples, TAR batches with the cache (its label kept with the image), and one sample,
    with the same pixels as the dataset's own Decoder."""
    import torch

    from turboloader.data import ImageFolder, TarDataset, step
    from turboloader.data.reader import ReaderMixin

    _folder(tmp_path / "f")
    want_map = ImageFolder(str(tmp_path / "f"), _train(), seed=2, cache="8MB")
    want_map.set_epoch(1)
    want = [img.clone() for img, _ in want_map.__getitems__(list(range(len(want_map))))]
    urls = make_shards([4, 3])
    want_ds = TarDataset(urls, _train(), seed=3, cache="8MB")
    want_ds.set_epoch(0)
    want_tar = list(want_ds.batched(4))

    real = ReaderMixin._decoder
    monkeypatch.setattr(ReaderMixin, "_decoder", lambda self: _protocol_only(real(self)))
    ds = ImageFolder(str(tmp_path / "f"), _train(), seed=2, cache="8MB")
    ds.set_epoch(1)
    assert not isinstance(ds._lease("probe").decoder, step.Decoder)
    for _ in range(2):  # misses, then hits
        got = ds.__getitems__(list(range(len(ds))))
        assert all(torch.equal(g[0], w) for g, w in zip(got, want))
        assert torch.equal(ds[2][0], want[2])
    tar = TarDataset(urls, _train(), seed=3, cache="8MB")
    tar.set_epoch(0)
    for _ in range(2):
        got = list(tar.batched(4))
        assert len(got) == len(want_tar)
        for (gi, gl), (wi, wl) in zip(got, want_tar):
            assert torch.equal(gi, wi) and torch.equal(gl, wl)
    lone = _protocol_only(step.Decoder(_train(), cache="1MB"))
    with open(ds.samples[0][0], "rb") as f:
        assert torch.equal(step.one(lone, f.read(), key=0, seed=2, epoch=1, slot=0), want[0])
