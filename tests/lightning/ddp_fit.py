"""Run by test_lightning_module.py: a 2-process CPU DDP fit (Lightning re-launches this
script for rank 1). Usage: ddp_fit.py SHARD_PATTERN OUT_DIR STRATEGY"""

import os
import sys

import lightning as L

from helpers.tinymodel import Tiny
from turboloader.lightning import TurboDataModule

if __name__ == "__main__":
    pattern, out, strategy = sys.argv[1], sys.argv[2], sys.argv[3]
    dm = TurboDataModule(pattern, pattern, batch_size=4, num_workers=1, image_size=32)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=2,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(Tiny(out), datamodule=dm)
