"""Photoroom's datago (``datago`` from PyPI, a Rust loader; venv ``.venv-datago``): its file
source over the ImageFolder tree, val pipeline only.

- val: ``DatagoClient`` with ``source_type="file"`` (``root_path`` = the ImageFolder tree) and
  ``image_config={"crop_and_resize": True, "default_image_size": 256, "downsampling_ratio": 32,
  "min_aspect_ratio": 1.0, "max_aspect_ratio": 1.0, "image_to_rgb8": True}``: one square
  aspect-ratio bucket of 256 x 256, so datago decodes (zune-jpeg, through the ``image`` crate),
  resizes the short side to 256 and centre-crops 256 x 256 (``fast_image_resize``, Lanczos3) in
  its own threads. This process then takes the centre 224 x 224 of each sample (offset 16: the
  centre crop of a centre crop), copies it into its slot of a new float32 CHW batch as it
  arrives and normalises the batch in place (``v2.ToDtype(scale=True)`` + ``v2.Normalize`` as
  one pass), with one torch thread. The result is Resize(256) + CenterCrop(224) as in the other
  rows, except the filter: Lanczos3 where the baseline's ``v2.Resize`` is antialiased bilinear
  (Pillow's triangle filter), and datago's crop box may sit at a sub-pixel offset
  (``fast_image_resize``'s ``CropBox`` is fractional) where torchvision rounds.
- train: not implemented. datago has no random crop and no flip: ``crop_and_resize`` is a
  deterministic centre crop to the nearest aspect-ratio bucket, not RandomResizedCrop, and
  its random sampling only shuffles the file order. A train row would have to run
  RandomResizedCrop in this one Python process, which would time torchvision, not datago.
- Its WebDataset source is not used: it fetches shard URLs over HTTP only (a local path or
  ``file://`` URL fails with reqwest's "builder error" and the stream ends with 0 samples), so it
  cannot read the benchmark's TAR shards from disk.

Concurrency: ``DATAGO_MAX_TASKS`` (datago's documented knob, the number of samples decoded at
once) is set to ``--workers``; datago's tokio runtime itself has one thread per CPU. Every
epoch is a new pass (``start()``, then ``get_sample()`` until it returns ``None``, as datago
2026.10 requires); the timed epoch includes the start (the directory walk). Labels: the
sample's id is its file path; the label is the index of its class folder in sorted order, as
``torchvision.datasets.ImageFolder`` assigns it. A file datago cannot decode is logged and
skipped; a truncated JPEG decodes (the missing rows filled in) and is delivered with no error.
"""
import json
import os
import warnings
from pathlib import Path

import torch

import _harness as H

BUCKET = 256  # datago's square bucket: Resize(256) + CenterCrop(256)
OUT = 224
EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp")  # what datago's file source reads
# a sample's pixels are a read-only view of datago's bytes, only read (copied into the batch)
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


class Unavailable(RuntimeError):
    pass


def _config(folder, limit):
    return {
        "source_type": "file",
        "source_config": {"root_path": str(folder), "random_sampling": False,
                          "rank": 0, "world_size": 1},
        "image_config": {"crop_and_resize": True, "default_image_size": BUCKET,
                         "downsampling_ratio": 32, "min_aspect_ratio": 1.0,
                         "max_aspect_ratio": 1.0, "pre_encode_images": False,
                         "image_to_rgb8": True},  # greyscale/RGBA files come out RGB
        "limit": limit,
        "samples_buffer_size": 64,
    }


class Loader:
    def __init__(self, args, pipeline, root):
        if pipeline != "val":
            raise Unavailable("not implemented: datago has no random crop or flip (its "
                              "crop_and_resize is a deterministic centre crop to an aspect-ratio "
                              "bucket, not RandomResizedCrop)")
        from datago import DatagoClient

        folder = Path(root) / "folder"
        classes = sorted(d.name for d in os.scandir(folder) if d.is_dir())
        self.class_index = {c: i for i, c in enumerate(classes)}
        self.n = sum(1 for _, _, files in os.walk(folder) for f in files
                     if f.lower().endswith(EXTENSIONS))
        # read by datago at every start(): how many samples it decodes at once
        os.environ["DATAGO_MAX_TASKS"] = str(max(args.workers, 1))
        self.client = DatagoClient(json.dumps(_config(folder, self.n)))
        # one torch thread, as in a DataLoader worker: the per-sample copies are too small for
        # intra-op threads, which would only spin against datago's decode threads
        torch.set_num_threads(1)
        self.batch = args.batch
        self.mean255 = torch.tensor(H.MEAN).view(1, 3, 1, 1) * 255
        self.inv_std255 = 1 / (torch.tensor(H.STD).view(1, 3, 1, 1) * 255)
        self.note = (f"DatagoClient(source_type='file', ImageFolder tree, image_config="
                     f"crop_and_resize to one {BUCKET}x{BUCKET} bucket: short side -> {BUCKET} "
                     f"+ centre crop, Lanczos3), DATAGO_MAX_TASKS={args.workers}; this process: "
                     f"centre {OUT}x{OUT} of each sample copied into its float32 CHW batch slot, "
                     "then normalised in place (1 torch thread); "
                     "val only (no random crop in datago)")

    def _label(self, sample_id):
        path = Path(json.loads(sample_id))  # the id is the file path as a JSON string
        return self.class_index[path.parent.name]

    def _new_batch(self):
        return torch.empty((self.batch, 3, OUT, OUT), dtype=torch.float32), []

    def _finish(self, x, labels):
        # v2.ToDtype(scale=True) + v2.Normalize as one in-place pass: (x - 255 mean) / (255 std)
        x = x[:len(labels)].sub_(self.mean255).mul_(self.inv_std255)
        return x, torch.tensor(labels)

    def epoch(self, e):
        self.client.start()  # a new pass; datago never restarts a finished stream by itself
        o = (BUCKET - OUT) // 2
        x, labels = self._new_batch()
        while True:
            s = self.client.get_sample()
            if s is None:
                break
            a = s.image.to_numpy_array()
            if a.shape != (BUCKET, BUCKET, 3):
                raise ValueError(f"datago sample {s.id}: shape {a.shape}, expected "
                                 f"({BUCKET}, {BUCKET}, 3)")
            # each sample goes straight into its batch slot (uint8 HWC -> float32 CHW)
            x[len(labels)].copy_(torch.from_numpy(a[o:o + OUT, o:o + OUT]).permute(2, 0, 1))
            labels.append(self._label(s.id))
            if len(labels) == self.batch:
                yield self._finish(x, labels)
                x, labels = self._new_batch()
        if labels:
            yield self._finish(x, labels)

    def close(self):
        self.client.stop()


def versions():
    import importlib.metadata as m

    return {"datago": m.version("datago"), "torch": torch.__version__}


if __name__ == "__main__":
    H.main("datago", Loader, versions)
