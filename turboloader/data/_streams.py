"""Which reading stream the calling thread belongs to, and the per-stream reading states of
the map-style datasets (ImageFolder, TBLDataset).

A stream is what has its own decoder, cache, statistics recorder and failure budget: the
main process (``"main"``), a DataLoader worker process (``"worker{id}"``), or a decode
thread of ``turboloader.DataLoader(backend="threads")``, which names itself with
:func:`reading_as` (``"rank{r}-thread{w}"``) so that its threads keep separate counters
and budgets, as worker processes do. TarDataset names its streams itself (``_stream``).
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

from turboloader.data.cache import Decoder
from turboloader.data.failures import FailureLog

_local = threading.local()
_LOCK = threading.Lock()  # guards every dataset's _states (module level: picklable datasets)


@contextmanager
def reading_as(name: str):
    """Samples read by this thread inside the block belong to the stream ``name``."""
    prev = getattr(_local, "name", None)
    _local.name = name
    try:
        yield
    finally:
        _local.name = prev


def stream_name() -> str:
    """The calling thread's stream: set by :func:`reading_as`, else ``"worker{id}"`` in a
    DataLoader worker process, else ``"main"``."""
    name = getattr(_local, "name", None)
    if name is not None:
        return name
    import torch.utils.data

    info = torch.utils.data.get_worker_info()
    return f"worker{info.id}" if info is not None else "main"


def stream_state(dataset, factory):
    """``dataset._states[name]`` for the calling thread's stream, made by ``factory(name)``
    on first use in this process. States inherited from a parent process (fork) are dropped,
    not closed. A state is used by one thread at a time (its stream's)."""
    name = stream_name()
    pid = os.getpid()
    st = dataset._states.get(name)
    if st is not None and st.pid == pid:
        return st
    with _LOCK:
        states = dataset._states
        if any(s.pid != pid for s in states.values()):
            states = dataset._states = {k: s for k, s in states.items() if s.pid == pid}
        st = states.get(name)
        if st is None:
            st = states[name] = factory(name)
    return st


def own_states(dataset) -> list:
    """The reading states this process created (for flushing their statistics)."""
    pid = os.getpid()
    with _LOCK:
        return [s for s in dataset._states.values() if s.pid == pid]


class MapStreamState:
    """What one stream of a map-style dataset keeps: its decoder (and cache), its statistics
    recorder and its per-epoch failure logs. Never pickled; rebuilt in each worker."""

    def __init__(self, dataset, name):
        self.pid = os.getpid()
        self.decoder = Decoder(dataset.transform, cache=dataset._cache_bytes,
                               short_side=dataset.cache_short_side, max_pixels=dataset.max_pixels)
        # failures are reported at once: a map-style worker never sees the end of a pass
        self.recorder = dataset._telemetry.recorder(name, interval=dataset.stats_interval,
                                                    flush_failures=True)
        self.recorder.cache = self.decoder.cache
        self.logs = {}

    def log(self, policy, n, epoch):
        """The failure log of ``epoch`` (budget over ``n`` samples), made on first use."""
        log = self.logs.get(epoch)
        if log is None:
            log = self.logs[epoch] = FailureLog(policy, n, epoch=epoch, recorder=self.recorder)
        return log
