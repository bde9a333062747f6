"""turboloader: fast, drop-in image data loading for PyTorch.

Importing the package is cheap: public names are resolved from their modules on first use.

The top level names the core (``__all__``): the errors, the datasets, the loader, the
``transforms`` module, the decoders and the shard formats. Transforms are
``turboloader.transforms.X``, torchvision's names with torchvision's arguments.

The seed documents' names (``turboloader.Resize``, ``Compose``, ``ToTensor``, ``Pipeline``,
``TransformConfig``, ...; :mod:`turboloader.compat`) also resolve here, so code written against
those documents runs unchanged, but they are not in ``__all__`` (nor ``dir()``): they are
that older API, not this one. Where a seed class and torchvision's share a name, a call that
means the same in both works (``turboloader.Resize(224, 224)``: the square); a call that
torchvision reads differently raises a TypeError naming the torchvision-exact class
(``turboloader.Resize(224)``: use ``turboloader.transforms.Resize(224)``).
``turboloader.DataLoader(dataset, ...)`` is :class:`turboloader.loader.DataLoader`;
``turboloader.DataLoader(path, ...)`` is seed 001's call and returns its
``SampleBatchLoader`` (batches of ``{"image", "label"}`` dicts).
"""

from turboloader import _fork
from turboloader._lazy import lazy_names
from turboloader.compat.names import TOP_LEVEL_SEED_NAMES
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
    "ShardCache": "turboloader.io",
    # the core loader with seed 001's path-first form (a subclass of turboloader.loader's)
    "DataLoader": "turboloader.compat",
    "profile": "turboloader.loader",
    "PrefetchLoader": "turboloader.prefetch",
    "transforms": "turboloader.transforms",
}

# the seed documents' APIs (thin adapters over the above; see turboloader.compat): resolvable
# for the code written against them, not listed in __all__ (the module docstring's rule)
_SEED_NAMES = dict.fromkeys(TOP_LEVEL_SEED_NAMES, "turboloader.compat")

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


__getattr__, _dir = lazy_names(__name__, {**_LAZY, **_SEED_NAMES}, globals())


def __dir__():
    return [n for n in _dir() if n not in _SEED_NAMES]
