"""turboloader: fast, drop-in image data loading for PyTorch.

Importing the package is cheap: public names are resolved from their modules on first use.
"""

import importlib

from turboloader.errors import (
    DecodeError,
    DecodeWarning,
    FailureBudgetExceeded,
    FormatError,
    RemoteShardError,
    RemoteShardNotFoundError,
    SampleError,
    TarFormatError,
    TurboLoaderError,
)

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "TarIndex": "turboloader.tar",
    "JpegHeader": "turboloader.jpeg",
    "decode_jpeg": "turboloader.jpeg",
    "decode_jpeg_header": "turboloader.jpeg",
    "decode_resized_crop": "turboloader.fused",
    "TarDataset": "turboloader.data",
    "ImageFolder": "turboloader.data",
    "TBLDataset": "turboloader.data",
    "ShardCache": "turboloader.data",
    "TBLFile": "turboloader.tbl",
    "TBLWriter": "turboloader.tbl",
    "write_tbl": "turboloader.tbl",
    "DataLoader": "turboloader.loader",
    "profile": "turboloader.loader",
    "PrefetchLoader": "turboloader.prefetch",
    # the seed documents' APIs (thin adapters over the above; see turboloader.seeds)
    "TransformConfig": "turboloader.seeds",
    "ResizeMethod": "turboloader.seeds",
    "Pipeline": "turboloader.seeds",
    "Compose": "turboloader.seeds",
    "Resize": "turboloader.seeds",
    "CenterCrop": "turboloader.seeds",
    "RandomCrop": "turboloader.seeds",
    "RandomHorizontalFlip": "turboloader.seeds",
    "ColorJitter": "turboloader.seeds",
    "ImageNetNormalize": "turboloader.seeds",
    "ToTensor": "turboloader.seeds",
    "TensorFormat": "turboloader.seeds",
    "HighPerformanceDataset": "turboloader.seeds",
    "create_dataloader": "turboloader.seeds",
    "transforms": "turboloader.transforms",
}

__all__ = [
    "DecodeError",
    "DecodeWarning",
    "FailureBudgetExceeded",
    "FormatError",
    "RemoteShardError",
    "RemoteShardNotFoundError",
    "SampleError",
    "TarFormatError",
    "TurboLoaderError",
    "__version__",
    *_LAZY,
]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'turboloader' has no attribute {name!r}")
    imported = importlib.import_module(module)
    value = imported if module == f"turboloader.{name}" else getattr(imported, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
