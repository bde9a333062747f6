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

**Masks and boxes** follow the image's geometry when the entry says so:

* :class:`MaskField` (``MaskField("seg.png")``): the member decoded as a
  ``torchvision.tv_tensors.Mask`` (``(H, W)`` for a one-channel PNG: class ids or palette
  indices kept), then put through ``transform`` with the *same drawn parameters* as the
  image (resampled nearest, cropped, flipped... as torchvision v2 does it);
* :class:`BoxesField` (``BoxesField("json", key="boxes", format="XYXY")``): ``N`` boxes
  read from a JSON member (or ``key`` of a JSON object; ``.npy`` arrays too) into a
  ``tv_tensors.BoundingBoxes`` whose canvas is the image's stored size, then transformed
  with the image's parameters and clamped to the new canvas, as torchvision v2 does.

The image stays on the fused path. Rows of the fused batch call take its drawn parameters
(:meth:`Fields.annotate_batch`: one-channel PNG masks sampled nearest from their rows by one
native call per batch, boxes moved per batch); the others replay the pipeline from the
sample's generator (``sample_rng(seed, epoch, index)``, the one the fused plan draws from) on
the image's stored size, exactly what :func:`turboloader.transforms.transform_jointly` does.
Both equal torchvision v2 given the same parameters.
A mask whose size differs from the image's, or boxes that are not ``N x 4`` numbers, are
:class:`~turboloader.errors.SampleError` naming the key and the field.

A sample without a member for a field is a :class:`~turboloader.errors.SampleError` naming
the key and the field (a counted skip under ``on_error="skip"``). Batches (``batched()``,
the thread backend) collate each field as ``default_collate`` does, or list the values
where it cannot (JSON of varying shapes, which torch's own collate refuses).
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from turboloader.decode import DEFAULT_MAX_PIXELS, decode_pil
from turboloader.errors import SampleError
from turboloader.io.shards import IMAGE_EXTENSIONS, parse_json

__all__ = ["BoxesField", "Fields", "MaskField", "collate_column", "collate_fields"]

_IMAGES = frozenset(IMAGE_EXTENSIONS) | {"ppm", "pgm", "pbm", "pnm", "bmp", "tif", "tiff"}
_TEXT = frozenset({"txt", "text", "transcript", "caption"})
_INT = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})
_JSON = frozenset({"json", "jsn"})
_NAMES = ("__key__", "__url__")


def _decode_image(data, where, max_pixels=DEFAULT_MAX_PIXELS):
    from turboloader.errors import DecodeError

    try:   # the decoders' one max_pixels rule, on the header, before any pixel is decoded
        img = decode_pil(data, max_pixels, mode=None)
    except DecodeError as exc:
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
    if ext in _TEXT:  # utf-8-sig: a byte-order mark is not part of the text
        return bytes(data).decode("utf-8-sig")
    if ext in _INT:
        text = bytes(data).decode("utf-8-sig", "replace").strip()
        try:
            return int(text)
        except ValueError:
            raise SampleError(f"sample {key!r}: .{ext} is not an integer: {text[:40]!r}") from None
    if ext in _JSON:
        try:
            return parse_json(bytes(data))
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


def _alternatives(name, columns=False):
    if columns:  # column names keep their case
        return tuple(a.strip() for a in name.split(";") if a.strip())
    return tuple(a.strip().lower().lstrip(".") for a in name.split(";") if a.strip())


class _Annotation:
    """What MaskField and BoxesField share: the member (or column) they read."""

    def __init__(self, name: Any, /) -> None:
        if not isinstance(name, str) or not _alternatives(name) or name.strip() in _NAMES:
            raise ValueError(f"{type(self).__name__} names a member extension (or 'a;b' "
                             f"alternatives, or a column), got {name!r}")
        self.name = name.strip()

    def __eq__(self, other):
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self):
        return hash((type(self).__name__, self.name))


