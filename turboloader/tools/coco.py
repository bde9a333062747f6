"""COCO ``instances_*.json`` to a turboloader manifest: one JSON Lines row per image with
its boxes, labels, areas, crowd flags and (optionally) an instance mask, for
``ManifestDataset(fields=...)`` and :class:`turboloader.data.DetectionTargets`.

Masks: COCO polygons are rasterised and RLE masks decoded by pycocotools when it is
installed (``pip install 'torch-turboloader[coco]'``), else by the pure-Python fallback
here (RLE decoded exactly; polygons filled with Pillow, which can differ from pycocotools on
edge pixels).
"""

from __future__ import annotations

import json
import os

import numpy as np

__all__ = ["coco_to_manifest", "decode_segmentation"]


def _rle_counts(s: str) -> list:
    """The run lengths of a compressed COCO RLE string (pycocotools' ``rleFrString``)."""
    counts, p = [], 0
    while p < len(s):
        x, k, more = 0, 0, True
        while more:
            c = ord(s[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def _rle_decode(counts, h, w) -> np.ndarray:
    flat = np.zeros(h * w, np.uint8)
    pos, value = 0, 0
    for n in counts:
        if value:
            flat[pos:pos + n] = 1
        pos += n
        value ^= 1
    return flat.reshape(w, h).T  # COCO runs go down the columns


def decode_segmentation(segmentation, height: int, width: int) -> np.ndarray:
    """A COCO annotation's ``segmentation`` (polygons, RLE or compressed RLE) as an
    ``(height, width)`` uint8 mask of 0 and 1.

    Raises:
        ValueError: a segmentation of no COCO form, or an RLE of another size.
    """
    try:
        from pycocotools import mask as cocomask
    except ImportError:
        cocomask = None
    if isinstance(segmentation, list):  # polygons
        if cocomask is not None:
            rles = cocomask.frPyObjects(segmentation, height, width)
            return cocomask.decode(cocomask.merge(rles)).astype(np.uint8)
        from PIL import Image, ImageDraw

        img = Image.new("L", (width, height), 0)
        draw = ImageDraw.Draw(img)
        for poly in segmentation:
            if len(poly) >= 6:
                draw.polygon([float(v) for v in poly], fill=1, outline=1)
        return np.asarray(img, np.uint8)
    if isinstance(segmentation, dict) and "counts" in segmentation:
        size = [int(v) for v in segmentation.get("size", (height, width))]
        if size != [height, width]:
            raise ValueError(f"an RLE of size {size} for an image of {height} x {width}")
        counts = segmentation["counts"]
        if cocomask is not None:
            rle = (cocomask.frPyObjects(segmentation, height, width) if isinstance(counts, list)
                   else {"size": size, "counts": counts.encode() if isinstance(counts, str)
                         else counts})
            return cocomask.decode(rle).astype(np.uint8)
        if isinstance(counts, (bytes, bytearray)):
            counts = counts.decode()
        runs = _rle_counts(counts) if isinstance(counts, str) else [int(v) for v in counts]
        return _rle_decode(runs, height, width)
    raise ValueError(f"not a COCO segmentation (polygons or RLE): {type(segmentation).__name__}")


def coco_to_manifest(instances, images: str, out: str, *, masks: bool = False,
                     crowd: bool = True) -> int:
    """Write a JSON Lines manifest of COCO detection annotations.

    Each row: ``path`` (the image, relative to the manifest's directory), ``image_id``,
    ``width``, ``height``, ``boxes`` (``[[x0, y0, x1, y1], ...]``, XYXY in pixels: COCO's
    XYWH converted and clamped to the image), ``labels`` (COCO ``category_id``, as
    torchvision's detection references use them), ``area`` and ``iscrowd`` (COCO's). Boxes
    with no width or height after clamping are dropped with their annotation, as the
    reference's ``ConvertCocoPolysToMask`` drops them. Images without annotations are kept
    (with empty lists).

    ``masks=True`` also writes ``masks/<image_id>.png`` beside the manifest, named in the
    row's ``masks`` column: an instance-index mask, pixel value ``k + 1`` for the ``k``-th
    annotation of the row (0: background; 16-bit when a row has more than 255), drawn
    largest first so that where instances overlap the smaller one keeps the pixel. Read it
    with ``MaskField("masks")`` (it is transformed with the image, nearest) and
    :class:`~turboloader.data.DetectionTargets` makes it Mask R-CNN's ``(N, H, W)`` masks.

    Args:
        instances: the path of ``instances_*.json`` (or its parsed dict).
        images: the directory of the images (``file_name`` is relative to it).
        out: the manifest to write (``.jsonl``).
        masks: write instance masks.
        crowd: keep ``iscrowd`` annotations (False: leave them out, as the reference's
            training set does).

    Returns:
        The number of rows written.

    Raises:
        ValueError: an annotation names an image or category the file does not list, or
            its segmentation has no COCO form.
    """
    if not isinstance(instances, dict):
        with open(instances) as f:
            instances = json.load(f)
    out = os.path.abspath(out)
    root = os.path.dirname(out)
    known = {c["id"] for c in instances.get("categories", [])}
    per_image = {im["id"]: [] for im in instances["images"]}
    for ann in instances.get("annotations", []):
        if ann["image_id"] not in per_image:
            raise ValueError(f"annotation {ann.get('id')!r} names image {ann['image_id']!r}, "
                             "which the file does not list")
        if known and ann["category_id"] not in known:
            raise ValueError(f"annotation {ann.get('id')!r} has category "
                             f"{ann['category_id']!r}, which the file does not list")
        if crowd or not ann.get("iscrowd", 0):
            per_image[ann["image_id"]].append(ann)
    if masks:
        os.makedirs(os.path.join(root, "masks"), exist_ok=True)
    rows = []
    for im in instances["images"]:
        h, w = int(im["height"]), int(im["width"])
        row = {"path": os.path.relpath(os.path.join(os.path.abspath(images), im["file_name"]),
                                       root),
               "image_id": im["id"], "width": w, "height": h,
               "boxes": [], "labels": [], "area": [], "iscrowd": []}
        kept = []
        for ann in per_image[im["id"]]:
            x, y, bw, bh = (float(v) for v in ann["bbox"])
            x0, y0 = min(max(x, 0.0), w), min(max(y, 0.0), h)
            x1, y1 = min(max(x + bw, 0.0), w), min(max(y + bh, 0.0), h)
            if x1 <= x0 or y1 <= y0:
                continue
            row["boxes"].append([x0, y0, x1, y1])
            row["labels"].append(int(ann["category_id"]))
            row["area"].append(float(ann.get("area", bw * bh)))
            row["iscrowd"].append(int(ann.get("iscrowd", 0)))
            kept.append(ann)
        if masks:
            from PIL import Image

            index = np.zeros((h, w), np.uint16 if len(kept) > 255 else np.uint8)
            for k in sorted(range(len(kept)), key=lambda k: -row["area"][k]):
                seg = kept[k].get("segmentation")
                if seg:
                    index[decode_segmentation(seg, h, w).astype(bool)] = k + 1
            name = os.path.join("masks", f"{im['id']}.png")
            Image.fromarray(index).save(os.path.join(root, name))
            row["masks"] = name
        rows.append(json.dumps(row))
    with open(out, "w") as f:
        f.write("\n".join(rows) + ("\n" if rows else ""))
    return len(rows)
