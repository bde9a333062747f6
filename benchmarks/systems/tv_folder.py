"""Classic baseline: torchvision ImageFolder + transforms v2 on PIL images + torch DataLoader.

Run with the dev venv's Python for the Pillow row and with ``benchmarks/.venv-simd`` for the
pillow-simd row (same code; only the ``PIL`` module differs). The transforms run on PIL images
(the classic ImageNet recipe), so Pillow does the resampling and pillow-simd can speed it up.
"""
import torch
import torchvision
from torchvision import datasets
from torchvision.transforms import v2

import _harness as H


def transform(pipeline):
    if pipeline == "train":
        head = [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()]
    else:
        head = [v2.Resize(256, antialias=True), v2.CenterCrop(224)]
    return v2.Compose([*head, v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(H.MEAN, H.STD)])


class Loader:
    def __init__(self, args, pipeline, root):
        ds = datasets.ImageFolder(f"{root}/folder", transform=transform(pipeline))
        self.dl = torch.utils.data.DataLoader(
            ds, batch_size=args.batch, shuffle=pipeline == "train", num_workers=args.workers,
            persistent_workers=args.workers > 0, drop_last=False)
        self.note = ("ImageFolder, PIL decode (Image.open().convert('RGB')), v2 on PIL, "
                     f"DataLoader(num_workers={args.workers}, persistent_workers=True)")

    def epoch(self, e):
        return iter(self.dl)

    def close(self):
        del self.dl


def versions():
    import PIL
    import PIL.features
    return {"torch": torch.__version__, "torchvision": torchvision.__version__,
            "PIL": PIL.__version__, "libjpeg-turbo": PIL.features.version_feature("libjpeg_turbo"),
            "PIL module": PIL.__file__}


if __name__ == "__main__":
    H.main("torchvision", Loader, versions)