class MaskField(_Annotation):
    """A ``fields=`` entry: a segmentation mask transformed with the image.

    The member (``.png`` usually; any image format Pillow reads) is decoded with its stored
    values kept (class ids, palette indices; 16-bit PNGs as int64) into a
    ``torchvision.tv_tensors.Mask`` (``(H, W)`` for one channel, else ``(C, H, W)``) and
    goes through the dataset's ``transform`` with the image's drawn parameters, so it is
    resampled nearest, cropped, flipped, rotated... exactly as torchvision v2 transforms a
    ``Mask`` given with the image.

    Args:
        name: the member extension (``"png"``, ``"seg.png"``, alternatives ``"seg.png;png"``),
            or the column of a ParquetDataset / ManifestDataset.

    Example:
        >>> ds = TarDataset(urls, transform, fields=("jpg", MaskField("seg.png")))  # doctest: +SKIP
        >>> image, mask = ds[0]   # mask: tv_tensors.Mask of the image's output size
    """

    def __repr__(self):
        return f"MaskField({self.name!r})"


_BOX_FORMATS = ("XYXY", "XYWH", "CXCYWH")


class BoxesField(_Annotation):
    """A ``fields=`` entry: bounding boxes transformed with the image.

    The member is parsed (JSON; ``.npy`` arrays too), ``key`` picked from a JSON object, and
    the ``N x 4`` numbers become a ``torchvision.tv_tensors.BoundingBoxes`` in ``format``
    whose ``canvas_size`` is the image's stored ``(height, width)``; it then goes through the
    dataset's ``transform`` with the image's drawn parameters and comes out on the output
    image's canvas, clamped to it, as torchvision v2 transforms boxes given with the image.
    No box is dropped (the labels stay aligned): ``torchvision.transforms.v2.
    SanitizeBoundingBoxes`` removes degenerate ones afterwards if wanted.

    Args:
        name: the member extension (``"json"``) or column.
        key: the JSON object's entry holding the boxes (None: the JSON value is the list).
        format: ``"XYXY"`` (default), ``"XYWH"`` (COCO) or ``"CXCYWH"``.

    Example:
        >>> ds = TarDataset(urls, transform,                             # doctest: +SKIP
        ...                 fields=("jpg", BoxesField("json", key="boxes"), "json"))
        >>> image, boxes, target = ds[0]   # target["labels"]: the boxes' classes
    """

    def __init__(self, name: Any, /, *, key: Any = None, format: str | None = "XYXY") -> None:
        super().__init__(name)
        fmt = str(getattr(format, "name", format)).upper()
        if fmt not in _BOX_FORMATS:
            raise ValueError(f"format must be one of {', '.join(_BOX_FORMATS)}, got {format!r}")
        self.key, self.format = key, fmt

    def __hash__(self):
        return hash((type(self).__name__, self.name, self.key, self.format))

    def __repr__(self):
        extra = "" if self.key is None else f", key={self.key!r}"
        return f"BoxesField({self.name!r}{extra}, format={self.format!r})"


class _Pending:
    """A mask or boxes read at gather time, waiting for the image's draws and size (boxes:
    their canvas). ``format`` None for a mask; ``where`` names the sample and field."""

    __slots__ = ("data", "format", "where")

    def __init__(self, data, format, where):
        self.data, self.format, self.where = data, format, where


def _parse_mask(data, where):
    """A mask member, kept encoded until :meth:`Fields.annotate` (a cached sample's values
    then hold a few KB of PNG, not the decoded mask, which the cache's budget does not
    count)."""
    if not isinstance(data, torch.Tensor):
        data = bytes(data)
    return _Pending(data, None, where)


def _decode_mask(v, max_pixels=DEFAULT_MAX_PIXELS):
    """The ``tv_tensors.Mask`` of a pending mask, refused over ``max_pixels`` (the dataset's,
    as its images) before it is decoded.

    Raises:
        SampleError: the mask does not decode, or is over ``max_pixels``.
    """
    from torchvision import tv_tensors

    from turboloader.errors import DecodeError

    t = v.data
    if not isinstance(t, torch.Tensor):
        try:
            t = _decode_image(t, v.where, max_pixels)
        except DecodeError as exc:  # a mask that does not decode: the sample's problem
            raise SampleError(f"{v.where}: the mask does not decode: {exc}") from None
    if t.ndim == 3 and t.shape[0] == 1:
        t = t[0]
    return tv_tensors.Mask(t)


