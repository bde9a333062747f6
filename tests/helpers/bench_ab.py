"""What the A/B benchmarks' smoke tests hand the scripts: a small photo folder and two copies
of this tree's native modules (``--build a=DIR --build b=DIR``)."""

import shutil

import numpy as np
from PIL import Image


def photo_folder(root):
    """``root/class_0`` with three noise JPEGs of ImageNet-like shapes; returns ``root``."""
    rng = np.random.default_rng(0)
    data = root / "class_0"
    data.mkdir(parents=True)
    for i, (h, w) in enumerate([(375, 500), (333, 250), (260, 300)]):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(data / f"{i}.jpg")
    return root


def build_args(root, modules):
    """Copies of ``modules``' extension files in ``root/a`` and ``root/b``, as the scripts'
    ``--build`` arguments."""
    args = []
    for label in ("a", "b"):
        d = root / label
        d.mkdir()
        for mod in modules:
            shutil.copy(mod.__file__, d)
        args += ["--build", f"{label}={d}"]
    return args
