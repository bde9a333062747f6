"""The side-protocol the fused path asks of a transform, declared once.

A fused pipeline is ``[crop | resize [crop]] post...``: one geometry step, then members that
act on the output (a flip, colour operations, the containers around them). Each role's
methods, with one signature each:

* :class:`Draws`: where a batch's random numbers come from (``KeyDraws`` for a batch of
  samples' keys, ``RngDraws`` for one sample's generator; :mod:`turboloader.transforms._draws`).
* :class:`FusedCrop`: a crop that draws its parameters for every row at once
  (``RandomResizedCrop``, ``RandomCrop``, ``CenterCrop``); :class:`FusedResize`: a resize's
  output size for every row (``Resize``).
* :class:`FusedMember`: a post-geometry member (``RandomHorizontalFlip``, ``ColorJitter``,
  ``RandomApply`` / ``RandomChoice`` / ``RandomOrder`` / ``Compose`` of such): how many colour
  operations it adds to a fused call, and its draw for a batch, recorded in the executor's
  :class:`~turboloader.decode.executor.SlotSpec`. Only a class's own declaration counts
  (:func:`~turboloader.transforms._transform.fused_ops`): a subclass that changes what its
  parent does is not fused by accident.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from turboloader.decode.executor import SlotSpec

__all__ = ["Draws", "FusedCrop", "FusedMember", "FusedResize"]


@runtime_checkable
class Draws(Protocol):
    """A batch's random numbers, drawn for the rows where ``mask`` is True (all rows when
    None); the others' generators stay where they are."""

    def random(self, mask: np.ndarray | None = None) -> np.ndarray:
        """``float64 (n,)`` in [0, 1), as ``rng.random()``."""
        ...

    def uniform(self, a: Any, b: Any, mask: np.ndarray | None = None) -> np.ndarray:
        """As ``rng.uniform(a, b)``."""
        ...

    def below(self, m: Any, mask: np.ndarray | None = None) -> np.ndarray:
        """``int64 (n,)``, as ``rng.randint(0, m - 1)``."""
        ...

    def permutation(self, k: int, mask: np.ndarray | None = None) -> np.ndarray:
        """``int64 (n, k)``, as ``rng.shuffle(list(range(k)))``."""
        ...

    def categorical(self, p: Any, mask: np.ndarray | None = None) -> np.ndarray:
        """``int64 (n,)``, as RandomChoice's draw."""
        ...


@runtime_checkable
class FusedResize(Protocol):
    """A fused pipeline's resize."""

    def _output_sizes(self, sizes: np.ndarray) -> np.ndarray:
        """The output (height, width) of every row of ``sizes`` (``int64 (n, 2)``)."""
        ...


@runtime_checkable
class FusedCrop(Protocol):
    """A fused pipeline's crop."""

    def _draw_batch(self, sizes: np.ndarray, d: Draws,
                    mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """This step's parameters for every row of ``sizes`` (``int64 (n, 2)`` (height,
        width)), drawn from ``d``: arrays named as ``make_params``' keys (``top``, ``left``,
        ``height``, ``width``)."""
        ...


@runtime_checkable
class FusedMember(Protocol):
    """A fused pipeline's post-geometry member."""

    def _fused_ops(self) -> int:
        """How many colour operations this member can add to a fused call."""
        ...

    def _fused_draw(self, d: Draws, mask: np.ndarray, r: SlotSpec) -> None:
        """Draw this member's parameters from ``d`` for the rows in ``mask`` and record them
        in ``r`` (``r.flip``; ``r.ops`` / ``r.factors`` / ``r.n_ops``, the colour operations
        of each row in order)."""
        ...
