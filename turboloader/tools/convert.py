"""Conversion jobs behind the ``turboloader`` command line: folder / TAR shards / TBL.

Three dataset layouts, read and written by this module:

* ``folder``: a torchvision ``ImageFolder`` tree, ``root/<class>/<file>.jpg``; the label is
  the index of the class directory in sorted order, the key the path without extension.
* ``tar``: WebDataset-style TAR shards, members ``<key>.jpg`` (or ``.jpeg``/``.png``/
  ``.webp``) and ``<key>.cls`` (the label as decimal text) or ``<key>.json``.
* ``tbl``: a :mod:`turboloader.io.tbl` file.

Every job streams: samples are read one at a time, checked (the image header must parse),
optionally re-encoded (``max_short_side``/``quality``, or ``codec="raw"``), and written, in
source order. Bad samples are skipped and listed with their shard, key and reason (or, with
``strict=True``, the first one stops the job). Names from input TARs are never trusted:
absolute names and names with a ``..`` component are skipped, and nothing is ever
extracted by member name.

The layouts are read by :mod:`~turboloader.tools.sources`, written by
:mod:`~turboloader.tools.sinks`, and checked against the ``manifest.json`` of
:mod:`~turboloader.tools.manifests`; this module holds the jobs (:func:`convert`,
:func:`inspect_dataset`, :func:`verify_dataset`) and the per-sample work between them.
"""

from __future__ import annotations

import collections
import io
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from turboloader.errors import SampleError, TurboLoaderError
from turboloader.decode import decode_image
from turboloader.decode.executor import resample_into_slot
from turboloader.decode.sizes import resized_sizes, shrunk_size
from turboloader.io.codec import Codec, detect_codec, image_size
from turboloader.io.tbl import TBLFile
from turboloader.tools.manifests import MANIFEST, check_manifest, find_manifest
from turboloader.tools.sinks import _FolderSink, _TarSink, _TBLSink, _dst_format, _tar_pattern
from turboloader.tools.sources import (FORMATS, SOURCE_FORMATS, Sample, Skip, _TarSource,
                                       detect_format, iter_samples, open_source)

__all__ = [
    "ConvertReport",
    "FORMATS",
    "SOURCE_FORMATS",
    "MANIFEST",
    "Progress",
    "Sample",
    "Skip",
    "check_manifest",
    "convert",
    "detect_format",
    "find_manifest",
    "inspect_dataset",
    "iter_samples",
    "open_source",
    "verify_dataset",
]

def _shown_key(key):
    """A sample key for a summary line: repr'd, long ones cut."""
    return repr(key) if key is None or len(key) <= 80 else \
        f"{key[:60]!r}... ({len(key)} characters)"


