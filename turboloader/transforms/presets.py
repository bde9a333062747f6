"""The standard ImageNet pipelines and statistics, defined once (the compat APIs, the
Lightning DataModule and the command line all use these).

Example:
    >>> from turboloader.transforms.presets import imagenet_train_transform
    >>> ds = TarDataset("train-{0000..0099}.tar", imagenet_train_transform(224))  # doctest: +SKIP
"""

from typing import Any

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "from_timm", "imagenet_train_transform",
           "imagenet_val_transform"]

#: Per-channel mean and standard deviation of ImageNet's training images, RGB in [0, 1]
#: (torchvision's reference values).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def imagenet_train_transform(image_size=224):
    """RandomResizedCrop + horizontal flip + ToTensor + ImageNet Normalize (fusable).

    Args:
        image_size: output side in pixels.

    Returns:
        A :class:`~turboloader.transforms.Compose` giving float32 ``(3, image_size,
        image_size)`` tensors.

    Example:
        >>> imagenet_train_transform(224)  # doctest: +SKIP
    """
    from turboloader import transforms as T

    return T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def imagenet_val_transform(image_size=224):
    """Resize(image_size * 256 / 224) + CenterCrop + ToTensor + ImageNet Normalize (fusable).

    The resize is to ``int(image_size * 256 / 224)`` (256 for 224), the usual 0.875 crop
    ratio.

    Args:
        image_size: output side in pixels.

    Returns:
        A :class:`~turboloader.transforms.Compose` giving float32 ``(3, image_size,
        image_size)`` tensors.

    Example:
        >>> imagenet_val_transform(224)  # doctest: +SKIP
    """
    from turboloader import transforms as T

    return T.Compose([T.Resize(int(image_size * 256 / 224)), T.CenterCrop(image_size),
                      T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


_TIMM_INTERPOLATION = {"bilinear": "BILINEAR", "bicubic": "BICUBIC", "nearest": "NEAREST_EXACT",
                       "random": "BILINEAR"}


def from_timm(data_config: dict, is_training: bool = False, *, scale=None, ratio=None,
              hflip: float = 0.5, color_jitter=0.4):
    """The pipeline ``timm.data.create_transform(**data_config, is_training=...)`` builds,
    as a fused turboloader pipeline.

    ``data_config`` is what ``timm.data.resolve_data_config({}, model=model)`` returns
    (``input_size``, ``interpolation``, ``mean``, ``std``, ``crop_pct``, ``crop_mode``).
    Training: ``RandomResizedCrop(size, scale, ratio)`` (timm's defaults (0.08, 1) and
    (3/4, 4/3)), ``RandomHorizontalFlip(hflip)``, ``ColorJitter(color_jitter)`` (timm's
    default 0.4 for brightness, contrast and saturation; 0 or None: none), ``ToTensor``,
    ``Normalize(mean, std)``. Evaluation: ``Resize(floor(size / crop_pct))`` (both sides
    with ``crop_mode="squash"``), ``CenterCrop(size)``, ``ToTensor``, ``Normalize``. The
    keyword arguments are ``create_transform``'s of the same names (``scale``, ``ratio``,
    ``hflip``, ``color_jitter``), for a training script that passes its own.

    timm's training default ``interpolation="random"`` (bilinear or bicubic, drawn per
    image) has no fused kernel: it becomes bilinear here.

    Args:
        data_config: timm's resolved data config (a dict).
        is_training: the training pipeline (else evaluation).
        scale, ratio, hflip, color_jitter: as ``timm.data.create_transform``'s.

    Returns:
        A :class:`~turboloader.transforms.Compose` that fuses into the decoder.

    Raises:
        ValueError: what has no fused equivalent: ``crop_mode="border"`` (timm pads), a
            non-RGB ``input_size``, an interpolation other than bilinear, bicubic, nearest
            or random, or a colour-jitter with hue (four values).

    Example:
        >>> import timm, timm.data                                          # doctest: +SKIP
        >>> cfg = timm.data.resolve_data_config({}, model=timm.create_model("resnet50"))
        >>> ds = turboloader.ImageFolder("train/", from_timm(cfg, is_training=True))
    """
    import math

    from turboloader import transforms as T

    channels, height, width = (int(v) for v in data_config["input_size"])
    if channels != 3:
        raise ValueError(f"from_timm: input_size {data_config['input_size']} is not RGB "
                         "(3 channels), which the fused pipelines decode")
    size = height if height == width else (height, width)
    name = data_config.get("interpolation", "bilinear") or "bilinear"
    if name not in _TIMM_INTERPOLATION:
        raise ValueError(f"from_timm: interpolation {name!r} has no fused kernel (bilinear, "
                         "bicubic, nearest or random)")
    from torchvision.transforms import InterpolationMode

    interp = getattr(InterpolationMode, _TIMM_INTERPOLATION[name])
    norm = [T.ToTensor(), T.Normalize(tuple(data_config["mean"]), tuple(data_config["std"]))]
    if is_training:
        steps: list[Any] = [T.RandomResizedCrop(size, scale=tuple(scale or (0.08, 1.0)),
                                     ratio=tuple(ratio or (3.0 / 4.0, 4.0 / 3.0)),
                                     interpolation=interp)]
        if hflip > 0:
            steps.append(T.RandomHorizontalFlip(p=hflip))
        if color_jitter:
            cj = ((float(color_jitter),) * 3 if isinstance(color_jitter, (int, float))
                  else tuple(float(v) for v in color_jitter))
            if len(cj) == 4 and cj[3]:
                raise ValueError("from_timm: a colour jitter with hue has no fused kernel")
            steps.append(T.ColorJitter(*cj[:3]))
        return T.Compose(steps + norm)
    crop_pct = data_config.get("crop_pct") or 0.875
    mode = data_config.get("crop_mode") or "center"
    if mode == "border":
        raise ValueError("from_timm: crop_mode='border' pads the resized image (timm's "
                         "CenterCropOrPad), which no fused pipeline does; use 'center' or "
                         "'squash'")
    scaled = (math.floor(height / crop_pct), math.floor(width / crop_pct))
    if mode == "squash":
        resize = T.Resize(scaled, interpolation=interp)
    elif scaled[0] == scaled[1]:
        resize = T.Resize(scaled[0], interpolation=interp)
    else:
        raise ValueError("from_timm: a non-square input_size with crop_mode='center' is "
                         "timm's ResizeKeepRatio, which no fused pipeline does")
    return T.Compose([resize, T.CenterCrop(size)] + norm)
