"""Byte sizes written the way people write them (``"512MB"``, ``"2GiB"``): cache capacities."""

from __future__ import annotations

import numbers
import re

__all__ = ["parse_size"]

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}


def parse_size(size: int | str) -> int:
    """Bytes in ``size``: an int, or a string such as ``"512MB"``, ``"2GiB"``, ``"1.5g"``.

    Example:
        >>> parse_size("2GiB"), parse_size(1000)
        (2147483648, 1000)
    """
    if isinstance(size, bool):
        raise TypeError("size must be an int or a string such as '2GB'")
    if isinstance(size, numbers.Integral):
        value = int(size)
    elif isinstance(size, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", size)
        if m is None or m.group(2).lower() not in _UNITS:
            raise ValueError(f"cannot read a size from {size!r} (try '512MB' or '2GiB')")
        value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    else:
        raise TypeError(f"size must be an int or a string such as '2GB', not {type(size).__name__}")
    if value < 0:
        raise ValueError(f"size must be >= 0, got {size!r}")
    return value
