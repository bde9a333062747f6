"""Helpers of the seed-example tests (a module of its own: test modules import it)."""

import textwrap

import torch
from torch import nn

N = 12

# what the seeds name at the top level of turboloader (see test_top_level_exports)
SEED_NAMES = ["TransformConfig", "ResizeMethod", "Pipeline", "Compose", "Resize", "CenterCrop",
              "RandomCrop", "RandomHorizontalFlip", "ColorJitter", "ImageNetNormalize",
              "ToTensor", "TensorFormat", "HighPerformanceDataset", "create_dataloader"]


def tiny_model(classes=1000, *, num_classes=None):
    """Any input size: stride-4 conv, global pooling, a linear layer (``num_classes``: as
    torchvision's models name it, for examples that build one)."""
    classes = classes if num_classes is None else num_classes
    return nn.Sequential(nn.Conv2d(3, 4, 3, stride=4), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, classes))


def run(source, namespace=None, replace=()):
    """Execute an example (dedented) after the textual ``replace`` pairs, each of which
    must occur; returns the namespace."""
    source = textwrap.dedent(source)
    for old, new in replace:
        assert old in source, f"substitution {old!r} not found"
        source = source.replace(old, new)
    ns = {"__name__": "seed_example"} if namespace is None else namespace
    exec(compile(source, "<seed example>", "exec"), ns)
    return ns


def training_namespace(**extra):
    model = tiny_model()
    ns = {"__name__": "seed_example", "torch": torch, "model": model,
          "criterion": nn.CrossEntropyLoss(),
          "optimizer": torch.optim.SGD(model.parameters(), lr=0.01)}
    ns.update(extra)
    return ns
