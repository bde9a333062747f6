"""The failure policy: skip or raise, with a budget.

The datasets route every data error through :meth:`FailureLog.record`, the one place that
decides between raising and skipping. Only :class:`~turboloader.errors.TurboLoaderError`
is ever skipped; anything else (TypeError in a transform, OSError reading a file) is a
programming or environment error and propagates.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from turboloader.errors import FailureBudgetExceeded, SharedMemoryError, TurboLoaderError

__all__ = ["FailureLog", "FailurePolicy"]


class FailurePolicy:
    """What to do when a sample cannot be read: ``"raise"`` or ``"skip"`` within a budget.

    Args:
        on_error: ``"raise"`` (default) re-raises the typed error, with notes naming the
            shard/file, key and byte offset; ``"skip"`` records it and moves on.
        max_failures: the skip budget per process (main or each DataLoader worker) per
            epoch: an int count, or a float in [0, 1) taken as a fraction of the samples
            that process is assigned in the epoch, and never less than one failure (so a
            small run, or a worker share under 100 samples, survives one bad file). One more
            failure than the budget raises :class:`FailureBudgetExceeded`. Default 0.01
            (1 %, at least 1). ``0`` allows none.

    Raises:
        ValueError: unknown ``on_error`` or a negative / out-of-range ``max_failures``.
        TypeError: ``max_failures`` is not a number.
    """

    def __init__(self, on_error: str = "raise", max_failures: float = 0.01) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f'on_error must be "raise" or "skip", got {on_error!r}')
        if isinstance(max_failures, bool) or not isinstance(max_failures, numbers.Real):
            raise TypeError(f"max_failures must be an int or a float, not {type(max_failures).__name__}")
        if isinstance(max_failures, numbers.Integral):
            if max_failures < 0:
                raise ValueError(f"max_failures must be >= 0, got {max_failures}")
            max_failures = int(max_failures)
        elif not 0 <= max_failures < 1:
            raise ValueError(f"a fractional max_failures must be in [0, 1), got {max_failures}")
        self.on_error: str = on_error
        self.max_failures: float = max_failures   # an int: a count; a float: a fraction

    def budget(self, n_items: int) -> float:
        """Failures allowed among ``n_items`` samples."""
        if isinstance(self.max_failures, int):
            return self.max_failures
        if self.max_failures == 0:
            return 0
        return max(1.0, self.max_failures * n_items)

    def __repr__(self):
        return f"FailurePolicy(on_error={self.on_error!r}, max_failures={self.max_failures!r})"


class FailureLog:
    """Failures of one process in one epoch, under a :class:`FailurePolicy`."""

    def __init__(self, policy: FailurePolicy, n_items: int, *, epoch: int, recorder=None):
        self.policy = policy
        self.n_items = n_items
        self.epoch = epoch
        self.recorder = recorder
        self.failures = []  # (shard, key, reason)
        self.count = 0
        self.bad = {}  # map-style: sample index -> its exception, for the rest of the pass
        self.jump = {}  # map-style: a bad index -> the readable one that replaced it

    def record_sample(self, exc: BaseException, where: tuple[str, Any, Any, Any], *,
                      stream: Any = None) -> None:
        """:meth:`record` for the sample ``where`` names (a dataset's ``_where``: ``(note,
        shard, key, offset)``), the note added to a turboloader error once: what every walk
        (map-style and stream, every grouping) does with a failed row.

        Must be called from the ``except`` block that caught ``exc``, or where raising it
        is what the caller wants.
        """
        note, shard, key, offset = where
        if isinstance(exc, TurboLoaderError) and note not in getattr(exc, "__notes__", ()):
            exc.add_note(note)  # type: ignore[attr-defined]  # 3.11+
        self.record(exc, shard=shard, key=key, offset=offset, stream=stream)

    def record(self, exc: BaseException, *, shard, key, offset=None, stream=None) -> None:
        """Raise ``exc`` under ``"raise"``; under ``"skip"`` count and list it, raising
        :class:`FailureBudgetExceeded` (caused by ``exc``) once over budget.

        Must be called from the ``except`` block that caught ``exc``.
        """
        if (not isinstance(exc, TurboLoaderError) or isinstance(exc, SharedMemoryError)
                or self.policy.on_error == "raise"):
            raise exc
        self.count += 1
        reason = f"{type(exc).__name__}: {exc}"
        self.failures.append((shard, key, reason))
        if self.recorder is not None:
            self.recorder.failure(self.epoch, shard, key, offset, reason, stream)
        budget = self.policy.budget(self.n_items)
        if self.count > budget:
            if self.recorder is not None:
                self.recorder.flush()
            raise FailureBudgetExceeded(
                f"{self.count} samples failed in epoch {self.epoch}, over the budget of "
                f"max_failures={self.policy.max_failures!r} ({math.floor(budget)} of "
                f"{self.n_items} samples in this process); last: {reason}",
                self.failures,
            ) from exc
