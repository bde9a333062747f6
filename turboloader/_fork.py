"""What a forked child does first: freeze the garbage collector's view of what it inherited.

Why: torch's ``_MultiProcessingDataLoaderIter`` shuts its workers down in ``__del__``, which
asserts that it runs in the process that started them. An iterator that stopped on an
exception stays alive after the ``except`` block: the traceback's frames hold it, in a
reference cycle that only the cyclic garbage collector frees. When the next multi-worker
DataLoader forks its workers before that collection ran in the main process, each worker
inherits the dead iterator, and a collection inside the worker runs its ``__del__`` there:
``Exception ignored in ... __del__ ... AssertionError: can only test a child process``.
``gc.freeze()`` as the child's first step moves every inherited object to the permanent
generation, so no collection in the child ever finalizes the parent's objects. It is also
what CPython's documentation of ``gc.freeze`` recommends for forked workers: collections in
the child stop writing to inherited objects' headers, which kept copy-on-write pages shared.
Objects the child creates are collected as usual.
"""

import gc
import os

_installed = False


def install():
    """Register ``gc.freeze`` to run in every child forked from now on (once per process)."""
    global _installed
    if not _installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=gc.freeze)
        _installed = True
