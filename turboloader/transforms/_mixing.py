"""Augmentations that replace or blend image regions, with torchvision v2's names,
arguments and semantics: ``RandomErasing`` (per image) and ``MixUp`` / ``CutMix`` (per batch).

``MixUp`` and ``CutMix`` work on batches, ``(images, labels)`` as torchvision v2's: use them
after collation, e.g. ``DataLoader(..., collate_fn=CutMix(num_classes=1000).collate)``. They
draw in torchvision's order, so under torch's global RNG ``torch.manual_seed(s)`` gives
torchvision's own draws.
"""

from __future__ import annotations

from typing import Any, cast
import math
import numbers
import random
import warnings
from collections.abc import Sequence

import torch

from turboloader.transforms import functional as F
from turboloader.transforms._draws import coin
from turboloader.transforms._random import TorchRandom
from turboloader.transforms._transform import (
    Transform,
    _channels,
    _check_p,
    _kind,
    _randint_below,
    _rng,
    _seed_from,
    _uniform,
)

__all__ = ["CutMix", "MixUp", "RandomErasing"]



class RandomErasing(Transform):
    """Erase a random rectangle with probability ``p``, like
    ``torchvision.transforms.v2.RandomErasing`` (same 10-attempt area/ratio search).

    ``value="random"`` fills with standard-normal noise from a torch generator seeded from the
    current rng (torchvision draws it from torch's global RNG); like torchvision, it is
    converted to the image dtype, so it is meant for float tensors.

    Args:
        p: probability (default 0.5).
        scale: ``(min, max)`` fraction of the area, within [0, 1].
        ratio: ``(min, max)`` aspect ratio of the rectangle.
        value: a number, one per channel, or ``"random"``.
        inplace: modify the input (tensors and writeable arrays).

    Raises:
        TypeError / ValueError: as torchvision.

    Example:
        >>> RandomErasing(p=1.0, value=0)(tensor_image)  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, p: float = 0.5, scale: Any = (0.02, 0.33),
                 ratio: Sequence[float] = (0.3, 3.3), value: Any = 0.0, inplace: bool = False
                ) -> None:
        self.p = _check_p(p)
        if not isinstance(value, (numbers.Number, str, tuple, list)):
            raise TypeError("Argument value should be either a number or str or a sequence")
        if isinstance(value, str) and value != "random":
            raise ValueError("If value is str, it should be 'random'")
        if not isinstance(scale, Sequence):
            raise TypeError("Scale should be a sequence")
        if not isinstance(ratio, Sequence):
            raise TypeError("Ratio should be a sequence")
        if (scale[0] > scale[1]) or (ratio[0] > ratio[1]):
            warnings.warn("Scale and ratio should be of kind (min, max)", stacklevel=2)
        if scale[0] < 0 or scale[1] > 1:
            raise ValueError("Scale should be between 0 and 1")
        self.scale = scale
        self.ratio = ratio
        self.value: list[float] | None
        if isinstance(value, (int, float)):
            self.value = [float(value)]
        elif isinstance(value, str):
            self.value = None
        else:   # a tuple or list (checked above)
            self.value = [float(v) for v in cast(Sequence[float], value)]
        self.inplace = inplace
        # torchvision's float32 log of the ratio range
        self._log_ratio = [float(v) for v in torch.log(torch.tensor(self.ratio))]

    def make_params(self, size, *, rng=None):
        """``{"apply", "i", "j", "h", "w", "noise_seed"}``; ``apply`` is False when the coin
        says so or no rectangle fits in 10 attempts."""
        rng = _rng(rng)
        none = {"apply": False, "i": 0, "j": 0, "h": 0, "w": 0, "noise_seed": None}
        if not coin(rng, self.p):
            return none
        img_h, img_w = size
        area = img_h * img_w
        for _ in range(10):
            erase_area = area * _uniform(rng, self.scale[0], self.scale[1])
            aspect_ratio = math.exp(_uniform(rng, self._log_ratio[0], self._log_ratio[1]))
            h = int(round(math.sqrt(erase_area * aspect_ratio)))
            w = int(round(math.sqrt(erase_area / aspect_ratio)))
            if not (h < img_h and w < img_w):
                continue
            seed = _seed_from(rng) if self.value is None else None
            i = int(rng.randint(0, img_h - h))
            j = int(rng.randint(0, img_w - w))
            return {"apply": True, "i": i, "j": j, "h": h, "w": w, "noise_seed": seed}
        return none

    def _value(self, params, channels):
        if self.value is None:
            g = torch.Generator().manual_seed(params["noise_seed"])
            return torch.empty([channels, params["h"], params["w"]], dtype=torch.float32).normal_(
                generator=g)
        if len(self.value) not in (1, channels):
            raise ValueError("If value is a sequence, it should have either a single value or "
                             f"{channels} (number of inpt channels)")
        return torch.tensor(self.value)[:, None, None]

    def transform(self, img, params):
        if not params["apply"]:
            return img
        if _kind(img) == "pil":
            raise TypeError("RandomErasing does not support PIL images (as torchvision)")
        v = self._value(params, _channels(img))
        return F.erase(img, params["i"], params["j"], params["h"], params["w"], v,
                       inplace=self.inplace)

    def _extra_repr(self):
        value = "random" if self.value is None else self.value
        return (f"p={self.p}, scale={tuple(self.scale)}, ratio={tuple(self.ratio)}, "
                f"value={value}, inplace={self.inplace}")


_BETAS = {}


def _beta(rng, alpha):
    """One Beta(alpha, alpha) draw: torchvision's own distribution under torch's RNG."""
    if isinstance(rng, TorchRandom):
        dist = _BETAS.get(alpha)
        if dist is None:
            dist = _BETAS[alpha] = torch.distributions.Beta(torch.tensor([alpha]),
                                                            torch.tensor([alpha]))
        return float(dist.sample(()))
    if isinstance(rng, torch.Generator):
        rng = random.Random(_seed_from(rng))
    return float(rng.betavariate(alpha, alpha))


def _as_rng(rng):
    if isinstance(rng, torch.Generator):
        return random.Random(_seed_from(rng))
    return _rng(rng)


class _BaseMixUpCutMix:
    def __init__(self, *, alpha: float = 1.0, num_classes: int | None = None,
                 labels_getter: Any = "default") -> None:
        self.alpha = float(alpha)
        if not self.alpha > 0:
            raise ValueError(f"alpha must be positive, got {alpha}")
        self.num_classes = num_classes
        if labels_getter != "default" and not callable(labels_getter):
            raise ValueError("labels_getter should either be 'default' or a callable")
        self.labels_getter = labels_getter

    def _split(self, inputs):
        sample = inputs if len(inputs) > 1 else inputs[0]
        if self.labels_getter != "default":
            labels = self.labels_getter(sample)
            images = sample[0] if isinstance(sample, (tuple, list)) else None
        elif isinstance(sample, dict):
            key = next((k for k in sample if isinstance(k, str) and k.lower() in ("labels", "label")), None)
            if key is None:
                raise ValueError("Could not infer where the labels are in the sample")
            labels = sample[key]
            images = next(v for k, v in sample.items() if k != key and isinstance(v, torch.Tensor))
        elif isinstance(sample, (tuple, list)) and len(sample) >= 2:
            images, labels = sample[0], sample[1]
        else:
            raise ValueError("expected (images, labels)")
        return sample, images, labels

    def _check(self, images, labels):
        if not isinstance(labels, torch.Tensor):
            raise ValueError(f"The labels must be a tensor, but got {type(labels)} instead.")
        if labels.ndim not in (1, 2):
            raise ValueError("labels should be index based with shape (batch_size,) or probability "
                             f"based with shape (batch_size, num_classes), but got a tensor of "
                             f"shape {labels.shape} instead.")
        if labels.ndim == 2 and self.num_classes is not None and labels.shape[-1] != self.num_classes:
            raise ValueError("When passing 2D labels, the number of elements in last dimension must "
                             f"match num_classes: {labels.shape[-1]} != {self.num_classes}. You can "
                             "Leave num_classes to None.")
        if labels.ndim == 1 and self.num_classes is None:
            raise ValueError("num_classes must be passed if the labels are index-based (1D)")
        if not isinstance(images, torch.Tensor):
            raise ValueError(f"{type(self).__name__}() expects a batch tensor of images, got "
                             f"{type(images).__name__}")
        if images.ndim != 4:
            raise ValueError(f"Expected a batched input with 4 dims, but got {images.ndim} "
                             "dimensions instead.")
        if images.shape[0] != labels.shape[0]:
            raise ValueError("The batch size of the image or video does not match the batch size "
                             f"of the labels: {images.shape[0]} != {labels.shape[0]}.")

    def _mix_labels(self, labels, lam):
        if labels.ndim == 1:
            labels = torch.nn.functional.one_hot(labels, num_classes=self.num_classes)
        if not labels.dtype.is_floating_point:
            labels = labels.float()
        return labels.roll(1, 0).mul_(1.0 - lam).add_(labels.mul(lam))

    def __call__(self, *inputs):
        sample, images, labels = self._split(inputs)
        self._check(images, labels)
        params = self.make_params(tuple(images.shape[-2:]))
        out_images, out_labels = self.transform_batch(images, labels, params)
        if isinstance(sample, dict):
            out = dict(sample)
            for k, v in sample.items():
                if v is labels:
                    out[k] = out_labels
                elif v is images:
                    out[k] = out_images
            return out
        rest = tuple(sample[2:]) if isinstance(sample, (tuple, list)) else ()
        return (out_images, out_labels) + rest

    def collate(self, batch):
        """``collate_fn`` for a DataLoader: ``default_collate`` then this transform.

        Example:
            >>> loader = DataLoader(ds, batch_size=64, collate_fn=MixUp(num_classes=10).collate)  # doctest: +SKIP
        """
        from torch.utils.data import default_collate

        return self(*default_collate(batch))

    def __repr__(self):
        return f"{type(self).__name__}(alpha={self.alpha}, num_classes={self.num_classes})"


class MixUp(_BaseMixUpCutMix):
    """MixUp on a batch, like ``torchvision.transforms.v2.MixUp``: each image is blended with
    its neighbour in the batch (``roll(1, 0)``) by ``lam ~ Beta(alpha, alpha)``; index labels
    become one-hot and are mixed the same way.

    Called as ``images, labels = MixUp(num_classes=N)(images, labels)`` on a (B, C, H, W)
    tensor and (B,) or (B, N) labels. Under torch's RNG the draw is torchvision's own; inside
    a turboloader dataset (or with ``make_params(rng=...)``, a ``random.Random`` or a
    ``torch.Generator``) it comes from that generator.

    Args:
        alpha: Beta distribution parameter (> 0). num_classes: for one-hot labels.
        labels_getter: ``"default"`` (second element / ``"labels"`` key) or a callable.

    Raises:
        ValueError: as torchvision for bad shapes or missing num_classes.

    Example:
        >>> images, labels = MixUp(alpha=0.2, num_classes=10)(images, labels)  # doctest: +SKIP
    """

    def make_params(self, size=None, *, rng=None):
        """``{"lam": float}``."""
        return {"lam": _beta(_rng(rng) if not isinstance(rng, torch.Generator) else rng, self.alpha)}

    def transform_batch(self, images, labels, params):
        """Apply drawn ``params`` to a batch; returns ``(images, labels)``."""
        lam = params["lam"]
        out = images.roll(1, 0).mul_(1.0 - lam).add_(images.mul(lam))
        return out, self._mix_labels(labels, lam)


class CutMix(_BaseMixUpCutMix):
    """CutMix on a batch, like ``torchvision.transforms.v2.CutMix``: a box of area fraction
    ``1 - lam`` (``lam ~ Beta(alpha, alpha)``) is pasted from the neighbouring image
    (``roll(1, 0)``); labels are mixed by the box's actual area.

    Args and call convention as :class:`MixUp`.

    Example:
        >>> images, labels = CutMix(num_classes=1000)(images, labels)  # doctest: +SKIP
    """

    def make_params(self, size, *, rng=None):
        """``{"box": (x1, y1, x2, y2), "lam_adjusted": float}`` for images of ``size = (H, W)``."""
        rng = _rng(rng) if not isinstance(rng, torch.Generator) else rng
        H, W = size
        lam = _beta(rng, self.alpha)
        rng = _as_rng(rng)
        r_x = _randint_below(rng, W)
        r_y = _randint_below(rng, H)
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w_half = int(r * W)
        r_h_half = int(r * H)
        x1 = max(r_x - r_w_half, 0)
        y1 = max(r_y - r_h_half, 0)
        x2 = min(r_x + r_w_half, W)
        y2 = min(r_y + r_h_half, H)
        lam_adjusted = float(1.0 - (x2 - x1) * (y2 - y1) / (W * H))
        return {"box": (x1, y1, x2, y2), "lam_adjusted": lam_adjusted}

    def transform_batch(self, images, labels, params):
        """Apply drawn ``params`` to a batch; returns ``(images, labels)``."""
        x1, y1, x2, y2 = params["box"]
        rolled = images.roll(1, 0)
        out = images.clone()
        out[..., y1:y2, x1:x2] = rolled[..., y1:y2, x1:x2]
        return out, self._mix_labels(labels, params["lam_adjusted"])
