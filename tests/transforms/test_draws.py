"""One definition of every fusable transform's sampling, drawn both ways.

Each random transform defines its draws once, for a batch (``_draw_batch``); ``make_params``
is a batch of one drawing through the generator's own methods (``RngDraws``), the batch path
draws many SampleRandom generators at once from their keys (``KeyDraws``). Both must give
the same numbers and leave each generator at the same draw, for every fusable transform,
and ``make_params`` must keep drawing what it drew before the batch form existed (a
hand-written scalar replay of torchvision's algorithm, kept here as the oracle)."""

import math

import numpy as np
import pytest
import torch

from turboloader import transforms as T
from turboloader.transforms._batch import draw
from turboloader.transforms._draws import KeyDraws, RngDraws
from turboloader.transforms._random import SampleRandom, TorchRandom, sample_keys

N = 300
SIZES = np.random.default_rng(5).integers(1, 900, (N, 2))
SIZES[:10] = [[40, 900], [900, 30], [1, 1], [2, 700], [260, 260], [8, 8], [1, 5], [5, 1],
              [300, 301], [224, 224]]
KEYS = sample_keys(7, 2, np.arange(N))


def _rows(out):
    if isinstance(out, dict):
        return [{k: int(v[i]) for k, v in out.items()} for i in range(N)]
    if isinstance(out, tuple):
        return [tuple(o[i].tolist() for o in out) for i in range(N)]
    return [out[i].tolist() for i in range(N)]


def _per_row(call):
    # the same definition, one row at a time through each row's SampleRandom
    rows, counters = [], []
    for i in range(N):
        rng = SampleRandom(int(KEYS[i]))
        rows.append(call(i, RngDraws(rng)))
        counters.append(rng.counter)
    return rows, counters


