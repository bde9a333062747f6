"""max_pixels guards every codec, not only JPEG: a small PNG or WebP that claims a huge image
is a DecodeError naming the size and the key before any pixel is decoded."""

import io

import numpy as np
import pytest
from PIL import Image
from helpers.shards import write_tar

import turboloader
from turboloader import transforms as T
from turboloader.data.cache import decode_pil
from turboloader.errors import DecodeError


def flat(fmt, w, h):
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (10, 20, 30)).save(buf, fmt, **({"lossless": True} if fmt == "WEBP"
                                                              else {}))
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "WEBP"])
def test_decode_pil_checks_the_header(fmt):
    data = flat(fmt, 3000, 3000)
    assert len(data) < 60_000
    with pytest.raises(DecodeError, match=r"3000 x 3000 .*max_pixels"):
        decode_pil(data, max_pixels=1_000_000)
    assert decode_pil(data, max_pixels=None).size == (3000, 3000)
    assert decode_pil(flat(fmt, 100, 100), max_pixels=1_000_000).size == (100, 100)


@pytest.mark.parametrize("fmt,ext", [("PNG", "png"), ("WEBP", "webp")])
def test_tar_dataset_applies_max_pixels_to_every_codec(tmp_path, fmt, ext):
    path = write_tar(tmp_path / "s.tar", [(f"big.{ext}", flat(fmt, 3000, 3000)), ("big.cls", b"1"),
                                          (f"ok.{ext}", flat(fmt, 40, 30)), ("ok.cls", b"2")])
    tf = T.Compose([T.Resize(8), T.ToTensor()])
    ds = turboloader.TarDataset([path], tf, shuffle=False, max_pixels=1_000_000)
    with pytest.raises(DecodeError) as info:
        list(ds)
    assert "'big'" in "".join(info.value.__notes__)
    ds = turboloader.TarDataset([path], tf, shuffle=False, max_pixels=1_000_000,
                                on_error="skip", max_failures=1)
    assert [y for _, y in ds] == [2, 2]  # the skipped one replaced
    assert ds.stats()["skipped"][0]["key"] == "big"


def test_image_folder_applies_max_pixels_to_png(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "big.png").write_bytes(flat("PNG", 3000, 3000))
    ds = turboloader.ImageFolder(str(tmp_path), T.ToTensor(), max_pixels=1_000_000)
    with pytest.raises(DecodeError, match="max_pixels"):
        ds[0]
