"""Containers with torchvision v2's names and semantics: ``Compose``, ``RandomApply``,
``RandomChoice``, ``RandomOrder``, ``Lambda`` and ``Identity``.

Members may be any callables (a torchvision transform, a lambda). ``RandomApply``,
``RandomChoice`` and ``RandomOrder`` draw their decision from
:func:`~turboloader.transforms._random.current_rng` (torch's global RNG outside a dataset,
with torchvision's own draws: ``torch.rand(1)``, ``torch.multinomial``, ``torch.randperm``),
then call the members, which draw their own parameters. A ``Compose`` of turboloader
transforms fuses with the decoder, and so do ``Identity`` anywhere in it and
``RandomApply`` / ``RandomChoice`` / ``RandomOrder`` around the fusable post-geometry
members (``RandomHorizontalFlip``, ``ColorJitter``); see :func:`turboloader.transforms.plan`.
"""

from __future__ import annotations

from typing import Any, Callable
from collections.abc import Sequence

import torch

from turboloader.transforms._draws import RngDraws, bernoulli, one_row
from turboloader.transforms._transform import Transform, _check_p, _rng, fused_ops

__all__ = ["Compose", "Identity", "Lambda", "RandomApply", "RandomChoice", "RandomOrder"]


def _members(transforms, *, module_list=False):
    """The member list, validated as torchvision does (plus: every member is callable)."""
    if not (isinstance(transforms, Sequence)
            or (module_list and isinstance(transforms, torch.nn.ModuleList))):
        raise TypeError("Argument transforms should be a sequence of callables"
                        + (" or a `nn.ModuleList`" if module_list else ""))
    if not len(transforms):
        raise ValueError("Pass at least one transform")
    for t in transforms:
        if not callable(t):
            raise TypeError(f"every transform must be callable, got {type(t).__name__}")
    return list(transforms)


def _run(transforms, inputs):
    """Call ``transforms`` in order; several inputs are passed along unpacked (Compose's rule)."""
    needs_unpacking = len(inputs) > 1
    outputs = inputs if needs_unpacking else inputs[0]
    for t in transforms:
        outputs = t(*inputs)
        inputs = outputs if needs_unpacking else (outputs,)
    return outputs


def _members_ops(transforms, combine=sum):
    """:func:`fused_ops` of a container: its members' counts combined, or None when one of
    them is not a fused post-geometry member."""
    counts = [fused_ops(m) for m in transforms]
    return None if None in counts else combine(counts)


def _repr(obj, transforms, extra=""):
    body = "".join(f"\n    {t!r}," for t in transforms)
    return f"{type(obj).__name__}({body}{extra}\n)"



class Compose:
    """Apply transforms one after the other, like ``torchvision.transforms.v2.Compose``.

    Any callable is accepted (a torchvision transform, a lambda) and is called with what the
    previous one returned. When every member is one of turboloader's transforms and the
    pipeline ends in a tensor conversion, :func:`turboloader.transforms.plan` turns it into
    one fused native call; the dataset does this automatically.

    Args:
        transforms: a sequence of callables.

    Raises:
        TypeError: ``transforms`` is not a sequence. ValueError: it is empty.

    Example:
        >>> t = Compose([RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(),
        ...              Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
        >>> x = t(pil_image)  # doctest: +SKIP
    """

    def __init__(self, transforms: Any) -> None:
        self.transforms = _members(transforms)

    def __call__(self, *inputs):
        return _run(self.transforms, inputs)

    def _fused_ops(self):
        return _members_ops(self.transforms)

    def _fused_draw(self, d, mask, r):
        for m in self.transforms:
            m._fused_draw(d, mask, r)

    def __repr__(self):
        return _repr(self, self.transforms)


class RandomApply:
    """Apply all of ``transforms`` with probability ``p``, else none, like
    ``torchvision.transforms.v2.RandomApply``: one ``rng.random() < p`` draw decides
    (torchvision: ``torch.rand(1) >= p`` skips), then the members draw their own parameters.

    Fuses when its members are fusable after the geometry (``RandomHorizontalFlip``,
    ``ColorJitter``), e.g. SimCLR's ``RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8)``.

    Args:
        transforms: a sequence of callables (or an ``nn.ModuleList``).
        p: the probability of applying them, in [0, 1].

    Raises:
        TypeError: ``transforms`` is not a sequence of callables. ValueError: it is empty,
        or ``p`` is outside [0, 1].

    Example:
        >>> t = RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8)
        >>> t.make_params(rng=random.Random(1))  # random.Random(1).random() is 0.134 < 0.8
        {'apply': True}
    """

    def __init__(self, transforms: Any, p: float = 0.5) -> None:
        self.transforms = _members(transforms, module_list=True)
        self.p = _check_p(p)

    def make_params(self, size=None, *, rng=None):
        """``{"apply": bool}``: one ``rng.random()`` draw."""
        return {"apply": bool(self._draw_batch(one_row(size), RngDraws(_rng(rng)))[0])}

    def _draw_batch(self, sizes, d, mask=None):
        """``bool (n,)``: whether each row applies the members, ``random() < p`` (rows
        outside ``mask``: False, nothing drawn)."""
        return bernoulli(d, self.p, mask)

    def _fused_ops(self):
        return _members_ops(self.transforms)

    def _fused_draw(self, d, mask, r):
        apply = mask & self._draw_batch(r.out, d, mask)
        for m in self.transforms:
            m._fused_draw(d, apply, r)

    def __call__(self, *inputs):
        if not self.make_params()["apply"]:
            return inputs if len(inputs) > 1 else inputs[0]
        return _run(self.transforms, inputs)

    def __repr__(self):
        return _repr(self, self.transforms, f"\n    p={self.p},")


