"""Epochs shared between the main process and DataLoader workers, explicit or automatic.

A dataset's epoch lives in a :class:`SharedEpoch` (shared memory, so persistent workers see
``set_epoch`` calls made in the main process after they started); :class:`EpochMixin` gives
the datasets ``epoch``, ``auto_epochs`` and ``set_epoch`` over it.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context

__all__ = ["AUTO_EPOCH", "EpochMixin", "SharedEpoch", "mix64", "torch_epoch_word"]


def _spawning() -> bool:
    return multiprocessing.context.get_spawning_popen() is not None


AUTO_EPOCH = 1 << 62
"""Epoch words at or above this are automatic: drawn from torch's RNG for a pass that no
``set_epoch`` call named. ``set_epoch`` values stay below it, so the two never collide."""


def mix64(*words) -> int:
    """splitmix64 over ``words``: a 64-bit hash of a few integers (epoch words, tokens)."""
    x = 0
    for w in words:
        x = (x ^ (int(w) & 0xFFFFFFFFFFFFFFFF)) + 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x


def torch_epoch_word() -> int:
    """An automatic epoch word drawn from torch's global RNG (so ``torch.manual_seed`` and a
    DataLoader worker's seeding reproduce it)."""
    import torch

    return AUTO_EPOCH | int(torch.randint(0, AUTO_EPOCH, (), dtype=torch.int64))


class SharedEpoch:
    """The epoch set in the main process and read by DataLoader workers, persistent ones too.

    ``value`` is -1 until ``set_epoch`` is called (automatic epochs, see :class:`EpochMixin`).
    ``claim`` marks which pass used an automatic epoch pinned by ``load_state_dict``. Backed by
    ``multiprocessing.RawValue`` (shared memory, no lock). It travels to workers by fork or
    when a spawned worker starts; any other pickling (e.g. a copy sent elsewhere) carries the
    current values instead.
    """

    def __init__(self, value: int = -1):
        self._value = multiprocessing.RawValue("q", int(value))
        self._claim = multiprocessing.RawValue("q", 0)

    @property
    def value(self) -> int:
        return int(self._value.value)

    @value.setter
    def value(self, v: int) -> None:
        self._value.value = int(v)
        self._claim.value = 0

    @property
    def claim(self) -> int:
        return int(self._claim.value)

    @claim.setter
    def claim(self, v: int) -> None:
        self._claim.value = int(v)

    def __getstate__(self):
        if _spawning():
            return {"shared": self._value, "claim": self._claim}
        return {"value": self.value, "claim_value": self.claim}

    def __setstate__(self, state):
        if "shared" in state:
            self._value, self._claim = state["shared"], state["claim"]
        else:
            self._value = multiprocessing.RawValue("q", state["value"])
            self._claim = multiprocessing.RawValue("q", state.get("claim_value", 0))


class EpochMixin:
    """Epochs over a :class:`SharedEpoch` in ``self._epoch``, in one of two modes.

    * **Explicit** (after ``set_epoch(e)``, from the main process): the pass's order and
      augmentations are a function of ``(seed, e)``: the same on any run, any number of
      workers, and resumable mid-epoch.
    * **Automatic** (no ``set_epoch`` call, the default): every pass draws a fresh epoch word
      from torch's RNG, as torchvision's transforms and torch's samplers do: new
      augmentations (and, for ``TarDataset``, a new order) every epoch under a plain
      ``torch.utils.data.DataLoader``, reproducible from ``torch.manual_seed`` (and, with
      workers, the loader's ``generator``).
    """

    @property
    def epoch(self) -> int:
        """The epoch given to ``set_epoch`` (0 while epochs are automatic)."""
        return max(self._epoch.value, 0)

    @property
    def auto_epochs(self) -> bool:
        """True until ``set_epoch`` is called: each pass draws its own epoch from torch's RNG."""
        return self._epoch.value < 0

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that orders and augments the next pass (call from the main process).

        From then on the dataset is in explicit mode: passes repeat their epoch's order and
        augmentations until ``set_epoch`` is called again."""
        epoch = int(epoch)
        if not 0 <= epoch < AUTO_EPOCH:
            raise ValueError(f"epoch must be in [0, 2**62), got {epoch}")
        self._epoch.value = epoch

    def _sample_epoch(self) -> int:
        """The epoch word of one map-style sample: the explicit epoch, else a fresh draw from
        torch's RNG (the worker's own stream, seeded by the DataLoader per worker and epoch)."""
        v = self._epoch.value
        return v if v >= 0 else torch_epoch_word()
