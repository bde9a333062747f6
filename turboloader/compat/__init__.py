"""The seed documents' APIs, as thin adapters over the core (:mod:`turboloader.compat.seeds`).

Code written against those APIs runs unchanged: ``turboloader.DataLoader("train.tar")``
(seed 001's path-first form, :class:`DataLoader`), the ``.apply`` transform classes
(``turboloader.Compose``, ``turboloader.Resize``, ...), the ``Pipeline`` API and
``HighPerformanceDataset`` / ``create_dataloader``. This layer sits on top of the chain
(io -> decode -> transforms -> data -> loader); nothing below imports it.

Names are imported on first use.
"""

from turboloader._lazy import lazy_names
from turboloader.compat.names import SEED_NAMES

_SEEDS = "turboloader.compat.seeds"

_LAZY = {name: _SEEDS for name in SEED_NAMES}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
