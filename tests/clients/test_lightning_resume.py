"""Lightning: a fit that crashes mid-epoch, resumed with ``fit(ckpt_path=<the last mid-epoch
checkpoint>)``, sees every sample of the epoch exactly once across the two runs, for every
source ``TurboDataModule`` takes, without Lightning's "not resumable" warning."""

import glob
import os
import re
import warnings

import pytest

L = pytest.importorskip("lightning")

from helpers.tinymodel import Tiny  # noqa: E402

from turboloader.lightning import TurboDataModule  # noqa: E402

B = 2
N = 16  # the sources' samples (conftest.py), labelled 0..N-1


class Crash(L.Callback):
    """Raises after ``at`` training batches: the fit dies mid-epoch."""

    def __init__(self, at):
        self.at = at

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx + 1 == self.at:
            raise RuntimeError("crash")


def _module(source, backend="threads", num_workers=0):
    return TurboDataModule(source, batch_size=B, num_workers=num_workers, image_size=32,
                           seed=5, backend=backend)


def _fit(tmp_path, model, dm, *, callbacks=(), **kw):
    from lightning.pytorch.callbacks import ModelCheckpoint

    every3 = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1)
    L.Trainer(accelerator="cpu", devices=1, logger=False, max_epochs=1, limit_val_batches=0,
              enable_progress_bar=False, enable_model_summary=False,
              callbacks=[*callbacks, every3]).fit(model, datamodule=dm, **kw)


def _last_checkpoint(tmp_path):
    ckpts = glob.glob(os.path.join(tmp_path, "*.ckpt"))
    return max(ckpts, key=lambda p: int(re.search(r"step=(\d+)", p).group(1)))


@pytest.mark.parametrize("kind,backend,num_workers", [
    ("folder", "threads", 0), ("shards", "threads", 0), ("manifest", "threads", 0),
    ("tbl", "threads", 0), ("parquet", "threads", 0),
    pytest.param("folder", "processes", 2, marks=pytest.mark.slow),
    pytest.param("shards", "processes", 2, marks=pytest.mark.slow)])
def test_fit_crash_resume_sees_every_sample_once(sources, tmp_path, kind, backend, num_workers):
    source = sources[kind]
    crashed = Tiny()
    with pytest.raises(RuntimeError, match="crash"):
        _fit(tmp_path, crashed, _module(source, backend, num_workers), callbacks=[Crash(5)])
    ckpt = _last_checkpoint(tmp_path)
    assert ckpt.endswith("step=3.ckpt")
    kept = crashed.seen[0][:3 * B]  # what the checkpointed model was trained on

    resumed = Tiny()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(tmp_path / "after", resumed, _module(source, backend, num_workers),
             ckpt_path=ckpt)
    assert not [w for w in caught if "not resumable" in str(w.message)]
    rest = resumed.seen[0]
    assert sorted(kept + rest) == list(range(N)), (kept, rest)
    # the same order an uninterrupted epoch has
    whole = Tiny()
    _fit(tmp_path / "whole", whole, _module(source, backend, num_workers))
    assert kept + rest == whole.seen[0]


def test_a_checkpoint_without_the_loader_position_is_refused(sources, tmp_path):
    # a mid-epoch checkpoint of map-style data that holds only the epoch (what turboloader
    # saved before) cannot continue exactly: fit(ckpt_path=...) says so before any batch
    import torch

    with pytest.raises(RuntimeError, match="crash"):
        _fit(tmp_path, Tiny(), _module(sources["folder"]), callbacks=[Crash(4)])
    ckpt = _last_checkpoint(tmp_path)
    state = torch.load(ckpt, weights_only=False)
    key = next(k for k in state if k.endswith("TurboDataModule"))
    state[key] = {"train": {"format": "turboloader.ImageFolder/1", "epoch": 0}}
    for loops in state.get("loops", {}).values():
        for s in loops.get("state_dict", {}).get("combined_loader", []) or []:
            s.clear()
            s.update(state[key])
    torch.save(state, ckpt)
    resumed = Tiny()
    with pytest.raises(ValueError, match="no position of the training loader"):
        _fit(tmp_path / "after", resumed, _module(sources["folder"]), ckpt_path=ckpt)
    assert not resumed.seen
