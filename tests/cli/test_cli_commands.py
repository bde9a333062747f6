"""The ``turboloader`` commands run as a user would: exit codes, messages, outputs."""

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from PIL import Image

from turboloader.tools.cli import main
from turboloader.io.tbl import TBLFile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from turboloader.tools.synthetic import synthetic_jpegs

    root = tmp_path_factory.mktemp("cli") / "folder"
    for i, (jpeg, label) in enumerate(synthetic_jpegs(9, seed=2, num_classes=3)):
        d = root / f"cls{label}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:03d}.jpg").write_bytes(jpeg)
    return root


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", ["convert", "inspect", "verify", "index", "preview", "bench",
                                     "demo"])
def test_help(command):
    proc = subprocess.run([sys.executable, "-m", "turboloader.tools.cli", command, "--help"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0 and f"usage: turboloader {command}" in proc.stdout


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "turboloader", *map(str, argv)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


@pytest.mark.slow
def test_a_misspelt_option_prints_its_commands_usage():
    # argparse's own error printed the top-level usage (COMMAND ...), which does not show the
    # option the user meant; the subcommand's usage does, and the close match is named
    proc = _cli("convert", "src", "dst", "--shard-sise", "5")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("usage: turboloader convert "), proc.stderr
    assert "--shard-size SHARD_SIZE" in proc.stderr
    assert "turboloader convert: error: unrecognized arguments: --shard-sise 5" in proc.stderr
    assert "did you mean --shard-size?" in proc.stderr
    proc = _cli("verify", "x", "--no-manfest")
    assert proc.returncode == 2 and proc.stderr.startswith("usage: turboloader verify ")
    assert "did you mean --no-manifest?" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", ["convert", "inspect", "verify", "index", "preview", "bench",
                                     "demo"])
def test_every_argument_has_help_text(command):
    # a user stalls on `bench PATH --size N` when --help does not say what they are
    import argparse

    from turboloader.tools.cli import _build_parser

    parser = _build_parser()
    sub = next(a for a in parser._actions
               if isinstance(a, argparse._SubParsersAction)).choices[command]
    for action in sub._actions:
        assert action.help and action.help != argparse.SUPPRESS, (command, action.dest)
    proc = _cli(command, "--help")
    assert proc.returncode == 0
    if command in ("preview", "bench"):
        assert "ImageFolder root, TAR shards" in proc.stdout        # what PATH is
        assert "RandomResizedCrop(PX)" in proc.stdout               # what --size is


def test_bad_arguments_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["convert", "only-one-arg"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["preview", "x", "--transform", "sideways"])
    assert e.value.code == 2


def test_convert_inspect_verify(capsys, folder, tmp_path):
    code, out, err = run(capsys, "convert", folder, tmp_path / "shards", "--to", "tar",
                         "--shard-size", "4", "-q")
    assert code == 0, err
    assert "samples written: 9" in out and "outputs: 3 files" in out and "skipped: 0" in out
    code, out, _ = run(capsys, "convert", tmp_path / "shards", tmp_path / "a.tbl", "-q")
    assert code == 0 and "output: " + str(tmp_path / "a.tbl") in out
    code, out, _ = run(capsys, "convert", tmp_path / "a.tbl", tmp_path / "s.tbl",
                       "--max-short-side", "128", "-j", "2", "-q")
    assert code == 0 and "9 images re-encoded" in out

    code, out, _ = run(capsys, "inspect", tmp_path / "s.tbl")
    assert code == 0
    assert "samples: 9" in out and "codecs: jpeg 9" in out and "labels: 3 distinct" in out
    assert "short side: min 128" in out and "max_short_side=128" in out
    code, out, _ = run(capsys, "inspect", folder)
    assert code == 0 and "folder" in out and "samples: 9" in out and "cls0" in out

    code, out, _ = run(capsys, "verify", tmp_path / "a.tbl", "-q")
    assert code == 0 and "checked 9 samples: 9 ok, 0 bad" in out


def test_verify_reports_each_bad_sample(capsys, folder, tmp_path):
    assert run(capsys, "convert", folder, tmp_path / "a.tbl", "-q")[0] == 0
    with TBLFile(tmp_path / "a.tbl") as f:
        offsets, keys = f.index["offset"].tolist(), f.keys
    data = bytearray((tmp_path / "a.tbl").read_bytes())
    for r in (2, 7):
        data[offsets[r] + 400] ^= 0x10
    (tmp_path / "a.tbl").write_bytes(bytes(data))
    code, out, _ = run(capsys, "verify", tmp_path / "a.tbl", "-q")
    assert code == 1
    lines = [l for l in out.splitlines() if "CRC-32" in l]
    assert [l.split(": ")[1] for l in lines] == [keys[2], keys[7]]
    assert all(l.startswith(str(tmp_path / "a.tbl")) for l in lines)
    assert "9 samples: 7 ok, 2 bad" in out


