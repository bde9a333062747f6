"""Plan.prepare_batch + Plan.run_batch against the per-sample path: every row must be
bit-identical to Plan.from_jpeg / Plan.from_array with the row's SampleRandom, whatever the
pipeline, the DCT scaling, the source kind and the number of runner threads; bad rows are
statuses carrying the per-sample path's own exception."""

import io
import warnings

import numpy as np
import pytest
from helpers import sweep
import torch
from PIL import Image

from turboloader import DecodeError, DecodeWarning
from turboloader import transforms as T
from turboloader.tools.synthetic import synthetic_jpegs
from turboloader.decode.executor import FAILED, GENERIC, OK, BatchParams, BatchRunner
from turboloader.transforms._random import SampleRandom, sample_keys

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

PIPELINES = {
    "train": [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
              T.Normalize(MEAN, STD)],
    "train_jitter": [T.RandomResizedCrop(160), T.RandomHorizontalFlip(),
                     T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.ToTensor(), T.Normalize(MEAN, STD)],
    "val": [T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)],
    "val_uint8": [T.Resize(256), T.CenterCrop(224), T.ToImage()],
    "rrc_uint8_bicubic": [T.RandomResizedCrop((96, 160), interpolation="bicubic"),
                          T.RandomHorizontalFlip(), T.PILToTensor()],
    "rrc_nearest_exact": [T.RandomResizedCrop(64, interpolation="nearest-exact"),
                          T.ToImage(), T.ToDtype(torch.float32, scale=True)],
    "resize_randomcrop": [T.Resize(200, max_size=260), T.RandomCrop((128, 170)),
                          T.RandomHorizontalFlip(0.7), T.ToImage()],
    "resize_hw": [T.Resize((123, 77)), T.ToImage()],
    "crop_two_jitters": [T.CenterCrop(201), T.ColorJitter(brightness=0.5, hue=0.2),
                         T.RandomHorizontalFlip(), T.ColorJitter(0.3, 0.3), T.ToImage()],
    "randomcrop_only": [T.RandomCrop(64), T.ToImage(), T.ToDtype(torch.float32)],
    "no_geometry_rect": [T.Resize((150, 200)), T.ToTensor()],
    # every attempt fails: torchvision's centre-crop fallback after 20 draws
    "rrc_fallback": [T.RandomResizedCrop(80, scale=(1.5, 2.0), ratio=(0.5, 0.6)),
                     T.RandomHorizontalFlip(), T.ToImage()],
    # parameters the vectorized replay does not cover: drawn row by row
    "rrc_float32_scale": [T.RandomResizedCrop(100, scale=(np.float32(0.2), 1.0)),
                          T.RandomHorizontalFlip(), T.ToImage()],
    "containers": [T.RandomResizedCrop(96), T.RandomApply([T.ColorJitter(0.3, 0.3)], p=0.5),
                   T.RandomChoice([T.RandomHorizontalFlip(), T.Identity()]), T.ToImage()],
}


@pytest.fixture(scope="module")
def jpegs():
    data = [b for b, _ in synthetic_jpegs(40, seed=11, short_side=(120, 700))]
    # extreme aspect ratios exercise RandomResizedCrop's failed attempts and fallback
    for h, w in ((40, 900), (700, 30), (260, 260)):
        img = np.asarray(Image.open(io.BytesIO(data[0])).convert("RGB").resize((w, h)))
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=90)
        data.append(buf.getvalue())
    return data


def _decode(data):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _batch(p, n):
    return torch.full((n, *p.output_shape), 7, dtype=p.output_dtype)


def _assert_rows_match_per_sample(p, sources, keys, result, out, *, arrays=False, sizes=None):
    ran = 0
    for i, src in enumerate(sources):
        rng = SampleRandom(int(keys[i]))
        if result.status[i] == OK:
            if arrays:
                size = None if sizes is None else tuple(int(v) for v in sizes[i])
                ref = p.from_array(src, rng=rng, source_size=size)
            else:
                ref = p.from_jpeg(src, rng=rng)
            assert torch.equal(ref, out[i]), f"row {i} differs from the per-sample path"
            ran += 1
        else:
            assert result.status[i] == GENERIC, result.errors[i]
            assert p._draw(*_size(src, arrays, sizes, i), SampleRandom(int(keys[i]))) is None
    return ran


