"""torchvision-shaped image transforms backed by turboloader's native kernels.

The classes mirror ``torchvision.transforms.v2`` (names, arguments, defaults, semantics) and
work standalone on PIL images, tensors and HWC uint8 NumPy arrays. :func:`plan` turns a
``Compose`` made only of them into one fused native call per sample (JPEG bytes -> tensor);
the datasets do this automatically. ``turboloader.transforms.functional`` holds the
NumPy-facing functionals (HWC uint8 in, HWC uint8 or CHW out) the classes are built on.

Randomness: :func:`sample_rng` ``(seed, epoch, index)`` is the generator a dataset gives each
sample; :func:`using_rng` makes a generator current for a block, :func:`current_rng` is the
one transforms draw from (torch's global RNG outside a dataset).

Example:
    >>> from turboloader import transforms as T
    >>> pipeline = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
    ...                       T.ToTensor(), T.Normalize((0.485, 0.456, 0.406),
    ...                                                 (0.229, 0.224, 0.225))])
    >>> fused = T.plan(pipeline)
    >>> x = fused.from_jpeg(jpeg_bytes)  # doctest: +SKIP
"""

from turboloader.transforms import functional
from turboloader.transforms._augment import (
    AutoAugment,
    AutoAugmentPolicy,
    CutMix,
    GaussianBlur,
    Grayscale,
    MixUp,
    Pad,
    RandAugment,
    RandomAdjustSharpness,
    RandomAffine,
    RandomAutocontrast,
    RandomEqualize,
    RandomErasing,
    RandomGrayscale,
    RandomInvert,
    RandomPerspective,
    RandomPosterize,
    RandomRotation,
    RandomSolarize,
    RandomVerticalFlip,
    TrivialAugmentWide,
)
from turboloader.transforms._plan import Plan, plan
from turboloader.transforms._random import current_rng, sample_rng, using_rng
from turboloader.transforms._transforms import (
    CenterCrop,
    ColorJitter,
    Compose,
    Normalize,
    PILToTensor,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
    ToImage,
    ToTensor,
    Transform,
)

__all__ = [
    "AutoAugment",
    "AutoAugmentPolicy",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "CutMix",
    "GaussianBlur",
    "Grayscale",
    "MixUp",
    "Normalize",
    "PILToTensor",
    "Pad",
    "Plan",
    "RandAugment",
    "RandomAdjustSharpness",
    "RandomAffine",
    "RandomAutocontrast",
    "RandomCrop",
    "RandomEqualize",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomInvert",
    "RandomPerspective",
    "RandomPosterize",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomSolarize",
    "RandomVerticalFlip",
    "Resize",
    "ToDtype",
    "ToImage",
    "ToTensor",
    "Transform",
    "TrivialAugmentWide",
    "current_rng",
    "functional",
    "plan",
    "sample_rng",
    "using_rng",
]
