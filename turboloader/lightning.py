"""Lightning integration: :class:`TurboDataModule` (needs the ``lightning`` extra).

``import turboloader`` never imports this module or Lightning; ``from turboloader.lightning
import TurboDataModule`` does.
"""

from __future__ import annotations

import os

import torch
import torch.utils.data

try:
    from lightning.pytorch import LightningDataModule
except ImportError:  # the older package name, same class
    try:
        from pytorch_lightning import LightningDataModule  # type: ignore[assignment]
    except ImportError:
        from turboloader.errors import DISTRIBUTION, MissingDependencyError

        raise MissingDependencyError("turboloader.lightning needs Lightning, which is not "
                                     f"installed: pip install '{DISTRIBUTION}[lightning]'") from None

from turboloader.loader import DataLoader
from turboloader.transforms.presets import imagenet_train_transform, imagenet_val_transform

__all__ = ["TurboDataModule"]

_MANIFESTS = (".jsonl", ".json", ".csv", ".tsv")


class _EpochHook:
    """What Lightning sees as the loader's ``sampler``: it calls ``set_epoch`` on it at the
    start of every training and validation epoch (``_set_sampler_epoch``)."""

    def __init__(self, owner):
        self._owner = owner

    def set_epoch(self, epoch):
        self._owner.set_epoch(epoch)


class _StageLoader:
    """One stage's loader: sets the epoch on the dataset (and sampler) before each pass.

    The epoch comes from Lightning's ``set_epoch`` call when it made one, else from
    ``trainer.current_epoch`` when iteration starts, else counts passes.
    """

    def __init__(self, module, dataset, loader):
        self.module = module
        self.dataset = dataset
        self.loader = loader
        self.sampler = _EpochHook(self)
        self.batch_sampler = None  # Lightning looks for one next to ``sampler``
        self.epoch = None
        self._passes = 0

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        epoch = self.epoch
        if epoch is None:
            trainer = self.module._trainer_or_none()
            epoch = trainer.current_epoch if trainer is not None else self._passes
        self._passes += 1
        self.loader.set_epoch(epoch)  # on the dataset and sampler, from the main process
        return iter(self.loader)


class _ResumableStageLoader(_StageLoader):
    """The training loader: Lightning checks that a loader has ``state_dict`` /
    ``load_state_dict`` before it trusts a mid-epoch checkpoint. The position is the
    module's (the batches Lightning processed, not the ones the loader prefetched), so the
    loader saves and restores that state."""

    def state_dict(self):
        return self.module.state_dict()

    def load_state_dict(self, state_dict):
        self.module.load_state_dict(state_dict)


