"""torchvision-shaped image transforms backed by turboloader's native kernels.

``turboloader.transforms.functional`` holds the NumPy-facing functionals (HWC uint8 in,
HWC uint8 or CHW out); the transform classes are built on top of them.
"""

from turboloader.transforms import functional

__all__ = ["functional"]