@dataclass
class ConvertReport:
    """What a conversion did.

    Attributes:
        written: samples written. skipped: :class:`Skip` entries (source, key, reason).
        bytes_in / bytes_out: image bytes read / written. reencoded: samples re-encoded.
        seekable: JPEGs rewritten with restart markers (``seekable=True``);
        seekable_kept: JPEGs that could not be rewritten (corrupt data) and were copied as is;
        ``not_seekable`` lists them as :class:`Skip` entries (source, key, libjpeg's reason),
        although they were written.
        seconds: wall time. outputs: the files (or the directory) written.
    """

    written: int = 0
    skipped: list = field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0
    reencoded: int = 0
    seekable: int = 0
    seekable_kept: int = 0
    not_seekable: list = field(default_factory=list)
    seconds: float = 0.0
    outputs: list = field(default_factory=list)

    def summary(self, *, max_listed=20) -> str:
        """A human-readable multi-line summary, with skip reasons grouped and listed."""
        rate = self.written / self.seconds if self.seconds > 0 else 0.0
        lines = [f"samples written: {self.written} ({rate:.0f} samples/s, {self.seconds:.1f} s)",
                 f"bytes: {_human(self.bytes_in)} read, {_human(self.bytes_out)} written"
                 + (f", {self.reencoded} images re-encoded" if self.reencoded else "")]
        if self.seekable or self.seekable_kept:
            lines.append(f"seekable: {self.seekable} JPEGs rewritten with restart markers"
                         + (f", {self.seekable_kept} copied as is (could not be rewritten)"
                            if self.seekable_kept else ""))
            for s in self.not_seekable[:max_listed]:
                lines.append(f"  - {s.source}: key {_shown_key(s.key)}: {s.reason[:300]}")
            if len(self.not_seekable) > max_listed:
                lines.append(f"  ... and {len(self.not_seekable) - max_listed} more")
        if len(self.outputs) == 1:
            lines.append(f"output: {self.outputs[0]}")
        elif self.outputs:
            lines.append(f"outputs: {len(self.outputs)} files, {self.outputs[0]} .. "
                         f"{self.outputs[-1]}")
        lines.append(f"skipped: {len(self.skipped)}")
        if self.skipped:
            reasons = collections.Counter(_reason_class(s.reason) for s in self.skipped)
            for reason, n in reasons.most_common():
                lines.append(f"  {n:6d}  {reason}")
            for s in self.skipped[:max_listed]:
                lines.append(f"  - {s.source}: key {_shown_key(s.key)}: {s.reason[:300]}")
            if len(self.skipped) > max_listed:
                lines.append(f"  ... and {len(self.skipped) - max_listed} more")
        return "\n".join(lines)


def _reason_class(reason: str) -> str:
    """The reason without sample-specific details, for grouping."""
    head = reason.split(":", 2)
    text = ":".join(head[:2]) if len(head) > 1 else reason
    return re.sub(r"'[^']*'|\d+", "_", text)[:100]


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


# -- per-sample work -------------------------------------------------------------------------


class _Processor:
    """Check a sample's header and re-encode it when asked. Thread-safe (no shared state)."""

    def __init__(self, *, max_short_side=None, quality=90, codec=None, seekable=False,
                 restart_mcus=0, max_side=None):
        if not 0 <= int(restart_mcus) <= 65535:
            raise ValueError(f"restart_mcus must be in 0..65535, got {restart_mcus}")
        self.seekable = bool(seekable)
        self.restart_mcus = int(restart_mcus)
        if max_short_side is not None and int(max_short_side) < 1:
            raise ValueError(f"max_short_side must be >= 1, got {max_short_side}")
        if max_side is not None and int(max_side) < 1:
            raise ValueError(f"max_side must be >= 1, got {max_side}")
        self.max_side = None if max_side is None else int(max_side)
        if not 1 <= int(quality) <= 100:
            raise ValueError(f"quality must be in 1..100, got {quality}")
        if codec not in (None, "keep", "raw", "jpeg"):
            raise ValueError(f"codec must be 'keep', 'jpeg' or 'raw', got {codec!r}")
        self.max_short_side = None if max_short_side is None else int(max_short_side)
        self.quality = int(quality)
        self.codec = None if codec == "keep" else codec

    @property
    def reencodes(self) -> bool:
        return bool(self.max_short_side or self.max_side or self.codec or self.seekable)

    def _pixels(self, s):
        """Decoded RGB pixels of a sample, shrunk to max_short_side / max_side."""
        w, h = s.width, s.height
        # Full-resolution decode: a DCT-scaled one is faster but measurably different
        # (mean 2-5 levels on grainy images), and conversion runs once.
        img = np.ascontiguousarray(decode_image(s.data, codec=s.codec, size=(h, w)))
        size = _shrunk_size(h, w, self.max_short_side, self.max_side)
        if size != (h, w):
            return _shrink_to(img, size)
        return img

    def __call__(self, s):
        """The sample ready to write, with width/height set; Skip if it is unusable."""
        s.size_in = len(s.data)
        try:
            if s.codec != Codec.RAW:
                codec = detect_codec(s.data)
                if codec == Codec.BYTES:
                    return Skip(s.source, s.key, "not a JPEG, PNG or WebP image (by content)")
                s.codec = codec
                if not (s.width and s.height):
                    s.width, s.height = image_size(s.data, codec)
            big = _shrunk_size(s.height, s.width, self.max_short_side,
                               self.max_side) != (s.height, s.width)
            if self.codec == "raw" and s.codec != Codec.RAW or big or \
                    (self.codec == "jpeg" and s.codec != Codec.JPEG):
                img = self._pixels(s)
                s.height, s.width = img.shape[:2]
                if self.codec == "raw":
                    s.data, s.codec = img.reshape(-1), Codec.RAW
                else:
                    s.data, s.codec = _encode_jpeg(img, self.quality), Codec.JPEG
                s.reencoded = True
            if self.seekable and s.codec == Codec.JPEG:
                self._make_seekable(s)
        except TurboLoaderError as exc:
            return Skip(s.source, s.key, f"{type(exc).__name__}: {exc}")
        return s


    def _make_seekable(self, s):
        """Rewrite a JPEG sample losslessly with restart markers (same DCT coefficients,
        optimized Huffman tables); a JPEG libjpeg reports as corrupt is left as it is."""
        from turboloader._native import _jpeg
        from turboloader.errors import DecodeError

        try:
            s.data, _ = _jpeg.transcode_restart(s.data, restart_mcus=self.restart_mcus)
        except DecodeError as exc:
            s.not_seekable = f"{type(exc).__name__}: {exc}"
            return
        s.seekable = True


