"""ManifestDataset: images listed in a CSV / TSV / JSON Lines file, map-style."""

from __future__ import annotations

from typing import Any
import os

import torch.utils.data

from turboloader.data.cache import own_copy
from turboloader.data.map_dataset import MapDataset, gather_file
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS
from turboloader.errors import ManifestError, SampleError, UnreadableFileError
from turboloader.io.files import read_file
from turboloader.io.manifest import int_label, read_manifest

__all__ = ["ManifestDataset"]


class ManifestDataset(MapDataset, torch.utils.data.Dataset):
    """Map-style ``(image, label)`` samples from a manifest: a CSV, TSV or JSON Lines file
    listing ``path,label[,more]`` rows, the paths relative to ``root``.

    Reading is :class:`ImageFolder`'s: a file's bytes are read with a bound, JPEGs are decoded
    by libjpeg-turbo and, with a turboloader pipeline that has a fused plan, decoded and
    transformed in one native call (otherwise ``transform`` gets a PIL RGB image); the random
    parameters of index ``i`` in epoch ``e`` come from ``sample_rng(seed, e, i)`` (call
    ``set_epoch`` from the main process each epoch). Shuffling and sharding are the
    sampler's job, as for any map-style dataset. ``cache``, ``on_error="skip"`` with its
    ``max_failures`` budget and ``stats()`` behave as in :class:`ImageFolder`; a missing file
    always propagates (``FileNotFoundError``), as there.

    **Labels.** When every label is an int (a JSON int, or a CSV string of one) the targets
    are those ints. Otherwise labels are class names: ``classes`` (given, or the sorted
    distinct names) and ``class_to_idx`` map them to indices, as ``ImageFolder`` does.
    ``label_column=None`` gives every row ``missing_label`` (default -1); a row without a
    label gives ``missing_label`` (a ManifestError while ``missing_label`` is None).

    Attributes:
        samples: ``[(absolute path, target), ...]``, like ``ImageFolder.samples``.
        targets: the targets.
        rows: the manifest's rows (dicts), with every other column (captions, ids...).
        classes, class_to_idx: the class names (None for int labels).

    Args:
        manifest: the manifest file (``.csv``, ``.tsv``, ``.jsonl``/``.ndjson``/``.json``,
            optionally ``.gz``; see :func:`turboloader.io.manifest.read_manifest`).
        root: the directory the paths are relative to (default: the manifest's directory);
            absolute paths are used as they are.
        transform, target_transform: applied to the image and the target.
        path_column, label_column: the columns naming the file and the label (also the
            names of the first two columns of a CSV without a header).
        classes: the class names, in index order, for string labels.
        missing_label: the target of a row without a label (None: such a row is an error).
        format: ``"csv"``, ``"tsv"`` or ``"jsonl"`` (default: from the extension).
        seed, cache, cache_short_side, on_error, max_failures, max_pixels, stats_interval:
            as in :class:`ImageFolder`.
        fields: yield tuples of these columns instead of ``(image, target)``, as
            :class:`TarDataset`'s ``fields`` (see :mod:`turboloader.data.fields`):
            ``path_column`` is the image (decoded and transformed), ``"__key__"`` the row's
            path, ``"__url__"`` the manifest, another column its value as the manifest
            holds it (CSV: a string; JSON Lines: its JSON value), ``MaskField(column)`` the
            mask file it names (relative to ``root``) transformed with the image,
            ``BoxesField(column)`` its boxes (a JSON list, a string of one, or a
            ``.json`` / ``.npy`` file it names) transformed with the image. The label column
            is then optional.

    Raises:
        ManifestError: a malformed manifest, a row without a path or label, a class name
            not in ``classes``.
        FileNotFoundError: no manifest.

    Example:
        >>> from turboloader import ManifestDataset, transforms as T         # doctest: +SKIP
        >>> ds = ManifestDataset("train.csv", root="images/",
        ...                      transform=T.Compose([T.RandomResizedCrop(224), T.ToTensor()]))
        >>> image, label = ds[0]
        >>> ds.rows[0]["caption"]
    """

    def __init__(self, manifest: Any, root: Any = None, transform: Any = None,
                 target_transform: Any = None, *, path_column: str = "path",
                 label_column: Any = "label", classes: Any = None, missing_label: Any = None,
                 format: str | None = None, seed: int = 0, cache: Any = None,
                 cache_short_side: Any = None, on_error: str = "raise", max_failures: float = 0.01,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS, stats_interval: int = 256,
                 fields: Any = None) -> None:
        super().__init__()
        if fields is not None:
            from turboloader.data.fields import Fields

            self._fields: Any = Fields(fields, image_names=(path_column,), columns=True)
            self._fields.check_transform(transform)
            if target_transform is not None:
                raise ValueError("target_transform applies to the target of (image, target) "
                                 "samples; with fields=, transform the fields you get instead")
        self.manifest = os.fspath(manifest)
        self.root = os.path.abspath(os.path.dirname(self.manifest) if root is None
                                    else os.fspath(root))
        self.path_column, self.label_column = path_column, label_column
        self.rows = read_manifest(self.manifest, format=format, path_column=path_column,
                                  label_column=label_column or "label")
        raw = [None if label_column is None else row.get(label_column) for row in self.rows]
        if label_column is None and missing_label is None:
            missing_label = -1  # no label column: every row is unlabelled
        for k, v in enumerate(raw):
            if (v is None or v == "") and missing_label is None and fields is None:
                raise ManifestError(f"{self.manifest!r}: row {k} has no {label_column!r} "
                                    f"(pass missing_label=... for unlabelled rows)")
        present = [v for v in raw if v is not None and v != ""]
        ints = [int_label(v) for v in present]
        if classes is None and all(v is not None for v in ints):
            self.classes = self.class_to_idx = None
            lookup = int_label
        else:
            self.classes = (list(classes) if classes is not None
                            else sorted({str(v) for v in present}))
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

            def lookup(v):
                try:
                    return self.class_to_idx[str(v)]
                except KeyError:
                    raise ManifestError(f"{self.manifest!r}: label {v!r} is not one of the "
                                        f"{len(self.classes)} classes") from None
        self.targets = [missing_label if v is None or v == "" else lookup(v) for v in raw]
        self.samples = [(os.path.join(self.root, row[path_column]), t)
                        for row, t in zip(self.rows, self.targets)]
        self._init_reader(transform, target_transform, seed=seed, cache=cache,
                          cache_short_side=cache_short_side, on_error=on_error,
                          max_failures=max_failures, max_pixels=max_pixels,
                          stats_interval=stats_interval)

    def __len__(self) -> int:
        return len(self.samples)

    def _gather(self, st, chunk, i, slot, epoch, counters):
        path, target = self.samples[i]
        if self._fields is not None:
            try:
                target = self._field_values(i)
            except SampleError as exc:
                chunk.fail(exc, i, slot, epoch)
                return
        gather_file(st, chunk, path, target, i, slot, epoch, counters)

    def _field_values(self, i):
        """Row ``i``'s ``fields`` values: the files its mask (and boxes file) columns name
        read from under ``root``."""
        from turboloader.data.fields import BoxesField, MaskField

        row = self.rows[i]
        key = row[self.path_column]
        # the parsed rows are kept for every epoch: a JSON column's list or dict handed out
        # is the caller's own copy
        members = {k: own_copy(v) for k, v in row.items()}
        for (_, alts), kind in zip(self._fields.entries, self._fields.kinds):
            if kind is None:
                continue
            col = next((a for a in alts if members.get(a) not in (None, "")), None)
            value = members.get(col)
            if isinstance(value, str) and (isinstance(kind, MaskField) or (
                    isinstance(kind, BoxesField) and
                    value.lower().endswith((".json", ".npy")))):
                file = os.path.join(self.root, value)
                try:  # the images' guarded reader: a FIFO or /dev/zero is a typed error
                    members[col] = read_file(file)
                except UnreadableFileError as exc:
                    raise UnreadableFileError(f"sample {key!r}, field {kind!r}: {exc}") from None
                except OSError as exc:
                    raise SampleError(f"sample {key!r}, field {kind!r}: cannot read {file!r} "
                                      f"({exc.strerror or exc})") from None
        return self._fields.values(key, self.manifest, members)

    def _where(self, st, i):
        path = self.samples[i][0]
        return (f"ManifestDataset: {self.manifest!r} row {i}, file {path!r}", self.manifest,
                self.rows[i][self.path_column], 0)

    def __repr__(self):
        return (f"ManifestDataset({self.manifest!r}, {len(self)} samples, root={self.root!r}, "
                f"on_error={self.policy.on_error!r})")