class TurboDataModule(LightningDataModule):
    """A ``LightningDataModule`` over TAR shards, TBL files or class folders, with the
    standard ImageNet pipelines by default, sharded over the Trainer's ranks.

    ``train`` / ``val``: a directory is read as an :class:`~turboloader.ImageFolder`; a
    ``.tbl`` path (or list of them) as a :class:`~turboloader.TBLDataset`; a ``.csv``,
    ``.tsv``, ``.jsonl`` or ``.json`` manifest as a :class:`~turboloader.ManifestDataset`;
    ``.parquet`` files as a :class:`~turboloader.ParquetDataset`; anything else (a ``.tar``
    path, glob, brace pattern ``"train-{0000..0099}.tar"`` or list) as a
    :class:`~turboloader.TarDataset`. A fit resumed from a mid-epoch checkpoint continues
    exactly (see :meth:`state_dict`). Without explicit transforms: train =
    RandomResizedCrop(image_size) + RandomHorizontalFlip + ToTensor + Normalize(ImageNet),
    val = Resize(int(image_size * 256 / 224)) + CenterCrop(image_size) + ToTensor +
    Normalize(ImageNet); both fuse into one native call per JPEG. Batches are
    ``(images, labels)``.

    **Ranks and epochs.** In ``setup`` the rank and world size come from the Trainer
    (``trainer.global_rank``, ``trainer.world_size``), so ``strategy="ddp"`` on any number
    of devices gives each rank a disjoint share of every epoch (TAR shards: the dataset's
    own split, padded so ranks are equal; map-style datasets: a ``DistributedSampler`` with
    that rank). Lightning calls ``set_epoch`` on the loaders at the start of every epoch;
    the module passes it to the dataset and sampler, so the order and the augmentations
    change every epoch and are reproducible for a given ``seed``.

    Args:
        train: training data (see above).
        val: validation data, or None (no ``val_dataloader``).
        test, predict: data for ``trainer.test`` / ``trainer.predict`` (read like ``val``:
            eval pipeline, no shuffle), or None (no ``test_dataloader`` /
            ``predict_dataloader``). Keyword-only.
        batch_size: samples per batch, per rank.
        num_workers: loader workers per rank.
        image_size: output side of the default pipelines.
        train_transform, val_transform: replace the default pipelines (any callable; a
            :mod:`turboloader.transforms` pipeline is fused); ``val_transform`` also serves
            ``test`` and ``predict``.
        backend: the core loader's backend (``"threads"`` or ``"processes"``; None: its
            default).
        seed: seed of the shuffle and of the augmentations.
        drop_last: drop each rank's last short training batch.
        dataset_kwargs: extra keyword arguments for the dataset classes (e.g.
            ``{"cache": "2GB", "on_error": "skip"}``).

    Example:
        >>> import lightning as L                                            # doctest: +SKIP
        >>> dm = TurboDataModule("train-{0000..0099}.tar", "val-{0000..0009}.tar",
        ...                      batch_size=256, num_workers=8)
        >>> L.Trainer(devices=8, strategy="ddp", max_epochs=90).fit(model, datamodule=dm)
    """

    def __init__(self, train=None, val=None, *, batch_size, num_workers, image_size=224,
                 train_transform=None, val_transform=None, backend=None, seed=0,
                 drop_last=False, dataset_kwargs=None, test=None, predict=None):
        super().__init__()
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if int(num_workers) < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.train = train
        self.val = val
        self.test = test
        self.predict = predict
        if train is None and val is None and test is None and predict is None:
            raise ValueError("TurboDataModule needs at least one of train=, val=, test=, predict=")
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.image_size = image_size
        self.train_transform = (train_transform if train_transform is not None
                                else imagenet_train_transform(image_size))
        self.val_transform = (val_transform if val_transform is not None
                              else imagenet_val_transform(image_size))
        self.backend = backend
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.dataset_kwargs = dict(dataset_kwargs or {})
        self.train_dataset = None
        self.val_dataset = None
        self.test_dataset = None
        self.predict_dataset = None
        self.rank, self.world_size = 0, 1

    def _trainer_or_none(self):
        return getattr(self, "trainer", None)

    def _topology(self):
        trainer = self._trainer_or_none()
        if trainer is not None:
            return int(trainer.global_rank), int(trainer.world_size)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    def _make_dataset(self, source, transform, *, shuffle):
        from turboloader.data import ImageFolder, TarDataset, TBLDataset

        kwargs = dict(self.dataset_kwargs)
        kwargs.setdefault("seed", self.seed)
        paths = [source] if isinstance(source, (str, os.PathLike)) else list(source)
        paths = [os.fspath(p) for p in paths]
        if len(paths) == 1 and os.path.isdir(paths[0]):
            return ImageFolder(paths[0], transform, **kwargs)
        if all(p.endswith(".tbl") for p in paths):
            return TBLDataset(paths if len(paths) > 1 else paths[0], transform, **kwargs)
        if len(paths) == 1 and paths[0].lower().endswith(_MANIFESTS):
            from turboloader.data import ManifestDataset

            return ManifestDataset(paths[0], transform=transform, **kwargs)
        if all(p.lower().endswith(".parquet") for p in paths):
            from turboloader.data import ParquetDataset

            return ParquetDataset(paths if len(paths) > 1 else paths[0], transform,
                                  shuffle=shuffle, rank=self.rank, world_size=self.world_size,
                                  **kwargs)
        return TarDataset(paths if len(paths) > 1 else paths[0], transform, shuffle=shuffle,
                          rank=self.rank, world_size=self.world_size, **kwargs)

    def setup(self, stage=None):
        """Build the datasets for this rank (``stage``: "fit", "validate", ... or None)."""
        self.rank, self.world_size = self._topology()
        if self.train is not None and stage in (None, "fit") and self.train_dataset is None:
            self.train_dataset = self._make_dataset(self.train, self.train_transform, shuffle=True)
            self._apply_pending_state()
        if self.val is not None and stage in (None, "fit", "validate") and self.val_dataset is None:
            self.val_dataset = self._make_dataset(self.val, self.val_transform, shuffle=False)
        if self.test is not None and stage in (None, "test") and self.test_dataset is None:
            self.test_dataset = self._make_dataset(self.test, self.val_transform, shuffle=False)
        if self.predict is not None and stage in (None, "predict") and \
                self.predict_dataset is None:
            self.predict_dataset = self._make_dataset(self.predict, self.val_transform,
                                                      shuffle=False)

    def _loader(self, dataset, *, train):
        sampler = None
        if not isinstance(dataset, torch.utils.data.IterableDataset):
            sampler = torch.utils.data.DistributedSampler(
                dataset, num_replicas=self.world_size, rank=self.rank, shuffle=train,
                seed=self.seed, drop_last=False)
        # an iterable dataset shuffles itself (shuffle None); the sampler shuffles the others
        kwargs = {} if self.backend is None else {"backend": self.backend}
        loader = DataLoader(dataset, batch_size=self.batch_size, shuffle=None if sampler is None
                            else False, sampler=sampler, num_workers=self.num_workers,
                            pin_memory=torch.cuda.is_available(),
                            drop_last=self.drop_last and train, **kwargs)
        if not train:
            return _StageLoader(self, dataset, loader)
        self._train_loader = loader
        self._apply_pending_state()
        return _ResumableStageLoader(self, dataset, loader)

    # -- checkpoints: Lightning calls these when it saves and restores a checkpoint --------

    def state_dict(self):
        """The training data's position, saved in Lightning checkpoints.

        For TAR shards and Parquet (iterable datasets): the dataset's resume state after the
        batches the current epoch has processed so far, so a fit resumed from a mid-epoch
        checkpoint continues with exactly the samples not yet seen, in the same order (see
        :meth:`turboloader.TarDataset.state_dict`). For folders, manifests and TBL files
        (map-style datasets): the training loader's state (see
        :meth:`turboloader.DataLoader.state_dict`) with the batches Lightning processed: the
        epoch's order is drawn again from the seed and those batches are left out.

        Raises:
            ValueError: the training dataset is iterable and has no ``state_dict`` (its
                position cannot be saved, and a resumed fit would repeat or skip samples).
        """
        ds, trainer = self.train_dataset, self._trainer_or_none()
        if ds is None or trainer is None:
            return {}
        batches = int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)
        if isinstance(ds, torch.utils.data.IterableDataset):
            if not hasattr(ds, "state_dict"):
                raise ValueError(f"TurboDataModule: {type(ds).__name__} has no state_dict, so "
                                 "a checkpoint cannot name its mid-epoch position")
            return {"train": ds.state_dict(batches=batches, batch_size=self.batch_size,
                                           num_workers=self.num_workers,
                                           drop_last=self.drop_last)}
        loader = getattr(self, "_train_loader", None)
        if loader is None or loader.epoch is None:
            return {}
        state = loader.state_dict()
        if not state["finished"]:
            state["batches"] = batches
        return {"train": {"loader": state}}

    def load_state_dict(self, state_dict):
        """Restore :meth:`state_dict` (before the training loader's next pass).

        Raises:
            turboloader.errors.StateMismatchError, ValueError: the saved position does not
                fit this module's training data (another dataset, batch size, ``drop_last``
                or number of ranks), so the fit would not continue exactly; raised at
                ``fit(ckpt_path=...)``, before any batch.
        """
        self._pending_state = state_dict.get("train")
        self._apply_pending_state()

    def _apply_pending_state(self):
        state = getattr(self, "_pending_state", None)
        if state is None or self.train_dataset is None:
            return
        if isinstance(self.train_dataset, torch.utils.data.IterableDataset):
            self.train_dataset.load_state_dict(state)
        else:
            loader = getattr(self, "_train_loader", None)
            if "loader" not in state:
                raise ValueError(
                    "TurboDataModule: the checkpoint holds no position of the training loader "
                    f"over {type(self.train_dataset).__name__} (it was saved by a turboloader "
                    "that kept only the epoch of map-style data), so a mid-epoch resume would "
                    "repeat samples: resume from an end-of-epoch checkpoint instead")
            if loader is None:
                return  # applied when train_dataloader() makes the loader
            loader.load_state_dict(state["loader"])
        self._pending_state = None

    def train_dataloader(self):
        if self.train is None:
            raise ValueError("TurboDataModule: no train= data was given")
        if self.train_dataset is None:
            self.setup("fit")
        return self._loader(self.train_dataset, train=True)

    def val_dataloader(self):
        if self.val is None:
            return []
        if self.val_dataset is None:
            self.setup("validate")
        return self._loader(self.val_dataset, train=False)

    def test_dataloader(self):
        """The ``test=`` data (eval pipeline, no shuffle, this rank's share)."""
        if self.test is None:
            return []
        if self.test_dataset is None:
            self.setup("test")
        return self._loader(self.test_dataset, train=False)

    def predict_dataloader(self):
        """The ``predict=`` data (eval pipeline, no shuffle, this rank's share)."""
        if self.predict is None:
            return []
        if self.predict_dataset is None:
            self.setup("predict")
        return self._loader(self.predict_dataset, train=False)