def _size(src, arrays, sizes, i):
    if arrays:
        return tuple(int(v) for v in (sizes[i] if sizes is not None else src.shape[:2]))
    from turboloader import decode_jpeg_header

    h = decode_jpeg_header(src)
    return h.height, h.width


@pytest.mark.parametrize("dct", [True, False], ids=["dct", "full"])
@pytest.mark.parametrize("name", sweep(sorted(PIPELINES), fast=2))
def test_rows_equal_from_jpeg(jpegs, name, dct):
    p = T.plan(T.Compose(PIPELINES[name]), dct_scaling=dct)
    assert p is not None
    keys = sample_keys(3, 1, np.arange(len(jpegs)))
    params = p.prepare_batch(jpegs, keys)
    assert isinstance(params, BatchParams) and params.n == len(jpegs)
    out = _batch(p, len(jpegs))
    result = p.run_batch(jpegs, params, out)
    assert not (result.status == FAILED).any(), result.errors
    ran = _assert_rows_match_per_sample(p, jpegs, keys, result, out)
    assert ran >= len(jpegs) - 8
    # the parameters are the per-sample draw, counter included
    for i in range(len(jpegs)):
        if params.status[i] == OK:
            rng = SampleRandom(int(keys[i]))
            box, clip, size, flip, ops = p._draw(*_size(jpegs[i], False, None, i), rng)
            assert params.counter[i] == rng.counter
            assert bool(params.flip[i]) == flip and tuple(params.out_size[i]) == size
            assert [(int(a), float(b)) for a, b in
                    zip(params.ops[i, :params.n_ops[i]], params.factors[i, :params.n_ops[i]])] \
                == [(a, float(b)) for a, b in ops]


def test_fallback_pipeline_really_falls_back(jpegs):
    p = T.plan(T.Compose(PIPELINES["rrc_fallback"]))
    params = p.prepare_batch(jpegs, sample_keys(0, 0, np.arange(len(jpegs))))
    assert (params.counter[params.status == OK] == 21).all()  # 20 attempts' draws + flip


@pytest.mark.parametrize("name", ["train_jitter", "val", "resize_randomcrop", "rrc_fallback",
                                  "rrc_float32_scale"])
def test_rows_equal_from_array_with_source_size(jpegs, name):
    p = T.plan(T.Compose(PIPELINES[name]))
    full = [_decode(d) for d in jpegs[:20]]
    sizes = np.array([a.shape[:2] for a in full], np.int64)
    small = [np.ascontiguousarray(a[::2, ::2]) for a in full]   # a cache at half size
    keys = sample_keys(8, 2, np.arange(20) * 3)
    out = _batch(p, 20)
    result = p.run_batch(small, p.prepare_batch(small, keys, source_sizes=sizes), out)
    assert _assert_rows_match_per_sample(p, small, keys, result, out, arrays=True,
                                         sizes=sizes) >= 15
    # without source sizes: the array's own size
    out2 = _batch(p, 20)
    result = p.run_batch(full, p.prepare_batch(full, keys), out2)
    _assert_rows_match_per_sample(p, full, keys, result, out2, arrays=True)


