"""TurboDataModule's test= / predict= data under trainer.test / trainer.predict, and a user's
own DataModule over turboloader datasets getting fresh epochs without set_epoch."""

import pytest
import torch

L = pytest.importorskip("lightning")

from helpers.tinymodel import Tiny  # noqa: E402

import turboloader  # noqa: E402
from turboloader import transforms as T  # noqa: E402
from turboloader.lightning import TurboDataModule  # noqa: E402


def _trainer(**kw):
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, **kw)


class Recording(Tiny):
    def test_step(self, batch, batch_idx):
        x, y = batch
        self.test_seen = getattr(self, "test_seen", []) + y.tolist()
        self.log("test_loss", torch.nn.functional.cross_entropy(self.net(x), y % 10))

    def predict_step(self, batch, batch_idx):
        x, y = batch
        return y, self.net(x).argmax(1)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_trainer_test_and_predict(shards, num_workers):
    dm = TurboDataModule(test=shards, predict=shards, batch_size=4, num_workers=num_workers,
                         image_size=32)
    model = Recording()
    results = _trainer().test(model, datamodule=dm)
    assert sorted(model.test_seen) == list(range(16))  # every sample once, unshuffled
    assert "test_loss" in results[0]
    preds = _trainer().predict(model, datamodule=dm)
    labels = [lab for y, _ in preds for lab in y.tolist()]
    assert sorted(labels) == list(range(16))
    assert all(p.shape == y.shape for y, p in preds)


def test_fit_then_test_on_folder(folder, shards):
    dm = TurboDataModule(shards, batch_size=4, num_workers=0, image_size=32, test=folder)
    model = Recording()
    trainer = _trainer(max_epochs=1, limit_val_batches=0)
    trainer.fit(model, datamodule=dm)
    trainer.test(model, datamodule=dm)
    assert sorted(model.test_seen) == [0] * 8 + [1] * 8  # ImageFolder labels: a/ and b/


def test_missing_stage_data():
    with pytest.raises(ValueError, match="at least one"):
        TurboDataModule(batch_size=4, num_workers=0)
    dm = TurboDataModule(test="x.tar", batch_size=4, num_workers=0)
    assert dm.predict_dataloader() == [] and dm.val_dataloader() == []
    with pytest.raises(ValueError, match="train="):
        dm.train_dataloader()


class UserDataModule(L.LightningDataModule):
    """What a user writes: turboloader datasets in plain torch DataLoaders, no set_epoch."""

    def __init__(self, shards, num_workers):
        super().__init__()
        self.shards, self.num_workers = shards, num_workers

    def setup(self, stage=None):
        self.ds = turboloader.TarDataset(self.shards, T.Compose([
            T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor()]))

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.ds, batch_size=4, num_workers=self.num_workers,
                                           persistent_workers=self.num_workers > 0)


class Digests(Tiny):
    def training_step(self, batch, batch_idx):
        x, y = batch
        for img, lab in zip(x, y.tolist()):
            self.seen[self.current_epoch].append((lab, hash(img.numpy().tobytes())))
        return torch.nn.functional.cross_entropy(self.net(x), y % 10)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_user_datamodule_gets_fresh_epochs(shards, num_workers):
    model = Digests()
    _trainer(max_epochs=2, limit_val_batches=0).fit(model, datamodule=UserDataModule(
        shards, num_workers))
    e0, e1 = dict(model.seen[0]), dict(model.seen[1])
    assert sorted(e0) == sorted(e1) == list(range(16))  # exactly once per epoch
    assert [lab for lab, _ in model.seen[0]] != [lab for lab, _ in model.seen[1]]  # new order
    assert sum(e0[i] == e1[i] for i in e0) == 0  # new crops and flips
