"""Every ```python block of README.md and docs/**/*.md runs: the examples are what users paste.

The blocks of one page run in order in one namespace (a page reads like a notebook), in a
fresh folder that holds small generated data under the names the pages use:

    shards/train-00000.tar, shards/train-00001.tar   16 JPEG + .cls samples each
    shards/val-00000.tar                             8 samples
    damaged/train-00000.tar                          16 samples, one of them a truncated JPEG
    seg/train-00000.tar, seg/train-00001.tar         the train images with a .seg.png mask
                                                     and a .json {"boxes": [...]} each
    imagenet/train/<class>/*.jpg, imagenet/val/...   the same images as class folders
    train-00000.tar                                  a copy of the first shard
    train.tbl                                        the train images as a TBL file
    train.parquet                                    the train images: image, label, caption
    train.csv                                        a manifest of imagenet/train (path,label)

Two substitutions apply to every block, so the examples keep realistic values and still run
in seconds: ``num_workers=8`` runs as ``num_workers=2`` and ``range(90)`` as ``range(1)``.
An HTML comment just before a block (shown neither on the code host nor on the site) says
what else to do with it:

    <!-- example: skip (why: needs a GPU, an S3 bucket, a process group, ...) -->
    <!-- example: replace OLD => NEW -->      (several allowed; OLD must occur in the block)

docs/development.md says the same for writers.
"""

import contextlib
import io
import os
import re
import shutil
import tarfile
import textwrap
import warnings

import pytest

from helpers import ROOT
from helpers.hf import hf_datasets
from turboloader.tools.synthetic import synthetic_jpegs

PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md")
                                      if "_build" not in p.parts)
GLOBAL = [("num_workers=8", "num_workers=2"), ("range(90)", "range(1)")]
DIRECTIVE = re.compile(r"<!--\s*example:\s*(.*?)\s*-->")
OPEN = re.compile(r"^(\s*)```python\s*$")
OTHER = re.compile(r"^\s*(`{3,})[\w-]*\s*$")


def blocks(text):
    """``(line, source, skip_reason, replacements)`` for each ```python block of ``text``."""
    out, pending, lines, i = [], [], text.split("\n"), 0
    while i < len(lines):
        m = OPEN.match(lines[i])
        other = OTHER.match(lines[i])
        if other and not m:  # a bash, text or output block: skip it whole, comments included
            fence = other.group(1)
            i += 1
            while i < len(lines) and not re.match(rf"^\s*{fence}\s*$", lines[i]):
                i += 1
            i += 1
            continue
        pending += DIRECTIVE.findall(lines[i])
        if not m:
            i += 1
            continue
        indent, start = m.group(1), i + 1
        i += 1
        while not re.match(rf"^{re.escape(indent)}```\s*$", lines[i]):
            i += 1
        source = textwrap.dedent("\n".join(lines[start:i]))
        skip, replace = None, []
        for d in pending:
            if d.startswith("skip"):
                skip = d[4:].strip(" ()") or "marked skip"
            elif d.startswith("replace "):
                old, sep, new = d[8:].partition(" => ")
                assert sep, f"line {start}: replace needs 'OLD => NEW': {d!r}"
                replace.append((old, new))
            else:
                raise AssertionError(f"line {start}: unknown example directive {d!r}")
        out.append((start, source, skip, replace))
        pending = []
        i += 1
    return out


