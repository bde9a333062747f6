"""Shard lists and shard readers: URL expansion, TAR opening, WebDataset sample grouping.

Vocabulary is webdataset's: a *shard* is a TAR file; its members group into *samples* by
``__key__``, the member path up to the first ``"."`` of its basename (``"a.b/x.y.jpg"`` has
key ``"a.b/x"`` and extension ``"y.jpg"``; extensions are lower-cased). Like webdataset,
only *consecutive* members with the same key form one sample.

Two readers:

* :class:`TarShard` (``.tar``): indexed natively through ``mmap`` (:class:`TarIndex`);
  samples are read in any order, zero-copy.
* :class:`StreamShard` (``.tar.gz`` / ``.tgz``): read front to back with :mod:`tarfile`.
  Reading sample ``j`` after sample ``k > j`` re-opens the stream, so stream shards are
  always visited in stream order. Counting a stream shard's samples decompresses it once.

Remote shards (``s3://``, ``http(s)://``, see :mod:`turboloader.io.remote`): without a
:class:`~turboloader.io.shard_cache.ShardCache` they are streamed (a :class:`StreamShard`
over a retrying remote stream, read in stream order, nothing downloaded ahead); with one,
the shard is fetched into the node-local cache and read as a local file (``.tar``: a
random-access :class:`TarShard` over the cached copy). Errors name the URL.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tarfile
import zlib
from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from turboloader.io import files
from turboloader.io.files import check_size
from turboloader.io.fetch import fetch_pool
from turboloader.io.remote import can_glob, glob_objects, is_remote, url_path
from turboloader.errors import (RemoteShardError, SampleError, TarFormatError,
                                TurboLoaderError, UnreadableFileError)

__all__ = [
    "IMAGE_EXTENSIONS",
    "IndexedShard",
    "LABEL_EXTENSIONS",
    "MAX_JSON_DEPTH",
    "SampleRecord",
    "Shard",
    "FIELDS_HINT",
    "ShardSource",
    "StreamShard",
    "TarShard",
    "TarShards",
    "braceexpand",
    "check_record",
    "count_samples",
    "expand_urls",
    "is_stream",
    "list_shards",
    "open_shard",
    "parse_json",
    "parse_label",
    "random_access",
    "shard_set_file",
    "read_classes",
    "split_key",
]

#: Image extensions, in order of preference when a sample has more than one.
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
#: Label extensions, in order of preference.
LABEL_EXTENSIONS = ("cls", "json")
_WANTED = frozenset(IMAGE_EXTENSIONS + LABEL_EXTENSIONS)
_STREAM_SUFFIXES = (".tar.gz", ".tgz")
#: The end of an error message where ``(image, label)`` reading stalls on shards made for
#: other uses (captions, JSON): how to read their members instead.
FIELDS_HINT = (", or pass fields= to read other members as webdataset's to_tuple does, e.g. "
               "fields=('jpg', 'txt') or fields=('jpg', 'json')")



def braceexpand(pattern: str) -> list[str]:
    """Expand braces exactly as WebDataset does (it uses the ``braceexpand`` package, and so
    do we): ranges ``{000..099}`` (zero-padded to the wider bound), stepped ranges
    ``{0..6..2}``, letter ranges ``{a..c}``, alternatives ``{a,b,c}``, nested groups
    ``{a,{b,c}}``, and ``\\{`` / ``\\}`` escapes for literal braces; several groups expand as a
    product, left first.

    Example:
        >>> braceexpand("train-{00..02}.tar")
        ['train-00.tar', 'train-01.tar', 'train-02.tar']
        >>> braceexpand("{a,b}-{1..2}")
        ['a-1', 'a-2', 'b-1', 'b-2']
        >>> braceexpand("{0..6..2}")
        ['0', '2', '4', '6']
    """
    import braceexpand as _be

    try:
        return list(_be.braceexpand(pattern))
    except _be.UnbalancedBracesError as exc:
        raise ValueError(f"unbalanced braces in {pattern!r}: {exc}") from None


def list_shards(directory) -> list[str]:
    """The shards directly inside a local ``directory``: its ``.tar``, ``.tar.gz`` and
    ``.tgz`` entries, sorted by name (the ``.tmp-<pid>`` files of an unfinished
    ``turboloader convert`` do not match; a FIFO or device so named is listed, and refused
    with a typed error when opened).

    Raises:
        FileNotFoundError: the directory holds no shard.
    """
    directory = os.fspath(directory)
    found = sorted(os.path.join(directory, f) for f in os.listdir(directory)
                   if f.lower().endswith((".tar",) + _STREAM_SUFFIXES)
                   and not os.path.isdir(os.path.join(directory, f)))
    if not found:
        raise FileNotFoundError(f"no shards (.tar, .tar.gz, .tgz files) in the directory "
                                f"{directory!r}")
    return found


def expand_urls(urls: Any) -> list[str]:
    """The shard list for ``urls``: a path, a directory, a glob, a brace pattern, or a list
    of those.

    Brace patterns are expanded first, then each item containing ``*``, ``?`` or ``[`` is
    globbed (sorted). A local directory stands for the shards in it, sorted by name (see
    :func:`list_shards`), as ``turboloader convert`` and ``inspect`` read it. Plain paths are
    kept as given, in order; existence is checked when the shard is opened. A glob in the
    object name of an ``s3://``, ``gs://``, ``az://`` or ``fsspec`` URL lists the store and
    keeps the matching objects, sorted (:func:`~turboloader.io.remote.glob_objects`);
    ``http(s)://`` URLs are brace-expanded but never globbed (a ``?`` there starts a query
    string, and HTTP has no listing).

    Raises:
        FileNotFoundError: a glob matched nothing (remote:
            :class:`~turboloader.errors.RemoteShardNotFoundError`, naming the pattern), or
            a directory holds no shard.
        RemoteShardError: a store refused to list a remote glob, or stayed unavailable.
        ValueError: the list is empty.
        TypeError: ``urls`` is not a str, ``os.PathLike`` or a sequence of them.

    Example:
        >>> expand_urls("data/train-{00000..00002}.tar")        # doctest: +SKIP
        ['data/train-00000.tar', 'data/train-00001.tar', 'data/train-00002.tar']
    """
    if isinstance(urls, (str, os.PathLike)):
        urls = [urls]
    elif isinstance(urls, (bytes, bytearray)) or not hasattr(urls, "__iter__"):
        raise TypeError(f"urls must be a path, a pattern or a list of them, not {type(urls).__name__}")
    out = []
    for url in urls:
        if not isinstance(url, (str, os.PathLike)):
            raise TypeError(f"each url must be a str or os.PathLike, not {type(url).__name__}")
        for item in braceexpand(os.fspath(url)):
            if can_glob(item):
                out.extend(glob_objects(item))
            elif glob.has_magic(item) and not is_remote(item):
                matches = sorted(glob.glob(item))
                if not matches:
                    raise FileNotFoundError(f"no shard matches {item!r}")
                out.extend(matches)
            elif not is_remote(item) and os.path.isdir(item):
                out.extend(list_shards(item))
            else:
                out.append(item)
    if not out:
        raise ValueError("the shard list is empty")
    return out


def is_stream(url: str) -> bool:
    """True for shards read as a compressed stream (``.tar.gz``, ``.tgz``)."""
    return url_path(url).lower().endswith(_STREAM_SUFFIXES)


def split_key(name: str):
    """``(key, extension)`` of a member name, webdataset's way; ``(None, None)`` without a dot.

    Example:
        >>> split_key("train.v2/n01/0001.seg.PNG")
        ('train.v2/n01/0001', 'seg.png')
    """
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash:  # no extension, or a hidden file such as ".DS_Store"
        return None, None
    return name[:dot], name[dot + 1:].lower()


def _group(names):
    """Group member names into samples: a list of (key, {ext: member_pos}, problem)."""
    samples = []
    key = members = problem = None
    for pos, name in enumerate(names):
        k, ext = split_key(name)
        if k is None:
            continue
        if k != key:
            if key is not None:
                samples.append((key, members, problem))
            key, members, problem = k, {}, None
        if ext in members:
            problem = problem or f"duplicate member {name!r} in sample {key!r}"
        else:
            members[ext] = pos
    if key is not None:
        samples.append((key, members, problem))
    return samples


#: How deeply a JSON label, field or manifest row may nest its lists and objects. Deeper is a
#: ValueError at parse time (a typed error of the sample or manifest), not a RecursionError
#: later in whatever walks the value (copying it, torch's collate, pickling it to a worker).
MAX_JSON_DEPTH = 100


def parse_json(text: str | bytes) -> Any:
    """``json.loads(text)``, refusing values nested more than :data:`MAX_JSON_DEPTH` deep.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``), or nested too deeply.
    """
    try:
        obj = json.loads(text)
    except RecursionError:  # json's C parser stops at the interpreter's recursion limit
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} lists or objects deep") from None
    if not isinstance(obj, (list, dict)):
        return obj
    # a walk without recursion, one level at a time
    level, depth = [obj], 0
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"nested more than {MAX_JSON_DEPTH} lists or objects deep")
        level = [v for c in level for v in (c.values() if isinstance(c, dict) else c)
                 if isinstance(v, (list, dict))]
    return obj


def parse_label(data, ext: str, label_key):
    """Decode a label member: ``.cls`` is an int in text, ``.json`` an object's ``label_key``.

    Raises:
        SampleError: the text is not an int / not JSON / has no ``label_key``.
    """
    if len(data) > 4096:
        raise SampleError(f".{ext} label member is {len(data)} bytes (a label is at most 4096)")
    text = bytes(data).decode("utf-8-sig", "replace").strip()  # -sig: a BOM is not text
    if ext == "cls":
        try:
            value = int(text)
        except ValueError:
            raise SampleError(f".cls label is not an integer: {text[:40]!r}") from None
        if not -(1 << 63) <= value < (1 << 63):
            # torch's collate would fail later with an untyped overflow naming no sample
            raise SampleError(f".cls label {text[:40]!r} does not fit in int64")
        return value
    try:
        obj = parse_json(text)
    except ValueError as exc:
        raise SampleError(f".json label is not valid JSON: {exc}") from None
    if label_key is None:
        return obj
    if not isinstance(obj, dict) or label_key not in obj:
        keys = f" (its keys: {', '.join(map(repr, list(obj)[:8]))})" if isinstance(obj, dict) \
            else f" (it is a JSON {type(obj).__name__})"
        raise SampleError(f".json label has no key {label_key!r}{keys}; label_key= names the "
                          f"label's key{FIELDS_HINT}")
    value = obj[label_key]
    if isinstance(value, int) and not -(1 << 63) <= value < (1 << 63):
        raise SampleError(f".json label {label_key!r} = {value} does not fit in int64")
    return value


@dataclass
class SampleRecord:
    """What a shard holds for one sample: its key, image and label members, and any problem.

    ``image``/``label`` are buffers (a read-only ``memoryview`` for ``.tar``) or None;
    ``offset`` is the byte offset of the image member's data (the first member's when there
    is no image), in the uncompressed stream for ``.tar.gz``.
    """

    url: str
    key: str
    member: str | None
    offset: int
    image: object
    image_ext: str | None
    label: object
    label_ext: str | None
    problem: str | None
    nbytes: int
    extras: dict | None = None  # stream shards read with extra extensions: {ext: bytes}


def _pick(members, exts):
    for ext in exts:
        if ext in members:
            return ext
    return None


def check_record(record, *, require_label=True):
    """SampleError for a record the dataset cannot use as (image, label)."""
    if record.problem:
        raise SampleError(record.problem)
    if record.image is None:
        raise SampleError(f"sample {record.key!r} has no image member "
                          f"(.{', .'.join(IMAGE_EXTENSIONS)})")
    if require_label and record.label is None:
        raise SampleError(f"sample {record.key!r} has no label member (.cls or .json); "
                          f"missing_label= labels such samples{FIELDS_HINT}")


@runtime_checkable
class Shard(Protocol):
    """What a dataset's stream reads one shard through (a ``.tar``, ``.tar.gz``, remote or
    Parquet row-group shard; :class:`TarShard`, :class:`StreamShard`,
    :class:`~turboloader.io.parquet.ColumnShard`). A shard that is not ``random_access`` is
    read in order, one :meth:`sample` after the other.

    * ``random_access``: whether samples can be read in any order (then it is also an
      :class:`IndexedShard`).
    * ``use_image_extensions(exts)``: the image member to take, in order of preference.
    * ``sample(j)``: sample ``j`` as a :class:`SampleRecord`.
    * ``close()``: release the file, mapping or connection (idempotent).
    """

    random_access: bool

    def use_image_extensions(self, exts: Sequence[str], /) -> None:
        ...

    def sample(self, j: int, /) -> SampleRecord:
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class IndexedShard(Shard, Protocol):
    """A random-access :class:`Shard` (``.tar``, Parquet): the batch path reads its image
    bytes straight into a gather buffer.

    * ``len(shard)``, ``key(j)``, ``where(j)`` (``(key, member, byte offset)`` for errors);
    * ``image_size(j)`` then ``read_image_into(j, out)``: the image member's size, then its
      bytes into ``out`` (a writable buffer of that size);
    * ``members(j, exts)``: ``{ext: bytes}`` of the members ``fields=`` asks for;
    * ``labels(label_key)``: ``(values, {j: exception})`` for the whole shard at once.
    """

    def __len__(self) -> int:
        ...

    def key(self, j: int, /) -> str:
        ...

    def where(self, j: int, /) -> tuple[str, str, int]:
        ...

    def image_size(self, j: int, /) -> int:
        ...

    def read_image_into(self, j: int, out: Any, /) -> int:
        ...

    def members(self, j: int, exts: Sequence[str], /) -> dict[str, bytes]:
        ...

    def labels(self, label_key: str | None, /) -> tuple[list, dict[int, Exception]]:
        ...


@runtime_checkable
class ShardSource(Protocol):
    """Where a dataset's shards come from (:class:`TarShards`,
    :class:`~turboloader.io.parquet.ParquetShards`), the ``_io`` of a ``TarDataset``:
    ``count(name)`` (samples in a shard), ``random_access(name)``,
    ``open(name)`` (a :class:`Shard`) and ``classes()`` (class names, or None)."""

    def count(self, name) -> int:
        ...

    def random_access(self, name) -> bool:
        ...

    def open(self, name) -> Shard:
        ...

    def classes(self):
        ...


class TarShard:
    """Random-access reader of the samples of an uncompressed ``.tar`` shard.

    Raises:
        TarFormatError: the archive is malformed (from :class:`TarIndex`).
    """

    random_access = True

    def __init__(self, url: str, /, *, path=None, strict=False):
        from turboloader.io.tar import TarIndex

        self.url = url  # what errors name; ``path`` (default: the url) is what is read
        # strict: no end-of-archive block is a TarFormatError (else a warning)
        self._index = TarIndex(url if path is None else path, strict=strict)
        self._image_sizes = None   # per sample: (image member, its size) lists, made on first use
        self._image_size_array = None   # the sizes as int64, made on first use (image_sizes)
        self._key_list = self._member_list = None   # made on first use (keys, members)
        grouped = self._index.group_samples(IMAGE_EXTENSIONS, LABEL_EXTENSIONS)
        if grouped is None:  # names the native grouping leaves to the Python definition
            self._from_groups(_group(self._index.names))
            return
        # the usual shard: grouped natively, keys and per-sample member maps made when asked
        first, image, image_which, label, label_which, _, key_len = grouped
        self._n = len(first)
        self._problems = {}
        self._first, self._image, self._label = first, image, label
        self._key_len = key_len
        exts = IMAGE_EXTENSIONS + (None,)   # position -1: none
        self._image_ext = [exts[i] for i in image_which.tolist()]
        exts = LABEL_EXTENSIONS + (None,)
        self._label_ext = [exts[i] for i in label_which.tolist()]

    def _from_groups(self, groups):
        """The per-sample tables from :func:`_group`'s samples."""
        n = self._n = len(groups)
        self._key_list = [g[0] for g in groups]
        self._problems = {i: g[2] for i, g in enumerate(groups) if g[2]}
        self._image = np.full(n, -1, np.int64)
        self._label = np.full(n, -1, np.int64)
        self._first = np.empty(n, np.int64)
        self._image_ext = [None] * n
        self._label_ext = [None] * n
        self._member_list = [members for _, members, _ in groups]  # ext -> member position
        for i, (_, members, _) in enumerate(groups):
            self._first[i] = min(members.values())
            ext = _pick(members, IMAGE_EXTENSIONS)
            if ext is not None:
                self._image[i] = members[ext]
                self._image_ext[i] = ext
            ext = _pick(members, LABEL_EXTENSIONS)
            if ext is not None:
                self._label[i] = members[ext]
                self._label_ext[i] = ext

    @property
    def _names(self):
        return self._index.names

    @property
    def _keys(self):
        """Each sample's key (its first member's name up to the extension's dot)."""
        keys = self._key_list
        if keys is None:
            names = self._index.names
            keys = self._key_list = [names[f][:k] for f, k in
                                     zip(self._first.tolist(), self._key_len.tolist())]
        return keys

    @property
    def _members(self):
        """Per sample, ``{ext: member position}`` (:func:`_group`'s)."""
        members = self._member_list
        if members is None:
            members = self._member_list = [m for _, m, _ in _group(self._index.names)]
        return members

    def __len__(self) -> int:
        return self._n

    def extensions(self) -> set[str]:
        """The member extensions of all the shard's samples (lower case)."""
        return {e for members in self._members for e in members}

    def key(self, j: int) -> str:
        return self._keys[j]

    def sample(self, j: int, /) -> SampleRecord:
        """The members of sample ``j`` (read-only views of bytes read now).

        Raises:
            TarFormatError: no sample ``j`` any more (the shard shrank since it was counted),
                or its bytes are gone (truncated while open).
        """
        if not 0 <= j < self._n:
            raise TarFormatError(
                f"shard {self.url!r} has {self._n} samples now, so there is no sample "
                f"#{j}: the file changed since its samples were counted")
        index = self._index
        im, lb = int(self._image[j]), int(self._label[j])
        pos = im if im >= 0 else int(self._first[j])
        image = index.member(im) if im >= 0 else None
        label = index.member(lb) if lb >= 0 else None
        nbytes = (len(image) if image is not None else 0) + (len(label) if label is not None else 0)
        return SampleRecord(self.url, self._keys[j], self._names[pos], int(index.offsets[pos]),
                            image, self._image_ext[j], label, self._label_ext[j],
                            self._problems.get(j), nbytes)

    def use_image_extensions(self, exts, /) -> None:
        """Take each sample's image from the first of ``exts`` it has (default:
        :data:`IMAGE_EXTENSIONS` in that order), e.g. a ``fields`` entry ``"png;jpg"``."""
        exts = tuple(exts)
        for i, members in enumerate(self._members):
            ext = _pick(members, exts)
            self._image[i] = members[ext] if ext is not None else -1
            self._image_ext[i] = ext
        self._image_sizes = self._image_size_array = None

    def _image_table(self):
        """``(member, size)`` lists per sample: the image member (-1: none) and its size (-1:
        no usable image, as :meth:`image_size` says), as Python ints for the per-sample
        lookups of a batch."""
        table = self._image_sizes
        if table is None:
            image = self._image.tolist()
            sizes = self._index.sizes
            size = [int(sizes[im]) if im >= 0 and j not in self._problems else -1
                    for j, im in enumerate(image)]
            table = self._image_sizes = (image, size)
        return table

    def members(self, j: int, exts, /) -> dict:
        """``{ext: bytes}`` of sample ``j``'s members among ``exts`` (those it has), each
        read now (one ``pread``).

        Raises:
            TarFormatError: the file no longer holds a member's bytes.
            UnreadableFileError: a member is over the member-size limit.
        """
        have = self._members[j]
        sizes = self._index.sizes
        for ext in exts:
            if ext in have and int(sizes[have[ext]]) > files.MAX_FILE_BYTES:
                check_size(f"member {self._names[have[ext]]!r} of {self.url!r}",
                           int(sizes[have[ext]]))
        return {ext: bytes(self._index.member(have[ext])) for ext in exts if ext in have}

    # -- batch access: what a dataset gathering many samples at a time needs ---------------

    def image_size(self, j: int, /) -> int:
        """Bytes of sample ``j``'s image member, or -1 when :meth:`sample` would give no
        usable image (no image member, or a problem such as a duplicate member).

        Raises:
            UnreadableFileError: the image member is over the member-size limit
                (:data:`turboloader.io.files.MAX_FILE_BYTES`).
        """
        size = self._image_table()[1][j]
        if size > files.MAX_FILE_BYTES:
            im = self._image_table()[0][j]
            check_size(f"member {self._names[im]!r} of {self.url!r}", size)
        return size

    def read_image_into(self, j: int, out, /, *, head=False) -> int:
        """Read sample ``j``'s image bytes into ``out`` (one ``pread``, no allocation);
        returns their size (with ``head``: at most ``len(out)``, the start of the image).
        Call after :meth:`image_size` said there is an image.

        Raises:
            TarFormatError: the file no longer holds the bytes (see :meth:`TarIndex.read_into`).
        """
        return self._index.read_into(self._image_table()[0][j], out, head=head)

    def image_sizes(self, js, /) -> np.ndarray:
        """:meth:`image_size` of many samples at once, without its member-size check:
        ``int64`` bytes of each image member of the samples ``js`` (in range), -1 where
        there is no usable image. A batch reader checks the sizes itself (or asks
        :meth:`image_size` for the rows it cannot take)."""
        sizes = self._image_size_array
        if sizes is None:
            sizes = self._image_size_array = np.array(self._image_table()[1], np.int64)
        return sizes[js]

    def read_images_into(self, js, out, /) -> int:
        """:meth:`read_image_into` for the samples ``js`` (each with an image, as
        :meth:`image_sizes` says), back to back into the start of ``out``: one ``pread``
        each, one call. Returns how many were read whole, in order (fewer when the file no
        longer holds one: :meth:`read_image_into` then raises the error for it)."""
        return self._index.read_many_into(self._image[js], out)

    def image_extents(self, js: Any, /) -> tuple[int, np.ndarray, np.ndarray]:
        """Where the image members of the samples ``js`` (in range) are, for reading many
        shards' images in one call (:func:`turboloader.io.tar.read_extents_into`):
        ``(fd, starts, sizes)``, the shard file's descriptor (valid while the shard is
        open) and ``int64`` byte offsets and :meth:`image_sizes` of each image member
        (-1 size, and an unusable offset, where there is no usable image).

        Raises:
            ValueError: the shard is closed.
        """
        return (self._index.fileno(), self._index.offsets[self._image[js]],
                self.image_sizes(js))

    def where(self, j: int, /) -> tuple:
        """``(key, member, byte offset)`` of sample ``j`` (its image member, else its first),
        as :meth:`sample` reports them: for error messages."""
        im = int(self._image[j])
        pos = im if im >= 0 else int(self._first[j])
        return self._keys[j], self._names[pos], int(self._index.offsets[pos])

    def labels(self, label_key, /) -> tuple:
        """Every sample's label, parsed once: ``(values, errors)``, ``values[j]`` the
        label (None without a label member) and ``errors`` ``{j: SampleError}`` for labels
        that do not parse (or ``TarFormatError`` for bytes gone since indexing) (see :func:`parse_label`). A shard's labels are read with one
        ``pread`` each."""
        values, errors = [None] * self._n, {}
        index = self._index
        js = np.flatnonzero(self._label >= 0)
        if js.size and self._plain_labels(js, values, errors):
            return values, errors
        for j, lb in zip(js.tolist(), self._label[js].tolist()):
            try:
                values[j] = parse_label(index.member(lb), self._label_ext[j], label_key)
            except TurboLoaderError as exc:  # unparsable, or the file changed since
                errors[j] = exc
        return values, errors

    def _plain_labels(self, js, values, errors) -> bool:
        """:meth:`labels` of the samples ``js`` when every label is a ``.cls`` member of at
        most 4096 bytes (the usual shard): all read in one native call, each parsed as
        :func:`parse_label` does (an ASCII integer directly, anything else by
        :func:`parse_label` itself). False (nothing filled) when that does not apply or the
        file no longer holds a label's bytes."""
        label_ext = self._label_ext
        if any(label_ext[j] != "cls" for j in js.tolist()):
            return False
        members = self._label[js]
        sizes = self._index.sizes[members]
        if int(sizes.max()) > 4096:
            return False
        buf = bytearray(int(sizes.sum()))
        if self._index.read_many_into(members, buf) != len(members):
            return False
        data = bytes(buf)
        ends = np.cumsum(sizes)
        low, high = -(1 << 63), 1 << 63
        for j, a, b in zip(js.tolist(), (ends - sizes).tolist(), ends.tolist()):
            text = data[a:b]
            try:
                value = int(text)   # ASCII digits, sign, whitespace: parse_label's value
                if low <= value < high:
                    values[j] = value
                    continue
            except ValueError:
                pass
            try:  # a BOM, other whitespace or digits, not a number, out of range
                values[j] = parse_label(text, "cls", None)
            except TurboLoaderError as exc:
                errors[j] = exc
        return True

    def close(self) -> None:
        self._index.close()


