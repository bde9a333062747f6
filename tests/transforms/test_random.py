"""The counter-based sample RNG: its stated formulas (an independent splitmix64 written from
the definition), the fixed number of draws per method, the random.Random API, and that
sample_keys/draws vectorize exactly what SampleRandom yields."""

import copy
import math
import pickle
import random

import numpy as np
import pytest

from turboloader.transforms._random import (
    SampleRandom, draws, sample_key, sample_keys, sample_rng,
)

M = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def splitmix64(state):
    """The reference splitmix64 step (Steele, Lea & Flood), written out from its definition."""
    z = (state + GAMMA) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def reference_key(seed, epoch, index):
    return splitmix64(splitmix64(splitmix64(seed & M) ^ (epoch & M)) ^ (index & M))


def reference_draw(key, k):
    return splitmix64((key + k * GAMMA) & M)


def test_known_splitmix64_value():
    # splitmix64 seeded with 0: first output of the published reference implementation
    assert splitmix64(0) == 0xE220A8397B1DCDAF


@pytest.mark.parametrize("seed,epoch,index", [(0, 0, 0), (1, 2, 3), (-1, -5, -3),
                                              (2 ** 70 + 3, 7, 2 ** 63 + 5), (123, 2 ** 40, 9)])
def test_key_and_draws_follow_the_stated_formula(seed, epoch, index):
    key = reference_key(seed, epoch, index)
    assert sample_key(seed, epoch, index) == key
    rng = sample_rng(seed, epoch, index)
    assert rng.key == key and rng.counter == 0
    for k in range(5):
        x = reference_draw(key, k)
        assert rng.random() == (x >> 11) * 2.0 ** -53
        assert rng.counter == k + 1


def test_sample_keys_is_sample_key_vectorized():
    idx = np.arange(-50, 1000, 7)
    keys = sample_keys(11, 3, idx)
    assert keys.dtype == np.uint64 and keys.shape == idx.shape
    assert [int(k) for k in keys] == [sample_key(11, 3, int(i)) for i in idx]
    big = [2 ** 64 - 1, 2 ** 63, -1, 0]
    assert [int(k) for k in sample_keys(1, 2, big)] == [sample_key(1, 2, i) for i in big]
    assert sample_keys(0, 0, np.arange(4, dtype=np.uint32)).tolist() == \
        sample_keys(0, 0, [0, 1, 2, 3]).tolist()
    assert sample_keys(0, 0, []).shape == (0,)
    # one epoch word per sample (the map-style datasets draw one per sample)
    words = [3, 2 ** 64 - 7, -2, 0]
    got = sample_keys(5, np.array(words, dtype=object), [10, 11, 12, 13])
    assert [int(k) for k in got] == [sample_key(5, w, i) for w, i in zip(words, range(10, 14))]
    assert sample_keys(5, np.array([4, 4]), [1, 2]).tolist() == sample_keys(5, 4, [1, 2]).tolist()
    with pytest.raises(TypeError):
        sample_keys(0, 0, [1.5])
    # a list of ints (a chunk's slots) is mixed by one native loop; other entries (NumPy
    # integers, bools) take the general path: the same keys either way
    many = list(range(-300, 300, 3)) + [2 ** 64 - 5, 2 ** 63 - 1, 2 ** 63]
    assert [int(k) for k in sample_keys(9, 4, many)] == [sample_key(9, 4, i) for i in many]
    assert sample_keys(9, 4, [np.int64(5), 6, True]).tolist() == \
        [sample_key(9, 4, 5), sample_key(9, 4, 6), sample_key(9, 4, 1)]


def test_draws_is_the_counter_stream_vectorized():
    keys = sample_keys(4, 0, np.arange(20))
    table = draws(keys[:, None], np.arange(6))
    for i, key in enumerate(keys):
        assert [int(v) for v in table[i]] == [reference_draw(int(key), k) for k in range(6)]


