"""The standard ImageNet pipelines and statistics, defined once (the compat APIs, the
Lightning DataModule and the command line all use these).

Example:
    >>> from turboloader.transforms.presets import imagenet_train_transform
    >>> ds = TarDataset("train-{0000..0099}.tar", imagenet_train_transform(224))  # doctest: +SKIP
"""

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "imagenet_train_transform", "imagenet_val_transform"]

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