def _stream_error(url, exc):
    err = TarFormatError(f"cannot read compressed TAR stream: {exc}")
    err.add_note(f"archive: {url}")
    return err


class StreamShard:
    """Front-to-back reader of a shard: a compressed ``.tar.gz`` / ``.tgz`` (stdlib
    ``tarfile``), or a remote ``.tar`` read without a shard cache (the native TAR kernel over
    a window of the stream: :func:`~turboloader.io.tar.scan_stream`).

    ``sample(j)`` is cheap when ``j`` is at or after the last sample read; going back
    re-opens and re-decompresses the stream from the start.
    """

    random_access = False

    def __init__(self, url: str, /, *, opener=None):
        self.url = url
        self._opener = opener  # () -> binary file object; default: open the path ``url``
        self._it = None
        self._next = 0  # index of the sample the open stream yields next
        self._broken = None  # (sample index, exception) where the stream failed for good
        self._extra = frozenset()  # extensions read besides the image and label members
        self._image_exts = IMAGE_EXTENSIONS

    def _samples(self, *, read=True):
        """Yield SampleRecords in stream order (data read only for image/label members)."""
        if not is_stream(self.url):
            yield from self._plain_samples(read=read)
            return
        url = self.url
        fileobj = None
        try:
            if self._opener is None:
                tf = tarfile.open(url, mode="r|*")
            else:
                fileobj = self._opener()
                tf = tarfile.open(fileobj=fileobj, mode="r|*")
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            if fileobj is not None:
                fileobj.close()
            if isinstance(exc, (FileNotFoundError, TurboLoaderError)):
                raise
            raise _stream_error(url, exc) from exc
        with tf, (fileobj if fileobj is not None else contextlib.nullcontext()):
            key = members = problem = first = None
            try:
                for info in tf:
                    if not info.isfile():
                        continue
                    k, ext = split_key(info.name)
                    if k is None:
                        continue
                    if k != key:
                        if key is not None:
                            yield self._record(key, members, problem, first)
                        key, members, problem, first = k, {}, None, (info.name, info.offset_data)
                    if ext in members:
                        problem = problem or f"duplicate member {info.name!r} in sample {key!r}"
                        continue
                    data = None
                    if read and (ext in _WANTED or ext in self._extra):
                        # the header's size bounds the read: a small .tar.gz can hold a
                        # member of any size, so the member-size limit applies before it
                        try:
                            check_size(f"member {info.name!r} of {url!r}", info.size)
                            data = tf.extractfile(info).read()
                        except UnreadableFileError as exc:  # not read: the sample is skipped
                            problem = problem or str(exc)
                    members[ext] = (info.name, info.offset_data, data)
            except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
                if isinstance(exc, TurboLoaderError):  # a remote shard that stayed unavailable
                    raise
                raise _stream_error(url, exc) from exc
            if key is not None:
                yield self._record(key, members, problem, first)

    def _plain_samples(self, *, read=True):
        """:meth:`_samples` of an uncompressed ``.tar`` stream (a remote shard read without
        a shard cache): its members come from :func:`~turboloader.io.tar.scan_stream`, the
        native kernel that indexes local shards, not from ``tarfile``."""
        from turboloader.io.tar import scan_stream

        url = self.url
        wanted = _WANTED | self._extra

        def want(name):
            return read and split_key(name)[1] in wanted

        try:
            fileobj = self._opener() if self._opener is not None else open(url, "rb")
        except OSError as exc:
            if isinstance(exc, (FileNotFoundError, TurboLoaderError)):
                raise
            raise TarFormatError(f"cannot read TAR stream {url!r}: {exc}") from exc
        with fileobj:
            key = members = problem = first = None
            try:
                for name, offset, size, data, skipped in scan_stream(fileobj, want=want):
                    k, ext = split_key(name)
                    if k is None:
                        continue
                    if k != key:
                        if key is not None:
                            yield self._record(key, members, problem, first)
                        key, members, problem, first = k, {}, None, (name, offset)
                    if ext in members:
                        problem = problem or f"duplicate member {name!r} in sample {key!r}"
                        continue
                    if skipped is not None:
                        problem = problem or f"{skipped} in {url!r}"
                    members[ext] = (name, offset, data)
            except TarFormatError as exc:
                exc.add_note(f"archive: {url}")
                raise
            except OSError as exc:
                if isinstance(exc, TurboLoaderError):  # a remote shard that stayed unavailable
                    raise
                raise TarFormatError(f"cannot read TAR stream {url!r}: {exc}") from exc
            if key is not None:
                yield self._record(key, members, problem, first)

    def use_image_extensions(self, exts, /) -> None:
        """As :meth:`TarShard.use_image_extensions`."""
        self._image_exts = tuple(exts)
        self._extra = self._extra | frozenset(exts)

    def read_members(self, exts, /) -> None:
        """Also read the members with these extensions (``SampleRecord.extras``)."""
        self._extra = self._extra | frozenset(exts)

    def _record(self, key, members, problem, first):
        iext = _pick(members, self._image_exts)
        lext = _pick(members, LABEL_EXTENSIONS)
        name, offset = (members[iext][0], members[iext][1]) if iext else first
        image = members[iext][2] if iext else None
        label = members[lext][2] if lext else None
        nbytes = (len(image) if image is not None else 0) + (len(label) if label is not None else 0)
        extras = ({ext: m[2] for ext, m in members.items() if ext in self._extra and m[2] is not None}
                  if self._extra else None)
        return SampleRecord(self.url, key, name, offset, image, iext, label, lext, problem, nbytes,
                            extras)

    def count(self) -> int:
        """Number of samples: one full decompression pass."""
        return sum(1 for _ in self._samples(read=False))

    def sample(self, j: int, /) -> SampleRecord:
        """The members of sample ``j``, read from the stream.

        Raises:
            TarFormatError: the stream is corrupt or truncated before sample ``j`` (the
                message names the shard, the sample and where the stream broke), or has
                fewer samples than were counted.
            RemoteShardError: a remote stream stayed unavailable before sample ``j``.
        """
        broken = self._broken
        if broken is not None and j >= broken[0]:
            raise self._after_break(j)
        if self._it is None or j < self._next:
            self.close()
            self._it = self._samples()
            self._next = 0
        while True:
            try:
                rec = next(self._it)
            except StopIteration:
                n = self._next
                self.close()
                raise TarFormatError(
                    f"shard {self.url!r} has {n} samples now, so there is no sample #{j}: the "
                    f"stream changed since its samples were counted") from None
            except TurboLoaderError as exc:
                # the stream cannot go on: later samples fail at once, with the same reason
                # (re-reading a truncated stream from the start would fail at the same place)
                at = self._next
                self._broken = (at, exc)
                self.close()
                if j == at:
                    exc.add_note(f"while reading sample #{j} of shard {self.url!r}")
                    raise
                raise self._after_break(j) from exc
            self._next += 1
            if self._next - 1 == j:
                return rec

    def _after_break(self, j):
        at, exc = self._broken
        kind = RemoteShardError if isinstance(exc, RemoteShardError) else TarFormatError
        return kind(f"sample #{j} of shard {self.url!r} cannot be read: the stream broke at "
                    f"sample #{at} ({type(exc).__name__}: {exc})")

    def close(self) -> None:
        if self._it is not None:
            self._it.close()
            self._it = None
        self._next = 0


