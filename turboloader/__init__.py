"""turboloader: fast, drop-in image data loading for PyTorch.

Importing the package is cheap: public names are resolved from their modules on first use.
"""

import importlib

from turboloader.errors import (
    DecodeError,
    DecodeWarning,
    FailureBudgetExceeded,
    FormatError,
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
    "TBLFile": "turboloader.tbl",
    "TBLWriter": "turboloader.tbl",
    "write_tbl": "turboloader.tbl",
    "transforms": "turboloader.transforms",
}

__all__ = [
    "DecodeError",
    "DecodeWarning",
    "FailureBudgetExceeded",
    "FormatError",
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
