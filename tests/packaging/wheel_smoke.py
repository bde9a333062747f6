"""Checks an installed turboloader wheel: run by tests/packaging/test_wheel.py (in a fresh venv)
and by the release workflow (.github/workflows/wheels.yml) on every built wheel. Generates its
own data in the current folder, decodes a JPEG (and one with restart markers), checks the
window decode of every JPEG sampling layout against the full decode (the wheel's own
libjpeg-turbo: the same check tests/native/test_jpeg_sampling.py runs on the system's), runs
a TarDataset epoch with workers, and prints OK. Run it from outside the source tree, so that the installed package is imported.

    python tests/packaging/wheel_smoke.py [--no-compiler]   (also: no C compiler on PATH)
"""
import importlib.util
import io
import re
import shutil
import sys
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

import turboloader
from turboloader import transforms as T

SOURCE_TREE = Path(__file__).resolve().parents[2]


def check_sampling_windows(jpeg):
    """Every sampling layout (tests/helpers/jpeg_sampling.py, loaded by path: NumPy and Pillow
    only): its windows at several DCT scales, on the crop and the restart-interval paths, are
    the full decode's, and a layout libjpeg cannot decode is a DecodeError."""
    spec = importlib.util.spec_from_file_location(
        "jpeg_sampling", SOURCE_TREE / "tests" / "helpers" / "jpeg_sampling.py")
    js = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(js)
    from turboloader.errors import DecodeError

    img = js.pattern(61, 83)
    for sampling in js.SAMPLINGS + js.ODD_SAMPLINGS:
        data = js.sampling_jpeg(img, sampling)
        try:
            turboloader.decode_jpeg(data)
        except DecodeError as exc:
            assert "Fractional sampling" in str(exc), (js.sampling_name(sampling), exc)
            continue
        bad = js.window_mismatches(jpeg, data, scales=(8, 6, 4, 2, 1),
                                   flags=(0, jpeg.NO_FANCY_UPSAMPLING), n_random=2)
        seek = jpeg.transcode_restart(np.frombuffer(data, np.uint8), restart_mcus=1)[0]
        bad += js.window_mismatches(jpeg, seek, scales=(8, 4), restart=True, n_random=2)
        assert not bad, (js.sampling_name(sampling), bad[:4])


def main():
    if "--no-compiler" in sys.argv[1:]:
        assert shutil.which("cc") is None and shutil.which("gcc") is None
    where = Path(turboloader.__file__).resolve()
    assert SOURCE_TREE not in where.parents, f"imported from the source tree: {where}"
    # runtime dispatch finds the CPU's best level (a toolchain whose runtime library reports no
    # CPU feature once left the whole wheel on the SSE2 baseline)
    from turboloader._native import _cpu

    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    if "avx2" in flags:  # Linux lists it only when the OS saves AVX state too
        assert _cpu.isa() == "avx2", _cpu.isa()
    buf = io.BytesIO()
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (64, 96, 3), np.uint8)).save(buf, "JPEG")
    data = buf.getvalue()
    img = turboloader.decode_jpeg(data)
    assert np.array_equal(img, np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
    # libjpeg-turbo is linked into the extensions: no libjpeg is loaded for them, neither the
    # system's nor a grafted copy (Pillow maps its own bundled one, which is all there may be)
    maps = Path("/proc/self/maps").read_text()
    jpeg_libs = set(re.findall(r"(\S*libjpeg\S*)", maps))
    assert all("/pillow.libs/" in p for p in jpeg_libs), jpeg_libs
    # a file with restart markers decodes through turboloader's Huffman decoder to the pixels
    # the wheel's own libjpeg-turbo gives (its STOCK_HUFFMAN path), whole and windowed
    from turboloader._native import _jpeg

    seek = _jpeg.transcode_restart(data, restart_mcus=1)[0]
    for crop in ((0, 0, 0, 0), (17, 9, 40, 30)):
        outs = []
        for flags in (0, _jpeg.STOCK_HUFFMAN):
            h, w = crop[3] or 64, crop[2] or 96
            out = np.empty((h, w, 3), np.uint8)
            _jpeg.decode_into(np.frombuffer(seek, np.uint8), out, crop_x=crop[0],
                              crop_y=crop[1], crop_w=crop[2], crop_h=crop[3], flags=flags,
                              restart=True)
            outs.append(out)
        assert np.array_equal(*outs)
    assert np.array_equal(outs[0], img[9:39, 17:57])
    check_sampling_windows(_jpeg)
    with tarfile.open("s.tar", "w") as tar:
        for i in range(10):
            for name, blob in ((f"{i:03d}.jpg", data), (f"{i:03d}.cls", str(i).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    ds = turboloader.TarDataset("s.tar", T.Compose([T.RandomResizedCrop(32), T.ToTensor()]))
    loader = turboloader.DataLoader(ds, 4, num_workers=2)
    labels = sorted(y for _, ys in loader for y in ys.tolist())
    assert labels == list(range(10)), labels
    print("OK", where.parent, sys.version.split()[0])


if __name__ == "__main__":
    main()
