"""decode="gpu" without a GPU: the plan that decides what goes to nvJPEG, the batching of the
byte lists, the per-file retry, the argument checks and the CPU fallbacks of
:class:`~turboloader.decode.device_executor.DeviceDecode`, run whole with a CPU stand-in for the
device decoder (``torchvision.io.decode_jpeg`` on the CPU).

Oracles: Pillow-made files of known kinds; torchvision v2's ``resized_crop`` / ``resize`` on the
torchvision-decoded image with the parameters the CPU path draws for the same seeds (the
device rows are exactly that); the CPU fused path itself for every fallback row (bit for bit)
and, within the documented tolerance, for the device rows."""

import io
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg
import torchvision.transforms.v2.functional as F

from turboloader import DecodeError
from turboloader import transforms as T
from turboloader.decode._device import as_tensors, decode_on_device, groups, route
from turboloader.errors import DeviceUnavailableError
from turboloader.tools.synthetic import synthetic_jpegs
from turboloader.decode.executor import FAILED, GENERIC, OK
from turboloader.decode.device_executor import DeviceDecode
from turboloader.loader._device import check_plan
from turboloader.transforms._random import SampleRandom, sample_keys

from helpers.images import pixels

# torchvision >= 0.29 deprecates its decoders (for TorchCodec); the stand-in still uses one
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

PIPELINES = {
    "train": [T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(),
              T.Normalize(MEAN, STD)],
    "val": [T.Resize(72), T.CenterCrop(64), T.ToTensor(), T.Normalize(MEAN, STD)],
    "train_uint8_bicubic": [T.RandomResizedCrop((48, 80), interpolation="bicubic"),
                            T.RandomHorizontalFlip(), T.PILToTensor()],
    "resize_randomcrop": [T.Resize(90), T.RandomCrop((64, 70)), T.RandomHorizontalFlip(0.7),
                          T.ToImage()],
    "resize_hw": [T.Resize((50, 77)), T.ToImage(), T.ToDtype(torch.float32, scale=True)],
}


def standin(files):
    return decode_jpeg(files, mode=ImageReadMode.RGB, device="cpu")


def encode(arr, **kw):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=90, **kw)
    return buf.getvalue()


@pytest.fixture(scope="module")
def jpegs():
    # 90..400 px short sides: outputs of 64 decode at 1/2 or 1/4 on the CPU's DCT path
    return [b for b, _ in synthetic_jpegs(12, seed=5, short_side=(90, 400))]