def open_shard(url: str, /, *, cache: Any = None, strict: bool = False):
    """A :class:`TarShard` for ``.tar`` files, a :class:`StreamShard` for ``.tar.gz``/``.tgz``.

    Remote URLs: with ``cache`` (a :class:`~turboloader.io.shard_cache.ShardCache`) the shard
    is fetched into it and read locally; without, it is streamed (a :class:`StreamShard`).
    """
    if is_remote(url):
        if cache is not None:
            for attempt in range(3):
                path = cache.fetch(url)
                try:
                    if is_stream(url):
                        return StreamShard(url, opener=lambda: open(path, "rb"))
                    return TarShard(url, path=path, strict=strict)
                except FileNotFoundError:  # evicted (another process) since fetched
                    if attempt == 2:
                        raise
        return StreamShard(url, opener=lambda: fetch_pool().open(url))
    return StreamShard(url) if is_stream(url) else TarShard(url, strict=strict)


def random_access(url: str, /, *, cache=None) -> bool:
    """Whether the samples of shard ``url`` can be read in any order: local ``.tar``, or
    remote ``.tar`` with a shard cache."""
    return not is_stream(url) and (cache is not None or not is_remote(url))


def shard_set_file(shard: str, suffix: str) -> str | None:
    """The file of ``shard``'s shard set named ``<prefix><suffix>`` next to it (``suffix``:
    ``manifest.json`` or ``classes.json``), or None: the longest ``prefix`` that starts
    the shard's file name (``train-`` for ``train-00003.tar``), ``""`` last. Each output
    prefix of ``turboloader convert`` has its own, so splits share a folder."""
    directory, name = os.path.split(os.path.abspath(os.fspath(shard)))
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    prefixes = [n[: -len(suffix)] for n in names if n.endswith(suffix)]
    prefixes = [p for p in prefixes if name.startswith(p) and not p.endswith(".tar.")]
    if not prefixes:
        return None
    return os.path.join(directory, max(prefixes, key=len) + suffix)