def test_mixed_source_kinds_and_rows(jpegs):
    p = T.plan(T.Compose(PIPELINES["train_jitter"]))
    n = 12
    arr = _decode(jpegs[3])
    strided = np.ascontiguousarray(_decode(jpegs[4])[:, ::-1])[:, ::-1]   # negative strides
    sources = [jpegs[0], memoryview(jpegs[1]), np.frombuffer(jpegs[2], np.uint8), arr,
               bytearray(jpegs[5]), strided] + jpegs[6:12]
    keys = sample_keys(1, 1, np.arange(100, 100 + n))
    sizes = np.zeros((n, 2), np.int64)
    sizes[3] = (arr.shape[0] * 2, arr.shape[1] * 2)   # a downscaled cache entry
    params = p.prepare_batch(sources, keys, source_sizes=sizes)
    assert params.kind.tolist() == [0, 0, 0, 1, 0, 1] + [0] * 6
    rows = np.array([5, 0, 13, 2, 9, 1, 3, 4, 6, 7, 8, 10])
    out = _batch(p, 14)
    result = p.run_batch(sources, params, out, rows=rows, runner=BatchRunner(threads=2))
    assert (result.status == OK).all(), result.errors
    for i, src in enumerate(sources):
        rng = SampleRandom(int(keys[i]))
        if i == 3:
            ref = p.from_array(src, rng=rng, source_size=tuple(sizes[3]))
        elif i == 5:
            ref = p.from_array(src, rng=rng)
        else:
            ref = p.from_jpeg(src, rng=rng)
        assert torch.equal(ref, out[rows[i]]), i
    untouched = sorted(set(range(14)) - set(rows.tolist()))
    assert (out[untouched] == 7).all()


@pytest.mark.parametrize("name", ["train", "val_uint8", "crop_two_jitters"])
def test_thread_counts_give_identical_batches(jpegs, name):
    p = T.plan(T.Compose(PIPELINES[name]))
    keys = sample_keys(5, 0, np.arange(len(jpegs)))
    params = p.prepare_batch(jpegs, keys)
    outs = []
    for threads in (1, 2, 4):
        out = _batch(p, len(jpegs))
        result = p.run_batch(jpegs, params, out, runner=BatchRunner(threads=threads))
        assert (result.status == params.status).all() and (result.status == OK).sum() > 35
        outs.append(out)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def test_runner_is_reused_across_batches_of_different_sizes(jpegs):
    p = T.plan(T.Compose(PIPELINES["val"]))
    runner = BatchRunner(threads=2)
    for lo, hi in ((0, 5), (5, 30), (30, 31), (31, 43), (0, 43)):
        src = jpegs[lo:hi]
        keys = sample_keys(0, 0, np.arange(lo, hi))
        out = _batch(p, hi - lo)
        result = p.run_batch(src, p.prepare_batch(src, keys), out, runner=runner)
        _assert_rows_match_per_sample(p, src, keys, result, out)
    grown = runner.scratch_bytes()
    p.run_batch(jpegs[:10], p.prepare_batch(jpegs[:10], sample_keys(0, 0, np.arange(10))),
                _batch(p, 10), runner=runner)
    assert runner.scratch_bytes() == grown > 0   # no growth for smaller samples


def test_generic_rows_are_flagged_not_run(jpegs):
    p = T.plan(T.Compose([T.Resize(64), T.RandomCrop(100), T.ToImage()]))
    keys = sample_keys(0, 0, np.arange(6))
    params = p.prepare_batch(jpegs[:6], keys)
    assert (params.status == GENERIC).all()
    out = _batch(p, 6)
    result = p.run_batch(jpegs[:6], params, out)
    assert (result.status == GENERIC).all() and (out == 7).all()
    with pytest.raises(ValueError):   # the generic path: torchvision's error
        p.from_jpeg(jpegs[0], rng=SampleRandom(int(keys[0])))


def test_bad_rows_are_statuses_carrying_the_per_sample_error(jpegs):
    p = T.plan(T.Compose(PIPELINES["train"]))
    good = jpegs[:6]
    truncated = jpegs[6][: len(jpegs[6]) // 2]
    garbage = bytes(np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8))
    huge = _with_size(jpegs[7], 60000, 60000)
    sources = [good[0], truncated, good[1], garbage, b"", good[2], huge, good[3],
               jpegs[8][:200], good[4], b"\xff\xd8\xff", good[5]]
    keys = sample_keys(2, 2, np.arange(len(sources)))
    params = p.prepare_batch(sources, keys)
    out = _batch(p, len(sources))
    result = p.run_batch(sources, params, out, runner=BatchRunner(threads=2))
    expect_ok = [0, 2, 5, 7, 9, 11]
    assert [i for i in range(len(sources)) if result.status[i] == OK] == expect_ok
    for i, src in enumerate(sources):
        rng = SampleRandom(int(keys[i]))
        if i in expect_ok:
            assert torch.equal(out[i], p.from_jpeg(src, rng=rng))
            continue
        assert result.status[i] == FAILED
        err = result.errors[i]
        assert isinstance(err, DecodeError) and str(err)
        with pytest.raises(DecodeError) as info:
            p.from_jpeg(src, rng=rng)
        assert str(info.value) == str(err)
        assert (out[i] == 7).all()
    assert "exceeds the limit" in str(result.errors[6])


