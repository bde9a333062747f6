"""TurboDataModule under a real lightning.Trainer: single process and 2-process CPU DDP."""

import json
import os
import subprocess
import sys

import pytest

from helpers import subprocess_env

L = pytest.importorskip("lightning")

from helpers.tinymodel import Tiny  # noqa: E402

from turboloader.lightning import TurboDataModule  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _trainer(**kw):
    kw.setdefault("max_epochs", 2)
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, **kw)


@pytest.mark.slow
def test_import_turboloader_does_not_import_lightning():
    code = ("import turboloader, sys\n"
            "turboloader.TarDataset, turboloader.transforms\n"
            "assert 'lightning' not in sys.modules, 'lightning imported'\n"
            "assert 'pytorch_lightning' not in sys.modules, 'pytorch_lightning imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env=subprocess_env())


def test_fit_on_shards_sets_epoch_and_default_pipelines(shards):
    dm = TurboDataModule(shards, shards, batch_size=4, num_workers=1, image_size=32)
    model = Tiny()
    _trainer(num_sanity_val_steps=0).fit(model, datamodule=dm)
    # default train pipeline at image_size: normalised float32 3x32x32
    assert model.shapes == {((3, 32, 32), "torch.float32")}
    # every sample once per epoch, and a new order in epoch 1 (set_epoch reached the dataset)
    assert sorted(model.seen[0]) == list(range(16))
    assert sorted(model.seen[1]) == list(range(16))
    assert model.seen[0] != model.seen[1]
    assert dm.train_dataset.epoch == 1
    assert (dm.rank, dm.world_size) == (0, 1)
    # validation: unshuffled, every sample, each epoch
    assert model.val_seen[0] == model.val_seen[1]
    assert sorted(model.val_seen[0]) == list(range(16))


def test_same_seed_same_epochs(shards):
    runs = []
    for _ in range(2):
        dm = TurboDataModule(shards, batch_size=4, num_workers=0, image_size=32, seed=7)
        model = Tiny()
        _trainer(limit_val_batches=0).fit(model, datamodule=dm)
        runs.append(dict(model.seen))
    assert runs[0] == runs[1]


def test_fit_on_folder_with_explicit_transforms(folder):
    from turboloader import transforms as T

    tf = T.Compose([T.Resize(24), T.CenterCrop(16), T.ToTensor()])
    dm = TurboDataModule(folder, folder, batch_size=4, num_workers=0, train_transform=tf,
                         val_transform=tf)
    model = Tiny()
    _trainer(max_steps=5, num_sanity_val_steps=1).fit(model, datamodule=dm)
    assert model.shapes == {((3, 16, 16), "torch.float32")}
    assert sorted(model.seen[0]) == [0] * 8 + [1] * 8  # ImageFolder labels, each file once
    assert len(model.seen[1]) == 4  # max_steps=5 stopped epoch 1 after one batch
    assert dm.train_dataset.epoch == 1


def test_no_val(shards):
    dm = TurboDataModule(shards, batch_size=8, num_workers=0, image_size=32)
    model = Tiny()
    _trainer(max_epochs=1).fit(model, datamodule=dm)
    assert sorted(model.seen[0]) == list(range(16))


@pytest.mark.distributed
@pytest.mark.timeout(900)   # two ranks started by Lightning: 214 s on the shared machine under load
@pytest.mark.parametrize("strategy", ["ddp"])
def test_ddp_two_ranks_see_disjoint_data(shards, tmp_path, strategy):
    env = subprocess_env(OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "ddp_fit.py"), shards,
                           str(tmp_path), strategy], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r, rec in enumerate(records):
        # the module took rank and world size from the Trainer and gave them to the dataset
        assert (rec["rank"], rec["world_size"]) == (r, 2)
        assert (rec["dm_rank"], rec["dm_world_size"], rec["dataset_rank"]) == (r, 2, r)
        assert rec["dataset_epoch"] == 1
    for epoch in ("0", "1"):
        a, b = records[0]["seen"][epoch], records[1]["seen"][epoch]
        assert len(a) == len(b) == 8
        assert not set(a) & set(b)
        assert sorted(a + b) == list(range(16))
        va, vb = records[0]["val_seen"][epoch], records[1]["val_seen"][epoch]
        assert not set(va) & set(vb) and sorted(va + vb) == list(range(16))
    # new shuffle in epoch 1: the split of samples over ranks changes
    assert set(records[0]["seen"]["0"]) != set(records[0]["seen"]["1"])


@pytest.mark.parametrize("backend", ["processes", "threads"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_mid_epoch_checkpoint_resumes_with_the_unseen_samples(shards, tmp_path, num_workers,
                                                              backend):
    # An uninterrupted epoch is the oracle: it checkpoints after 3 of its 8 batches (with 2
    # workers the next batch is worker 1's: the order after the resume shows whether the
    # streams were rotated); a new Trainer resumed from that checkpoint must see exactly the
    # epoch's last 5 batches, in order, without Lightning's "not resumable" warning.
    import warnings

    from lightning.pytorch.callbacks import ModelCheckpoint

    def module():
        return TurboDataModule(shards, batch_size=2, num_workers=num_workers, image_size=32,
                               seed=5, backend=backend)

    full = Tiny()
    every3 = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1)
    L.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=[every3], max_epochs=1,
              limit_val_batches=0, enable_progress_bar=False,
              enable_model_summary=False).fit(full, datamodule=module())
    assert sorted(full.seen[0]) == list(range(16))

    rest = Tiny()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(max_epochs=1, limit_val_batches=0).fit(
            rest, datamodule=module(), ckpt_path=str(tmp_path / "epoch=0-step=3.ckpt"))
    assert rest.seen[0] == full.seen[0][6:]
    assert not [w for w in caught if "not resumable" in str(w.message)]
