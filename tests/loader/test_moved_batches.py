"""Batches torch moves into new shared memory (``share_memory_()``, a
``torch.multiprocessing`` queue) while a NumPy or DLPack view of them is kept: the view must
stay readable and unchanged, and so must the moved batch (a pooled block freed or rewritten
under the view used to segfault or change its pixels). The loader runs in a subprocess, so a
segfault fails the test instead of killing pytest."""

import subprocess
import sys
import textwrap

import pytest
from helpers import subprocess_env, sweep

MODES = [("share", "numpy"), ("queue", "dlpack"), ("share", "dlpack"), ("queue", "numpy")]

MOVED = textwrap.dedent("""
    import gc, sys
    import numpy as np
    import torch, torch.multiprocessing as tmp, torch.utils.dlpack
    import turboloader
    from helpers import kept

    # the imports' objects (torch's, numpy's: a full collection walks them all, 0.16 CPU-s
    # each) go to the permanent generation; the collections below still walk every object
    # made from here on, the batches and the loader's blocks among them
    gc.freeze()
    root, backend = sys.argv[1:3]
    modes = %r
    want = kept.oracle((0,))
    ds = kept.make_dataset("tar", root)
    dl = turboloader.DataLoader(ds, batch_size=kept.B, num_workers=2, backend=backend)
    q = tmp.get_context("fork").Queue()
    held = []  # (mode, view, moved batch, labels)
    for e in range(3):
        ds.set_epoch(e)
        dl.set_epoch(e)
        for images, ys in dl:
            if e == 0:  # keep a view of each first-epoch batch, then let torch move it
                move, view = modes[len(held) %% len(modes)]
                v = images.numpy() if view == "numpy" else torch.utils.dlpack.to_dlpack(images)
                if move == "share":
                    images.share_memory_()
                    assert images.is_shared()
                else:
                    q.put(images)
                    images = q.get(timeout=60)
                held.append(((move, view), v, images, ys.tolist()))
            del images
            gc.collect()  # later epochs: every dropped block is free to be rewritten
    bad = {m: 0 for m in modes}
    for mode, v, images, ys in held:
        arr = v if mode[1] == "numpy" else torch.utils.dlpack.from_dlpack(v).numpy()
        for a, img, y in zip(arr, images, ys):
            bad[mode] += not (np.array_equal(a, want[(0, y)].numpy())
                              and torch.equal(img, want[(0, y)]))
    print(len(held), sorted(bad.items()))
""") % (MODES,)


@pytest.mark.parametrize("backend", sweep(["processes", "threads"]))
def test_a_view_of_a_moved_batch_stays_intact(backend, tmp_path):
    """Every mode (share_memory_() or a torch.multiprocessing queue, with a NumPy or a
    DLPack view kept): views and moved batches equal each sample decoded alone after two more
    epochs have recycled every block they could."""
    out = subprocess.run([sys.executable, "-c", MOVED, str(tmp_path), backend],
                         capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert out.returncode == 0, f"rc {out.returncode}: {out.stderr[-3000:]}"
    n, bad = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert int(n) == 8
    assert eval(bad) == [(m, 0) for m in sorted(MODES)]
