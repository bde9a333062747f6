"""``turboloader convert --seekable`` (issue 22.1): every JPEG rewritten losslessly with
restart markers into TAR, TBL and folder outputs; Pillow reads the same pixels as from the
originals; a corrupt JPEG is copied as it is; the summary says what happened."""

import io
import struct
import tarfile

import numpy as np
import pytest
from PIL import Image

from turboloader.io.tbl import TBLFile
from turboloader.tools.cli import main
from turboloader.tools.convert import convert

CLASSES = ("ant", "bee")


def _photo(seed, h=120, w=170):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([xx / w * 255, yy / h * 255, 128 + 90 * np.sin(xx / 5)], axis=-1)
    return np.clip(img + rng.normal(0, 10, img.shape), 0, 255).astype(np.uint8)


def _jpeg(seed, **kw):
    buf = io.BytesIO()
    Image.fromarray(_photo(seed)).save(buf, "JPEG", quality=88, **kw)
    return buf.getvalue()


def _pixels(data):
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def _dri(data):
    i = data.find(b"\xff\xdd")
    return 0 if i < 0 else struct.unpack(">H", data[i + 4:i + 6])[0]


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "folder"
    originals = {}
    for label, c in enumerate(CLASSES):
        (root / c).mkdir(parents=True)
        for i in range(4):
            data = _jpeg(10 * label + i, progressive=bool(i % 2), subsampling=i % 3)
            (root / c / f"{c}{i}.jpg").write_bytes(data)
            originals[f"{c}/{c}{i}"] = data
    return root, originals


def _check(originals, outputs):
    assert sorted(outputs) == sorted(originals)
    for key, data in outputs.items():
        assert _dri(data) > 0, key
        np.testing.assert_array_equal(_pixels(data), _pixels(originals[key]))


def test_tar_output(tmp_path, folder):
    root, originals = folder
    report = convert(root, tmp_path / "out.tar", seekable=True, shuffle=False)
    assert report.written == 8 and report.seekable == 8 and report.seekable_kept == 0
    assert "8 JPEGs rewritten with restart markers" in report.summary()
    with tarfile.open(tmp_path / "out.tar") as t:
        outs = {m.name[:-4]: t.extractfile(m).read() for m in t.getmembers()
                if m.name.endswith(".jpg")}
    _check(originals, outs)


def test_tbl_output(tmp_path, folder):
    root, originals = folder
    convert(root, tmp_path / "out.tbl", seekable=True)
    with TBLFile(tmp_path / "out.tbl") as f:
        assert f.metadata.get("seekable") is True
        outs = {k: bytes(f.data(i)) for i, k in enumerate(f.keys)}
    _check(originals, outs)


def test_folder_output_through_the_command_line(tmp_path, folder, capsys):
    root, originals = folder
    out = tmp_path / "out"
    assert main(["convert", str(root), str(out), "--seekable", "--restart-mcus", "2"]) == 0
    printed = capsys.readouterr().out
    assert "rewritten with restart markers" in printed
    outs = {f"{p.parent.name}/{p.stem}": p.read_bytes() for p in out.glob("*/*.jpg")}
    _check(originals, outs)
    assert {_dri(d) for d in outs.values()} == {2}


def test_corrupt_jpeg_is_copied_as_is(tmp_path, folder):
    root, originals = folder
    bad = bytearray(originals["ant/ant0"])
    bad[len(bad) // 2: len(bad) // 2 + 40] = b"\x00" * 40   # decodes only with warnings
    (root / "ant" / "ant0.jpg").write_bytes(bytes(bad))
    report = convert(root, tmp_path / "out.tar", seekable=True, shuffle=False)
    assert report.written == 8
    assert report.seekable + report.seekable_kept == 8
    with tarfile.open(tmp_path / "out.tar") as t:
        outs = {m.name[:-4]: t.extractfile(m).read() for m in t.getmembers()
                if m.name.endswith(".jpg")}
    if report.seekable_kept:
        assert outs["ant/ant0"] == bytes(bad)
        assert "copied as is" in report.summary()


def test_jpeg_that_cannot_be_rewritten_is_named(tmp_path, folder):
    # a truncated JPEG (its header reads, its data ends early): written as it is, counted,
    # and named with libjpeg's reason in the report and the summary
    root, originals = folder
    cut = originals["ant/ant0"][: len(originals["ant/ant0"]) * 2 // 3]
    (root / "ant" / "ant0.jpg").write_bytes(cut)
    report = convert(root, tmp_path / "out.tar", seekable=True, shuffle=False)
    assert (report.written, report.seekable, report.seekable_kept) == (8, 7, 1)
    [kept] = report.not_seekable
    assert kept.key == "ant/ant0" and kept.source.endswith("ant0.jpg")
    assert kept.reason.startswith("DecodeError: ") and "JPEG" in kept.reason
    with tarfile.open(tmp_path / "out.tar") as t:
        assert t.extractfile("ant/ant0.jpg").read() == cut
    summary = report.summary()
    assert "1 copied as is" in summary and "key 'ant/ant0': DecodeError" in summary


def test_seekable_with_raw_is_refused(tmp_path, folder):
    root, _ = folder
    with pytest.raises(ValueError, match="seekable"):
        convert(root, tmp_path / "x.tbl", seekable=True, codec="raw")


def test_help_names_the_option(capsys):
    with pytest.raises(SystemExit):
        main(["convert", "--help"])
    assert "--seekable" in capsys.readouterr().out


def _tensors(urls, pipeline, **kw):
    import torch

    import turboloader as tl
    from turboloader import transforms as T

    head = ([T.RandomResizedCrop(64), T.RandomHorizontalFlip()] if pipeline == "train"
            else [T.Resize(80), T.CenterCrop(64)])
    tf = T.Compose([*head, T.ToImage(), T.ToDtype(torch.float32, scale=True),
                    T.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
    ds = tl.TarDataset(urls, tf, shuffle=False, seed=3)
    torch.manual_seed(0)   # random parameters may come from torch's RNG outside a loader
    if kw:
        dl = tl.DataLoader(ds, batch_size=4, backend="threads", **kw)
        return torch.cat([x for x, _ in dl])
    return torch.stack([x for x, _ in ds])


@pytest.mark.parametrize("pipeline", ["train", "val"])
def test_datasets_give_the_same_tensors_from_seekable_shards(tmp_path, folder, pipeline):
    import torch

    root, _ = folder
    # the same shard name (random parameters may depend on where a sample comes from)
    orig, seek = tmp_path / "orig" / "s.tar", tmp_path / "seek" / "s.tar"
    convert(root, orig, shuffle=False)
    convert(root, seek, seekable=True, shuffle=False)
    a = _tensors([str(orig)], pipeline)
    b = _tensors([str(seek)], pipeline)
    assert a.shape == (8, 3, 64, 64) and torch.equal(a, b)
    # the batched thread backend (the native batch runner, several threads) too
    c = _tensors([str(seek)], pipeline, num_workers=2)
    d = _tensors([str(orig)], pipeline, num_workers=2)
    assert torch.equal(c, d)