CASES = {
    "RandomResizedCrop": (T.RandomResizedCrop(64), True),
    "RandomResizedCrop_fallback": (T.RandomResizedCrop(64, scale=(1.5, 2.0), ratio=(0.5, 0.6)),
                                   True),
    "RandomResizedCrop_float32": (T.RandomResizedCrop(64, scale=(np.float32(0.2), 1.0)), True),
    "RandomCrop": (T.RandomCrop((20, 30)), True),
    "CenterCrop": (T.CenterCrop((20, 30)), True),
    "RandomHorizontalFlip": (T.RandomHorizontalFlip(0.3), False),
    "ColorJitter": (T.ColorJitter(0.4, 0.4, 0.4, 0.1), False),
    "ColorJitter_two": (T.ColorJitter(brightness=0.5, hue=0.2), False),
    "RandomApply": (T.RandomApply([T.RandomHorizontalFlip()], p=0.4), False),
    "RandomChoice": (T.RandomChoice([T.Identity(), T.RandomHorizontalFlip()], p=[0.2, 0.8]),
                     False),
    "RandomOrder": (T.RandomOrder([T.Identity(), T.RandomHorizontalFlip(), T.Identity()]), False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_batch_draws_equal_one_sample_draws(name):
    t, _ = CASES[name]
    fits = np.ones(N, bool)
    if name in ("RandomCrop", "CenterCrop"):
        fits = (SIZES >= t.size).all(axis=1)   # a crop larger than the image is not drawn
    d = KeyDraws(KEYS)
    # one signature for every transform's draw: (sizes, d, mask)
    batch = _rows(t._draw_batch(SIZES, d, fits))
    one, counters = _per_row(lambda i, rd: _rows1(t._draw_batch(SIZES[i:i + 1], rd,
                                                                 fits[i:i + 1])))
    assert [b for b, f in zip(batch, fits) if f] == [o for o, f in zip(one, fits) if f]
    np.testing.assert_array_equal(d.counter, counters)
    # make_params is that batch of one
    for i in np.flatnonzero(fits)[:60]:
        rng = SampleRandom(int(KEYS[i]))
        size = tuple(int(v) for v in SIZES[i])
        p = t.make_params(size, rng=rng)
        assert rng.counter == counters[i]
        if isinstance(batch[i], dict):
            assert all(p[k] == v for k, v in batch[i].items())


def _rows1(out):
    if isinstance(out, dict):
        return {k: int(v[0]) for k, v in out.items()}
    if isinstance(out, tuple):
        return tuple(o[0].tolist() for o in out)
    return out[0].tolist()


def _rrc_scalar(t, size, rng):
    # torchvision's get_params, drawn from a random.Random-like rng (the pre-batch code)
    height, width = size
    area = height * width
    log_ratio = (math.log(t.ratio[0]), math.log(t.ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(t.scale[0], t.scale[1])
        aspect_ratio = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            return {"top": rng.randint(0, height - h), "left": rng.randint(0, width - w),
                    "height": h, "width": w}
    in_ratio = float(width) / float(height)
    if in_ratio < min(t.ratio):
        w, h = width, int(round(width / min(t.ratio)))
    elif in_ratio > max(t.ratio):
        h, w = height, int(round(height * max(t.ratio)))
    else:
        w, h = width, height
    return {"top": (height - h) // 2, "left": (width - w) // 2, "height": h, "width": w}


@pytest.mark.parametrize("name", ["RandomResizedCrop", "RandomResizedCrop_fallback"])
@pytest.mark.parametrize("kind", ["sample", "torch"])
def test_make_params_keeps_the_scalar_algorithms_draws(name, kind):
    t = CASES[name][0]
    for i in range(60):
        size = tuple(int(v) for v in SIZES[i])
        if kind == "sample":
            a, b = SampleRandom(int(KEYS[i])), SampleRandom(int(KEYS[i]))
        else:
            a = b = TorchRandom()
            torch.manual_seed(i)
        got = t.make_params(size, rng=a)
        if kind == "torch":
            torch.manual_seed(i)
        assert got == _rrc_scalar(t, size, b), (size, i)


PIPELINES = [
    [T.RandomResizedCrop(96), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1)],
    [T.Resize(200, max_size=260), T.RandomCrop((128, 170)), T.RandomHorizontalFlip(0.7)],
    [T.Resize(100), T.CenterCrop(90), T.ColorJitter(brightness=0.5, hue=0.2)],
    [T.RandomCrop(64), T.RandomApply([T.ColorJitter(0.3, 0.3)], p=0.5),
     T.RandomChoice([T.RandomHorizontalFlip(), T.Identity()]),
     T.RandomOrder([T.ColorJitter(0.2), T.RandomHorizontalFlip()])],
]


@pytest.mark.parametrize("i", range(len(PIPELINES)))
def test_a_compose_drawn_as_a_batch_equals_plan_draw(i):
    p = T.plan(T.Compose([*PIPELINES[i], T.ToImage()]))
    assert p is not None
    HW = SIZES.astype(np.int64)
    d = KeyDraws(KEYS)
    r = draw(p._fused, HW, d)
    for row in range(N):
        rng = SampleRandom(int(KEYS[row]))
        one = p._draw(int(HW[row, 0]), int(HW[row, 1]), rng)
        assert (one is None) == bool(r.generic[row])
        if one is None:
            continue
        box, clip, out, flip, ops = one
        assert box == tuple(r.box[row].tolist()) and clip == bool(r.clip[row])
        assert out == tuple(r.out[row].tolist()) and flip == bool(r.flip[row])
        assert ops == [(int(a), float(b)) for a, b in
                       zip(r.ops[row, :r.n_ops[row]], r.factors[row, :r.n_ops[row]])]
        assert rng.counter == d.counter[row]


@pytest.mark.parametrize("name", ["RandomResizedCrop", "RandomCrop", "RandomHorizontalFlip",
                                  "ColorJitter"])
def test_under_torch_manual_seed_make_params_draws_torchvisions_parameters(name):
    # outside a dataset the generator is torch's: a batch of one through its own methods
    # gives torchvision v2's draws for the same seed
    from torchvision.transforms import v2

    ours = CASES[name][0]
    theirs = {"RandomResizedCrop": lambda: v2.RandomResizedCrop(64),
              "RandomCrop": lambda: v2.RandomCrop((20, 30)),
              "RandomHorizontalFlip": lambda: v2.RandomHorizontalFlip(0.3),
              "ColorJitter": lambda: v2.ColorJitter(0.4, 0.4, 0.4, 0.1)}[name]()
    img = torch.zeros(3, 300, 400, dtype=torch.uint8)
    for seed in range(40):
        torch.manual_seed(seed)
        p = ours.make_params((300, 400))
        if name == "RandomHorizontalFlip":   # v2 draws torch.rand(1) in forward
            torch.manual_seed(seed)
            assert p["flip"] == bool(torch.rand(1) < 0.3)
            continue
        torch.manual_seed(seed)
        q = theirs.make_params([img])
        for k, v in q.items():
            if k in p and k != "padding":
                if isinstance(v, torch.Tensor):
                    assert p[k] == v.tolist(), (seed, k)
                elif isinstance(v, float):
                    assert p[k] == pytest.approx(v, abs=1e-6), (seed, k)
                else:
                    assert p[k] == v, (seed, k)


def test_every_draw_has_the_one_signature():
    # a crop's draw and a flip's / jitter's / container's are called alike: (sizes, d, mask)
    import importlib
    import inspect
    import pkgutil

    import turboloader.transforms as pkg

    mods = [importlib.import_module(f"turboloader.transforms.{m.name}")
            for m in pkgutil.iter_modules(pkg.__path__)] + \
        [importlib.import_module("turboloader.data.buckets")]
    seen = {}
    for mod in mods:
        for cls in vars(mod).values():
            if inspect.isclass(cls) and "_draw_batch" in vars(cls):
                seen[cls.__name__] = list(inspect.signature(vars(cls)["_draw_batch"]).parameters)
    assert len(seen) >= 9, seen   # 4 crops/buckets, flip, jitter, three containers
    assert {tuple(p) for p in seen.values()} == {("self", "sizes", "d", "mask")}, seen


def test_key_draws_are_each_rows_own_sequence():
    """KeyDraws mixes every row's next word in one native loop: each is its generator's draw
    at the row's own counter (``draws``, the module's definition), whatever the masks (rows
    outside one get the word at their counter and do not advance), from counters not at 0."""
    from turboloader.transforms._random import draws

    rng = np.random.default_rng(5)
    keys = sample_keys(7, 2, np.arange(37))
    ctr = rng.integers(0, 30, len(keys))
    d = KeyDraws(keys, ctr)
    for step in range(60):
        mask = None if step % 3 == 0 else rng.random(len(keys)) < 0.7
        got = d.next(mask)
        want = draws(keys, ctr)
        live = np.ones(len(keys), bool) if mask is None else mask
        assert (got == want).all(), step
        ctr = ctr + live
    assert d.counter.tolist() == ctr.tolist()


class _NumPyDraws(KeyDraws):
    """KeyDraws that RandomResizedCrop does not hand to its native loop (only KeyDraws
    itself goes there): the NumPy form of the definition, the oracle of the native one."""


@pytest.mark.parametrize("scale, ratio", [((0.08, 1.0), (3 / 4, 4 / 3)), ((1, 1), (1, 2)),
                                          ((1.5, 2.0), (0.5, 0.6)), ((0.3, 0.31), (0.2, 5))])
def test_resized_crops_native_loop_draws_the_numpy_forms_numbers(scale, ratio):
    """RandomResizedCrop's batch draw runs in C for a KeyDraws batch (issue 42: the GIL-held
    Python per image): every row and counter equals the NumPy form's, bit for bit, on
    photo-sized, tiny, extreme and fallback sizes, under a mask, from counters not at 0."""
    rng = np.random.default_rng(11)
    n = 4000
    sizes = np.concatenate([rng.integers(1, 5000, (n // 2, 2)),
                            rng.integers(300, 700, (n // 2, 2))])
    sizes[:6] = [[1, 1], [1, 4000], [4000, 1], [2, 3], [65535, 2], [9, 9]]
    keys = sample_keys(3, 9, np.arange(n))
    ctr = rng.integers(0, 50, n)
    t = T.RandomResizedCrop(224, scale=scale, ratio=ratio)
    for mask in (None, rng.random(n) < 0.8):
        fast, slow = KeyDraws(keys, ctr), _NumPyDraws(keys, ctr)
        got = t._draw_batch(sizes, fast, mask)
        want = t._draw_batch(sizes, slow, mask)
        for k in ("top", "left", "height", "width"):
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        np.testing.assert_array_equal(fast.counter, slow.counter)
        assert t._draw_native(sizes, KeyDraws(keys, ctr), mask) is not None   # it ran in C
