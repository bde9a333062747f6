"""Where a conversion writes: a TBL file, TAR shards or a folder tree.

Each sink takes samples in order, writes them (to temporary names first, renamed into
place) and records the :mod:`~turboloader.tools.manifests` manifest of what it wrote.
The job that drives them is :func:`turboloader.tools.convert.convert`.
"""

from __future__ import annotations

import io
import os
import tarfile

import numpy as np

from turboloader.errors import SampleError, TurboLoaderError
from turboloader.io.codec import Codec
from turboloader.io.tbl import TBLWriter
from turboloader.tools.manifests import (MANIFEST, _folder_digest, _manifest, _sha256_file,
                                         _write_json_atomic)
from turboloader.tools.sources import _EXT_OF, _unsafe_name

__all__ = []


def _encode_png(img):
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG", compress_level=1)
    return buf.getvalue()



class _TBLSink:
    def __init__(self, path, *, classes, metadata, compression, overwrite):
        meta = dict(metadata)
        if classes is not None:
            meta["classes"] = list(classes)
        self.writer = TBLWriter(path, compression=compression, metadata=meta,
                                overwrite=overwrite)
        self.outputs = [os.fspath(path)]

    def write(self, s):
        before = self.writer._pos
        try:
            self.writer.write(s.data, key=s.key, label=s.label, codec=s.codec, width=s.width,
                              height=s.height)
        except (ValueError, OverflowError) as exc:  # a label or key TBL cannot store
            if isinstance(exc, TurboLoaderError):
                raise
            raise SampleError(f"cannot be stored in TBL: {exc}") from exc
        return self.writer._pos - before

    def close(self):
        self.writer.close()

    def abort(self):
        self.writer.abort()


def _tar_info(name, size):
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


class _TarSink:
    """WebDataset shards ``pattern % i``; each written to a temporary name and renamed."""

    def __init__(self, pattern, *, shard_size, overwrite, classes=None, shuffle_seed=None,
                 prefix=None):
        self.pattern = pattern
        self.shard_size = shard_size
        self.overwrite = overwrite
        self.outputs = []
        self._tar = self._tmp = None
        self._count = 0
        self.directory = directory = os.path.dirname(os.path.abspath(pattern))
        os.makedirs(directory, exist_ok=True)
        self.classes = classes
        self.shuffle_seed = shuffle_seed
        self._entries = []
        # an unfinished conversion leaves this "complete": false manifest behind. One
        # manifest (and classes.json) per shard set: <prefix>manifest.json for the pattern
        # <prefix>%05d.tar (train-manifest.json; manifest.json for a directory output), so
        # the splits of one dataset share a folder; a single x.tar gets x.tar.manifest.json
        if "%" in pattern:
            if prefix is None:
                base = os.path.basename(pattern)
                prefix = base[:base.index("%")]
            self._manifest = os.path.join(directory, prefix + MANIFEST)
            self._classes = os.path.join(directory, prefix + "classes.json")
        else:
            self._manifest = os.path.abspath(pattern) + "." + MANIFEST
            self._classes = os.path.join(directory, "classes.json")
        if not overwrite and os.path.exists(self._manifest):
            # checked before anything is written: a conversion refused here must not
            # leave the existing output's manifest marked unfinished
            raise FileExistsError(f"{self._manifest!r} exists: another conversion wrote "
                                  f"into {pattern!r} (use --overwrite, or overwrite=True, "
                                  f"to replace it, or another output name)")
        _write_json_atomic(self._manifest, _manifest("tar", [], classes=classes, complete=False,
                                                     shuffle_seed=shuffle_seed))

    def _open(self):
        path = self.pattern % len(self.outputs) if "%" in self.pattern else self.pattern
        if not self.overwrite and os.path.exists(path):
            raise FileExistsError(f"{path!r} exists (use --overwrite, or overwrite=True, to "
                                  f"replace it)")
        self._path = path
        self._tmp = f"{path}.tmp-{os.getpid()}"
        self._tar = tarfile.open(self._tmp, "w", format=tarfile.GNU_FORMAT)
        self._count = 0

    def _finish(self):
        if self._tar is not None:
            self._tar.close()
            os.replace(self._tmp, self._path)
            self.outputs.append(self._path)
            self._tar = None
            self._entries.append({"path": os.path.relpath(self._path, self.directory),
                                  "samples": self._count,
                                  "bytes": os.path.getsize(self._path),
                                  "sha256": _sha256_file(self._path)})

    def write(self, s):
        if s.codec == Codec.RAW:
            data, ext = _encode_png(np.frombuffer(s.data, np.uint8).reshape(s.height, s.width, 3)), "png"
        else:
            data, ext = s.data, _EXT_OF[s.codec]
        unsafe = _unsafe_name(s.key)
        if unsafe:
            raise SampleError(f"{unsafe}: {s.key!r}")
        if self._tar is None:
            self._open()
        self._tar.addfile(_tar_info(f"{s.key}.{ext}", len(data)), io.BytesIO(data))
        n = len(data)
        if s.label is not None:
            cls = str(s.label).encode("ascii")
            self._tar.addfile(_tar_info(f"{s.key}.cls", len(cls)), io.BytesIO(cls))
        self._count += 1
        if self.shard_size and self._count >= self.shard_size and "%" in self.pattern:
            self._finish()
        return n

    def close(self):
        self._finish()
        if self.classes is not None:
            _write_json_atomic(self._classes, list(self.classes))
        # last, and atomically: its presence says every shard above is complete
        _write_json_atomic(self._manifest, _manifest("tar", self._entries, classes=self.classes,
                                                     complete=True,
                                                     shuffle_seed=self.shuffle_seed))

    def abort(self):
        if self._tar is not None:
            self._tar.close()
            os.unlink(self._tmp)
            self._tar = None


