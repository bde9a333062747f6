"""Hugging Face's ``datasets`` for a test, imported past ``benchmarks/datasets.py``."""

import contextlib
import os
import sys

import pytest


@contextlib.contextmanager
def hf_datasets():
    """Hugging Face's ``datasets``, imported past ``benchmarks/datasets.py`` (which
    tests/test_bench_smoke.py puts first on sys.path) and taken out of ``sys.modules``
    afterwards, so that the benchmarks' ``from datasets import ...`` still finds theirs."""
    def ours():
        return {k: v for k, v in sys.modules.items()
                if k == "datasets" or k.startswith("datasets.")}

    saved_path, saved = sys.path[:], ours()
    for k in saved:
        del sys.modules[k]
    _unregister()  # a fresh import registers them again
    sys.path[:] = [p for p in sys.path if not os.path.isfile(os.path.join(p or ".",
                                                                          "datasets.py"))]
    try:
        try:
            import datasets
        except ImportError:
            pytest.skip("Hugging Face datasets is not installed")
        yield datasets
    finally:
        for k in ours():
            del sys.modules[k]
        _unregister()  # so that the next fresh import (another test's) can register them
        sys.modules.update(saved)
        sys.path[:] = saved_path


def _unregister():
    """Drop the pyarrow extension types ``datasets`` registers when imported (importing it
    anew after taking it out of ``sys.modules`` would find them defined and fail)."""
    try:
        import pyarrow as pa
    except ImportError:
        return
    for n in range(2, 6):
        try:
            pa.unregister_extension_type(f"datasets.features.features.Array{n}DExtensionType")
        except (KeyError, pa.ArrowKeyError):
            pass
