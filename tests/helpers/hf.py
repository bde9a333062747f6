"""Hugging Face's ``datasets`` for a test, imported past ``benchmarks/datasets.py``."""

import contextlib
import os
import sys

import pytest


@contextlib.contextmanager
def hf_datasets():
    """Hugging Face's ``datasets``, imported past ``benchmarks/datasets.py`` (which
    tests/test_bench_smoke.py puts first on sys.path) and taken out of ``sys.modules``
    afterwards, so that the benchmarks' ``from datasets import ...`` still finds theirs
    (the same as tests/data/test_parquet.py's)."""
    def ours():
        return {k: v for k, v in sys.modules.items()
                if k == "datasets" or k.startswith("datasets.")}

    saved_path, saved = sys.path[:], ours()
    for k in saved:
        del sys.modules[k]
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
        sys.modules.update(saved)
        sys.path[:] = saved_path