def _tar(path, samples):
    with tarfile.open(path, "w") as tar:
        for key, blob, label in samples:
            for name, data in ((f"{key}.jpg", blob), (f"{key}.cls", str(label).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def _seg_tar(path, samples):
    """Segmentation / detection shards: each image with a 0/1 PNG mask of its size and a
    box around the mask's object (what README's MaskField / BoxesField block reads)."""
    import json

    import numpy as np
    from PIL import Image

    with tarfile.open(path, "w") as tar:
        for key, blob, label in samples:
            w, h = Image.open(io.BytesIO(blob)).size
            mask = np.zeros((h, w), np.uint8)
            mask[h // 4:3 * h // 4, w // 4:3 * w // 4] = 1
            png = io.BytesIO()
            Image.fromarray(mask).save(png, "PNG")
            boxes = json.dumps({"boxes": [[w // 4, h // 4, 3 * w // 4, 3 * h // 4]]}).encode()
            for name, data in ((f"{key}.jpg", blob), (f"{key}.seg.png", png.getvalue()),
                               (f"{key}.json", boxes), (f"{key}.cls", str(label).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from turboloader.io.tbl import write_tbl

    root = tmp_path_factory.mktemp("doc-data")
    samples = [(f"{i:05d}", blob, label) for i, (blob, label) in
               enumerate(synthetic_jpegs(40, seed=3, short_side=(240, 300), num_classes=4))]
    train, val = samples[:32], samples[32:]
    (root / "shards").mkdir()
    _tar(root / "shards" / "train-00000.tar", train[:16])
    _tar(root / "shards" / "train-00001.tar", train[16:])
    _tar(root / "shards" / "val-00000.tar", val)
    shutil.copy(root / "shards" / "train-00000.tar", root / "train-00000.tar")
    (root / "damaged").mkdir()
    damaged = [(k, b[: len(b) // 2] if n == 5 else b, lab) for n, (k, b, lab) in
               enumerate(train[:16])]
    _tar(root / "damaged" / "train-00000.tar", damaged)
    (root / "seg").mkdir()
    for n, part in enumerate((train[:16], train[16:])):
        _seg_tar(root / "seg" / f"train-{n:05d}.tar", part)
    for part, group in (("train", train), ("val", val)):
        for key, blob, label in group:
            folder = root / "imagenet" / part / f"class{label}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{key}.jpg").write_bytes(blob)
    write_tbl(str(root / "train.tbl"), [(key, blob, label) for key, blob, label in train])
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"image": [b for _, b, _ in train], "label": [y for _, _, y in train],
                             "caption": [f"image {k}" for k, _, _ in train]}),
                   root / "train.parquet", row_group_size=16)
    (root / "train.csv").write_text("path,label\n" + "".join(
        f"class{label}/{key}.jpg,{label}\n" for key, _, label in train))
    return root


def _pages():
    for page in PAGES:
        if any(skip is None for _, _, skip, _ in blocks(page.read_text())):
            yield pytest.param(page, id=str(page.relative_to(ROOT)))


def test_the_parser_finds_blocks_and_directives():
    text = ("<!-- example: skip (needs a GPU) -->\n```python\nx = 1\n```\n"
            "  <!-- example: replace a => b -->\n  ```python\n  a = 2\n  ```\n"
            "```text\n<!-- example: skip (inside a text block: not a directive) -->\n```\n"
            "```python\ny = 3\n```\n")
    assert blocks(text) == [(2, "x = 1", "needs a GPU", []), (6, "a = 2", None, [("a", "b")]),
                            (12, "y = 3", None, [])]
    # the pages have blocks to run, and every skip says why
    found = [b for page in PAGES for b in blocks(page.read_text())]
    assert len(found) >= 15
    assert all(skip != "marked skip" for _, _, skip, _ in found)


@pytest.mark.slow
@pytest.mark.parametrize("page", list(_pages()))
def test_page_examples_run(page, data, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(data, work)
    namespace = {"__name__": "__doc_example__"}
    here = os.getcwd()
    os.chdir(work)
    # a block's `import datasets` is Hugging Face's, not benchmarks/datasets.py (which the
    # benchmark tests put first on sys.path)
    hf = hf_datasets() if "import datasets" in page.read_text() else contextlib.nullcontext()
    try:
        with hf:
            _run_blocks(page, namespace)
    finally:
        os.chdir(here)


def _run_blocks(page, namespace):
    for line, source, skip, replace in blocks(page.read_text()):
        if skip:
            continue
        for old, new in replace + GLOBAL:
            if (old, new) in replace:
                assert old in source, f"{page.name}:{line}: {old!r} not in the block"
            source = source.replace(old, new)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pin_memory without an accelerator, ...
            try:
                exec(compile(source, f"{page.name}:{line}", "exec"), namespace)
            except Exception as exc:
                raise AssertionError(f"{page.relative_to(ROOT)}, the block at line {line}, "
                                     f"failed: {exc!r}\n{source}") from exc
