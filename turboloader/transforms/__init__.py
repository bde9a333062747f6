"""torchvision-shaped image transforms backed by turboloader's native kernels.

The classes mirror ``torchvision.transforms.v2`` (names, arguments, defaults, semantics) and
work standalone on PIL images, tensors and HWC uint8 NumPy arrays. :func:`plan` turns a
``Compose`` made only of them (or an object that wraps one, such as torchvision's
classification presets) into one fused native call per sample (JPEG bytes -> tensor); the
datasets do this automatically and :func:`explain` says why a pipeline does not fuse.
``turboloader.transforms.functional`` holds the functionals the classes are built on: each
sends NumPy arrays to the native kernels and PIL images and tensors to torchvision's.

Modules, as torchvision v2's: ``_geometry`` (resize, crops, flips, padding, warps, multi-crop),
``_colour`` (jitter, grayscale, point operations, blur), ``_auto_augment``, ``_mixing``
(erasing, MixUp, CutMix), ``_containers`` (Compose and the random containers),
``_conversion`` (types, dtypes, Normalize), ``_plan`` (fusion).

Randomness: :func:`sample_rng` ``(seed, epoch, index)`` is the generator a dataset gives each
sample (a :class:`SampleRandom` of the key :func:`sample_key` derives; :func:`sample_keys`
for a batch of indices); :func:`using_rng` makes a generator current for a block,
:func:`current_rng` is the one transforms draw from (torch's global RNG outside a dataset).

Example:
    >>> from turboloader import transforms as T
    >>> pipeline = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
    ...                       T.ToTensor(), T.Normalize((0.485, 0.456, 0.406),
    ...                                                 (0.229, 0.224, 0.225))])
    >>> fused = T.plan(pipeline)
    >>> x = fused.from_jpeg(jpeg_bytes)  # doctest: +SKIP
"""

from turboloader.transforms import functional
from turboloader.transforms._auto_augment import (
    AugMix,
    AutoAugment,
    AutoAugmentPolicy,
    RandAugment,
    TrivialAugmentWide,
)
from turboloader.transforms._colour import (
    ColorJitter,
    GaussianBlur,
    Grayscale,
    RandomAdjustSharpness,
    RandomAutocontrast,
    RandomChannelPermutation,
    RandomEqualize,
    RandomGrayscale,
    RandomInvert,
    RandomPhotometricDistort,
    RandomPosterize,
    RandomSolarize,
    RGB,
)
from turboloader.transforms._containers import (
    Compose,
    Identity,
    Lambda,
    RandomApply,
    RandomChoice,
    RandomOrder,
)
from turboloader.transforms._conversion import (
    ConvertImageDtype,
    Normalize,
    PILToTensor,
    ToDtype,
    ToImage,
    ToPILImage,
    ToPureTensor,
    ToTensor,
)
from turboloader.transforms._geometry import (
    CenterCrop,
    FiveCrop,
    Pad,
    RandomAffine,
    RandomCrop,
    RandomHorizontalFlip,
    RandomPerspective,
    RandomResize,
    RandomResizedCrop,
    RandomRotation,
    RandomShortestSize,
    RandomVerticalFlip,
    Resize,
    ScaleJitter,
    TenCrop,
)
from turboloader.transforms._joint import transform_jointly
from turboloader.transforms._mixing import CutMix, MixUp, RandomErasing
from turboloader.transforms._plan import Plan, explain, plan
from turboloader.transforms._random import (
    SampleRandom,
    current_rng,
    sample_key,
    sample_keys,
    sample_rng,
    using_rng,
)
from turboloader.transforms._transform import Transform

__all__ = [
    "AugMix",
    "AutoAugment",
    "AutoAugmentPolicy",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "ConvertImageDtype",
    "CutMix",
    "FiveCrop",
    "GaussianBlur",
    "Grayscale",
    "Identity",
    "Lambda",
    "MixUp",
    "Normalize",
    "PILToTensor",
    "Pad",
    "Plan",
    "RGB",
    "RandAugment",
    "RandomAdjustSharpness",
    "RandomAffine",
    "RandomApply",
    "RandomAutocontrast",
    "RandomChannelPermutation",
    "RandomChoice",
    "RandomCrop",
    "RandomEqualize",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomInvert",
    "RandomOrder",
    "RandomPerspective",
    "RandomPhotometricDistort",
    "RandomPosterize",
    "RandomResize",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomShortestSize",
    "RandomSolarize",
    "RandomVerticalFlip",
    "Resize",
    "SampleRandom",
    "ScaleJitter",
    "TenCrop",
    "ToDtype",
    "ToImage",
    "ToPILImage",
    "ToPureTensor",
    "ToTensor",
    "Transform",
    "TrivialAugmentWide",
    "current_rng",
    "explain",
    "functional",
    "plan",
    "sample_key",
    "sample_keys",
    "sample_rng",
    "transform_jointly",
    "using_rng",
]