def read_classes(urls, /):
    """Class names of a shard set: the JSON list in the classes file next to the first
    (local) shard, as ``turboloader convert`` writes it (``train-classes.json`` for
    ``train-00000.tar``, else ``classes.json``); None when there is none.

    Raises:
        ManifestError: the file is not a JSON list of strings.
    """
    from turboloader.errors import ManifestError

    urls = list(urls)
    if not urls or "://" in urls[0]:
        return None
    path = shard_set_file(urls[0], "classes.json")
    if path is None or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8-sig") as f:
            classes = json.load(f)
    except ValueError as exc:
        raise ManifestError(f"{path!r} is not valid JSON: {exc}") from None
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise ManifestError(f"{path!r} is not a JSON list of class names")
    return classes


def count_samples(url: str, /, *, cache=None, strict=False) -> int:
    """Number of samples in a shard (a ``.tar.gz`` is decompressed once to count them; a
    remote shard is read once, into ``cache`` if given).

    Raises:
        TarFormatError: the shard is malformed. FileNotFoundError: it does not exist.
        RemoteShardError: a remote shard stayed unavailable.
    """
    shard = open_shard(url, cache=cache, strict=strict)
    try:
        return shard.count() if isinstance(shard, StreamShard) else len(shard)
    finally:
        shard.close()