class RandomChoice:
    """Apply one of ``transforms``, picked with probabilities ``p``, like
    ``torchvision.transforms.v2.RandomChoice``.

    Fuses when every choice is fusable after the geometry (``RandomHorizontalFlip``,
    ``ColorJitter``, ``Identity``, or containers of them).

    Args:
        transforms: a sequence of callables.
        p: one weight per transform (normalised to sum to 1); None for equal weights.

    Raises:
        TypeError: ``transforms`` is not a sequence of callables. ValueError: it is empty,
        ``p`` has the wrong length, or its weights are negative or all zero.

    Example:
        >>> t = RandomChoice([RandomHorizontalFlip(1.0), ColorJitter(0.4)], p=[3, 1])
        >>> t.p
        [0.75, 0.25]
    """

    def __init__(self, transforms: Any, p: Sequence[float] | None = None) -> None:
        self.transforms = _members(transforms)
        if p is None:
            p = [1] * len(self.transforms)
        elif len(p) != len(self.transforms):
            raise ValueError(f"Length of p doesn't match the number of transforms: {len(p)} != "
                             f"{len(self.transforms)}")
        total = sum(p)
        if any(q < 0 for q in p) or not total > 0:
            raise ValueError(f"p must hold non-negative weights with a positive sum, got {p}")
        self.p = [q / total for q in p]

    def make_params(self, size=None, *, rng=None):
        """``{"index": int}``: the transform to apply."""
        return {"index": int(self._draw_batch(one_row(size), RngDraws(_rng(rng)))[0])}

    def _draw_batch(self, sizes, d, mask=None):
        """``int64 (n,)``: the member each row applies, drawn with probabilities ``p``."""
        return d.categorical(self.p, mask)

    def _fused_ops(self):
        return _members_ops(self.transforms, max)

    def _fused_draw(self, d, mask, r):
        index = self._draw_batch(r.out, d, mask)
        for i, m in enumerate(self.transforms):
            m._fused_draw(d, mask & (index == i), r)

    def __call__(self, *inputs):
        return self.transforms[self.make_params()["index"]](*inputs)

    def __repr__(self):
        return _repr(self, self.transforms, f"\n    p={self.p},")


class RandomOrder:
    """Apply all of ``transforms`` in a random order, like
    ``torchvision.transforms.v2.RandomOrder`` (the order is ``torch.randperm`` under torch's
    RNG).

    Fuses when every member is fusable after the geometry (``RandomHorizontalFlip``,
    ``ColorJitter``, ``Identity``, or containers of them).

    Args:
        transforms: a sequence of callables.

    Raises:
        TypeError: ``transforms`` is not a sequence of callables. ValueError: it is empty.

    Example:
        >>> t = RandomOrder([ColorJitter(brightness=0.4), ColorJitter(hue=0.1)])
        >>> sorted(t.make_params(rng=random.Random(0))["order"])
        [0, 1]
    """

    def __init__(self, transforms: Any) -> None:
        self.transforms = _members(transforms)

    def make_params(self, size=None, *, rng=None):
        """``{"order": [indices]}``: a permutation of the members."""
        return {"order": self._draw_batch(one_row(size), RngDraws(_rng(rng)))[0].tolist()}

    def _draw_batch(self, sizes, d, mask=None):
        """``int64 (n, k)``: each row's order of the k members, ``shuffle(list(range(k)))``."""
        return d.permutation(len(self.transforms), mask)

    def _fused_ops(self):
        return _members_ops(self.transforms)

    def _fused_draw(self, d, mask, r):
        order = self._draw_batch(r.out, d, mask)
        for j in range(order.shape[1]):
            for i, m in enumerate(self.transforms):
                m._fused_draw(d, mask & (order[:, j] == i), r)

    def __call__(self, *inputs):
        order = self.make_params()["order"]
        return _run([self.transforms[i] for i in order], inputs)

    def __repr__(self):
        return _repr(self, self.transforms)


class Lambda(Transform):
    """Apply a user function, like ``torchvision.transforms.v2.Lambda``: ``lambd(img)`` when
    ``img`` is an instance of one of ``types`` (default: anything), else ``img`` unchanged.

    Never fused (the function is opaque): a pipeline with a ``Lambda`` runs unfused.

    Args:
        lambd: the function.
        types: the input types it applies to.

    Raises:
        TypeError: ``lambd`` is not callable.

    Example:
        >>> Lambda(lambda crops: torch.stack(crops))([torch.zeros(3, 2, 2)] * 5).shape
        torch.Size([5, 3, 2, 2])
    """

    def __init__(self, lambd: Callable[..., Any], *types: type) -> None:
        if not callable(lambd):
            raise TypeError(f"Argument lambd should be callable, got {type(lambd).__name__!r}")
        self.lambd = lambd
        self.types = types or (object,)

    def __call__(self, img):
        return self.lambd(img) if isinstance(img, self.types) else img

    def transform(self, img, params):
        return self.lambd(img) if isinstance(img, self.types) else img

    def _extra_repr(self):
        name = getattr(self.lambd, "__name__", None)
        types = f"types={[t.__name__ for t in self.types]}"
        return f"{name}, {types}" if name else types


class Identity(Transform):
    """Return the input unchanged, like ``torchvision.transforms.v2.Identity`` (several
    inputs come back as the tuple). Dropped from fused pipelines.

    Example:
        >>> Identity()(3)
        3
    """

    def __call__(self, *inputs):
        return inputs if len(inputs) > 1 else inputs[0]

    def _fused_ops(self):   # a fused post-geometry member that does nothing
        return 0

    def _fused_draw(self, d, mask, r):
        pass

    def transform(self, img, params):
        return img
