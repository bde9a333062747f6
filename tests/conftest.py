"""Suite-wide settings that must be in place before any test touches torch's math libraries."""

import os

import pytest

# The warp tests compare with torchvision's tensor path exactly. torchvision builds its sampling
# grid with a batched matmul that runs in MKL, and MKL picks its kernel by CPU: on AVX-512 Intel
# parts its rounding differs in the last float32 bit from the AVX2 kernel (AMD, older Intel), which
# flips a nearest-neighbour tie on a pixel or two. MKL's Conditional Numerical Reproducibility mode
# pins the oracle to the AVX2 kernel on every CPU, so "exact" means the same thing everywhere.
# MKL reads it at its first call, after this module runs; subprocesses inherit it.
os.environ.setdefault("MKL_CBWR", "AVX2")

# turboloader's node-local caches (the remote shards' sample counts) go to a folder of this
# run, not the user's ~/.cache: a count cached by one test must not answer another's. Each
# pytest-xdist worker makes its own (a worker inherits the controller's environment, so the
# controller's folder is replaced, never shared by two processes running tests at once)
if "TURBOLOADER_CACHE" not in os.environ or (
        os.environ.get("PYTEST_XDIST_WORKER")
        and os.environ.get("_TURBOLOADER_TEST_CACHE_OF") != os.environ["PYTEST_XDIST_WORKER"]):
    import atexit
    import shutil
    import tempfile

    os.environ["TURBOLOADER_CACHE"] = tempfile.mkdtemp(prefix="turboloader-test-cache-")
    os.environ["_TURBOLOADER_TEST_CACHE_OF"] = os.environ.get("PYTEST_XDIST_WORKER", "")
    atexit.register(shutil.rmtree, os.environ["TURBOLOADER_CACHE"], True)


@pytest.hookimpl(trylast=True)   # after xdist's own (the grouping check below)
def pytest_collection_modifyitems(config, items):
    _check_loadgroup(config, items)
    _skip_cuda(items)


def _skip_cuda(items):
    """``@pytest.mark.cuda`` tests are skipped, saying why, where torch sees no CUDA device
    (CI's machines); ``benchmarks/gpu_check.sh`` runs them on a GPU machine."""
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA device; torch {torch.__version__} sees none "
                                   "here (run on a GPU machine: benchmarks/gpu_check.sh)")
    for item in marked:
        item.add_marker(skip)


def _check_loadgroup(config, items):
    """Under ``--dist loadgroup`` (``./dev.sh test``) the tests of one ``xdist_group`` run on
    one process: xdist marks them by a suffix on their id, on each worker after collection.
    Where that suffix is missing the grouping is silently off (pytest 9.2 keeps ids where
    xdist 3.8 no longer writes: pytest-dev/pytest-xdist#1386), and grouped module fixtures
    (the wheel's build, the benchmark smoke runs) run on both processes: each such test then
    fails at its setup, before its fixtures, saying so (an error raised here, on a worker, is
    lost in xdist's internal error)."""
    if not (hasattr(config, "workerinput") and config.getvalue("loadgroup")):
        return
    for item in items:
        if (item.get_closest_marker("xdist_group") is not None
                and "@" not in item.nodeid.rpartition("]")[2].rpartition("::")[2]):
            item.stash[_UNGROUPED] = True


_UNGROUPED = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.stash.get(_UNGROUPED, False):
        pytest.fail(f"--dist loadgroup did not group this xdist_group test: pytest "
                    f"{pytest.__version__} and this pytest-xdist do not work together "
                    "(requirements/constraints.txt pins a pair that does)", pytrace=False)