def _hf_image_bytes(value, where):
    """The bytes of a Hugging Face ``Image()`` value ``{bytes, path}``: its bytes, or (null
    bytes) the local file its path names, read by the guarded reader (a regular file within
    the member-size limit), as :class:`~turboloader.ParquetDataset` reads such an image.

    Raises:
        UnreadableFileError: the path names a FIFO, a device or a file over the limit.
        SampleError: neither bytes nor a readable file.
    """
    from turboloader.errors import UnreadableFileError
    from turboloader.io.files import read_file

    data, path = value.get("bytes"), value.get("path")
    if data is not None or not path:
        return data
    try:
        return read_file(path)
    except UnreadableFileError as exc:
        raise UnreadableFileError(f"{where}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise SampleError(f"{where}: no bytes, and cannot read its path {path!r} "
                          f"({getattr(exc, 'strerror', None) or exc})") from None


def _parse_boxes(spec, value, where):
    """``N x 4`` float32 boxes from a parsed member (JSON value, array, bytes)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if raw[:6] == b"\x93NUMPY":
            value = np.load(io.BytesIO(raw), allow_pickle=False)
        else:
            try:
                value = parse_json(raw)
            except ValueError as exc:
                raise SampleError(f"{where}: the boxes are not valid JSON: {exc}") from None
    if spec.key is not None:
        if not isinstance(value, dict) or spec.key not in value:
            have = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise SampleError(f"{where}: no {spec.key!r} entry for the boxes (has {have})")
        value = value[spec.key]
    try:
        arr = np.asarray(value if value is not None else [], dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise SampleError(f"{where}: the boxes are not numbers: {exc}") from None
    if arr.size == 0:
        arr = arr.reshape(0, 4)
    if arr.ndim != 2 or arr.shape[1] != 4:
        raise SampleError(f"{where}: boxes must be N x 4 numbers ({spec.format}), got shape "
                          f"{arr.shape}")
    if not np.isfinite(arr).all():
        raise SampleError(f"{where}: the boxes hold a NaN or infinite coordinate")
    return _Pending(torch.from_numpy(np.ascontiguousarray(arr)), spec.format, where)


def _image_hw(source, size):
    """``(h, w)`` of a gathered image source as the draws see it (None: unknown)."""
    if size is not None:
        return int(size[0]), int(size[1])
    if isinstance(source, np.ndarray) and source.ndim >= 2:  # a decoded HWC image
        return int(source.shape[0]), int(source.shape[1])
    if isinstance(source, (bytes, bytearray, memoryview, np.ndarray)):
        from turboloader.io.codec import Codec, detect_codec, image_size

        codec = detect_codec(source)
        if codec != Codec.BYTES:
            w, h = image_size(source, codec)
            return int(h), int(w)
        from PIL import Image

        try:
            with Image.open(io.BytesIO(bytes(source))) as im:
                w, h = im.size
            return int(h), int(w)
        except Exception:  # noqa: BLE001 (it decoded: the decoder knows better; unknown here)
            return None
    return None


#: torchvision v2 transforms that read the boxes (or their labels) to decide: they cannot be
#: replayed on a lone annotation
_WHOLE_SAMPLE = frozenset({"RandomIoUCrop", "SanitizeBoundingBoxes"})


def _members(transform):
    """``transform`` and every transform nested in it (Compose, RandomApply, ...)."""
    yield transform
    inner = getattr(transform, "transforms", None)
    if isinstance(inner, (list, tuple)):
        for t in inner:
            yield from _members(t)


def _check_pipeline(transform):
    """The pipeline must draw the same parameters for a lone annotation as for the image
    (each turboloader transform does; torchvision's or a user's callable cannot be replayed).

    The probe runs the pipeline on a 383 x 257 image, then on a mask of that size. A pipeline
    that refuses the probe image with a ValueError (a crop larger than it) cannot be judged
    here: the dataset reports what real samples do. Once the image ran, any exception the
    mask raises means the annotations cannot follow, and is raised now.

    Raises:
        ValueError: not a turboloader pipeline, or one that draws from torch's global
            generator (a torchvision class inside it) or differently for a mask; or what
            the pipeline raised on the mask; torchvision's ``RandomIoUCrop`` or
            ``SanitizeBoundingBoxes`` inside it (they need the whole sample: see
            :class:`~turboloader.data.DetectionTargets`).
        TypeError: a pipeline that refuses masks (AutoAugment, FiveCrop...).
    """
    import random

    from PIL import Image
    from torchvision import tv_tensors

    from turboloader.transforms import (Compose, RandomApply, RandomChoice, RandomOrder,
                                        Transform, using_rng)

    if transform is None:
        return
    for member in _members(transform):
        if type(member).__name__ in _WHOLE_SAMPLE and \
                type(member).__module__.startswith("torchvision."):
            raise ValueError(
                f"{type(member).__name__} works on the whole detection sample (the boxes "
                f"{'and their labels' if type(member).__name__ == 'SanitizeBoundingBoxes' else 'draw its crop'}), "
                "which MaskField / BoxesField cannot give it: they replay the image's draws "
                "on each annotation alone. Apply it to the (image, target) pairs instead, "
                "where torchvision applies it: turboloader.data.DetectionTargets(dataset, "
                "names, transforms=v2.Compose([...])) (the detection guide's ssd / ssdlite "
                "policies), or in collate_fn")
    if not isinstance(transform, (Transform, Compose, RandomApply, RandomChoice, RandomOrder)):
        raise ValueError(f"MaskField / BoxesField need a turboloader transform pipeline (its "
                         f"parameters are replayed on the annotations), got {transform!r}; "
                         f"for another transform, use plain fields and transform them yourself")
    h, w = 257, 383
    states = []
    for x in (Image.new("RGB", (w, h)), tv_tensors.Mask(torch.zeros(h, w, dtype=torch.uint8))):
        rng = random.Random(1234)
        torch_state = torch.get_rng_state()
        try:
            with using_rng(rng):
                transform(x)
        except Exception as exc:
            if states:  # the image ran, a mask cannot (AutoAugment, FiveCrop...): say so now
                exc.add_note("MaskField / BoxesField: the pipeline refuses masks and boxes")
                raise
            if isinstance(exc, ValueError):
                return   # the probe's size, not the pipeline (the dataset reports samples)
            raise
        if not torch.equal(torch.get_rng_state(), torch_state):
            # e.g. a torchvision v2 class inside a turboloader Compose: its draws cannot be
            # replayed, so the mask would silently miss the image's geometry
            raise ValueError(f"{transform!r} draws from torch's global generator (a "
                             f"torchvision transform?): MaskField / BoxesField can only replay "
                             f"turboloader transforms' draws")
        states.append(rng.getstate())
    if states[0] != states[1]:
        raise ValueError(f"{transform!r} draws other parameters for a mask than for the image: "
                         f"MaskField / BoxesField cannot follow it")


def _annotation_transform(transform):
    """``transform`` less its top-level members that neither draw nor move pixels
    (``ToImage``, ``ToDtype``, ``Normalize``...): they pass masks and boxes through, so
    replaying them on the annotations costs time for nothing (~0.4 ms a sample for those
    three). Members that draw (``ColorJitter``...) stay: the draws must stay aligned."""
    from turboloader.transforms import Compose, Transform

    if not isinstance(transform, Compose):
        return transform

    def inert(m):
        return (isinstance(m, Transform) and not m._geometric
                and type(m).make_params is Transform.make_params
                and type(m)._transform_other is Transform._transform_other)

    keep = [m for m in transform.transforms if not inert(m)]
    if len(keep) == len(transform.transforms):
        return transform
    return Compose(keep) if keep else None


class Fields:
    """A parsed ``fields=`` spec (see the module docstring).

    ``columns``: the names are columns (of a ParquetDataset or a ManifestDataset), not
    member extensions: values are passed on as the table holds them (no conversion by
    extension), and the image entry is the one named in ``image_names``; by default the
    first entry whose alternatives are all image extensions is the image.

    Raises:
        ValueError: an empty spec or entry, or no image entry to carry the transform.
    """

    def __init__(self, spec, *, image_names=(), columns=False):
        if isinstance(spec, (str, _Annotation)):
            spec = (spec,)
        self.spec = tuple(spec)
        if not self.spec:
            raise ValueError("fields must name at least one field")
        self.entries = []
        self.kinds = []  # per entry: None (a value), or its MaskField / BoxesField
        self.columns = columns
        for f in self.spec:
            if isinstance(f, _Annotation):
                self.entries.append((f.name, _alternatives(f.name, columns)))
                self.kinds.append(f)
                continue
            if not isinstance(f, str) or not f.strip():
                raise ValueError(f"a field is a member extension (or 'a;b' alternatives, "
                                 f"'__key__', '__url__', MaskField(...), BoxesField(...)), "
                                 f"got {f!r}")
            f = f.strip()
            self.kinds.append(None)
            if f in _NAMES:
                self.entries.append((f, ()))
                continue
            self.entries.append((f, _alternatives(f, columns)))
        image_names = set(image_names)
        self.image = next((i for i, (name, alts) in enumerate(self.entries)
                           if self.kinds[i] is None and alts and
                           (name in image_names or
                            (not columns and all(a in IMAGE_EXTENSIONS for a in alts)))),
                          None)
        self.joint = any(k is not None for k in self.kinds)
        self._reduced = {}  # id(transform) -> (transform, what annotations replay of it)
        if self.image is None:
            if columns:
                raise ValueError(f"fields={self.spec!r} does not name the image column "
                                 f"({', '.join(sorted(image_names))})")
            raise ValueError(f"fields={self.spec!r} has no image entry (one of "
                             f"{', '.join(IMAGE_EXTENSIONS)}, or alternatives of them): the "
                             f"first one is what transform applies to")
        self.image_exts = self.entries[self.image][1]
        self.exts = tuple(dict.fromkeys(a for i, (_, alts) in enumerate(self.entries)
                                        if i != self.image for a in alts))

    def values(self, key, url, members):
        """The fields other than the image, in order (None at the image's place), from
        ``members`` (``{ext: bytes}`` of the sample; ``{column: value}`` for columns).

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
                kind = self.kinds[i]
                ext = next((a for a in alts if a in members), None)
                if ext is not None and self.columns and kind is not None \
                        and members[ext] is None:
                    ext = None  # a null mask / boxes: as good as missing
                if ext is None:
                    what = (" or ".join(repr(a) for a in alts) + " column" if self.columns
                            else " or ".join("." + a for a in alts) + " member")
                    raise SampleError(f"sample {key!r} has no {what} (fields={self.spec!r})")
                if kind is None:
                    out.append(members[ext] if self.columns else
                               _convert(ext, members[ext], key))
                    continue
                where = (f"sample {key!r}, field {kind!r}" +
                         (f" (column {ext!r})" if self.columns else f" (.{ext})"))
                value = members[ext]
                if isinstance(kind, MaskField):
                    if isinstance(value, dict):  # Hugging Face's Image(): {bytes, path}
                        value = _hf_image_bytes(value, where)
                    if not isinstance(value, (bytes, bytearray, memoryview, torch.Tensor)):
                        raise SampleError(f"{where}: a mask is encoded image bytes, got "
                                          f"{type(value).__name__}")
                    out.append(_parse_mask(value, where))
                else:
                    if not self.columns and (ext in _JSON or ext == "npy"):
                        value = _convert(ext, value, key)
                    elif isinstance(value, str):
                        try:
                            value = parse_json(value)
                        except ValueError as exc:
                            raise SampleError(f"{where}: the boxes are not valid JSON: "
                                              f"{exc}") from None
                    out.append(_parse_boxes(kind, value, where))
        return out

    def check_members(self, extensions, where):
        """Raise ValueError for a member entry that no member in ``extensions`` (those of
        the shard ``where``) matches: a misspelt extension, found at construction rather
        than as a SampleError on every sample. Columns are checked by their reader."""
        if self.columns or extensions is None:
            return
        import difflib

        for name, alts in self.entries:
            if alts and not any(a in extensions for a in alts):
                close = difflib.get_close_matches(alts[0], sorted(extensions), n=1)
                raise ValueError(
                    f"fields entry {name!r} matches no member of shard {where!r} (its "
                    f"members' extensions: {', '.join(sorted(extensions)) or 'none'})"
                    + (f"; did you mean {close[0]!r}?" if close else ""))

    def check_transform(self, transform):
        """Raise ValueError when mask / boxes entries cannot follow ``transform``."""
        if self.joint:
            _check_pipeline(transform)

    def annotate(self, values, hw, transform, rng, *, stored=None,
                 max_pixels=DEFAULT_MAX_PIXELS):
        """``values`` (from :meth:`values`) with the masks and boxes transformed by
        ``transform`` with the draws of ``rng`` (the sample's generator, at draw 0), the
        image's stored size being ``hw`` (``(h, w)``, or None when unknown: then the mask's).
        ``stored``: the ``(h, w)`` the transform's image has when it is not ``hw`` (a cached
        image stored smaller, ``cache_short_side``, transformed as it is stored): the masks
        and boxes are resized to it first, as torchvision's ``Resize`` moves them (masks
        nearest), so that they follow the image the transform sees.
        A new list (``values`` may be cached).

        Raises:
            SampleError: a mask does not decode, is over ``max_pixels`` (the dataset's) or
                its size is not the image's; boxes without a known canvas.
        """
        from torchvision import tv_tensors

        from turboloader.transforms import using_rng

        at, items = [], []
        for i, kind in enumerate(self.kinds):
            if kind is None:
                continue
            v = values[i]
            if v.format is None:  # a mask
                mask = _decode_mask(v, max_pixels)
                v = _Pending(mask, None, v.where)
                size = tuple(mask.shape[-2:])
                if hw is None:
                    hw = size
                elif size != tuple(hw):
                    raise SampleError(f"{v.where}: a mask of size {size} for an image of "
                                      f"size {tuple(hw)}")
            at.append(i)
            items.append(v)
        if hw is None and any(v.format is not None for v in items):
            raise SampleError(f"{items[0].where}: the image's size is unknown, so the boxes "
                              f"have no canvas")
        items = [v.data if v.format is None else
                 tv_tensors.BoundingBoxes(v.data, format=v.format, canvas_size=tuple(hw))
                 for v in items]
        if stored is not None and hw is not None and tuple(stored) != tuple(hw):
            from torchvision.transforms.v2 import functional as F

            items = [F.resize(v, [int(stored[0]), int(stored[1])]) for v in items]
        if transform is not None:
            reduced = self._reduced.get(id(transform))
            if reduced is None or reduced[0] is not transform:
                reduced = self._reduced[id(transform)] = (transform,
                                                          _annotation_transform(transform))
            transform = reduced[1]
        if transform is not None:
            with using_rng(rng):
                res = transform(*items)
            items = list(res) if len(items) > 1 else [res]
        out = list(values)
        for i, v in zip(at, items):
            out[i] = v
        return out

    def annotate_batch(self, values, rows, params, prows, errors, *,
                       max_pixels=DEFAULT_MAX_PIXELS):
        """The masks and boxes of the rows ``rows`` of a fused batch call, from its
        ``params`` (:class:`~turboloader.transforms._batch.BatchParams`; row ``rows[k]`` is
        its row ``prows[k]``) instead of replaying the pipeline per sample: PNG masks
        sampled nearest straight from their rows into the output grid (one native call for
        the batch, :mod:`turboloader.decode.mask`), boxes moved by NumPy / torch
        expressions over the batch (:mod:`turboloader.transforms.annotations`); equal to
        :meth:`annotate`'s torchvision replay. ``values[i]`` is replaced by the transformed
        list; ``errors[i]`` set (a SampleError) where a mask's size is not its image's. A
        mask over ``max_pixels`` (the dataset's) is left to :meth:`annotate`, which refuses
        it before decoding, as the dataset's images.

        Returns:
            The set of rows done; the others (a mask this path does not take: not a
            one-channel PNG, interlaced, corrupt...) are left to :meth:`annotate`.
        """
        from torchvision import tv_tensors

        from turboloader.decode.mask import png_mask_header, png_masks_nearest
        from turboloader.transforms.annotations import boxes_batch, nearest_maps

        from turboloader.decode.sizes import over_pixel_limit, pixel_limit

        limit = pixel_limit(max_pixels)   # 0: no limit
        geometry = params.geometry
        if geometry is None or not len(rows):
            return set()
        out_hw = tuple(int(v) for v in params.out_size[prows[0]])
        if (params.out_size[prows] != out_hw).any():
            return set()   # one output size per call (always, on the batch path)
        cols = [i for i, k in enumerate(self.kinds) if k is not None]
        take, pngs = [], []   # rows whose masks this path samples; their masks, in order
        done = set()
        for i, j in zip(rows, prows):
            hw = (int(params.source_size[j, 0]), int(params.source_size[j, 1]))
            heads = []
            for c in cols:
                v = values[i][c]
                if v.format is not None:
                    continue
                head = png_mask_header(v.data)
                if head is None or over_pixel_limit(head.height, head.width, limit):
                    break
                if (head.height, head.width) != hw:   # annotate's message
                    errors[i] = SampleError(f"{v.where}: a mask of size "
                                            f"{(head.height, head.width)} for an image of "
                                            f"size {hw}")
                    done.add(i)
                    break
                heads.append(head)
            else:
                take.append((i, j))
                pngs.extend(heads)
        if not take:
            return done
        rows_i = [i for i, _ in take]
        prow = np.array([j for _, j in take], np.int64)
        flip = params.flip[prow].astype(bool)
        n_masks = sum(1 for c in cols if isinstance(self.kinds[c], MaskField))
        results = {}
        if n_masks:
            ymap, xmap = nearest_maps(geometry, prow, flip, out_hw)
            pick = np.repeat(np.arange(len(take)), n_masks)
            out8, out16, ok = png_masks_nearest(pngs, ymap[pick], xmap[pick])
            t8 = torch.from_numpy(out8)
            for m, head in enumerate(pngs):
                if not ok[m]:
                    results[m] = None
                elif head.bit_depth == 16:
                    results[m] = torch.from_numpy(out16[m].astype(np.int64))
                else:
                    results[m] = t8[m]
        boxes = {}
        for c in cols:
            kind = self.kinds[c]
            if isinstance(kind, BoxesField):
                moved = boxes_batch([values[i][c].data for i in rows_i], kind.format,
                                    geometry, prow, flip, out_hw)
                boxes[c] = moved
        for k, i in enumerate(rows_i):
            out = list(values[i])
            m = k * n_masks
            failed = False
            for c in cols:
                if isinstance(self.kinds[c], MaskField):
                    t = results[m]
                    m += 1
                    if t is None:
                        failed = True   # a corrupt stream: annotate's Pillow decode says how
                        break
                    out[c] = tv_tensors.Mask(t)
                else:
                    out[c] = tv_tensors.BoundingBoxes(boxes[c][k], format=values[i][c].format,
                                                      canvas_size=out_hw)
            if not failed:
                values[i] = out
                done.add(i)
        return done

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
            out.append(_collate_column(column, default_collate))
        return out


def _collate_column(column, default_collate):
    if column and isinstance(column[0], torch.Tensor) and \
            type(column[0]).__name__ == "BoundingBoxes":
        return list(column)  # a list of BoundingBoxes, as torchvision's detection references
    try:
        return default_collate(column)
    except (RuntimeError, TypeError):  # JSON of varying shapes, ragged arrays
        return list(column)


def collate_column(column: Iterable[Any]) -> Any:
    """One field of a batch (a tuple of its values) collated as :func:`collate_fields`
    collates each field: ``default_collate``'s result, or the list of the values where it
    cannot stack them (a list of ``BoundingBoxes`` always)."""
    from torch.utils.data import default_collate

    return _collate_column(tuple(column), default_collate)


def collate_fields(batch: Any):
    """A ``collate_fn`` for ``fields=`` samples under torch's ``DataLoader``: each field
    collated as ``default_collate`` does, or kept as a list where it cannot be (boxes of
    different counts, JSON of varying shapes; ``BoundingBoxes`` always a list of them,
    as torchvision's detection references have them) - what turboloader's own batches
    (``batched()``, the thread backend) give.

    Example:
        >>> loader = torch.utils.data.DataLoader(ds, batch_size=8,      # doctest: +SKIP
        ...                                      collate_fn=collate_fields)
    """
    from torch.utils.data import default_collate

    if not batch or not isinstance(batch[0], (tuple, list)):
        return default_collate(batch)
    return [_collate_column(tuple(s[i] for s in batch), default_collate)
            for i in range(len(batch[0]))]