def test_max_pixels_and_progressive_work_budget(jpegs):
    p = T.plan(T.Compose(PIPELINES["val_uint8"]))
    bomb = many_scans(1024, 600)
    sources = [jpegs[0], bomb, jpegs[1]]
    keys = sample_keys(0, 0, np.arange(3))
    out = _batch(p, 3)
    result = p.run_batch(sources, p.prepare_batch(sources, keys), out)
    assert result.status.tolist() == [OK, FAILED, OK]
    with pytest.raises(DecodeError) as info:
        p.from_jpeg(bomb, rng=SampleRandom(int(keys[1])))
    assert str(result.errors[1]) == str(info.value)
    # a smaller max_pixels refuses the good rows too, in prepare_batch already
    small = p.prepare_batch(sources, keys, max_pixels=1000)
    assert (small.status == FAILED).all()
    assert all("max_pixels" in str(e) for e in small.errors)


def test_warnings_and_strict(jpegs):
    p = T.plan(T.Compose(PIPELINES["val_uint8"]))
    data = jpegs[2]
    i = data.index(b"\xff\xdb")
    warned = data[:i] + b"\x00\x01\x02" + data[i:]   # junk between header segments
    sources = [jpegs[0], warned]
    keys = sample_keys(0, 0, np.arange(2))
    params = p.prepare_batch(sources, keys)
    out = _batch(p, 2)
    result = p.run_batch(sources, params, out)
    assert result.status.tolist() == [OK, OK]
    assert result.warnings[0] is None and result.warnings[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ref = p.from_jpeg(warned, rng=SampleRandom(int(keys[1])))
    assert torch.equal(ref, out[1])
    assert [str(w.message) for w in caught if w.category is DecodeWarning] == [result.warnings[1]]
    strict = p.run_batch(sources, params, _batch(p, 2), strict=True)
    assert strict.status.tolist() == [OK, FAILED]
    assert isinstance(strict.errors[1], DecodeError)


def test_bad_calls_raise(jpegs):
    p = T.plan(T.Compose(PIPELINES["train"]))
    keys = sample_keys(0, 0, np.arange(3))
    src = jpegs[:3]
    params = p.prepare_batch(src, keys)
    with pytest.raises(ValueError):
        p.prepare_batch(src, keys[:2])
    with pytest.raises(TypeError):
        p.prepare_batch([src[0], 42, src[1]], keys)
    with pytest.raises(TypeError):
        p.prepare_batch([np.zeros((4, 4, 3), np.float32)] * 3, keys)
    with pytest.raises(ValueError):
        p.prepare_batch(src, keys, source_sizes=np.zeros((2, 2), np.int64))
    with pytest.raises(TypeError):
        p.run_batch(src, params, torch.empty((3, 3, 224, 224), dtype=torch.uint8))
    with pytest.raises(ValueError):
        p.run_batch(src, params, torch.empty((3, 3, 200, 224)))
    with pytest.raises(ValueError):
        p.run_batch(src, params, torch.empty((2, 3, 224, 224)))
    with pytest.raises(ValueError):   # not C-contiguous
        p.run_batch(src, params, torch.empty((3, 224, 224, 3)).permute(0, 3, 1, 2))
    with pytest.raises(ValueError):
        p.run_batch(src, params, torch.empty((4, 3, 224, 224)), rows=[0, 1, 1])
    with pytest.raises(ValueError):
        p.run_batch(src, params, torch.empty((4, 3, 224, 224)), rows=[0, 1, 4])
    with pytest.raises(ValueError):
        p.run_batch(src[:2], params, torch.empty((3, 3, 224, 224)))
    with pytest.raises(TypeError):
        p.run_batch(src, params, torch.empty((3, 3, 224, 224)), runner=object())
    with pytest.raises(TypeError):
        p.run_batch(src, "params", torch.empty((3, 3, 224, 224)))
    with pytest.raises(ValueError):
        BatchRunner(threads=0)


def test_variable_output_size_rows_fail_without_writing(jpegs):
    p = T.plan(T.Compose([T.Resize(50), T.ToImage()]))   # output shape depends on the image
    assert p.output_shape is None
    src = jpegs[:6]
    keys = sample_keys(0, 0, np.arange(6))
    params = p.prepare_batch(src, keys)
    h, w = params.out_size[0]
    out = torch.full((6, 3, int(h), int(w)), 7, dtype=torch.uint8)
    result = p.run_batch(src, params, out)
    for i in range(6):
        ref = p.from_jpeg(src[i], rng=SampleRandom(int(keys[i])))
        if tuple(ref.shape[1:]) == (h, w):
            assert result.status[i] == OK and torch.equal(ref, out[i])
        else:
            assert result.status[i] == FAILED and isinstance(result.errors[i], ValueError)
            assert (out[i] == 7).all()


def many_scans(side, extra):
    """A flat progressive JPEG whose last scan repeats `extra` times (tests/native/
    test_decode_budget.py): small, and over the decode work budget."""
    buf = io.BytesIO()
    Image.new("L", (side, side), 128).save(buf, "JPEG", progressive=True, quality=75)
    data = buf.getvalue()
    sos = [i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] == 0xDA]
    last = data[sos[-1]:data.rindex(b"\xff\xd9")]
    return data[:data.rindex(b"\xff\xd9")] + last * extra + b"\xff\xd9"


