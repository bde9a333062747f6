"""What the interpreter does at exit, before it finalizes: stop the threads turboloader started.

Why: a script may stop in the middle of an epoch and exit with a thread-backend pass still
running (an iterator left open at module level, a ``break`` out of a loop whose iterator a
global still holds). Its threads are daemon threads, and CPython finalizes the interpreter
without waiting for those. A daemon thread inside a torch operation that released the GIL
(a copy into a batch tensor, a stack) then takes the GIL back during finalization, and
CPython ends it there with ``pthread_exit``. That unwinds through torch's C++ frames, which
cannot be unwound, and the process aborts with ``terminate called without an active
exception``. ``atexit`` callbacks run before finalization, while those threads still run
normally: stopping and joining them there makes the exit quiet.
"""

from __future__ import annotations

import atexit
import weakref
from collections.abc import Callable

_running: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # owner -> its stop function


def stop_at_exit(owner: object, stop: Callable[[object], None]) -> None:
    """Call ``stop(owner)`` at interpreter exit if ``owner`` is still alive then (its
    threads reference it while they run). ``stop`` must stop and join the threads, and may
    run again later (the owner's own close, after exit's)."""
    _running[owner] = stop


@atexit.register
def _stop_all() -> None:
    for owner, stop in list(_running.items()):
        try:
            stop(owner)
        except Exception:  # exiting anyway: one owner's failure must not keep the others running
            pass
