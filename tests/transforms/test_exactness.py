"""How far the fused path is from torchvision, measured, and the exact path.

With DCT scaling (the default) a JPEG is decoded at 1/2, 1/4 or 1/8 scale by libjpeg's
scaled IDCT when the output is small enough, which filters differently from decoding at
full size and then antialiasing: photographs differ little, but a sharp black/white edge
(text, line art, a chessboard) rings differently, by tens of levels. The guide
(docs/guide/transforms.md) states the bounds measured here; ``plan(...,
dct_scaling=False)``, passed as a dataset's transform, gives torchvision's pixels.
"""

import io
import re
import sys

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw
from torchvision.transforms.v2 import functional as F

from helpers import ROOT, sweep
from helpers.shards import write_tar
from turboloader import TarDataset
from turboloader import transforms as T
from turboloader.transforms._random import sample_rng

GUIDE = (ROOT / "docs" / "guide" / "transforms.md").read_text()
# the bounds the guide states (uint8 levels), with DCT scaling
EDGES_MAX, PHOTOS_MAX = 96, 64


def _edges(seed, h, w):
    """Black and white rectangles and lines: the hardest case for a different filter."""
    r = np.random.default_rng(seed)
    img = Image.new("L", (w, h), 0)
    d = ImageDraw.Draw(img)
    for _ in range(40):
        x0, y0 = int(r.integers(0, w)), int(r.integers(0, h))
        d.rectangle([x0, y0, x0 + int(r.integers(2, w // 3)), y0 + int(r.integers(2, h // 3))],
                    fill=255 if r.random() < 0.5 else 0)
    for _ in range(30):
        d.line([(int(r.integers(0, w)), int(r.integers(0, h))),
                (int(r.integers(0, w)), int(r.integers(0, h)))],
               fill=int(r.integers(0, 2)) * 255, width=int(r.integers(1, 4)))
    return np.stack([np.asarray(img)] * 3, -1)


def _photos():
    data = pytest.importorskip("skimage.data")
    out = []
    for name in ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field",
                 "immunohistochemistry", "retina"):
        a = getattr(data, name)()
        out.append(np.ascontiguousarray(a[..., :3]))
    return out


def _jpeg(a, quality=90):
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


IMAGES = {"edges": lambda: [_jpeg(_edges(i, 600 + 37 * i, 800 - 23 * i)) for i in range(6)],
          "photos": lambda: [_jpeg(a) for a in _photos()]}
PIPELINES = {"Resize(224)": [T.Resize(224), T.ToImage()],
             "Resize(256)+CenterCrop(224)": [T.Resize(256), T.CenterCrop(224), T.ToImage()],
             "RandomResizedCrop(128)": [T.RandomResizedCrop(128), T.ToImage()]}


def _reference(data, members, rng):
    """torchvision v2 on the Pillow-decoded image, with the parameters ours drew."""
    x = F.pil_to_tensor(Image.open(io.BytesIO(data)).convert("RGB"))
    for t in members:
        if isinstance(t, T.ToImage):
            continue
        p = t.make_params(tuple(x.shape[-2:]), rng=rng)
        if isinstance(t, T.RandomResizedCrop):
            x = F.resized_crop(x, **p, size=list(t.size), antialias=True)
        elif isinstance(t, T.Resize):
            x = F.resize(x, t.size, antialias=True)
        elif isinstance(t, T.CenterCrop):
            x = F.center_crop(x, list(t.size))
    return x


def _max_diff(images, members, dct_scaling):
    p = T.plan(T.Compose(members), dct_scaling=dct_scaling)
    assert p.dct_scaling == dct_scaling
    worst = 0
    for i, data in enumerate(images):
        for epoch in range(2):
            ours = p.from_jpeg(data, rng=sample_rng(0, epoch, i))
            ref = _reference(data, members, sample_rng(0, epoch, i))
            worst = max(worst, int((ours.int() - ref.int()).abs().max()))
    return worst


@pytest.fixture(scope="module")
def images():
    return {k: make() for k, make in IMAGES.items()}


@pytest.mark.parametrize("kind,pipeline", sweep(
    [(k, p) for p in PIPELINES for k in IMAGES], names=2))
def test_dct_scaling_stays_within_the_stated_bound(images, kind, pipeline):
    bound = EDGES_MAX if kind == "edges" else PHOTOS_MAX
    worst = _max_diff(images[kind], PIPELINES[pipeline], True)
    assert worst <= bound, (kind, pipeline, worst)
    # ... and the exact path is torchvision's, within the resampler's one level
    assert _max_diff(images[kind], PIPELINES[pipeline], False) <= 1


def test_the_guide_states_the_measured_bounds():
    # the guide said "at most 40" while black/white edges measured 69-83
    text = re.sub(r"\s+", " ", GUIDE)
    assert f"at most {EDGES_MAX} levels" in text and f"at most {PHOTOS_MAX}" in text
    assert "dct_scaling=False" in text and "T.plan(" in text


def test_edges_do_differ_with_dct_scaling(images):
    # the bound is not vacuous: sharp edges really are tens of levels apart at 1/2 scale
    assert _max_diff(images["edges"], PIPELINES["Resize(224)"], True) >= 20


def test_a_dataset_takes_the_exact_path_from_a_plan(tmp_path, images):
    # T.plan(pipeline, dct_scaling=False) as the transform: the fused path, without DCT
    # scaling, so the samples are torchvision's pixels; before, a Plan was an opaque
    # callable (every sample decoded to PIL and transformed unfused, with a warning)
    import warnings

    from turboloader.errors import UnfusedWarning

    members = [T.Resize(224), T.CenterCrop(224), T.ToImage()]
    jpegs = images["edges"][:3]
    path = write_tar(tmp_path / "e.tar", [m for i, d in enumerate(jpegs)
                                          for m in ((f"{i}.jpg", d), (f"{i}.cls", b"0"))])
    exact = T.plan(T.Compose(members), dct_scaling=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnfusedWarning)
        ds = TarDataset(path, exact, shuffle=False)
        got = [x for x, _ in ds]
    for d, x in zip(jpegs, got):
        assert int((x.int() - _reference(d, members, None).int()).abs().max()) <= 1
    # the default plan, for comparison, is not
    fast = TarDataset(path, T.Compose(members), shuffle=False)
    assert max(int((x.int() - _reference(d, members, None).int()).abs().max())
               for d, (x, _) in zip(jpegs, fast)) > 1
