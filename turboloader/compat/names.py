"""The seed documents' names, written once (no imports: the top level reads it at import)."""

__all__ = ["SEED_NAMES", "TOP_LEVEL_SEED_NAMES"]

#: The seed documents' names the top level resolves too (``turboloader.Resize``, ...: not in
#: its ``__all__``). Written once: the top level, :mod:`turboloader.compat` and
#: :mod:`turboloader.compat.seeds` read it.
TOP_LEVEL_SEED_NAMES = (
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "HighPerformanceDataset",
    "ImageNetNormalize",
    "Pipeline",
    "RandomCrop",
    "RandomHorizontalFlip",
    "Resize",
    "ResizeMethod",
    "TensorFormat",
    "ToTensor",
    "TransformConfig",
    "create_dataloader",
)

#: Every seed name :mod:`turboloader.compat.seeds` defines (the top level's ones, and those
#: reached as ``turboloader.compat.<name>``: ``DataLoader`` is the top level's own entry).
SEED_NAMES = (*TOP_LEVEL_SEED_NAMES, "DataLoader", "PrefetchLoader", "Sample",
              "SampleBatchLoader", "seed001_loader")
