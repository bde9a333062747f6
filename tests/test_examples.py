"""examples/: the CLIP-style, segmentation and detection loops run on generated data, and
their own checks hold (captions reach the loop as strings, masks and boxes still line up with
their images after joint augmentation)."""

import importlib.util
import math
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("workers", [0, 2])
def test_clip_captions(workers):
    pytest.importorskip("pyarrow")
    out = _load("clip_captions").main(["--workers", str(workers), "--steps", "4"])
    assert out["steps"] == 4 and out["image_shape"] == (16, 3, 64, 64)
    assert all(c.startswith("a ") for c in out["captions"])
    assert all(math.isfinite(v) for v in out["losses"])


@pytest.mark.parametrize("workers,extra", [(0, []), (2, []), (0, ["--rotate"])])
def test_segmentation(workers, extra):
    out = _load("segmentation").main(["--workers", str(workers), "--steps", "4", *extra])
    assert out["steps"] == 4
    # a mask that did not follow its image's crop, flip or rotation agrees on ~half the pixels
    assert min(out["agreement"]) > 0.9


def test_detection():
    out = _load("detection").main(["--workers", "2", "--steps", "4"])
    assert out["steps"] == 4 and out["boxes"] > 8
    assert min(out["purity"]) > 0.8
