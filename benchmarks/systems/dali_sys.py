"""NVIDIA DALI's CPU pipeline (``nvidia-dali-cuda120`` from PyPI, venv ``.venv-dali``), with
``device_id=None`` (no GPU is touched) and ``num_threads = --workers``.

- train: ``fn.readers.file`` over the ImageFolder tree (``shuffle_after_epoch=True``: a global
  reshuffle every epoch, so every sample comes exactly once per epoch) ->
  ``fn.decoders.image_random_crop`` (area (0.08, 1), aspect (3/4, 4/3), as RandomResizedCrop) ->
  ``fn.resize`` to 224 x 224 (linear, antialiased) -> ``fn.crop_mirror_normalize`` (random
  mirror from ``fn.random.coin_flip``, ImageNet mean/std, float CHW);
- val: ``fn.readers.file`` in order -> ``fn.decoders.image`` -> ``fn.resize(resize_shorter=256)``
  -> ``fn.crop_mirror_normalize`` (centre crop 224, mean/std, float CHW).

The labels are the reader's: the index of the image's class folder in sorted order, which is
the image's index in the benchmark data. Batches come out through DALI's own PyTorch plugin
(``DALIGenericIterator``, CPU tensors, ``LastBatchPolicy.PARTIAL`` so an epoch is exactly the
data set). DALI's CPU decoding is nvImageCodec's libjpeg-turbo backend.
"""
import torch

import _harness as H


def _pipeline(args, pipeline, root):
    from nvidia.dali import fn, pipeline_def, types

    mean = [255 * m for m in H.MEAN]
    std = [255 * s for s in H.STD]
    train = pipeline == "train"

    @pipeline_def(batch_size=args.batch, num_threads=args.workers, device_id=None,
                  seed=args.seed + 1)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=f"{root}/folder", shuffle_after_epoch=train,
                                        seed=args.seed + 1, name="Reader")
        if train:
            images = fn.decoders.image_random_crop(
                jpegs, device="cpu", output_type=types.RGB, random_area=[0.08, 1.0],
                random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10)
            images = fn.resize(images, resize_x=224, resize_y=224,
                               interp_type=types.INTERP_LINEAR, antialias=True)
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT, output_layout="CHW", mean=mean, std=std,
                mirror=fn.random.coin_flip(probability=0.5))
        else:
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_shorter=256, interp_type=types.INTERP_LINEAR,
                               antialias=True)
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT, output_layout="CHW", crop=(224, 224),
                crop_pos_x=0.5, crop_pos_y=0.5, mean=mean, std=std)
        return images, labels

    return pipe()


def _cause(exc):
    """DALI's message ends with "Current pipeline object is no longer valid."; the cause
    ("Failed to decode sample #15 : class_00031/00031.jpg") is the line to report."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    cause = next((ln for ln in lines if ln.startswith("Failed to ")), None)
    return RuntimeError(f"DALI: {cause}") if cause else exc


class Loader:
    def __init__(self, args, pipeline, root):
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        self.pipe = _pipeline(args, pipeline, root)
        self.pipe.build()
        try:  # the iterator runs the pipeline ahead at once: a bad file can fail here
            self.it = DALIGenericIterator([self.pipe], ["images", "labels"],
                                          reader_name="Reader",
                                          last_batch_policy=LastBatchPolicy.PARTIAL,
                                          auto_reset=True)
        except RuntimeError as exc:
            raise _cause(exc) from exc
        train = pipeline == "train"
        self.note = ("DALI CPU pipeline (device_id=None, num_threads="
                     f"{args.workers}, batch {args.batch}): readers.file(ImageFolder tree"
                     + (", shuffle_after_epoch=True) -> decoders.image_random_crop -> resize "
                        "224x224 (linear, antialias) -> crop_mirror_normalize(random mirror, "
                        "mean/std, float CHW)" if train else
                        ") -> decoders.image -> resize(resize_shorter=256, linear, antialias) "
                        "-> crop_mirror_normalize(centre crop 224, mean/std, float CHW)")
                     + "; DALIGenericIterator (CPU tensors, LastBatchPolicy.PARTIAL)")

    def epoch(self, e):
        try:
            for batch in self.it:
                d = batch[0]
                yield d["images"], d["labels"].reshape(-1)
        except RuntimeError as exc:
            raise _cause(exc) from exc

    def close(self):
        del self.it, self.pipe


def versions():
    import nvidia.dali as dali
    return {"nvidia-dali": dali.__version__, "torch": torch.__version__}


if __name__ == "__main__":
    H.main("dali", Loader, versions)
