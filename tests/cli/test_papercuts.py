"""Papercuts a migration hit (issue 40), each with the behaviour it should have had."""

import json

import pytest
from PIL import Image

from helpers.shards import write_shards
from turboloader.tools.cli import _busy_hint, main


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    from turboloader.tools.synthetic import synthetic_jpegs

    root = tmp_path_factory.mktemp("papercuts")
    rows = []
    for i, (jpeg, label) in enumerate(synthetic_jpegs(6, seed=4, num_classes=2)):
        (root / f"{i}.jpg").write_bytes(jpeg)
        rows.append({"path": f"{i}.jpg", "label": label, "caption": f"image {i}"})
    (root / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_preview_of_a_manifest(capsys, images, tmp_path):
    # was: AttributeError: '_ManifestSource' object has no attribute 'file'
    code, out, err = run(capsys, "preview", images / "train.jsonl", "-n", "4", "--cols", "2",
                         "--size", "32", "-o", tmp_path / "grid.png")
    assert code == 0, err
    assert Image.open(tmp_path / "grid.png").size == (2 * 36 + 4, 2 * 36 + 4)


def test_manifest_without_a_label_column(images):
    # the datasets guide: unlabelled rows need missing_label=-1 (or label_column=None)
    from turboloader import ManifestDataset
    from turboloader import transforms as T

    ds = ManifestDataset(images / "train.jsonl", transform=T.Compose([T.Resize((16, 16)),
                                                                      T.ToTensor()]),
                         label_column=None)
    assert ds.targets == [-1] * 6
    image, label = ds[2]
    assert image.shape == (3, 16, 16) and label == -1
    ds = ManifestDataset(images / "train.jsonl", label_column=None, missing_label=7)
    assert set(ds.targets) == {7}


def test_verify_of_other_tools_shards_names_no_manifest(capsys, images, tmp_path):
    out = tmp_path / "out"
    assert run(capsys, "convert", images / "train.jsonl", out, "--to", "tar", "-q")[0] == 0
    # webdataset shards (no manifest of their own) beside a conversion's manifest.json
    write_shards(str(out), [2, 2], name="wds")
    code, _, err = run(capsys, "verify", out / "wds-{0000..0001}.tar")
    assert code != 0 and "not in the manifest" in err and "--no-manifest" in err
    code, out_text, err = run(capsys, "verify", out / "wds-{0000..0001}.tar", "--no-manifest")
    assert code == 0, err
    assert "checked 4 samples: 4 ok" in out_text


def test_inspect_reports_train_and_val_apart(capsys, tmp_path):
    from helpers.shards import jpeg

    for split, n in (("train", 3), ("val", 1)):
        for c in ("cat", "dog"):
            (tmp_path / split / c).mkdir(parents=True)
            for i in range(n):
                (tmp_path / split / c / f"{i}.jpg").write_bytes(jpeg(i))
    code, out, err = run(capsys, "inspect", tmp_path)
    assert code == 0, err
    assert "2 splits (train, val)" in out
    assert out.count("samples: 6") == 1 and out.count("samples: 2") == 1
    assert "(cat)" in out and "(train)" not in out and "(val)" not in out


def test_unquoted_brace_pattern_gets_a_hint(capsys, tmp_path):
    paths = write_shards(str(tmp_path), [1, 1], name="s")
    with pytest.raises(SystemExit) as exit_:
        main(["inspect", *paths])  # what the shell makes of s-{0000..0001}.tar
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "unquoted brace pattern" in err and "quote it" in err


def test_bench_hints_at_a_busy_machine():
    assert _busy_hint(2, 100.0, 150.0) is None
    hint = _busy_hint(2, 100.0, 90.0)
    assert "2 threads were not faster than 1 (0.90x)" in hint and "busy" in hint
    assert _busy_hint(1, 100.0, None) is None