def test_verify_tar_with_truncated_jpeg(capsys, folder, tmp_path):
    path = tmp_path / "t.tar"
    good = next(folder.rglob("*.jpg")).read_bytes()
    with tarfile.open(path, "w") as tar:
        for name, data in [("a.jpg", good), ("a.cls", b"0"), ("b.jpg", good[:len(good) // 2]),
                           ("b.cls", b"1")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    code, out, _ = run(capsys, "verify", path, "-q", "--no-manifest")
    assert code == 1 and f"{path}: b: " in out and "1 ok, 1 bad" in out


def test_convert_with_skips_exits_3(capsys, folder, tmp_path):
    import shutil

    src = tmp_path / "src"
    shutil.copytree(folder, src)
    (src / "cls0" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 broken")
    code, out, _ = run(capsys, "convert", src, tmp_path / "a.tbl", "-q")
    assert code == 3 and "samples written: 9" in out and "skipped: 1" in out
    assert "cls0/broken" in out and "DecodeError" in out
    code, _, err = run(capsys, "convert", src, tmp_path / "b.tbl", "--strict", "-q")
    assert code == 1 and "broken" in err and not (tmp_path / "b.tbl").exists()


def test_errors_are_clear(capsys, folder, tmp_path):
    code, _, err = run(capsys, "inspect", tmp_path / "nope.tbl")
    assert code == 1 and "turboloader inspect: error:" in err and "nope.tbl" in err
    (tmp_path / "bad.tbl").write_bytes(b"\x89TBL\r\n\x1a\n" + b"\0" * 200)
    code, _, err = run(capsys, "verify", tmp_path / "bad.tbl")
    assert code == 1 and "checksum" in err and "bad.tbl" in err
    assert run(capsys, "convert", folder, tmp_path / "x.tbl", "-q")[0] == 0
    code, _, err = run(capsys, "convert", folder, tmp_path / "x.tbl", "-q")
    assert code == 1 and "exists" in err and "--overwrite" in err


def test_preview_writes_a_grid(capsys, folder, tmp_path):
    assert run(capsys, "convert", folder, tmp_path / "a.tbl", "-q")[0] == 0
    for src in (tmp_path / "a.tbl", folder):
        out_png = tmp_path / f"grid-{src.name}.png"
        code, out, err = run(capsys, "preview", src, "--transform", "train", "-n", "6",
                             "--cols", "3", "--size", "64", "-o", out_png)
        assert code == 0, err
        grid = Image.open(out_png)
        assert grid.size == (3 * 68 + 4, 2 * 68 + 4) and "6 samples" in out
    code, out, _ = run(capsys, "preview", tmp_path / "a.tbl", "--transform", "val", "-n", "1",
                       "--size", "32", "-o", tmp_path / "v.png")
    assert code == 0 and Image.open(tmp_path / "v.png").size == (40, 40)


def test_bench_prints_a_table(capsys, folder):
    code, out, err = run(capsys, "bench", folder, "-n", "6", "--workers", "0", "--repeat", "1",
                         "--threads", "2")
    assert code == 0, err
    assert "machine:" in out and "| stage" in out
    assert "read (source -> bytes)" in out and "train pipeline (fused plan), 2 threads" in out


def test_verify_folder_without_manifest_reads_it(capsys, folder):
    # an ImageFolder tree from other tools has no manifest.json: verify reads every image
    # and says so, instead of exiting 1 with "pass --no-manifest"
    assert not (folder / "manifest.json").exists()
    code, out, err = run(capsys, "verify", folder, "-q")
    assert code == 0, err
    assert "checked 9 samples: 9 ok, 0 bad" in out
    assert "no manifest.json, so the folder was verified by reading every image" in out
    code, out, _ = run(capsys, "verify", folder, "-q", "--no-manifest")
    assert code == 0 and "no manifest.json" not in out  # asked for: nothing to point out


def test_verify_folder_without_manifest_finds_bad_images(capsys, folder, tmp_path):
    import shutil

    src = tmp_path / "src"
    shutil.copytree(folder, src)
    victim = next(src.rglob("*.jpg"))
    victim.write_bytes(victim.read_bytes()[:300])
    code, out, _ = run(capsys, "verify", src, "-q")
    assert code == 1 and "8 ok, 1 bad" in out and victim.name in out


def test_verify_converted_folder_still_checks_its_manifest(capsys, folder, tmp_path):
    out_dir = tmp_path / "copy"
    assert run(capsys, "convert", folder, out_dir, "-q")[0] == 0
    code, out, _ = run(capsys, "verify", out_dir, "-q")
    assert code == 0 and "no manifest.json" not in out
    next(out_dir.rglob("*.jpg")).unlink()  # complete-looking, one image short
    code, out, err = run(capsys, "verify", out_dir, "-q")
    assert code == 1 and "the manifest records" in err