def _shrunk_size(h, w, short_side=None, max_side=None):
    """``(h, w)`` after shrinking (never enlarging) to a shorter side of ``short_side``
    (torchvision's ``Resize(short_side)``), then to a longer side of at most ``max_side``
    (torchvision's ``Resize(None, max_size=max_side)``, never below 1 pixel)."""
    h, w = shrunk_size(h, w, short_side)
    if max_side and max(h, w) > max_side:
        h, w = (max(1, int(v)) for v in resized_sizes(None, [[h, w]], max_side)[0])
    return h, w


def _shrink(img, short_side):
    """``img`` (HWC uint8) bicubic-resized so that its shorter side is ``short_side``
    (torchvision's rule for an int size), antialiased: the resample-into-slot entry into a
    uint8 CHW slot, returned as HWC."""
    return _shrink_to(img, resized_sizes([short_side], [img.shape[:2]])[0].tolist())


def _shrink_to(img, size):
    """``img`` (HWC uint8) antialiased-bicubic-resized to ``size`` (h, w), as HWC."""
    from turboloader.decode import Interpolation

    h, w = img.shape[:2]
    slot = np.empty((3, *size), np.uint8)
    resample_into_slot(img, slot, box=(0, 0, w, h), clip=True, filt=int(Interpolation.BICUBIC))
    return np.ascontiguousarray(slot.transpose(1, 2, 0))


def _encode_jpeg(img, quality):
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


# -- progress --------------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on a stream (stderr), redrawn at most 5 times a second."""

    def __init__(self, total, *, label="", stream=None, enabled=True):
        self.total = total
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.done = 0
        self.t0 = self._last = time.perf_counter()

    def update(self, n=1):
        self.done += n
        now = time.perf_counter()
        if self.enabled and (now - self._last > 0.2 or self.done == self.total):
            self._last = now
            self._draw(now)

    def _draw(self, now):
        rate = self.done / max(now - self.t0, 1e-9)
        if self.total:
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(frac * 30) + "-" * (30 - int(frac * 30))
            eta = (self.total - self.done) / rate if rate > 0 else 0
            text = f"{self.label} [{bar}] {self.done}/{self.total} {rate:.0f}/s ETA {eta:.0f}s"
        else:
            text = f"{self.label} {self.done} {rate:.0f}/s"
        self.stream.write("\r" + text)
        self.stream.flush()

    def close(self):
        if self.enabled:
            self._draw(time.perf_counter())
            self.stream.write("\n")
            self.stream.flush()


