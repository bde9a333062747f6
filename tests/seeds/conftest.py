"""Fixtures for the seed-example tests: a tiny labelled TAR shard and image files, and a
``run`` helper that executes a pasted example in a namespace."""

import io
import os
import tarfile
import textwrap

import pytest
import torch
from torch import nn

import turboloader
from turboloader import seeds
from turboloader.synthetic import synthetic_jpegs

N = 12

# what the seeds name at the top level of turboloader (see test_top_level_exports)
SEED_NAMES = ["TransformConfig", "ResizeMethod", "Pipeline", "Compose", "Resize", "CenterCrop",
              "RandomCrop", "RandomHorizontalFlip", "ColorJitter", "ImageNetNormalize",
              "ToTensor", "TensorFormat", "HighPerformanceDataset", "create_dataloader"]


@pytest.fixture(autouse=True)
def seed_names(monkeypatch):
    """Make the seed names resolvable as ``turboloader.X`` while ``turboloader/__init__``
    does not export them yet (test_top_level_exports asserts that it does)."""
    for name in SEED_NAMES:
        if name not in turboloader.__all__:
            monkeypatch.setattr(turboloader, name, getattr(seeds, name), raising=False)
    for name, module in (("DataLoader", "turboloader.loader"), ("PrefetchLoader", "turboloader.prefetch")):
        if name not in turboloader.__all__:
            import importlib

            value = getattr(importlib.import_module(module), name)
            monkeypatch.setattr(turboloader, name, value, raising=False)


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    """A dict: ``tar`` (one labelled shard, N samples, labels = index), ``paths`` (the same
    JPEGs as files), ``labels``."""
    d = tmp_path_factory.mktemp("seeddata")
    jpegs = [j for j, _ in synthetic_jpegs(N, seed=5, short_side=(40, 64))]
    tar = d / "train.tar"
    with tarfile.open(tar, "w", format=tarfile.USTAR_FORMAT) as tf:
        for i, jpeg in enumerate(jpegs):
            for name, blob in ((f"{i:06d}.jpg", jpeg), (f"{i:06d}.cls", str(i).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                tf.addfile(info, io.BytesIO(blob))
    paths = []
    for i, jpeg in enumerate(jpegs):
        p = d / f"img{i:03d}.jpg"
        p.write_bytes(jpeg)
        paths.append(str(p))
    return {"tar": str(tar), "paths": paths, "labels": list(range(N)), "dir": str(d)}


def tiny_model(classes=1000):
    """Any input size: stride-4 conv, global pooling, a linear layer."""
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
