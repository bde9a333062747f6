"""Shared test helpers, importable from every test as ``helpers`` (pyproject sets pytest's
``pythonpath`` to ``tests/``; subprocesses get the same through :func:`subprocess_env`).

* :mod:`helpers.shards`: JPEGs and TAR shards generated in the test.
* :mod:`helpers.images`: single encoded images (JPEG, PNG) with known pixels.
* :mod:`helpers.seeds`: the seed-example tests' helpers.
* :mod:`helpers.tinymodel`: the Lightning tests' model (needs Lightning).
"""

import os
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent.parent
ROOT = TESTS.parent


def subprocess_env(**extra):
    """``os.environ`` for a Python subprocess that imports this checkout's turboloader and
    the helpers (``PYTHONPATH`` = repo root + ``tests/``), plus ``extra``."""
    path = [str(ROOT), str(TESTS)]
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **extra}


def sweep(values, fast=1, *, names=1):
    """``values`` for ``pytest.mark.parametrize`` over ``names`` argument names, all but the
    first ``fast`` marked ``slow``: the edit loop runs representative cases, CI the sweep."""
    import pytest

    values = list(values)
    return values[:fast] + [pytest.param(*(v if names > 1 else (v,)), marks=pytest.mark.slow)
                            for v in values[fast:]]
