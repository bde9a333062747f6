"""The ``manifest.json`` a conversion writes beside its output, and its check.

A manifest lists every output file with its size and SHA-256 and says whether the job
completed; :func:`check_manifest` (used by ``turboloader verify``) refuses an output that a
killed job left behind, or whose files changed since. Written atomically (temporary file,
then rename).
"""

from __future__ import annotations

import os

from turboloader.errors import ManifestError
from turboloader.io.files import replace_file
from turboloader.tools.sources import _IMAGE_EXT, _TarSource, detect_format

__all__ = ["MANIFEST", "check_manifest", "find_manifest"]

MANIFEST = "manifest.json"


def _sha256_file(path):
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_json_atomic(path, obj):
    """Write ``obj`` as JSON to ``path`` through a temporary file and a rename, so a reader
    sees the old file or the whole new one, never a partial one."""
    import json

    replace_file(path, json.dumps(obj, indent=1).encode("utf-8"), durable=True)


def _manifest(layout, entries, *, classes, complete, shuffle_seed):
    return {"format": "turboloader-manifest", "version": 1, "layout": layout,
            "complete": bool(complete), "samples": sum(e["samples"] for e in entries),
            "classes": None if classes is None else list(classes),
            "shuffle_seed": shuffle_seed, "shards": entries}


def _folder_digest(directory):
    """``(samples, bytes, sha256)`` of the image files directly inside ``directory``: the
    hash runs over the sorted names and each file's bytes."""
    import hashlib

    h = hashlib.sha256()
    n = nbytes = 0
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.rpartition(".")[2].lower() not in _IMAGE_EXT or not os.path.isfile(path):
            continue
        from turboloader.io.files import read_file

        data = read_file(path)
        h.update(name.encode("utf-8", "surrogateescape") + b"\0")
        h.update(hashlib.sha256(data).digest())
        n += 1
        nbytes += len(data)
    return n, nbytes, h.hexdigest()


def _manifests_in(directory):
    """The TAR manifests in ``directory``: ``manifest.json`` and ``<prefix>manifest.json``
    (one per shard set), ``<shard>.tar.manifest.json`` (a single-file output)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(os.path.join(directory, n) for n in names if n.endswith(MANIFEST))


def _manifest_of_shard(shard):
    from turboloader.io.shards import shard_set_file

    own = os.path.abspath(os.fspath(shard)) + "." + MANIFEST
    return own if os.path.isfile(own) else shard_set_file(shard, MANIFEST)


def find_manifest(path, fmt=None):
    """The manifest that describes the dataset at ``path`` (a converted folder, a shard
    directory, a shard, a shard pattern), or None if there is none. A shard's manifest is
    its own ``<shard>.tar.manifest.json``, else its shard set's ``<prefix>manifest.json``
    (``train-manifest.json`` for ``train-00003.tar``; ``manifest.json`` for a directory
    output); a directory's is its ``manifest.json``, else its first shard set's."""
    path = os.fspath(path)
    if os.path.isdir(path):
        own = os.path.join(path, MANIFEST)
        if os.path.isfile(own) or (fmt or detect_format(path)) == "folder":
            return own if os.path.isfile(own) else None
        found = _manifests_in(path)
        return found[0] if found else None
    try:
        first = _TarSource(path).urls[0]
    except (OSError, ValueError):
        first = path
    return _manifest_of_shard(first)


def _load_manifest(found):
    import json

    with open(found, encoding="utf-8-sig") as f:
        try:
            man = json.load(f)
        except ValueError as exc:
            raise ManifestError(f"{found!r} is not valid JSON: {exc}") from None
    if not isinstance(man, dict) or man.get("format") != "turboloader-manifest":
        raise ManifestError(f"{found!r} is not a turboloader manifest")
    if not man.get("complete"):
        raise ManifestError(f"{found!r}: the conversion that wrote this output did not finish "
                            f"(killed or failed); the output is incomplete")
    return man


def _check_entries(found, man):
    """Every shard (class directory) ``man`` lists matches; returns their absolute paths."""
    base = os.path.dirname(found)
    listed = set()
    for e in man["shards"]:
        p = os.path.join(base, e["path"])
        listed.add(os.path.abspath(p))
        if man["layout"] == "folder":
            if not os.path.isdir(p):
                raise ManifestError(f"{found!r}: class directory {e['path']!r} is missing")
            got = dict(zip(("samples", "bytes", "sha256"), _folder_digest(p)))
        else:
            if not os.path.isfile(p):
                raise ManifestError(f"{found!r}: shard {e['path']!r} is missing")
            from turboloader.io.shards import count_samples

            got = {"bytes": os.path.getsize(p)}
            if got["bytes"] == e["bytes"]:
                got["sha256"] = _sha256_file(p)
                if got["sha256"] == e["sha256"]:
                    got["samples"] = count_samples(p)
        for k in ("samples", "bytes", "sha256"):
            if k in got and got[k] != e[k]:
                raise ManifestError(f"{found!r}: {e['path']!r}: {k} is {got[k]}, the manifest "
                                    f"records {e[k]}")
    return listed


def check_manifest(path, fmt=None):
    """Check a converted folder or TAR-shard output against its manifest.

    Every shard (TAR) or class directory (folder) listed must exist with the recorded
    sample count, size and SHA-256, and every shard asked about (all of a directory's) must
    be listed in its manifest. A directory holding several shard sets (``train-*.tar`` and
    ``val-*.tar``, each with its ``<prefix>manifest.json``) is checked set by set.

    Returns:
        The manifest (a dict); for several shard sets, their union (``samples`` summed,
        ``shards`` concatenated, ``manifests``: their paths).

    Raises:
        ManifestError: no manifest, a manifest of an unfinished conversion, or a mismatch
            (the message names the shard and the field).

    Example:
        >>> check_manifest("out/shards")["samples"]       # doctest: +SKIP
        3000
    """
    fmt = fmt or detect_format(path)
    path = os.fspath(path)
    missing = ManifestError(
        f"{path!r} has no {MANIFEST}: its completeness cannot be checked (a "
        f"conversion killed before the end leaves no manifest); re-run 'turboloader "
        f"convert', or pass --no-manifest to verify data not written by it")
    if fmt == "folder":
        found = find_manifest(path, fmt)
        if found is None:
            raise missing
        man = _load_manifest(found)
        _check_entries(found, man)
        return man
    urls = _TarSource(path).urls
    per_shard = {u: _manifest_of_shard(u) for u in urls}
    found = set(per_shard.values()) - {None}
    if os.path.isdir(path):
        found |= set(_manifests_in(path))
    if not found:  # shards beside other outputs' manifests are in none of them
        found = {m for u in urls for m in _manifests_in(os.path.dirname(os.path.abspath(u)))}
    if not found:
        raise missing
    mans = {}
    for f in sorted(found):
        man = _load_manifest(f)
        mans[f] = (man, _check_entries(f, man))
    for u, f in per_shard.items():
        if f is None or os.path.abspath(u) not in mans[f][1]:
            where = f or ", ".join(sorted(mans))
            raise ManifestError(f"{where!r}: shard {u!r} is not in the manifest")
    if len(mans) == 1:
        return next(iter(mans.values()))[0]
    all_ = [m for m, _ in mans.values()]
    classes = [m.get("classes") for m in all_]
    return {"format": "turboloader-manifest", "version": 1, "layout": "tar",
            "complete": True, "samples": sum(m["samples"] for m in all_),
            "classes": classes[0] if all(c == classes[0] for c in classes) else None,
            "shards": [e for m in all_ for e in m["shards"]], "manifests": sorted(mans)}