# -- the jobs --------------------------------------------------------------------------------


def _ordered(items, fn, workers):
    """``map(fn, items)`` in order, on ``workers`` threads with a bounded window."""
    if workers <= 1:
        for item in items:
            yield fn(item) if isinstance(item, Sample) else item
        return
    window = collections.deque()
    with ThreadPoolExecutor(workers) as pool:
        for item in items:
            window.append(pool.submit(fn, item) if isinstance(item, Sample) else item)
            if len(window) >= 4 * workers:
                head = window.popleft()
                yield head if isinstance(head, Skip) else head.result()
        while window:
            head = window.popleft()
            yield head if isinstance(head, Skip) else head.result()


def convert(src, dst, /, *, src_format=None, dst_format=None, shard_size=None,
            max_short_side=None, quality=90, codec=None, compression="auto", workers=None,
            overwrite=False, strict=False, progress=False, shuffle=None,
            seed=0, seekable=False, restart_mcus=0, max_side=None, image_column="image",
            label_column="label") -> ConvertReport:
    """Convert a dataset between the folder, TAR-shard and TBL layouts.

    Args:
        src: an ImageFolder root, TAR shard(s) (a file, a directory of ``.tar`` files, a
            brace pattern or glob) or a TBL file.
        dst: the output: ``*.tbl`` -> TBL; ``*.tar`` or a ``%``-pattern such as
            ``out/train-%05d.tar`` -> TAR shards; anything else -> an ImageFolder tree.
        src: also Parquet / Arrow files (``*.parquet``, a glob of them; the image and label
            columns ``image_column`` / ``label_column``, Hugging Face's image structs
            included) and CSV / JSON Lines manifests (``path,label`` rows relative to the
            manifest's folder; string labels become sorted class names).
        image_column, label_column: the source's columns (Parquet; a manifest's path column
            is ``image_column`` when it is not ``"image"``).
        src_format, dst_format: ``"folder"``, ``"tar"`` or ``"tbl"`` (sources also
            ``"parquet"``, ``"manifest"``) to override detection
            (``dst_format="tar"`` with a directory writes ``dst/shard-00000.tar``, ...).
        shard_size: samples per TAR shard (default 5000 for a directory or pattern; a plain
            ``x.tar`` without it is one file).
        max_short_side: re-encode images whose shorter side is longer than this, resized so
            it is exactly this (antialiased bicubic) and encoded as JPEG at ``quality``.
            Smaller images are copied byte for byte.
        max_side: likewise for the longer side (after ``max_short_side``, if both): images
            whose longer side is longer are shrunk so that it is this, re-encoded at
            ``quality``. Re-encoded (pre-sized) images change the pixels a model sees;
            the guide page "Seekable JPEG" has a speed / size table and the caveat.
        quality: JPEG quality of re-encoded images (1..100).
        codec: ``"keep"``/None (default), ``"jpeg"`` (re-encode PNG/WebP as JPEG) or
            ``"raw"`` (TBL only: store decoded RGB pixels, LZ4-compressed where it pays).
        compression: TBL record compression, ``"auto"``, ``"none"`` or ``"lz4"``.
        workers: threads for checking and re-encoding (default: CPU count when
            re-encoding, else 1; plain copies are I/O-bound).
        overwrite: replace existing outputs.
        strict: stop at the first bad sample (raising its error) instead of skipping it.
        progress: draw a progress bar on stderr.
        shuffle: write the samples in a random order (seeded by ``seed``), so shards of a
            class-ordered folder are not class-skewed; ``False`` keeps the source order.
            Default (None): shuffle TAR outputs (read sequentially, shard by shard), keep
            the order for TBL and folder outputs (random access: the dataset shuffles).
            Local ``.tar`` sources are shuffled across shards; compressed or remote
            shards keep their order.
        seed: the seed of that order (the same seed gives the same output).
        seekable: rewrite every JPEG losslessly (the same DCT coefficients, as ``jpegtran
            -restart N -optimize`` does) as a baseline JPEG with restart markers whose
            intervals never wrap a row, so that a crop decodes only the intervals under it
            (see the guide page "Seekable JPEG"). The files stay ordinary JPEGs. A JPEG that
            libjpeg reports as corrupt is copied as it is (``ConvertReport.seekable_kept``).
        restart_mcus: with ``seekable``, MCUs per restart interval (0: automatic, a divisor
            of the MCUs per row: the smallest whose markers add at most ~3% to
            the size, so crops are cut finely and intervals never wrap a row).

    Folder and TAR outputs get a manifest (written first as "complete": false, replaced
    atomically at the end with each shard's sample count, size and SHA-256;
    :func:`check_manifest` and ``turboloader verify`` check it); TAR outputs also get a
    classes file when the source names its classes. One of each per shard set, named after
    the output's prefix: ``out/train-%05d.tar`` gets ``out/train-manifest.json`` and
    ``out/train-classes.json``, so ``out/val-%05d.tar`` can share the folder; a directory
    output gets ``manifest.json`` and ``classes.json``, a single ``x.tar``
    ``x.tar.manifest.json``. A conversion whose manifest exists is refused before it writes
    anything (unless ``overwrite``).

    Returns:
        A :class:`ConvertReport`.

    Raises:
        FileNotFoundError, ValueError: bad paths or options. FileExistsError: output exists.
        TurboLoaderError: with ``strict``, the first bad sample's error (notes name it).

    Example:
        >>> report = convert("imagenet/train", "train-256.tbl", max_short_side=256)  # doctest: +SKIP
        >>> print(report.summary())                                                 # doctest: +SKIP
    """
    t0 = time.perf_counter()
    dst = os.fspath(dst)
    dst_format = _dst_format(dst, dst_format)
    if dst_format not in FORMATS:
        raise ValueError(f"unknown output format {dst_format!r}; expected one of "
                         f"{', '.join(FORMATS)}")
    if codec == "raw" and dst_format != "tbl":
        raise ValueError("codec='raw' (decoded pixels) can only be stored in a TBL file")
    if shard_size is not None and int(shard_size) < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    source = open_source(src, src_format, image_column=image_column, label_column=label_column)
    if shuffle is None:
        shuffle = dst_format == "tar"
    shuffle_seed = int(seed) if shuffle else None
    if shuffle:
        source.shuffle(shuffle_seed)
    if codec == "raw" and seekable:
        raise ValueError("seekable=True rewrites JPEGs; codec='raw' stores no JPEG")
    proc = _Processor(max_short_side=max_short_side, quality=quality, codec=codec,
                      seekable=seekable, restart_mcus=restart_mcus, max_side=max_side)
    if workers is None:
        workers = (os.cpu_count() or 1) if proc.reencodes else 1
    workers = max(1, int(workers))

    if dst_format == "tbl":
        if not overwrite and os.path.exists(dst):
            raise FileExistsError(f"{dst!r} exists (use --overwrite, or overwrite=True, to "
                                  f"replace it)")
        meta = {"source": os.fspath(src) if isinstance(src, (str, os.PathLike)) else None}
        if max_short_side:
            meta.update(max_short_side=int(max_short_side), quality=int(quality))
        if max_side:
            meta.update(max_side=int(max_side), quality=int(quality))
        if seekable:
            meta.update(seekable=True)
        sink = _TBLSink(dst, classes=source.classes, metadata=meta, compression=compression,
                        overwrite=overwrite)
    elif dst_format == "tar":
        if shard_size is None and not dst.lower().endswith(".tar"):
            shard_size = 5000
        # a directory output is one shard set: its manifest is plain manifest.json
        sink = _TarSink(_tar_pattern(dst, shard_size), shard_size=shard_size,
                        overwrite=overwrite, classes=source.classes, shuffle_seed=shuffle_seed,
                        prefix="" if "%" not in dst and not dst.lower().endswith(".tar")
                        else None)
    else:
        sink = _FolderSink(dst, classes=source.classes, overwrite=overwrite,
                           shuffle_seed=shuffle_seed)

    report = ConvertReport()
    try:
        total = len(source)
    except TurboLoaderError:
        total = None
    bar = Progress(total, label="convert", enabled=progress)
    try:
        for item in _ordered(source, proc, workers):
            bar.update()
            if isinstance(item, Sample):
                report.bytes_in += item.size_in or len(item.data)
                try:
                    report.bytes_out += sink.write(item)
                except (TurboLoaderError, ValueError, OverflowError) as exc:
                    # a label the output cannot store, a key over its limit: one sample
                    item = Skip(item.source, item.key, f"{type(exc).__name__}: {exc}")
                else:
                    report.written += 1
                    report.reencoded += item.reencoded
                    if seekable and item.codec == Codec.JPEG:
                        report.seekable += item.seekable
                        report.seekable_kept += not item.seekable
                        if not item.seekable:
                            report.not_seekable.append(Skip(item.source, item.key,
                                                            item.not_seekable or "not rewritten"))
                    continue
            if strict:
                key = item.key if item.key is None or len(item.key) <= 80 else \
                    f"{item.key[:60]}... ({len(item.key)} characters)"
                err = SampleError(f"{item.source}: key {key!r}: {item.reason[:300]}")
                err.add_note(f"strict: stopped at the first bad sample, after {report.written} "
                             f"written; the unfinished output is removed")
                raise err
            report.skipped.append(item)
        sink.close()
    except BaseException:
        sink.abort()
        raise
    finally:
        bar.close()
    report.outputs = list(sink.outputs)
    report.seconds = time.perf_counter() - t0
    return report