@pytest.fixture(scope="module")
def odd():
    """Files of each kind nvJPEG does not get, with what the plan must say about them."""
    base = pixels(120, 160, seed=3)
    cmyk = io.BytesIO()
    Image.fromarray(base).convert("CMYK").save(cmyk, "JPEG", quality=90)
    whole = encode(base)
    return {
        "progressive": encode(base, progressive=True),
        "cmyk": cmyk.getvalue(),
        "truncated": whole[: len(whole) * 2 // 3],
        "gray": encode(base[..., 0].copy()),
        "baseline": whole,
    }


def _run(tf, sources, *, executor=None, dct_scaling=True, out_dtype=None):
    plan = T.plan(T.Compose(tf), dct_scaling=dct_scaling)
    keys = sample_keys(7, 1, range(len(sources)))
    params = plan.prepare_batch(sources, keys)
    out = torch.full((len(sources), *plan.output_shape), -1 if plan.output_dtype is
                     torch.float32 else 0, dtype=plan.output_dtype)
    if executor is None:
        result = plan.run_batch(sources, params, out)
    else:
        result = plan.run_batch(sources, params, out, executor=executor)
    return plan, keys, out, result


# -- the plan: which files go to the device ------------------------------------------------


def test_route_sends_baseline_and_gray_to_the_device_and_says_why_not_the_rest(odd):
    names = list(odd) + ["garbage", "empty"]
    srcs = list(odd.values()) + [b"\xff\xd8\xff\xe0 not a jpeg", b""]
    reasons, sizes = route(srcs)
    why = dict(zip(names, reasons))
    assert why["baseline"] is None and why["gray"] is None
    assert why["progressive"] == "progressive"
    assert why["cmyk"].startswith("4 components")
    assert why["truncated"].startswith("no end-of-image marker")
    assert why["garbage"].startswith("header:") and why["empty"].startswith("header:")
    # the header sizes, as Pillow reads them
    for name, src, hw in zip(names, srcs, sizes):
        if name in ("garbage", "empty"):
            assert hw == (0, 0)
        else:
            w, h = Image.open(io.BytesIO(src)).size
            assert hw == (h, w)


def test_route_takes_every_buffer_kind(odd):
    src = odd["baseline"]
    reasons, _ = route([src, memoryview(src), np.frombuffer(src, np.uint8), bytearray(src)])
    assert reasons == [None] * 4


def test_groups_bound_files_and_decoded_bytes():
    assert groups([(10, 10)] * 5, max_files=2) == [[0, 1], [2, 3], [4]]
    # 3 * 100 * 100 = 30000 bytes each: two fit in 60000, the third starts a call
    assert groups([(100, 100)] * 3, max_bytes=60000) == [[0, 1], [2]]
    # a file larger than the bound is a call of its own, never dropped
    assert groups([(10, 10), (1000, 1000), (10, 10)], max_bytes=1000) == [[0], [1], [2]]
    assert groups([]) == []
    with pytest.raises(ValueError):
        groups([(1, 1)], max_bytes=0)
    with pytest.raises(ValueError):
        groups([(1, 1)], max_files=0)


def test_as_tensors_shares_the_bytes(odd):
    src = odd["baseline"]
    arr = np.frombuffer(src, np.uint8).copy()
    t_bytes, t_arr = as_tensors([src, arr])
    assert t_bytes.dtype == torch.uint8 and t_bytes.dim() == 1
    assert bytes(t_bytes.numpy()) == src
    arr[0] = 0   # a view of the array, not a copy
    assert int(t_arr[0]) == 0
    with pytest.raises(TypeError):
        as_tensors(["a str"])


def test_decode_on_device_retries_file_by_file():
    calls = []

    def decoder(files):
        calls.append(len(files))
        if any(int(f[0]) == 0 for f in files):
            raise RuntimeError("nvjpeg refuses")
        return [torch.full((1,), int(f[0])) for f in files]

    files = [torch.tensor([v], dtype=torch.uint8) for v in (1, 0, 3)]
    images, batch_error = decode_on_device(files, decoder)
    assert isinstance(batch_error, RuntimeError)
    assert calls == [3, 1, 1, 1]
    assert int(images[0]) == 1 and int(images[2]) == 3
    assert isinstance(images[1], RuntimeError)
    # one call when the batch decodes; a decoder that loses files is an error too
    assert decode_on_device(files[:1], decoder)[1] is None
    images, err = decode_on_device(files[:1] * 2, lambda fs: [torch.zeros(1)])
    assert isinstance(err, RuntimeError) and "1 images for 2 files" in str(err)
    assert all(isinstance(i, torch.Tensor) for i in images)   # then one by one: 1 for 1
    images, err = decode_on_device(files[:1], lambda fs: [])
    assert isinstance(err, RuntimeError) and isinstance(images[0], RuntimeError)


# -- the executor's arguments ---------------------------------------------------------------


def test_no_cuda_is_a_typed_error_at_construction(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceUnavailableError, match="needs CUDA"):
        DeviceDecode("cuda")
    with pytest.raises(DeviceUnavailableError):
        DeviceDecode("cuda:0", decoder=standin)   # a stand-in does not make CUDA appear
    assert issubclass(DeviceUnavailableError, RuntimeError)


def test_bad_arguments():
    with pytest.raises(ValueError, match="needs a decoder"):
        DeviceDecode("cpu")
    with pytest.raises(TypeError):
        DeviceDecode("cpu", decoder="nvjpeg")
    with pytest.raises(ValueError):
        DeviceDecode("cpu", decoder=standin, max_call_bytes=0)
    with pytest.raises(ValueError):
        DeviceDecode("cpu", decoder=standin, max_call_files=-1)


def test_check_plan_refuses_what_has_no_device_kernel():
    with pytest.raises(ValueError, match="fuses"):
        check_plan(None)
    with pytest.raises(ValueError, match="one output size"):
        check_plan(T.plan(T.Compose([T.Resize(64), T.ToTensor()])))
    with pytest.raises(ValueError, match="ColorJitter"):
        check_plan(T.plan(T.Compose([T.RandomResizedCrop(32), T.RandomApply(
            [T.ColorJitter(0.3)], p=0.5), T.ToTensor()])))
    check_plan(T.plan(T.Compose(PIPELINES["train"])))


def test_bad_out_and_rows_raise(jpegs):
    ex = DeviceDecode("cpu", decoder=standin)
    plan = T.plan(T.Compose(PIPELINES["train"]))
    params = plan.prepare_batch(jpegs[:2], sample_keys(0, 0, range(2)))
    with pytest.raises(TypeError):
        plan.run_batch(jpegs[:2], params, np.zeros((2, 3, 64, 64), np.float32), executor=ex)
    with pytest.raises(TypeError):
        plan.run_batch(jpegs[:2], params, torch.zeros((2, 3, 64, 64), dtype=torch.uint8),
                       executor=ex)
    with pytest.raises(ValueError, match="shape"):
        plan.run_batch(jpegs[:2], params, torch.zeros((2, 3, 32, 64)), executor=ex)
    with pytest.raises(ValueError, match="rows"):
        plan.run_batch(jpegs[:2], params, torch.zeros((2, 3, 64, 64)), rows=[1, 1], executor=ex)
    with pytest.raises(ValueError):
        plan.run_batch(jpegs[:1], params, torch.zeros((2, 3, 64, 64)), executor=ex)
    with pytest.raises(TypeError):
        plan.run_batch(jpegs[:2], "params", torch.zeros((2, 3, 64, 64)), executor=ex)
    if torch.cuda.is_available():   # a CPU executor refuses a batch on another device
        with pytest.raises(ValueError, match="must be on"):
            plan.run_batch(jpegs[:2], params, torch.zeros((2, 3, 64, 64), device="cuda"),
                           executor=ex)


# -- the rows ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_device_rows_are_torchvisions_kernels_with_the_cpu_paths_draws(jpegs, name):
    """Each device row is torchvision v2 on the decoded image with exactly the parameters
    the CPU path draws for the row's seed (Plan._draw with the row's SampleRandom)."""
    tf = PIPELINES[name]
    ex = DeviceDecode("cpu", decoder=standin)
    plan, keys, out, result = _run(tf, jpegs, executor=ex)
    assert (result.status == OK).all()
    assert ex.stats()["device"] == len(jpegs) and ex.stats()["cpu"] == 0
    mode = {"bilinear": F.InterpolationMode.BILINEAR,
            "bicubic": F.InterpolationMode.BICUBIC}[
        "bicubic" if "bicubic" in name else "bilinear"]
    for i, src in enumerate(jpegs):
        img = decode_jpeg(torch.frombuffer(bytearray(src), dtype=torch.uint8),
                          mode=ImageReadMode.RGB)
        H, W = img.shape[1:]
        box, clip, (oh, ow), flip, ops = plan._draw(H, W, SampleRandom(int(keys[i])))
        assert not ops
        x0, y0, x1, y1 = box
        if clip:
            ref = F.resized_crop(img, round(y0), round(x0), round(y1 - y0), round(x1 - x0),
                                 [oh, ow], interpolation=mode, antialias=True)
        else:
            resize = next(t for t in tf if isinstance(t, T.Resize))
            rh, rw = resize.output_size((H, W))
            ref = F.resize(img, [rh, rw], interpolation=mode, antialias=True)
            t, l = round(y0 * rh / H), round(x0 * rw / W)
            ref = ref[:, t:t + oh, l:l + ow]
        if flip:
            ref = F.horizontal_flip(ref)
        if plan.output_dtype is torch.float32:
            scale, bias = plan._fused.affine
            ref = ref.float() * torch.tensor(scale).view(3, 1, 1) + \
                torch.tensor(bias).view(3, 1, 1)
        assert torch.equal(out[i], ref.to(out.dtype)), (name, i)


@pytest.mark.parametrize("name", ["train", "val", "train_uint8_bicubic"])
def test_device_rows_are_the_cpu_paths_within_the_tolerance(jpegs, name):
    """Against the CPU fused path with the same seeds: within one uint8 level of its
    full-resolution decode (dct_scaling=False), and within the documented DCT-scaling
    tolerance of its default (the plan module's: mean <= 2, p99 <= 12, max <= 64 levels)."""
    tf = PIPELINES[name]
    _, _, dev, _ = _run(tf, jpegs, executor=DeviceDecode("cpu", decoder=standin))
    plan, _, full, _ = _run(tf, jpegs, dct_scaling=False)
    _, _, scaled, _ = _run(tf, jpegs)

    def levels(a, b):
        if plan.output_dtype is torch.float32:
            scale = torch.tensor(plan._fused.affine[0]).view(1, 3, 1, 1)
            return ((a - b) / scale).abs()
        return (a.int() - b.int()).abs().float()

    d = levels(dev, full)
    assert float(d.max()) <= 1.01, float(d.max())
    d = levels(dev, scaled)
    assert float(d.mean()) <= 2 and float(d.max()) <= 64
    assert float(torch.quantile(d.flatten()[::7], 0.99)) <= 12


def test_what_nvjpeg_does_not_take_is_the_cpu_path_bit_for_bit(jpegs, odd):
    tf = PIPELINES["train"]
    srcs = [jpegs[0], odd["progressive"], odd["cmyk"], odd["truncated"], jpegs[1], odd["gray"]]
    ex = DeviceDecode("cpu", decoder=standin)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # torchvision's decode_jpeg
        _, _, dev, r_dev = _run(tf, srcs, executor=ex)
        _, _, cpu, r_cpu = _run(tf, srcs)
    # the truncated file fails as on the CPU path (libjpeg-turbo's error, typed)
    assert r_dev.status.tolist() == r_cpu.status.tolist() == [OK, OK, OK, FAILED, OK, OK]
    assert isinstance(r_dev.errors[3], DecodeError)
    assert str(r_dev.errors[3]) == str(r_cpu.errors[3])
    for i in (1, 2):
        assert torch.equal(dev[i], cpu[i]), i
    stats = ex.stats()
    assert stats["device"] == 3 and stats["cpu"] == 3
    assert stats["cpu_reasons"] == {"progressive": 1, "4 components (cmyk)": 1,
                                    "no end-of-image marker (truncated)": 1}


def test_bad_rows_carry_the_cpu_paths_typed_errors(jpegs):
    tf = PIPELINES["train"]
    bad_header = b"\xff\xd8\xff\xdb\x00\x43" + b"\x00" * 20
    srcs = [jpegs[0], bad_header, b"not a jpeg at all", jpegs[2]]
    _, _, _, r_dev = _run(tf, srcs, executor=DeviceDecode("cpu", decoder=standin))
    _, _, _, r_cpu = _run(tf, srcs)
    assert r_dev.status.tolist() == r_cpu.status.tolist() == [OK, FAILED, FAILED, OK]
    for i in (1, 2):
        assert type(r_dev.errors[i]) is type(r_cpu.errors[i])
        assert isinstance(r_dev.errors[i], DecodeError)
        assert str(r_dev.errors[i]) == str(r_cpu.errors[i])


def test_a_file_the_device_refuses_is_decoded_on_the_cpu(jpegs):
    refuse = jpegs[3]

    def picky(files):
        if any(bytes(f.numpy()) == refuse for f in files):
            raise RuntimeError("nvjpegDecodeBatched failed: NVJPEG_STATUS_BAD_JPEG")
        return standin(files)

    tf = PIPELINES["train"]
    ex = DeviceDecode("cpu", decoder=picky)
    _, _, dev, r = _run(tf, jpegs[:6], executor=ex)
    _, _, cpu, _ = _run(tf, jpegs[:6])
    assert (r.status == OK).all()
    assert torch.equal(dev[3], cpu[3])   # the CPU path's row, DCT scaling and all
    stats = ex.stats()
    assert stats["cpu"] == 1 and stats["cpu_reasons"] == {"device decoder": 1}
    assert stats["device"] == 5 and stats["device_calls"] == 1 + 6


def test_a_decoder_that_always_fails_warns_once_and_every_row_still_decodes(jpegs):
    def broken(files):
        raise RuntimeError("no nvjpeg in this build")

    ex = DeviceDecode("cpu", decoder=broken)
    tf = PIPELINES["val"]
    with pytest.warns(RuntimeWarning, match="no nvjpeg in this build"):
        _, _, dev, r = _run(tf, jpegs[:4], executor=ex)
    _, _, cpu, _ = _run(tf, jpegs[:4])
    assert (r.status == OK).all() and torch.equal(dev, cpu)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # once per executor
        _run(tf, jpegs[:4], executor=ex)
    assert ex.stats()["device"] == 0 and ex.stats()["cpu"] == 8


def test_wrong_shaped_device_output_falls_back(jpegs):
    ex = DeviceDecode("cpu", decoder=lambda fs: [torch.zeros((3, 5, 5), dtype=torch.uint8)
                                                 for _ in fs])
    _, _, dev, r = _run(PIPELINES["train"], jpegs[:3], executor=ex)
    _, _, cpu, _ = _run(PIPELINES["train"], jpegs[:3])
    assert (r.status == OK).all() and torch.equal(dev, cpu)
    assert ex.stats()["cpu"] == 3


def test_rows_arrays_generic_and_small_calls(jpegs):
    """Rows of ``out`` chosen by ``rows``; a decoded array (a cache hit) on the CPU; a
    GENERIC row left alone as on the CPU path; calls cut by max_call_files."""
    tf = [T.RandomCrop(100), T.ToImage()]
    small = encode(pixels(60, 80, seed=1))   # smaller than the crop: the generic path
    arr = pixels(150, 170, seed=2)
    srcs = [jpegs[0], small, arr, jpegs[1], jpegs[2]]
    plan = T.plan(T.Compose(tf))
    keys = sample_keys(3, 0, range(len(srcs)))
    params = plan.prepare_batch(srcs, keys)
    rows = np.array([4, 0, 2, 1, 3])
    ex = DeviceDecode("cpu", decoder=standin, max_call_files=1)
    out = torch.zeros((5, 3, 100, 100), dtype=torch.uint8)
    r = plan.run_batch(srcs, params, out, rows=rows, executor=ex)
    ref = torch.zeros_like(out)
    r_cpu = plan.run_batch(srcs, params, ref, rows=rows)
    assert r.status.tolist() == r_cpu.status.tolist() == [OK, GENERIC, OK, OK, OK]
    assert torch.equal(out, ref)   # crop-only rows: the same pixels on both decoders
    assert ex.stats()["device_calls"] == 3 and ex.stats()["cpu_reasons"] == {"decoded array": 1}


# -- one executor contract ----------------------------------------------------------------------


def test_the_device_executor_has_the_cpu_executors_run_batch_signature():
    # one contract: a DeviceDecode is called exactly as decode.executor.run_batch is, so the
    # stream's batch call (Plan.run_batch(..., executor=...)) does not know which it holds
    import inspect

    from turboloader.decode import executor

    cpu = inspect.signature(executor.run_batch)
    dev = inspect.signature(DeviceDecode.run_batch)
    assert list(dev.parameters)[0] == "self"
    assert [(p.name, p.kind, p.default) for p in list(dev.parameters.values())[1:]] == \
        [(p.name, p.kind, p.default) for p in cpu.parameters.values()]


def test_over_the_pixel_limit_fails_as_on_the_cpu_without_a_check_of_its_own(jpegs):
    # max_pixels is read_sizes' rule (prepare_batch): the device executor leaves those rows
    # FAILED with the same error, and decodes nothing for them
    plan = T.plan(T.Compose(PIPELINES["train"]))
    srcs = jpegs[:4]
    areas = sorted({w * h for w, h in (Image.open(io.BytesIO(s)).size for s in srcs)})
    limit = areas[len(areas) // 2] - 1   # the larger half is over it
    params = plan.prepare_batch(srcs, sample_keys(0, 0, range(4)), max_pixels=limit)
    ex = DeviceDecode("cpu", decoder=standin)
    out = torch.zeros((4, *plan.output_shape))
    r = plan.run_batch(srcs, params, out, executor=ex)
    ref = plan.run_batch(srcs, params, torch.zeros_like(out))
    assert r.status.tolist() == ref.status.tolist()
    assert FAILED in r.status.tolist() and OK in r.status.tolist()
    for a, b in zip(r.errors, ref.errors):
        assert (a is None) == (b is None) and str(a) == str(b)
    assert ex.stats()["device"] == r.status.tolist().count(OK)


@pytest.mark.parametrize("tf", [
    [T.Resize(72), T.CenterCrop(64), T.ToImage()],          # resize, then a crop
    [T.Resize((80, 70)), T.RandomCrop(64), T.ToImage()],
    [T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToImage()],   # crop, then resize
    [T.CenterCrop(64), T.ToImage()],                          # a crop alone
], ids=["resize-centercrop", "resize-randomcrop", "rrc-flip", "crop"])
def test_device_rows_follow_params_geometry(jpegs, tf):
    # the device's crop and resize are the drawn geometry's (BatchParams.geometry, which masks
    # and boxes follow too): torchvision's resize / crop of the decoded image on those axes
    plan = T.plan(T.Compose(tf))
    srcs = jpegs[:4]
    params = plan.prepare_batch(srcs, sample_keys(5, 2, range(4)))
    out = torch.zeros((4, *plan.output_shape), dtype=plan.output_dtype)
    r = plan.run_batch(srcs, params, out, executor=DeviceDecode("cpu", decoder=standin))
    assert r.status.tolist() == [OK] * 4
    g = params.geometry
    for i, src in enumerate(srcs):
        img = decode_jpeg(torch.frombuffer(bytearray(src), dtype=torch.uint8),
                          mode=ImageReadMode.RGB)
        (y0, ty, h, rh), (x0, tx, w, rw) = g.axes[i].tolist()
        oh, ow = plan.output_shape[1:]
        if g.crop_first:
            want = img[:, y0:y0 + h, x0:x0 + w]
            if (h, w) != (rh, rw):
                want = F.resize(want, [rh, rw], antialias=True)
        else:
            want = img if (rh, rw) == (h, w) else F.resize(img, [rh, rw], antialias=True)
            want = want[:, ty:ty + oh, tx:tx + ow]
        if params.flip[i]:
            want = want.flip(-1)
        assert torch.equal(out[i], want), i


def test_the_stream_holds_its_executor(tmp_path):
    # no thread-local in transforms: the stream leased inside reading_as(..., executor=)
    # holds the executor, and the sample step runs its batch calls on it
    import turboloader.decode.device_executor as dev_module
    from helpers.shards import write_shards
    from turboloader.data import TarDataset
    from turboloader.data.reader import reading_as

    assert not hasattr(dev_module, "current_device_decode")
    ex = DeviceDecode("cpu", decoder=standin)
    ds = TarDataset(write_shards(tmp_path, [6]), transform=T.Compose(
        [T.Resize(40), T.CenterCrop(32), T.ToImage()]))
    ds.set_epoch(0)
    with reading_as("rank0-thread0", executor=ex):
        st = ds._lease()
        try:
            assert st.executor is ex
        finally:
            ds._release(st)
        batches = list(ds.worker_stream(0, 1, batch_size=3,
                                        out=lambda shape, dtype: torch.empty(shape, dtype=dtype)))
    assert sum(len(b[1]) for b in batches) == 6
    assert ex.stats()["device"] + ex.stats()["cpu"] == 6
    with reading_as("rank0-thread0"):
        st = ds._lease()
        assert st.executor is None   # the next lease, on the CPU
        ds._release(st)


# -- restart-marker files libjpeg warns about ------------------------------------------------


def restart_variants(data):
    """A file with a restart marker every MCU, and copies damaged the ways libjpeg recovers
    from (a warning) or refuses (an error): ``{name: bytes}``."""
    from turboloader._native import _jpeg

    conv = _jpeg.transcode_restart(np.frombuffer(data, np.uint8), restart_mcus=1)[0]
    sos = conv.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(conv[sos + 2:sos + 4], "big")
    rsts = [i for i in range(start, len(conv) - 1)
            if conv[i] == 0xFF and 0xD0 <= conv[i + 1] <= 0xD7]
    mis = bytearray(conv)
    mis[rsts[5] + 1] = 0xD0 + (mis[rsts[5] + 1] - 0xD0 + 3) % 8
    return {
        "intact": conv,
        "misnumbered": bytes(mis),
        "missing": conv[:rsts[7]] + conv[rsts[7] + 2:],
        "extra bytes before a marker": conv[:rsts[11]] + b"\x12\x34" + conv[rsts[11]:],
        "a byte short": conv[:rsts[13] - 1] + conv[rsts[13]:],
        "one too many": conv[:rsts[9]] + b"\xff\xd3" + conv[rsts[9]:],
    }


@pytest.fixture(scope="module")
def restart_files(jpegs):
    return [(f"{i}:{name}", v) for i, data in enumerate(jpegs[:4])
            for name, v in restart_variants(data).items()]


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
def test_restart_files_libjpeg_warns_about_get_the_cpu_paths_warnings_and_errors(
        restart_files, strict):
    """nvJPEG (and the stand-in) decode damaged restart intervals without a word: such files
    are found on the host and decoded on the CPU, so the device batch reports libjpeg's
    warnings, and with strict its errors, row for row as the CPU path does."""
    names = [n for n, _ in restart_files]
    srcs = [v for _, v in restart_files]
    plan = T.plan(T.Compose(PIPELINES["train"]))
    keys = sample_keys(7, 1, range(len(srcs)))
    params = plan.prepare_batch(srcs, keys)
    out_cpu = torch.zeros((len(srcs), *plan.output_shape))
    out_dev = torch.zeros((len(srcs), *plan.output_shape))
    kw = {"strict": True} if strict else {}
    cpu = plan.run_batch(srcs, params, out_cpu, **kw)
    ex = DeviceDecode("cpu", decoder=standin)
    dev = plan.run_batch(srcs, params, out_dev, executor=ex, **kw)
    assert dev.status.tolist() == cpu.status.tolist()
    assert dev.warnings == cpu.warnings
    assert [None if e is None else (type(e), str(e)) for e in dev.errors] == \
        [None if e is None else (type(e), str(e)) for e in cpu.errors]
    flagged = {n.split(":", 1)[1] for n, w, s in zip(names, cpu.warnings, cpu.status.tolist())
               if w or s != OK}
    assert "intact" not in flagged and len(flagged) >= 3, flagged   # the cases do reach libjpeg
    if strict:
        assert not any(dev.warnings) and (dev.status != OK).sum() >= 4
    else:
        assert sum(1 for w in dev.warnings if w) >= 4
    # every intact file still goes to the device
    intact = [i for i, n in enumerate(names) if n.endswith(":intact")]
    reasons, _ = route([srcs[i] for i in intact])
    assert reasons == [None] * len(intact)
    assert ex.stats()["device"] >= len(intact)
    for i in range(len(srcs)):   # the CPU rows are the CPU path's pixels exactly
        if names[i].split(":", 1)[1] in flagged and cpu.status[i] == OK:
            assert torch.equal(out_dev[i], out_cpu[i])
