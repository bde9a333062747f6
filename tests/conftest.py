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

# torch's intra-op threads are OpenMP's (GNU libgomp here), whose idle threads spin after each
# parallel region before they sleep: on a loaded 2-core machine the spinning thread burns its
# core while the thread it waits for is descheduled, in the test process and in every child
# (subprocesses inherit it). Passive waiting sleeps at once. It changes how idle threads wait,
# never what an operation computes. (A loop of small interpolations with 2 ms of Python
# between them: 8.4 CPU-s spinning, 1.4 passive.) libgomp reads it when torch loads it, after
# this module runs.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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


# The suite's longest tests (pytest --durations, two processes, a loaded 2-core machine:
# 10-100 s each), longest first. They run first, so that the two xdist processes do not end
# with one of them alone in a long test while the other is done: the short tests fill in
# behind them. (xdist's loadgroup schedules its groups first, largest first: the wheel build
# and the benchmark smoke runs.) A name that matches nothing costs nothing.
SLOW_FIRST = (
    "tests/test_bench_remote_smoke.py::test_bench_remote_runs",
    "tests/scale/test_remote_many_shards.py::test_thousand_remote_shards_every_loader_exactly_once",
    "tests/loader/test_kept_batches.py::test_start_methods_keep_batches_intact",
    "tests/test_docs.py::test_sphinx_build_has_no_warnings",
    "tests/scale/test_multinode.py::test_two_nodes_two_procs_two_workers",
    "tests/loader/test_moved_batches.py::test_a_view_of_a_moved_batch_stays_intact",
    "tests/test_gpu_check_smoke.py::test_dry_run_prints_the_table",
    "tests/lightning/test_lightning_module.py::test_ddp_two_ranks_see_disjoint_data",
    "tests/loader/test_shared_memory.py::test_shared_memory_is_returned_when_workers_exit",
    "tests/loader/test_fork_after_error.py::test_no_inherited_iterator_finalized_in_workers",
    "tests/loader/test_shared_memory.py::test_a_killed_workers_blocks_are_freed_under_file_system",
    "tests/realshape/test_tar_shapes.py::test_k40_turboloader",
    "tests/native/test_batch_runner.py::test_fuzzed_corrupt_batches_match_the_per_sample_path",
    "tests/loader/test_quiet_exit.py::test_nothing_is_printed_at_exit",
    "tests/seeds/test_seed_examples.py::test_seed001_distributed",
    "tests/test_bench_seekable_smoke.py::test_bench_seekable_runs",
    "tests/test_gpu_check_smoke.py::test_without_jpeg_headers_or_a_carry_it_stops_at_once",
    "tests/scale/test_resume.py::test_plain_dataloader_resume_same_order",
    "tests/cli/test_hostile_inputs.py::test_symlink_to_dev_zero_fails_at_once_like_torchvision",
    "tests/realshape/test_tar_shapes.py::test_k40_torch_dataloader",
    "tests/scale/test_fetch.py::test_a_streamed_epoch_starts_from_bytes_read_ahead",
)


# Modules whose tests share a costly module-scoped fixture (synthetic JPEGs of hundreds of
# pixels, a written dataset: seconds each) or one child interpreter
# (helpers.isolated.Interpreter): under --dist loadgroup each test is scheduled alone, so
# both xdist processes ran some of a module's tests and each built the fixture (or started
# the child) for itself. Each of these runs on one process, as an xdist_group of its own
# ("module:<path>"); the fixture is built once. (pytest --durations=0 of a whole run showed
# each of these modules' fixture set up two or more times, 1.6-5.6 s each time.)
ONE_PROCESS = (
    "tests/transforms/test_batch.py",
    "tests/transforms/test_device_decode.py",
    "tests/transforms/test_plan.py",
    "tests/test_fused.py",
    "tests/native/test_batch_runner.py",
    "tests/tbl/test_tbl_dataset.py",
    "tests/tbl/test_convert.py",
    "tests/tbl/test_tbl_format.py",
    "tests/test_doc_examples.py",
    "tests/cli/test_papercuts.py",
    "tests/cli/test_cli_commands.py",   # synthetic_jpegs(9) written as a folder: 2-3 s
    "tests/test_readme.py",             # synthetic_jpegs(16) written as shards: 3 s
    "tests/data/test_video_recorded.py",   # a session fixture: the recorded videos, encoded
    # one child interpreter for the module's cases
    "tests/data/test_truncation.py",
    "tests/data/test_hostile_sources.py",
    "tests/native/test_jpeg_corruption.py",
    # a tuple: one group for the modules together. The store emulators (tests/scale/
    # conftest.py's session fixtures: Azurite, moto's S3, the GCS emulator; Azurite's start
    # took 4-5 s), started once
    ("tests/scale/test_stores.py", "tests/scale/test_counts.py",
     "tests/scale/test_store_glob.py"),
)
_GROUP_OF = {module: f"module:{entry if isinstance(entry, str) else entry[0]}"
             for entry in ONE_PROCESS
             for module in ((entry,) if isinstance(entry, str) else entry)}


class _OneProcess:
    """``ONE_PROCESS``'s modules: each an ``xdist_group`` of its own, a tuple's modules one
    together (a test already in a group keeps it). A plugin object, since this conftest's own
    collection hook runs last."""

    @pytest.hookimpl(tryfirst=True)   # before xdist's own, which reads the xdist_group marks
    def pytest_collection_modifyitems(self, items):
        for item in items:
            group = _GROUP_OF.get(item.nodeid.partition("::")[0])
            if group is not None and item.get_closest_marker("xdist_group") is None:
                item.add_marker(pytest.mark.xdist_group(group))


def pytest_configure(config):
    config.pluginmanager.register(_OneProcess(), "turboloader-one-process")


@pytest.hookimpl(trylast=True)   # after xdist's own (the grouping check below)
def pytest_collection_modifyitems(config, items):
    _check_loadgroup(config, items)
    _skip_cuda(items)
    _slow_first(items)


def _slow_first(items):
    """``SLOW_FIRST``'s tests first, in its order; the rest in collection order (a stable sort:
    every xdist worker collects the same order, as xdist requires)."""
    def rank(item):
        name = item.nodeid.partition("[")[0].partition("@")[0]
        return next((k for k, slow in enumerate(SLOW_FIRST) if name.startswith(slow)),
                    len(SLOW_FIRST))
    items.sort(key=rank)


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