# -- inspect and verify ----------------------------------------------------------------------


def inspect_dataset(path, fmt=None, *, limit=None) -> dict:
    """Statistics of a dataset: samples, keys, labels, image sizes, codecs, bytes.

    For TBL files everything comes from the index (no record is read); folders and TAR
    shards are scanned (image headers only).

    Returns:
        A dict: ``format``, ``samples``, ``first_keys``, ``last_keys``, ``labels``
        (label -> count), ``unlabelled``, ``codecs`` (name -> count), ``widths`` and
        ``heights`` (arrays), ``bytes``, ``skipped`` (list of Skip), ``classes``, and for
        TBL ``compression`` (name -> count), ``metadata`` and ``version``.
    """
    fmt = fmt or detect_format(path)
    if fmt == "tbl":
        from turboloader.io.tbl import Compression

        with TBLFile(path) as f:
            t = f.index
            labels = f.labels
            keys = f.keys
            return {
                "format": "tbl", "path": os.fspath(path), "version": f.version,
                "samples": len(f), "first_keys": keys[:5], "last_keys": keys[-3:],
                "labels": collections.Counter(labels[labels >= 0].tolist()),
                "unlabelled": int((labels < 0).sum()),
                "codecs": collections.Counter(Codec(c).name.lower() for c in t["codec"].tolist()),
                "compression": collections.Counter(Compression(c).name.lower()
                                                   for c in t["compression"].tolist()),
                "widths": np.array(t["width"]), "heights": np.array(t["height"]),
                "bytes": int(t["size"].sum()), "raw_bytes": int(t["raw_size"].sum()),
                "file_bytes": os.path.getsize(path), "metadata": f.metadata,
                "classes": f.metadata.get("classes"), "skipped": [],
            }
    source = open_source(path, fmt)
    proc = _Processor()
    keys, labels, codecs, widths, heights, skipped = [], collections.Counter(), \
        collections.Counter(), [], [], []
    nbytes = unlabelled = 0
    for item in source:
        if isinstance(item, Sample):
            item = proc(item)
        if isinstance(item, Skip):
            skipped.append(item)
            continue
        keys.append(item.key)
        if item.label is None:
            unlabelled += 1
        else:
            labels[item.label] += 1
        codecs[item.codec.name.lower()] += 1
        widths.append(item.width)
        heights.append(item.height)
        nbytes += len(item.data)
        if limit and len(keys) >= limit:
            break
    return {"format": fmt, "path": os.fspath(path), "samples": len(keys),
            "first_keys": keys[:5], "last_keys": keys[-3:], "labels": labels,
            "unlabelled": unlabelled, "codecs": codecs, "widths": np.array(widths, np.int64),
            "heights": np.array(heights, np.int64), "bytes": nbytes, "classes": source.classes,
            "skipped": skipped}


