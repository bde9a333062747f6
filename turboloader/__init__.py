"""turboloader: fast, drop-in image data loading for PyTorch."""

from turboloader.errors import DecodeError, DecodeWarning, TarFormatError, TurboLoaderError

__version__ = "0.1.0"

__all__ = [
    "DecodeError",
    "DecodeWarning",
    "TarFormatError",
    "TurboLoaderError",
    "__version__",
]
