"""The README's code runs: its examples are what users paste first."""

import io
import os
import re
import tarfile
from pathlib import Path

import pytest

from turboloader.tools.synthetic import synthetic_jpegs

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _block(containing):
    blocks = [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if containing in b]
    assert len(blocks) == 1, f"expected one README block containing {containing!r}"
    return blocks[0]


def _run(source, replace, cwd, ns=None):
    for old, new in replace:
        assert old in source, old
        source = source.replace(old, new)
    here = os.getcwd()
    os.chdir(cwd)
    try:
        ns = {"__name__": "readme"} if ns is None else ns
        exec(compile(source, "<README>", "exec"), ns)
        return ns
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme")
    samples = synthetic_jpegs(16, seed=2, short_side=(250, 300))
    for shard in range(2):
        with tarfile.open(root / f"train-{shard:05d}.tar", "w") as tar:
            for i in range(shard * 8, shard * 8 + 8):
                for name, blob in ((f"{i:05d}.jpg", samples[i][0]),
                                   (f"{i:05d}.cls", str(samples[i][1]).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(blob)
                    tar.addfile(info, io.BytesIO(blob))
    for i, (blob, label) in enumerate(samples):
        (root / "imagenet" / "train" / f"c{label}").mkdir(parents=True, exist_ok=True)
        (root / "imagenet" / "train" / f"c{label}" / f"{i}.jpg").write_bytes(blob)
    return root


def test_native_core_example(data):
    ns = _run(_block("turboloader.TarIndex("), [], data)
    assert ns["img"].shape[2] == 3 and ns["window"].shape == (96, 128, 3)
    assert ns["batch"][0].std() > 0.1


def test_migration_examples(data):
    folder = ("imagenet/train", str(data / "imagenet" / "train"))
    ns = _run(_block("datasets.ImageFolder"), [("range(90)", "range(1)"), folder,
                                               ("num_workers=8", "num_workers=0")], data)
    before = len(ns["dataset"])
    ns = _run(_block("turboloader.ImageFolder("), [("num_workers=8", "num_workers=0"), folder],
              data)
    assert len(ns["dataset"]) == before == 16
    images, labels = next(iter(ns["loader"]))
    assert images.shape == (16, 3, 224, 224)
    source = _block("turboloader.TarDataset(\"shards/")
    ns = _run(source, [("shards/train-{00000..00256}.tar",
                        str(data / "train-{00000..00001}.tar")),
                       ("range(90)", "range(2)"), ("num_workers=8", "num_workers=2")], data,
              ns)  # continues the previous block: its train_tf
    assert ns["loader"].epoch == 1