def _decode_check(s, strict):
    """Fully decode one sample; return None if fine, else the reason."""
    import warnings

    from turboloader.errors import DecodeWarning

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DecodeWarning)
            if s.codec == Codec.BYTES:
                return "not a JPEG, PNG or WebP image (by content)"
            img = decode_image(s.data, codec=s.codec, strict=strict, size=(s.height, s.width))
        if s.width and s.height and img.shape[:2] != (s.height, s.width):
            return (f"decoded size {img.shape[1]} x {img.shape[0]} differs from the recorded "
                    f"{s.width} x {s.height}")
        if caught:
            return f"DecodeWarning: {caught[0].message}"
    except TurboLoaderError as exc:
        return f"{type(exc).__name__}: {exc}"
    except ValueError as exc:  # reshape of a damaged raw record
        return f"ValueError: {exc}"
    return None


def verify_dataset(path, fmt=None, *, workers=None, strict=False, progress=False,
                   manifest=False):
    """Decode every sample of a dataset; return ``(checked, bad)``.

    ``bad`` lists :class:`Skip` entries (source, key, reason) for samples that cannot be read
    or decoded: damaged records (CRC), undecodable or truncated images, unsafe names,
    missing images. libjpeg warnings (recoverable corruption) count as bad, and so does a
    TAR shard without its end-of-archive block (cut at a member boundary).

    ``manifest=True`` (the command line's default for folders and TAR shards) first checks
    the output against the ``manifest.json`` written by :func:`convert`
    (:func:`check_manifest`). A folder without any manifest is verified by reading it: an
    ImageFolder tree made by other tools has none, and a folder that :func:`convert` was
    writing has one from the start (``"complete": false`` until it ends). TAR shards always
    need theirs: a conversion killed half-way leaves shards that look complete.

    Raises:
        FileNotFoundError, ValueError: bad path. FormatError / TarFormatError: the file's
        header or index is damaged, so no sample can be located. ManifestError: with
        ``manifest``, the manifest is missing (TAR shards), unfinished, or does not match.
    """
    fmt = fmt or detect_format(path)
    if manifest and (fmt == "tar" or (fmt == "folder" and find_manifest(path, fmt) is not None)):
        check_manifest(path, fmt)
    source = open_source(path, fmt)
    if isinstance(source, _TarSource):
        source.strict_end = True
    workers = max(1, int(workers or os.cpu_count() or 1))
    bad = []
    checked = 0
    try:
        total = len(source)
    except TurboLoaderError:
        total = None
    bar = Progress(total, label="verify", enabled=progress)

    def check(s):
        reason = _decode_check(s, strict)
        return Skip(s.source, s.key, reason) if reason else s

    try:
        for item in _ordered(source, check, workers):
            bar.update()
            checked += 1
            if isinstance(item, Skip):
                bad.append(item)
    finally:
        bar.close()
    return checked, bad