class TarShards:
    """How :class:`turboloader.TarDataset` lists, counts and opens its shards: ``names``
    (the expanded shard list), ``count(name)``, ``random_access(name)``, ``open(name)`` (a
    :class:`TarShard` or :class:`StreamShard`) and ``classes()``. Other shard formats
    provide the same (:class:`turboloader.io.parquet.ParquetShards`).

    Raises:
        FileNotFoundError, ValueError, TypeError: as :func:`expand_urls`.
    """

    def __init__(self, urls, /, *, cache=None, strict=False):
        self.names = expand_urls(urls)
        self.cache = cache
        self.strict = bool(strict)
        self._prefetched = False

    def count(self, name) -> int:
        """Samples in shard ``name`` (see :func:`count_samples`; ``strict`` applies)."""
        if self.cache is not None and not self._prefetched:
            # counting reads every remote shard through the cache: download them concurrently
            self._prefetched = True
            self.cache.prefetch(self.names, at_once=16)
        return count_samples(name, cache=self.cache, strict=self.strict)

    def counts(self, names) -> list:
        """The sample count of each shard of ``names`` (an int, or the exception counting
        it raised), in order: local shards counted here; remote ones from a shard index
        next to them, the node-local count cache, or read in parallel (see
        :mod:`turboloader.io.counts`)."""
        from turboloader.io.counts import count_shards

        return count_shards(names, self.count, strict=self.strict)

    def random_access(self, name) -> bool:
        return random_access(name, cache=self.cache)

    def open(self, name):
        return open_shard(name, cache=self.cache)

    def extensions(self, name):
        """The member extensions in shard ``name``, or None where finding them would read
        the shard (compressed or remote shards)."""
        if not random_access(name) or is_remote(name):
            return None
        shard = self.open(name)
        try:
            return shard.extensions()
        finally:
            shard.close()

    def classes(self):
        """Class names from ``classes.json`` next to the shards (see :func:`read_classes`)."""
        return read_classes(self.names)
