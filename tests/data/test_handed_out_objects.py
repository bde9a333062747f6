"""Values a dataset hands out are the caller's own: an in-place edit of a label, a JSON
dict, a ``.npy`` array, a second image or a ``collate_fields`` list never shows up in a later
epoch. The decoded-sample cache keeps what it stores private (copied in and out), and a
``.tar`` shard's parsed label table hands out copies of mutable labels."""

import io
import json

import numpy as np
import pytest
import torch
from helpers.shards import jpeg, write_tar

from turboloader.data import TarDataset, collate_fields

N = 6


def _npy(i):
    buf = io.BytesIO()
    np.save(buf, np.arange(4, dtype=np.int64) + i)
    return buf.getvalue()


def _meta(i):
    return {"label": i, "tags": [i] * (1 + i % 3), "box": {"xy": [i, 2 * i]}}  # ragged


def _shards(tmp_path):
    members = []
    for i in range(N):
        members += [(f"{i:03d}.jpg", jpeg(i)), (f"{i:03d}.json", json.dumps(_meta(i)).encode()),
                    (f"{i:03d}.npy", _npy(i)), (f"{i:03d}.png", jpeg(i + 50, fmt="PNG"))]
    return [write_tar(tmp_path / "a.tar", members[:4 * (N // 2)]),
            write_tar(tmp_path / "b.tar", members[4 * (N // 2):])]


def _vandalise(value):
    """Edit every mutable thing inside ``value`` in place."""
    if isinstance(value, dict):
        for k in list(value):
            if isinstance(value[k], (dict, list, np.ndarray, torch.Tensor)):
                _vandalise(value[k])
            else:
                value[k] = "edited"
        value["added"] = True
    elif isinstance(value, list):
        for k, v in enumerate(value):
            if isinstance(v, (dict, list, np.ndarray, torch.Tensor)):
                _vandalise(v)
            else:
                value[k] = "edited"
        value.append("added")
    elif isinstance(value, (np.ndarray, torch.Tensor)):
        value.fill(-7) if isinstance(value, np.ndarray) else value.fill_(-7)
    elif isinstance(value, tuple):
        for v in value:
            _vandalise(v)


def _order(value):
    return json.dumps(value, sort_keys=True, default=str)


@pytest.mark.parametrize("cache", [None, "4MB"])
def test_an_edited_json_label_is_not_seen_in_later_epochs(cache, tmp_path):
    """``label_key=None``: the whole ``.json`` dict is the label, parsed once per shard."""
    ds = TarDataset(_shards(tmp_path), None, label_key=None, cache=cache, seed=1)
    for e in range(3):
        ds.set_epoch(e)
        got = sorted(((img, y) for img, y in ds), key=lambda s: _order(s[1]))
        assert [y for _, y in got] == sorted((_meta(i) for i in range(N)), key=_order), \
            f"epoch {e}"
        for _, y in got:
            _vandalise(y)


@pytest.mark.parametrize("cache", [None, "4MB"])
def test_edited_fields_are_not_seen_in_later_epochs(cache, tmp_path):
    """``fields=``: a JSON dict, a ``.npy`` array and a second image, edited in place."""
    ds = TarDataset(_shards(tmp_path), None, fields=("__key__", "jpg", "npy", "png", "json"),
                    cache=cache, seed=1)
    from PIL import Image

    want_png = {i: torch.from_numpy(np.array(Image.open(io.BytesIO(jpeg(i + 50, fmt="PNG")))))
                .permute(2, 0, 1) for i in range(N)}
    for e in range(3):
        ds.set_epoch(e)
        got = sorted(ds, key=lambda s: s[0])
        assert [s[0] for s in got] == [f"{i:03d}" for i in range(N)]
        for i, (_, _, arr, png, meta) in enumerate(got):
            assert meta == _meta(i), f"epoch {e}"
            assert np.array_equal(arr, np.arange(4) + i), f"epoch {e}"
            assert torch.equal(png, want_png[i]), f"epoch {e}"
        for sample in got:
            _vandalise(sample[2:])


def test_edited_collate_fields_lists_are_not_seen_in_later_epochs(tmp_path):
    """In-process batches through ``collate_fields``, with the cache on."""
    ds = TarDataset(_shards(tmp_path), None, fields=("jpg", "json"), cache="4MB", seed=1)
    dl = torch.utils.data.DataLoader(ds, batch_size=3, collate_fn=collate_fields)
    for e in range(3):
        ds.set_epoch(e)
        batches = list(dl)
        assert all(isinstance(ms, list) for _, ms in batches)  # ragged: kept as lists
        metas = sorted((m for _, ms in batches for m in ms), key=_order)
        assert metas == sorted((_meta(i) for i in range(N)), key=_order), f"epoch {e}"
        for _, ms in batches:
            _vandalise(ms)


def test_an_edited_manifest_column_is_not_seen_in_later_epochs(tmp_path):
    """A JSON Lines column holding a dict (the parsed manifest is kept for every epoch)."""
    from turboloader.data import ManifestDataset

    lines = []
    for i in range(N):
        (tmp_path / f"{i}.jpg").write_bytes(jpeg(i))
        lines.append(json.dumps({"path": f"{i}.jpg", "meta": _meta(i)}))
    (tmp_path / "list.jsonl").write_text("\n".join(lines) + "\n")
    ds = ManifestDataset(tmp_path / "list.jsonl", fields=("path", "meta"), seed=1)
    for e in range(2):
        ds.set_epoch(e)
        got = [ds[i][1] for i in range(N)]
        assert got == [_meta(i) for i in range(N)], f"epoch {e}"
        _vandalise(got)
