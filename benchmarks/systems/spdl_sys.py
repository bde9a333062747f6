"""SPDL (Meta's Scalable and Performant Data Loading, ``spdl`` from PyPI): a thread-based
pipeline in one process.

``PipelineBuilder().add_source(indices).pipe(load, concurrency=workers).aggregate(batch)
.pipe(collate).add_sink(3).build(num_threads=workers)``; the per-sample stage reads the file
and runs the same Pillow decode + torchvision v2 transforms as the classic baseline (Pillow
and torch release the GIL in decode, resample and the tensor ops), so this row measures SPDL's
thread scheduling against the DataLoader's worker processes. SPDL's own image decoder
(``spdl.io.load_image``) is FFmpeg's, which needs FFmpeg's shared libraries; when they load,
``--variant ffmpeg`` decodes with it instead (full-size RGB, then v2 on the tensor).
Train shuffles the indices per epoch with ``torch.randperm`` seeded by (seed, epoch).
"""
import torch
from PIL import Image
from torchvision import datasets
from torchvision.transforms import v2

import _harness as H
from tv_folder import transform


def _tensor_transform(pipeline):
    if pipeline == "train":
        head = [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()]
    else:
        head = [v2.Resize(256, antialias=True), v2.CenterCrop(224)]
    return v2.Compose([*head, v2.ToDtype(torch.float32, scale=True), v2.Normalize(H.MEAN, H.STD)])


class Loader:
    def __init__(self, args, pipeline, root):
        import spdl.pipeline  # noqa: F401 - fail early if missing

        self.samples = datasets.ImageFolder(f"{root}/folder").samples
        self.args, self.pipeline = args, pipeline
        if args.variant == "ffmpeg":
            import spdl.io

            tf = _tensor_transform(pipeline)

            def load(i):
                path, label = self.samples[i]
                buf = spdl.io.load_image(path, filter_desc=spdl.io.get_video_filter_desc(pix_fmt="rgb24"))
                x = spdl.io.to_torch(buf).permute(2, 0, 1)
                return tf(x), label
            dec = "spdl.io.load_image (FFmpeg) + v2 on tensors"
        else:
            tf = transform(pipeline)

            def load(i):
                path, label = self.samples[i]
                with open(path, "rb") as f:
                    img = Image.open(f).convert("RGB")
                return tf(img), label
            dec = "Pillow decode + v2 on PIL (as the baseline)"
        self.load = load
        self.note = (f"PipelineBuilder: source -> pipe(load, concurrency={args.workers}) -> "
                     f"aggregate({args.batch}) -> pipe(collate) -> sink; build(num_threads="
                     f"{args.workers}); {dec}")

    def epoch(self, e):
        from spdl.pipeline import PipelineBuilder

        n = len(self.samples)
        if self.pipeline == "train":
            g = torch.Generator().manual_seed(self.args.seed * 1000003 + e)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))

        def collate(items):
            return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items])

        pipe = (PipelineBuilder().add_source(order)
                .pipe(self.load, concurrency=self.args.workers, output_order="input"
                      if self.pipeline == "val" else "completion")
                .aggregate(self.args.batch).pipe(collate).add_sink(3)
                .build(num_threads=self.args.workers))
        with pipe.auto_stop():
            yield from pipe.get_iterator(timeout=600)


def versions():
    import importlib.metadata as m

    import PIL
    return {"spdl": m.version("spdl"), "PIL": PIL.__version__, "torch": torch.__version__}


if __name__ == "__main__":
    H.main("spdl", Loader, versions)
