"""A script that stops mid-epoch and exits prints nothing at exit, whatever it left open.

A stream dropped mid-epoch is closed by the garbage collector, possibly while the
interpreter shuts down, when module globals are already None: its statistics flush used
to print ``Exception ignored in: <generator object TarDataset._stream ...> ...
AttributeError: 'NoneType' object has no attribute 'getpid'``.

A thread-backend pass left running is stopped and joined at exit, before the interpreter
finalizes: a daemon thread still inside a torch operation when CPython finalizes is ended
with ``pthread_exit`` through torch's C++ frames, and the process aborted with ``terminate
called without an active exception`` (now and then, more often on a loaded machine). The
script's own ``atexit`` hook, registered before turboloader's, runs after it and lists the
turboloader threads still alive: none.
"""

import subprocess
import sys

import pytest

from helpers import subprocess_env

SCRIPT = r"""
import atexit
import sys
import threading

def alive_at_exit():  # registered first, so it runs after turboloader's own exit hook
    names = sorted(t.name for t in threading.enumerate() if t.name.startswith("turboloader"))
    print("alive at exit:", names)

atexit.register(alive_at_exit)

import torch
from helpers.shards import write_shards
import turboloader
from turboloader import transforms as T

paths = write_shards(sys.argv[1], [40, 40])
tf = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
ds = turboloader.TarDataset(paths, tf, seed=1)
ds.set_epoch(0)
how = sys.argv[2]
if how == "samples":            # an iterator left open at module level
    it = iter(ds)
    first = next(it)
elif how == "batches":          # a worker stream of batches, left open
    it = ds.worker_stream(0, 1, batch_size=4)
    first = next(it)
elif how == "resume":           # the resume guide's shape: break, save, resume, break
    it = iter(torch.utils.data.DataLoader(ds, batch_size=4))
    for step, batch in enumerate(it, 1):
        if step == 2:
            state = ds.state_dict(batches=step, batch_size=4, num_workers=0)
            break
    ds2 = turboloader.TarDataset(paths, tf, seed=1)
    ds2.load_state_dict(state)
    ds2.set_epoch(state["epoch"])
    it2 = iter(ds2)
    first = next(it2)
elif how == "threads":
    loader = turboloader.DataLoader(ds, batch_size=4, num_workers=2, backend="threads")
    it = iter(loader)
    first = next(it)
elif how == "pipeline":        # the seed guides' Pipeline, started and left running
    pipeline = turboloader.Pipeline(tar_paths=paths, num_workers=2, queue_size=4)
    pipeline.start()
    first = pipeline.next_batch(4)
elif how == "processes":
    loader = turboloader.DataLoader(ds, batch_size=4, num_workers=2)
    it = iter(loader)
    first = next(it)
print("stopped")
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["samples", "batches", "resume", "threads", "pipeline",
                                 "processes"])
def test_nothing_is_printed_at_exit(tmp_path, how):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), how],
                         env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "stopped\nalive at exit: []\n"
    assert out.stderr == "", out.stderr