def _with_size(data, width, height):
    b = bytearray(data)
    i = 2
    while i < len(b):
        marker = b[i + 1]
        n = int.from_bytes(b[i + 2:i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            b[i + 5:i + 7] = height.to_bytes(2, "big")
            b[i + 7:i + 9] = width.to_bytes(2, "big")
            return bytes(b)
        i += 2 + n
    raise ValueError("no SOF")


@pytest.mark.parametrize("resize", [T.Resize(256), T.Resize([100]), T.Resize(200, max_size=260),
                                    T.Resize(None, max_size=300), T.Resize((5, 9)),
                                    T.Resize(1000, max_size=1001), T.Resize(3)],
                         ids=repr)
def test_vectorized_resize_size_equals_output_size(resize):
    hw = np.random.default_rng(0).integers(1, 5000, (5000, 2))
    hw[:20] = 7
    expect = np.array([resize.output_size((int(h), int(w))) for h, w in hw])
    np.testing.assert_array_equal(resize._output_sizes(hw), expect)
    # the rule of the functional resize too (one definition: output_size is a batch of one)
    from turboloader.transforms.functional import _array

    size = None if resize.size is None else list(resize.size)
    assert [_array._resized_size(size, int(h), int(w), resize.max_size) for h, w in hw[:50]] \
        == [tuple(e) for e in expect[:50].tolist()]


def test_huge_images_never_size_scratch_memory(jpegs):
    p = T.plan(T.Compose(PIPELINES["val_uint8"]), dct_scaling=False)
    huge = _with_size(jpegs[7], 60000, 60000)   # claims 3.6 gigapixels
    buf = io.BytesIO()
    Image.new("RGB", (5000, 5000), (90, 120, 150)).save(buf, "JPEG", quality=80)
    big = buf.getvalue()   # a real 25-megapixel image: a 75 MB decode window
    sources = [jpegs[0], huge, big, jpegs[1]]
    keys = sample_keys(0, 0, np.arange(4))
    runner = BatchRunner(threads=2)
    out = _batch(p, 4)
    result = p.run_batch(sources, p.prepare_batch(sources, keys), out, runner=runner)
    assert result.status.tolist() == [OK, FAILED, OK, OK]
    with pytest.raises(DecodeError) as info:
        p.from_jpeg(huge, rng=SampleRandom(int(keys[1])))
    assert str(result.errors[1]) == str(info.value)
    assert torch.equal(out[2], p.from_jpeg(big, rng=SampleRandom(int(keys[2]))))
    # its ~60 MB window buffer is not kept for the runner's lifetime (buffers > 16 MiB go)
    assert runner.scratch_bytes() < 16 << 20, runner.scratch_bytes()
    # max_pixels below the big image: refused before decoding, by prepare_batch's one check
    small = p.run_batch(sources, p.prepare_batch(sources, keys, max_pixels=10_000_000),
                        _batch(p, 4))
    assert small.status.tolist() == [OK, FAILED, FAILED, OK]
    assert "exceeds the limit of 10000000" in str(small.errors[2])


def test_max_pixels_is_one_rule_checked_once_where_sizes_are_read(jpegs):
    """max_pixels means the same in prepare_batch as in from_jpeg and decode_jpeg (the oracle:
    the per-sample error): its default is DEFAULT_MAX_PIXELS, None is no limit, and a JPEG
    over it is a FAILED row of the params already, with from_jpeg's message; run_batch has
    no second limit of its own (it decodes under the one the params were planned with)."""
    import inspect

    from turboloader.decode import DEFAULT_MAX_PIXELS

    p = T.plan(T.Compose(PIPELINES["val_uint8"]), dct_scaling=False)
    huge = _with_size(jpegs[7], 20000, 10000)   # 2e8 pixels: over the default limit
    sources = [jpegs[0], huge]
    keys = sample_keys(0, 0, np.arange(2))
    params = p.prepare_batch(sources, keys)
    assert params.status.tolist() == [OK, FAILED]
    with pytest.raises(DecodeError) as info:
        p.from_jpeg(huge, rng=SampleRandom(int(keys[1])))
    assert str(params.errors[1]) == str(info.value)
    assert str(DEFAULT_MAX_PIXELS) in str(params.errors[1])
    # None: no limit, the same meaning as from_jpeg's (its header is read and drawn on)
    assert p.prepare_batch(sources, keys, max_pixels=None).status.tolist() == [OK, OK]
    assert "max_pixels" not in inspect.signature(p.run_batch).parameters


@pytest.mark.parametrize("kind", ["420", "444", "422", "gray", "cmyk", "progressive"])
def test_crop_windows_are_the_full_decodes_pixels(kind):
    # A crop without resampling writes the decoded window itself: the fused decode (libjpeg
    # writing rows straight into the wider scratch rows) must equal the same window of a
    # full decode, wherever the window starts (iMCU-aligned or not).
    from turboloader import decode_jpeg

    rng = np.random.default_rng(1)
    yy, xx = np.mgrid[0:173, 0:251]
    img = np.stack([xx, yy, (xx * yy) % 256], axis=-1).astype(np.uint8)
    img = np.clip(img + rng.normal(0, 20, img.shape), 0, 255).astype(np.uint8)
    pil = Image.fromarray(img)
    kw = {"quality": 90}
    if kind == "gray":
        pil = pil.convert("L")
    elif kind == "cmyk":
        pil = pil.convert("CMYK")
    elif kind == "progressive":
        kw["progressive"] = True
    else:
        kw["subsampling"] = {"420": 2, "422": 1, "444": 0}[kind]
    buf = io.BytesIO()
    pil.save(buf, "JPEG", **kw)
    data = buf.getvalue()
    full = decode_jpeg(data)
    p = T.plan(T.Compose([T.RandomCrop((37, 61)), T.ToImage()]), dct_scaling=False)
    n = 24
    keys = sample_keys(0, 0, np.arange(n))
    out = torch.empty((n, 3, 37, 61), dtype=torch.uint8)
    result = p.run_batch([data] * n, p.prepare_batch([data] * n, keys), out)
    assert (result.status == OK).all()
    for i in range(n):
        prm = T.RandomCrop((37, 61)).make_params(full.shape[:2], rng=SampleRandom(int(keys[i])))
        window = full[prm["top"]:prm["top"] + 37, prm["left"]:prm["left"] + 61]
        np.testing.assert_array_equal(out[i].permute(1, 2, 0).numpy(), window)
        assert torch.equal(out[i], p.from_jpeg(data, rng=SampleRandom(int(keys[i]))))
