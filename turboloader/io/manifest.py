"""Manifests: CSV / TSV / JSON Lines lists of ``path,label[,more]`` rows naming image files.

Only the list is read here (no image bytes, no decoding): :func:`read_manifest` returns
one dict per row, in file order. :class:`turboloader.ManifestDataset` reads the images.
"""

from __future__ import annotations

from typing import Any
import csv
import io
import os

from turboloader.errors import ManifestError
from turboloader.io.shards import parse_json

__all__ = ["int_label", "manifest_format", "read_manifest"]

_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
            ".json": "jsonl"}


def int_label(value: object) -> int | None:
    """A manifest row's label as an int when it is one (an int, or a string of one, signs and
    surrounding blanks allowed), else None (a class name; a bool, a float, an empty string).
    The one rule of :class:`~turboloader.ManifestDataset` and ``turboloader convert``'s
    manifest source, so both read a manifest's labels alike.

    Example:
        >>> int_label(" -3"), int_label(7), int_label("cat"), int_label(True)
        (-3, 7, None, None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        s = value.strip()
        if s and (s.isdigit() or (s[0] == "-" and s[1:].isdigit())):
            return int(s)
    return None


def manifest_format(path) -> str:
    """``"csv"``, ``"tsv"`` or ``"jsonl"`` from a manifest's file name (a ``.gz`` suffix is
    allowed).

    Raises:
        ValueError: an extension that is none of ``.csv``, ``.tsv``, ``.jsonl``,
            ``.ndjson``, ``.json``.
    """
    name = os.fspath(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    fmt = _FORMATS.get(os.path.splitext(name)[1])
    if fmt is None:
        raise ValueError(f"cannot tell the manifest format of {os.fspath(path)!r} from its "
                         f"extension; pass format='csv', 'tsv' or 'jsonl'")
    return fmt


def _open_text(path):
    # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8" writes one) is dropped, not read as
    # part of the first column's name, which would turn the header into a row
    path = os.fspath(path)
    if path.endswith(".gz"):
        import gzip

        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def read_manifest(path: Any, /, *, format: str | None = None, path_column: str = "path",
                  label_column: Any = "label") -> list:
    """The rows of a manifest, one dict per row (column name -> value), in file order.

    * CSV / TSV: with a header row when the first row names ``path_column``; otherwise the
      columns are positional: ``path_column``, ``label_column``, then ``"col2"``,
      ``"col3"``, ... Values are strings (blank lines are skipped).
    * The text is UTF-8, with or without a byte-order mark.
    * JSON Lines: one JSON object per line (blank lines skipped); values keep their JSON
      types. A ``.json`` file holding one JSON list of objects is accepted too.

    Args:
        path: the manifest file (``.csv``, ``.tsv``, ``.jsonl``/``.ndjson``/``.json``,
            optionally ``.gz``).
        format: ``"csv"``, ``"tsv"`` or ``"jsonl"``; default from the extension.
        path_column, label_column: the column names of positional CSV rows.

    Raises:
        ManifestError: a row without ``path_column``, a line that is not a JSON object, a
            CSV row with more columns than the header; the message names the file and line.
        FileNotFoundError: no such file.

    Example:
        >>> rows = read_manifest("train.csv")                           # doctest: +SKIP
        >>> rows[0]
        {'path': 'img/0001.jpg', 'label': '3', 'caption': 'a cat'}
    """
    fmt = manifest_format(path) if format is None else format
    name = os.fspath(path)
    rows = []
    if fmt in ("csv", "tsv"):
        with _open_text(path) as f:
            reader = csv.reader(f, delimiter="," if fmt == "csv" else "\t")
            header = None
            for line_no, values in enumerate(reader, 1):
                if not values or (len(values) == 1 and not values[0].strip()):
                    continue
                if header is None:
                    if path_column in [v.strip() for v in values]:
                        header = [v.strip() for v in values]
                        continue
                    header = [path_column, label_column] + [f"col{k}" for k in range(2, 64)]
                if len(values) > len(header):
                    raise ManifestError(f"{name!r} line {line_no}: {len(values)} columns, the "
                                        f"header has {len(header)}")
                rows.append(dict(zip(header, values)))
    elif fmt == "jsonl":
        with _open_text(path) as f:
            text = f.read()
        stripped = text.lstrip()
        if stripped.startswith("["):  # one JSON list of objects
            try:
                items = parse_json(text)
            except ValueError as exc:
                raise ManifestError(f"{name!r} is not valid JSON: {exc}") from None
            numbered = enumerate(items, 1)
        else:
            def parse():
                for line_no, line in enumerate(text.splitlines(), 1):
                    if not line.strip():
                        continue
                    try:
                        yield line_no, parse_json(line)
                    except ValueError as exc:
                        raise ManifestError(f"{name!r} line {line_no}: not JSON ({exc})") \
                            from None
            numbered = parse()
        for line_no, item in numbered:
            if not isinstance(item, dict):
                raise ManifestError(f"{name!r} line {line_no}: expected a JSON object, got "
                                    f"{type(item).__name__}")
            rows.append(item)
    else:
        raise ValueError(f"format must be 'csv', 'tsv' or 'jsonl', got {format!r}")
    for k, row in enumerate(rows):
        if not isinstance(row.get(path_column), str) or not row[path_column]:
            raise ManifestError(f"{name!r}: row {k} has no {path_column!r} value: {row!r}")
    return rows
