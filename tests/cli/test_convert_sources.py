"""``turboloader convert`` reads Parquet / Arrow files and CSV / JSON Lines manifests as
sources; the TAR it writes holds the source's bytes and labels (oracle: pyarrow, tarfile)."""

import json
import subprocess
import sys
import tarfile

import pytest
from helpers import subprocess_env
from helpers.shards import jpeg

from turboloader.tools.convert import convert, detect_format

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def members(path):
    out = {}
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            if m.isfile():
                out[m.name] = tf.extractfile(m).read()
    return out


def samples(path):
    """``{image bytes: label}`` of a TAR written by convert."""
    got = members(path)
    out = {}
    for name, data in got.items():
        if name.endswith(".jpg"):
            out[data] = int(got[name[:-4] + ".cls"])
    return out


@pytest.mark.parametrize("hf_struct", [False, True])
def test_parquet_to_tar(tmp_path, hf_struct):
    images = [jpeg(i) for i in range(20)]
    column = ([{"bytes": b, "path": f"{i}.jpg"} for i, b in enumerate(images)] if hf_struct
              else images)
    for k in range(2):  # two files, two row groups each
        part = slice(10 * k, 10 * k + 10)
        pq.write_table(pa.table({"image": column[part], "label": list(range(20))[part]}),
                       tmp_path / f"d-{k}.parquet", row_group_size=5)
    assert detect_format(str(tmp_path / "d-0.parquet")) == "parquet"
    report = convert(str(tmp_path / "d-*.parquet"), str(tmp_path / "out.tar"))
    assert report.written == 20 and not report.skipped
    assert samples(tmp_path / "out.tar") == {b: i for i, b in enumerate(images)}


def test_manifest_to_tar_with_class_names(tmp_path):
    (tmp_path / "img").mkdir()
    rows = []
    for i in range(12):
        (tmp_path / "img" / f"{i}.jpg").write_bytes(jpeg(i))
        rows.append(f"img/{i}.jpg,{'dog' if i % 3 else 'cat'}")
    (tmp_path / "img" / "bad.jpg").write_bytes(b"not an image")
    (tmp_path / "train.csv").write_text("path,label\n" + "\n".join(rows) +
                                        "\nimg/bad.jpg,cat\nimg/missing.jpg,dog\n")
    report = convert(str(tmp_path / "train.csv"), str(tmp_path / "out.tar"))
    assert report.written == 12 and len(report.skipped) == 2
    got = samples(tmp_path / "out.tar")
    assert got == {jpeg(i): (1 if i % 3 else 0) for i in range(12)}  # cat=0, dog=1
    assert json.loads((tmp_path / "classes.json").read_text()) == ["cat", "dog"]


@pytest.mark.slow
def test_convert_command_line_reads_jsonl_and_parquet_columns(tmp_path):
    pq.write_table(pa.table({"jpg": [jpeg(i) for i in range(6)], "cls": list(range(6))}),
                   tmp_path / "x.parquet")
    (tmp_path / "m.jsonl").write_text("".join(
        json.dumps({"file": f"{i}.jpg", "y": i}) + "\n" for i in range(4)))
    for i in range(4):
        (tmp_path / f"{i}.jpg").write_bytes(jpeg(i))
    for src, extra in (("x.parquet", ["--image-column", "jpg", "--label-column", "cls"]),
                       ("m.jsonl", ["--image-column", "file", "--label-column", "y"])):
        out = subprocess.run([sys.executable, "-m", "turboloader", "convert", src,
                              f"{src}.tar", *extra], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120, env=subprocess_env())
        assert out.returncode == 0, out.stderr
        n = 6 if src == "x.parquet" else 4
        assert samples(tmp_path / f"{src}.tar") == {jpeg(i): i for i in range(n)}