class _FolderSink:
    """``root/<class>/<basename>.<ext>``; class names from the source, else ``class_NNNNN``."""

    def __init__(self, root, *, classes, overwrite, shuffle_seed=None):
        self.root = os.fspath(root)
        if os.path.isdir(self.root) and os.listdir(self.root) and not overwrite:
            raise FileExistsError(f"{self.root!r} is not empty (use --overwrite, or "
                                  f"overwrite=True, to write into it)")
        os.makedirs(self.root, exist_ok=True)
        self.classes = classes
        self.outputs = [self.root]
        self._seen = set()
        self.shuffle_seed = shuffle_seed
        self._manifest = os.path.join(self.root, MANIFEST)
        _write_json_atomic(self._manifest, _manifest("folder", [], classes=classes,
                                                     complete=False, shuffle_seed=shuffle_seed))

    def write(self, s):
        if s.label is None:
            raise SampleError("sample has no label, so no class directory")
        if self.classes is not None and 0 <= s.label < len(self.classes):
            cls = self.classes[s.label]
        else:
            cls = f"class_{s.label:05d}"
        base = s.key.replace("\\", "/").rsplit("/", 1)[-1]
        for part in (cls, base):
            if _unsafe_name(part) or "/" in part or part in ("", ".", ".."):
                raise SampleError(f"unsafe path component {part!r}")
        if s.codec == Codec.RAW:
            data = _encode_png(np.frombuffer(s.data, np.uint8).reshape(s.height, s.width, 3))
            ext = "png"
        else:
            data, ext = s.data, _EXT_OF[s.codec]
        rel = f"{cls}/{base}.{ext}"
        if rel in self._seen:
            raise SampleError(f"duplicate file name {rel!r} in the output folder")
        self._seen.add(rel)
        d = os.path.join(self.root, cls)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{base}.{ext}"), "wb") as f:
            f.write(data)
        return len(data)

    def close(self):
        entries = []
        for cls in sorted({rel.split("/", 1)[0] for rel in self._seen}):
            n, nbytes, digest = _folder_digest(os.path.join(self.root, cls))
            entries.append({"path": cls, "samples": n, "bytes": nbytes, "sha256": digest})
        _write_json_atomic(self._manifest, _manifest("folder", entries, classes=self.classes,
                                                     complete=True,
                                                     shuffle_seed=self.shuffle_seed))

    def abort(self):
        pass


def _dst_format(dst, to):
    if to:
        return to
    low = dst.lower()
    if low.endswith(".tbl"):
        return "tbl"
    if low.endswith(".tar") or "%" in dst:
        return "tar"
    return "folder"


def _tar_pattern(dst, shard_size):
    if "%" in dst:
        return dst
    if dst.lower().endswith(".tar"):
        return dst if not shard_size else dst[:-4] + "-%05d.tar"
    return os.path.join(dst, "shard-%05d.tar")
