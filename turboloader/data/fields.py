"""WebDataset fields: which members of a sample a dataset yields, in which order, as what.

``TarDataset(urls, transform, fields=("jpg;png", "txt", "__key__"))`` yields
``(image, caption, key)`` tuples, as webdataset's ``.to_tuple("jpg;png", "txt", "__key__")``
after its default decoding does. Each entry names one field: a member extension, several
alternatives separated by ``;`` (the first the sample has is taken), or ``__key__`` /
``__url__``. Values by extension (webdataset's conventions):

* the first image entry (all alternatives image extensions): decoded and transformed through
  the dataset's ``transform`` (the fused plan when it has one), exactly as the image of an
  ``(image, label)`` sample;
* other images (``jpg``, ``jpeg``, ``png``, ``webp``, ``ppm``, ``pgm``, ``pbm``, ``pnm``,
  ``bmp``, ``tif``, ``tiff``): a ``uint8`` ``(C, H, W)`` tensor of the stored channels
  (1 for grayscale and palette images, e.g. segmentation masks: palette indices kept);
* ``txt``, ``text``, ``transcript``, ``caption``: ``str`` (UTF-8);
* ``cls``, ``cls2``, ``class``, ``count``, ``index``, ``inx``, ``id``: ``int``;
* ``json``, ``jsn``: the parsed JSON value;
* ``npy``: a NumPy array (``allow_pickle=False``);
* anything else: the member's ``bytes``.

A sample without a member for a field is a :class:`~turboloader.errors.SampleError` naming
the key and the field (a counted skip under ``on_error="skip"``). Batches (``batched()``,
the thread backend) collate each field as ``default_collate`` does, or list the values
where it cannot (JSON of varying shapes, which torch's own collate refuses).
"""

from __future__ import annotations

import io
import json

import numpy as np
import torch

from turboloader.errors import SampleError
from turboloader.io.shards import IMAGE_EXTENSIONS

__all__ = ["Fields"]

_IMAGES = frozenset(IMAGE_EXTENSIONS) | {"ppm", "pgm", "pbm", "pnm", "bmp", "tif", "tiff"}
_TEXT = frozenset({"txt", "text", "transcript", "caption"})
_INT = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})
_JSON = frozenset({"json", "jsn"})
_NAMES = ("__key__", "__url__")


def _decode_image(data, where):
    from PIL import Image

    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except Exception as exc:  # Pillow raises many types for bad data
        from turboloader.errors import DecodeError

        raise DecodeError(f"{where}: cannot decode image member: {exc}") from None
    if img.mode not in ("L", "P", "RGB", "RGBA", "I;16", "I", "1"):
        img = img.convert("RGB")
    if img.mode == "1":
        img = img.convert("L")
    arr = np.array(img)  # a writable copy of the decoded pixels
    if arr.dtype != np.uint8:
        arr = arr.astype(np.int64) if arr.dtype.kind in "iu" else arr
    t = torch.from_numpy(arr)
    return t.unsqueeze(0) if t.ndim == 2 else t.permute(2, 0, 1).contiguous()


def _convert(ext, data, key):
    if ext in _TEXT:
        return bytes(data).decode("utf-8")
    if ext in _INT:
        text = bytes(data).decode("utf-8", "replace").strip()
        try:
            return int(text)
        except ValueError:
            raise SampleError(f"sample {key!r}: .{ext} is not an integer: {text[:40]!r}") from None
    if ext in _JSON:
        try:
            return json.loads(bytes(data))
        except ValueError as exc:
            raise SampleError(f"sample {key!r}: .{ext} is not valid JSON: {exc}") from None
    if ext == "npy":
        try:
            return np.load(io.BytesIO(bytes(data)), allow_pickle=False)
        except ValueError as exc:
            raise SampleError(f"sample {key!r}: .npy member does not load: {exc}") from None
    if ext in _IMAGES:
        return _decode_image(bytes(data), f"sample {key!r}, .{ext}")
    return bytes(data)


class Fields:
    """A parsed ``fields=`` spec (see the module docstring).

    Raises:
        ValueError: an empty spec or entry, or no image entry to carry the transform.
    """

    def __init__(self, spec):
        if isinstance(spec, str):
            spec = (spec,)
        self.spec = tuple(spec)
        if not self.spec:
            raise ValueError("fields must name at least one field")
        self.entries = []
        for f in self.spec:
            if not isinstance(f, str) or not f.strip():
                raise ValueError(f"a field is a member extension (or 'a;b' alternatives, "
                                 f"'__key__', '__url__'), got {f!r}")
            f = f.strip()
            if f in _NAMES:
                self.entries.append((f, ()))
                continue
            alts = tuple(a.strip().lower().lstrip(".") for a in f.split(";") if a.strip())
            self.entries.append((f, alts))
        self.image = next((i for i, (_, alts) in enumerate(self.entries)
                           if alts and all(a in IMAGE_EXTENSIONS for a in alts)), None)
        if self.image is None:
            raise ValueError(f"fields={self.spec!r} has no image entry (one of "
                             f"{', '.join(IMAGE_EXTENSIONS)}, or alternatives of them): the "
                             f"first one is what transform applies to")
        self.image_exts = self.entries[self.image][1]
        self.exts = tuple(dict.fromkeys(a for i, (_, alts) in enumerate(self.entries)
                                        if i != self.image for a in alts))

    def values(self, key, url, members):
        """The fields other than the image, in order (None at the image's place), from
        ``members`` (``{ext: bytes}`` of the sample).

        Raises:
            SampleError: a field has no member, or its member does not parse.
            DecodeError: an image field does not decode.
        """
        out = []
        for i, (name, alts) in enumerate(self.entries):
            if i == self.image:
                out.append(None)
            elif name == "__key__":
                out.append(key)
            elif name == "__url__":
                out.append(url)
            else:
                ext = next((a for a in alts if a in members), None)
                if ext is None:
                    raise SampleError(f"sample {key!r} has no {' or '.join('.' + a for a in alts)} "
                                      f"member (fields={self.spec!r})")
                out.append(_convert(ext, members[ext], key))
        return out

    def sample(self, image, values):
        """The sample tuple: ``values`` with ``image`` at its place."""
        out = list(values)
        out[self.image] = image
        return tuple(out)

    def batch(self, images, rows):
        """A batch: ``images`` (already one tensor) at the image's place, each other field
        collated as ``default_collate`` collates it in ``DataLoader(ds, batch_size=B)``
        (strings a tuple, ints a tensor, JSON objects per key), or a list of the values
        where that fails (JSON of varying shapes, arrays of different sizes)."""
        from torch.utils.data import default_collate

        out = []
        for i, (_, alts) in enumerate(self.entries):
            if i == self.image:
                out.append(images)
                continue
            column = tuple(r[i] for r in rows)  # what torch's collate sees: str stay a tuple
            try:
                out.append(default_collate(column))
            except (RuntimeError, TypeError):  # JSON of varying shapes, ragged arrays
                out.append(list(column))
        return out
