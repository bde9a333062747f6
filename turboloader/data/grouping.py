"""What a pass of :class:`~turboloader.data.TarDataset` yields: a grouping value.

A pass of one logical worker stream reads the same way whatever it yields (the epoch, the
topology, the stream's items, the resume point, a reader, the cursor of
:mod:`turboloader.data.stream`); the grouping is the last step, a value passed in:

* :class:`Samples`: ``(image, label)`` one at a time (``iter(dataset)``);
* :class:`Batched` ``(size, drop_last)``: ``[images, labels]`` batches of the stream's
  samples in order (:meth:`TarDataset.batched <turboloader.data.TarDataset.batched>`, and
  the thread backend's ``worker_stream(batch_size=B)``);
* :class:`~turboloader.data.buckets.Bucketed`: batches of one aspect-ratio bucket each,
  the stream's items ordered into them first
  (:meth:`TarDataset.bucketed <turboloader.data.TarDataset.bucketed>`).

The checkpoint rule is one for every grouping (:mod:`turboloader.data.checkpoint`): a state
names, per stream, how far its item list was consumed; a grouping adds only how a stream's
batches advance it (:meth:`Grouping.marks`) and the ``key`` a state of it records (None:
the dataset's item order, which samples and batches share). ``batched()`` / ``bucketed()``
return a :class:`GroupedView`: the dataset with a grouping, every method one call into the
dataset's pass or checkpoint rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch.utils.data

from turboloader.data import stream

__all__ = ["Batched", "GroupedView", "Grouping", "Samples", "check_grouping", "position_after"]

# the resume entry of a stream after it handed out ``g`` batches (``g`` = 0 .. its count)
_Marks = Callable[[int], dict]


class Grouping(Protocol):
    """What a pass yields from the walk (samples, batches or buckets), and how a state of it
    counts a stream's batches. Implemented by :class:`Samples`, :class:`Batched` and
    :class:`~turboloader.data.buckets.Bucketed`."""

    @property
    def key(self) -> dict | None:
        """What a state of this grouping records: None for the dataset's item order
        (samples and batches), else a JSON-able dict (positions are in its own order)."""
        ...

    @property
    def batches(self) -> bool:
        """The pass yields whole batches (a view of it is loaded with ``batch_size=None``)."""
        ...

    def arrange(self, ds: Any, st: Any, slots: list, samples: list) -> tuple[list, list, Any]:
        """``(slots, samples, groups)``: the stream's items in delivery order and what
        :meth:`walk` needs of the arrangement (None when the order is the dataset's)."""
        ...

    def walk(self, cursor: Any, groups: Any, out: Callable | None,
             timing: Callable | None) -> Iterator:
        """What the pass yields from ``cursor`` (a :class:`~turboloader.data.stream` walk)."""
        ...

    def counted(self, batch_size: int | None, drop_last: bool) -> Grouping:
        """The grouping whose batches a loader over this one hands out (``batch_size``,
        ``drop_last``: the loader's)."""
        ...

    def marks(self, ds: Any, epoch: int, worker: int, num_workers: int, share: int,
              progress: dict | None) -> tuple[int, _Marks]:
        """``(count, after)``: the batches stream ``worker`` of ``num_workers`` yields in
        ``epoch`` (``share`` items), and its resume entry after ``g`` of them; ``progress``:
        what is known of its skips (None: none)."""
        ...


@dataclass(frozen=True)
class Samples:
    """``(image, label)`` samples one at a time, in the stream's order (``iter(dataset)``)."""

    key = None
    batches = False

    def arrange(self, ds: Any, st: Any, slots: list, samples: list) -> tuple[list, list, Any]:
        return slots, samples, None

    def walk(self, cursor: Any, groups: Any, out: Callable | None,
             timing: Callable | None) -> Iterator:
        return stream.samples(cursor, timing)

    def counted(self, batch_size: int | None, drop_last: bool) -> Grouping:
        """Batches of ``batch_size`` samples of each stream, as torch's DataLoader makes them."""
        if batch_size is None:
            raise ValueError("batches= needs batch_size= and num_workers= (and no delivered=)")
        return Batched(int(batch_size), drop_last=drop_last)

    def marks(self, ds: Any, epoch: int, worker: int, num_workers: int, share: int,
              progress: dict | None) -> tuple[int, _Marks]:
        raise ValueError("a stream of samples has no batches of its own: count them with "
                         "batch_size=")


@dataclass(frozen=True)
class Batched:
    """``[images, labels]`` batches of ``size`` samples of the stream in order, each decoded
    into one tensor (the last one shorter, or dropped with ``drop_last``)."""

    size: int
    drop_last: bool = False

    key = None  # the positions are the samples': a state of batches is a state of samples
    batches = True

    def __post_init__(self) -> None:
        if int(self.size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.size}")

    def arrange(self, ds: Any, st: Any, slots: list, samples: list) -> tuple[list, list, Any]:
        return slots, samples, None

    def walk(self, cursor: Any, groups: Any, out: Callable | None,
             timing: Callable | None) -> Iterator:
        return stream.batches(cursor, int(self.size), out, timing, drop_last=self.drop_last)

    def counted(self, batch_size: int | None, drop_last: bool) -> Grouping:
        """These batches (a loader over them has ``batch_size=None``; one given must agree)."""
        if batch_size is not None and int(batch_size) != self.size:
            raise ValueError(f"TarBatches.state_dict: batch_size={batch_size} but these "
                             f"batches hold {self.size}")
        return self

    def marks(self, ds: Any, epoch: int, worker: int, num_workers: int, share: int,
              progress: dict | None) -> tuple[int, _Marks]:
        B = int(self.size)
        count = share // B if self.drop_last else -(-share // B)
        return count, lambda g: position_after(min(g * B, share), share, progress)


def position_after(delivered: int, size: int, progress: dict | None = None) -> dict:
    """The resume entry of a stream of ``size`` items in the dataset's order after it
    delivered ``delivered`` samples (samples and batches count the same). ``progress``:
    what is known of its skips (``failed_pos``, ``pos``, ``failures``: the stream this
    process ran, or the skips another process reported); None: none are assumed.

    Example:
        >>> position_after(3, 10, {"failed_pos": [1], "pos": 10, "failures": 1})
        {'pos': 4, 'failed_pos': [1], 'replaced': 0, 'failures': 1}
    """
    if progress is None:
        return {"pos": min(delivered, size), "failed_pos": [], "replaced": 0, "failures": 0}
    # every failure before the point took an item without delivering a sample
    fails = progress["failed_pos"]
    pos = delivered
    for fp in fails:
        if fp < pos:
            pos += 1
    pos = min(pos, size)
    before = [fp for fp in fails if fp < pos]
    replaced = max(0, delivered - (size - len(before))) if pos >= size else 0
    return {"pos": pos, "failed_pos": before, "replaced": replaced,
            "failures": len(before) if pos < progress["pos"] else progress["failures"]}


def check_grouping(what: str, taken: dict | None, mine: dict | None) -> None:
    """Refuse a state taken over grouping ``taken`` (its ``key``; None: the dataset's
    samples or batches) for a pass over ``mine``: their positions are in different orders.

    Raises:
        ValueError: the two differ (the message names both).
    """
    if taken != mine:
        raise ValueError(
            f"{what}: a state of {_described(taken)} is not a state of "
            f"{_described(mine)}: positions differ between the two; take the state from "
            f"the object the loader iterates (ds.bucketed(...).state_dict, "
            f"ds.batched(...).state_dict or turboloader.DataLoader.state_dict)")


def _described(key):
    return "the dataset's samples (or batches)" if key is None else f"buckets {key}"


class GroupedView(torch.utils.data.IterableDataset):
    """A :class:`~turboloader.data.TarDataset` whose passes are grouped by ``grouping``
    (what ``batched()`` and ``bucketed()`` return): the dataset's one pass, the thread
    backend's worker streams and the one checkpoint rule, each with this grouping.
    Attributes not defined here are the dataset's.

    Args:
        dataset: the dataset.
        grouping: a :class:`Grouping` that yields batches.
    """

    # the thread backend's protocol (turboloader.loader.protocol): whole batches per stream
    yields_batches = True

    def __init__(self, dataset: Any, grouping: Grouping):
        self.dataset = dataset
        self.grouping = grouping

    def __getattr__(self, name):
        if name in ("dataset", "grouping"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def worker_sizes(self, num_workers: int) -> list[int]:
        """Samples each logical worker stream reads per epoch (the dataset's shares)."""
        return self.dataset.worker_sizes(num_workers)

    def worker_stream(self, worker: int, num_workers: int, *, batch_size: int | None = None,
                      out: Callable | None = None, timing: Callable | None = None) -> Iterator:
        """The batches of logical worker ``worker`` of ``num_workers`` (what ``__iter__``
        yields in that DataLoader worker; :meth:`TarDataset.worker_stream
        <turboloader.data.TarDataset.worker_stream>` with this grouping; ``batch_size`` is
        the grouping's), written into ``out(shape, dtype)`` tensors when given."""
        return self.dataset.worker_stream(worker, num_workers, out=out, timing=timing,
                                          grouping=self.grouping)

    def __iter__(self) -> Iterator:
        return self.dataset._iter(self.grouping)

    def state_dict(self, *, batches: int | None = None, batch_size: int | None = None,
                   num_workers: int | None = None, drop_last: bool = False,
                   delivered: list[int] | None = None) -> dict:
        """The dataset's :meth:`~turboloader.data.TarDataset.state_dict` of a pass of this
        grouping: ``batches=k`` counts this grouping's batches (its batch size and
        ``drop_last``; a loader over it has ``batch_size=None``, and a ``batch_size=``
        given must agree).

        Raises:
            ValueError: what the dataset's ``state_dict`` raises."""
        return self.dataset.state_dict(batches=batches, batch_size=batch_size,
                                       num_workers=num_workers, drop_last=drop_last,
                                       delivered=delivered, grouping=self.grouping)

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict` (the dataset's ``load_state_dict``, checked to
        be a state of this grouping).

        Raises:
            ValueError: a state of another grouping, or any reason the dataset refuses it."""
        if isinstance(state, dict):
            check_grouping(f"{type(self).__name__}.load_state_dict", state.get("grouping"),
                           self.grouping.key)
        self.dataset.load_state_dict(state)
