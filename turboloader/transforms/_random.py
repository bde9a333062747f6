"""Where random transform parameters come from.

Inside a turboloader dataset every sample gets its own ``random.Random`` seeded from
(seed, epoch, sample index), so a sample's augmentation does not depend on which rank,
worker process or thread handles it, and the same seed and epoch give the same
augmentations on any run with any number of workers. Outside a dataset (a transform
called by hand, or inside someone else's Dataset) parameters come from torch's global RNG,
as torchvision's do, so ``torch.manual_seed`` and DataLoader's per-worker seeding apply.
NumPy's global state is never used (pytorch#5059).
"""

import contextlib
import random
import threading

__all__ = ["TorchRandom", "current_rng", "sample_rng", "using_rng"]

_MASK64 = (1 << 64) - 1
_local = threading.local()


def _mix(x):
    # splitmix64 finalizer: nearby (seed, epoch, index) triples give unrelated streams
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def sample_rng(seed, epoch, index):
    """The ``random.Random`` that draws sample ``index``'s parameters in ``epoch``.

    Example:
        >>> sample_rng(0, 1, 42).random() == sample_rng(0, 1, 42).random()
        True
    """
    return random.Random(_mix(_mix(_mix(int(seed)) ^ int(epoch)) ^ int(index)))


class TorchRandom:
    """The subset of ``random.Random`` that transforms use, drawn from torch's global RNG."""

    def random(self):
        import torch

        return float(torch.rand(()))

    def uniform(self, a, b):
        return a + (b - a) * self.random()

    def randint(self, a, b):
        """An int in [a, b], both ends included (like ``random.Random.randint``)."""
        import torch

        return int(torch.randint(a, b + 1, ()))

    def shuffle(self, x):
        import torch

        x[:] = [x[i] for i in torch.randperm(len(x)).tolist()]


_TORCH = TorchRandom()


def current_rng():
    """The generator transforms draw from now: the sample's inside a dataset, else torch's."""
    return getattr(_local, "rng", None) or _TORCH


@contextlib.contextmanager
def using_rng(rng):
    """Make ``rng`` the current generator of this thread for the duration of the block."""
    previous = getattr(_local, "rng", None)
    _local.rng = rng
    try:
        yield rng
    finally:
        _local.rng = previous
