"""turboloader: fast, drop-in image data loading for PyTorch.

Importing the package is cheap: public names are resolved from their modules on first use.
"""

from turboloader import _deprecated, _fork
from turboloader._lazy import lazy_names
from turboloader.errors import (
    DecodeError,
    DecodeWarning,
    FailureBudgetExceeded,
    FormatError,
    RemoteShardError,
    RemoteShardNotFoundError,
    SharedMemoryError,
    SampleError,
    TarFormatError,
    TurboLoaderError,
)

from turboloader._version import __version__

_deprecated.install()  # old module paths (turboloader.tar, .jpeg, ...) for one release
_fork.install()  # forked DataLoader workers never finalize the parent's objects (see _fork)

# public name -> module that defines it (the layers, bottom up: io -> decode -> transforms ->
# data -> loader -> prefetch; compat/ holds the seed documents' APIs on top)
_LAZY = {
    "TarIndex": "turboloader.io.tar",
    "TBLFile": "turboloader.io.tbl",
    "TBLWriter": "turboloader.io.tbl",
    "write_tbl": "turboloader.io.tbl",
    "JpegHeader": "turboloader.decode",
    "decode_image": "turboloader.decode",
    "decode_jpeg": "turboloader.decode",
    "decode_jpeg_header": "turboloader.decode",
    "decode_resized_crop": "turboloader.decode",
    "sample_rng": "turboloader.transforms",
    "TarDataset": "turboloader.data",
    "ImageFolder": "turboloader.data",
    "TBLDataset": "turboloader.data",
    "VideoDataset": "turboloader.data",
    "VideoFolder": "turboloader.data",
    "ManifestDataset": "turboloader.data",
    "ParquetDataset": "turboloader.data",
    "MaskField": "turboloader.data",
    "BoxesField": "turboloader.data",
    "ShardCache": "turboloader.data",
    # the core loader with seed 001's path-first form (a subclass of turboloader.loader's)
    "DataLoader": "turboloader.compat",
    "profile": "turboloader.loader",
    "PrefetchLoader": "turboloader.prefetch",
    # the seed documents' APIs (thin adapters over the above; see turboloader.compat)
    "TransformConfig": "turboloader.compat",
    "ResizeMethod": "turboloader.compat",
    "Pipeline": "turboloader.compat",
    "Compose": "turboloader.compat",
    "Resize": "turboloader.compat",
    "CenterCrop": "turboloader.compat",
    "RandomCrop": "turboloader.compat",
    "RandomHorizontalFlip": "turboloader.compat",
    "ColorJitter": "turboloader.compat",
    "ImageNetNormalize": "turboloader.compat",
    "ToTensor": "turboloader.compat",
    "TensorFormat": "turboloader.compat",
    "HighPerformanceDataset": "turboloader.compat",
    "create_dataloader": "turboloader.compat",
    "transforms": "turboloader.transforms",
}

__all__ = [
    "DecodeError",
    "DecodeWarning",
    "FailureBudgetExceeded",
    "FormatError",
    "RemoteShardError",
    "RemoteShardNotFoundError",
    "SharedMemoryError",
    "SampleError",
    "TarFormatError",
    "TurboLoaderError",
    "__version__",
    *_LAZY,
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