def test_methods_consume_fixed_draws():
    key = sample_key(9, 9, 9)
    r = SampleRandom(key)
    n = 37
    assert r.randint(3, 3 + n - 1) == 3 + ((reference_draw(key, 0) * n) >> 64)
    assert r.counter == 1
    assert r.randrange(1000) == (reference_draw(key, 1) * 1000) >> 64 and r.counter == 2
    a, b = 0.25, 4.5
    assert r.uniform(a, b) == a + (b - a) * ((reference_draw(key, 2) >> 11) * 2.0 ** -53)
    assert r.getrandbits(10) == reference_draw(key, 3) >> 54 and r.counter == 4
    assert r.getrandbits(0) == 0 and r.counter == 4
    lo, hi = reference_draw(key, 4), reference_draw(key, 5)
    assert r.getrandbits(100) == (lo | (hi << 64)) & ((1 << 100) - 1) and r.counter == 6
    seq = list(range(8))
    r.shuffle(seq)
    assert r.counter == 6 + 7 and sorted(seq) == list(range(8))
    # shuffle is the standard library's Fisher-Yates over _randbelow
    expect, k = list(range(8)), 6
    for i in reversed(range(1, 8)):
        j = (reference_draw(key, k) * (i + 1)) >> 64
        expect[i], expect[j] = expect[j], expect[i]
        k += 1
    assert seq == expect
    # a bound above 2**64 takes more draws, still a fixed number
    r2 = SampleRandom(key)
    r2.randrange(2 ** 70)
    assert r2.counter == 3


def test_random_random_api_works():
    r = sample_rng(0, 1, 42)
    assert 0 <= r.random() < 1
    assert r.choice("abc") in "abc"
    assert len(set(r.sample(range(100), 10))) == 10
    assert isinstance(r.gauss(0, 1), float)
    assert len(r.randbytes(5)) == 5
    assert 0 <= r.randrange(0, 10, 3) < 10
    with pytest.raises(ValueError):
        r.randint(5, 4)
    with pytest.raises(IndexError):
        r.choice([])
    assert isinstance(r, random.Random)


def test_state_copy_and_pickle_round_trip():
    r = sample_rng(3, 1, 4)
    r.random()
    state = r.getstate()
    ahead = [r.random() for _ in range(3)]
    r.setstate(state)
    assert [r.random() for _ in range(3)] == ahead
    r.setstate(state)
    for clone in (copy.deepcopy(r), pickle.loads(pickle.dumps(r))):
        assert clone.key == r.key and clone.counter == r.counter == 1
        assert clone.random() == ahead[0]
    with pytest.raises(ValueError):
        r.setstate(random.Random(0).getstate())


def test_seeding_like_random_random():
    assert SampleRandom(5).key == 5 and SampleRandom(2 ** 64 + 5).key == 5
    assert SampleRandom("abc").key == SampleRandom(b"abc").key != SampleRandom("abd").key
    assert SampleRandom().key != SampleRandom().key  # os.urandom
    r = SampleRandom(1)
    r.random()
    r.seed(1)
    assert r.counter == 0
    with pytest.raises(TypeError):
        SampleRandom(1.5)


def test_streams_differ_and_are_uniform():
    # nearby (seed, epoch, index) triples give unrelated streams...
    firsts = {sample_rng(s, e, i).random() for s in range(3) for e in range(3) for i in range(50)}
    assert len(firsts) == 450
    # ...and the draws look uniform: chi-square over 16 bins, 32000 draws (p ~ 1e-6 bound)
    u = (draws(sample_keys(0, 0, np.arange(4000))[:, None], np.arange(8))
         >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    counts = np.bincount((u.ravel() * 16).astype(int), minlength=16)
    expected = u.size / 16
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 50, chi2
    assert abs(u.mean() - 0.5) < 0.01
    # and integer draws are unbiased enough for small bounds
    r = sample_rng(1, 1, 1)
    faces = np.bincount([r.randint(1, 6) for _ in range(12000)], minlength=7)[1:]
    assert (abs(faces - 2000) < 5 * math.sqrt(2000)).all(), faces
