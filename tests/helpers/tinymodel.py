"""A tiny LightningModule that records what each rank saw (labels and image checksums)."""

import json
from collections import defaultdict

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn


class Tiny(L.LightningModule):
    def __init__(self, out=None):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, stride=4), nn.AdaptiveAvgPool2d(1),
                                 nn.Flatten(), nn.Linear(4, 10))
        self.out = out
        self.seen = defaultdict(list)
        self.val_seen = defaultdict(list)
        self.shapes = set()

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.shapes.add((tuple(x.shape[1:]), str(x.dtype)))
        self.seen[self.current_epoch] += y.tolist()
        return F.cross_entropy(self.net(x), y % 10)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        if not self.trainer.sanity_checking:
            self.val_seen[self.current_epoch] += y.tolist()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def on_fit_end(self):
        if self.out is None:
            return
        dm = self.trainer.datamodule
        record = {
            "rank": self.global_rank,
            "world_size": self.trainer.world_size,
            "dm_rank": dm.rank,
            "dm_world_size": dm.world_size,
            "dataset_rank": dm.train_dataset.rank,
            "dataset_epoch": dm.train_dataset.epoch,
            "seen": {str(k): v for k, v in self.seen.items()},
            "val_seen": {str(k): v for k, v in self.val_seen.items()},
        }
        with open(f"{self.out}/rank{self.global_rank}.json", "w") as f:
            json.dump(record, f)
