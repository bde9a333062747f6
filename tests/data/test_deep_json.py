"""JSON nested deeper than anything a label needs (700 lists: past Python's recursion limit
for a recursive copy; 2000: past json's own parser) is a typed error of its sample, which
on_error="skip" skips, in every place a dataset parses JSON: a ``.json`` label, a ``.json``
field, a manifest row. Values that deep but not from JSON (a Parquet row, a Python label)
are copied without recursion."""

import copy
import json

import pytest
import torch
from helpers.shards import jpeg, labelled_members, size_of, write_tar

import turboloader
from turboloader.data.cache import own_copy
from turboloader.errors import ManifestError, SampleError
from turboloader.io.shards import MAX_JSON_DEPTH, parse_json


def nested(depth):
    return "[" * depth + "1" + "]" * depth


@pytest.mark.parametrize("depth", [700, 2000])
def test_deep_json_label_is_skipped_and_counted(tmp_path, depth):
    path = write_tar(tmp_path / "s.tar", labelled_members(range(5)) + [
        ("deep.jpg", jpeg(7)), ("deep.json", b'{"label": %s}' % nested(depth).encode())])
    ds = turboloader.TarDataset([str(path)], size_of, shuffle=False, on_error="skip")
    labels = [y for _, ys in torch.utils.data.DataLoader(ds, batch_size=3) for y in ys.tolist()]
    assert len(labels) == 6 and set(labels) == {0, 1, 2, 3, 4}  # the skipped one replaced
    (skip,) = ds.stats()["skipped"]
    assert skip["key"] == "deep" and f"more than {MAX_JSON_DEPTH}" in skip["reason"]


def test_deep_json_label_raises_a_sample_error_naming_the_key(tmp_path):
    path = write_tar(tmp_path / "s.tar", labelled_members(range(2)) + [
        ("deep.jpg", jpeg(7)), ("deep.json", b'{"label": %s}' % nested(700).encode())])
    ds = turboloader.TarDataset([str(path)], size_of, shuffle=False)
    with pytest.raises(SampleError) as info:
        list(ds)
    text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert "'deep'" in text and "s.tar" in text


def test_deep_json_field_is_skipped(tmp_path):
    members = []
    for i in range(4):
        members += [(f"{i:03d}.jpg", jpeg(i)), (f"{i:03d}.json", json.dumps({"i": i}).encode())]
    members += [("deep.jpg", jpeg(9)), ("deep.json", nested(700).encode())]
    path = write_tar(tmp_path / "s.tar", members)
    ds = turboloader.TarDataset([str(path)], size_of, shuffle=False, on_error="skip",
                                fields=("jpg", "json"))
    got = [meta["i"] for _, meta in ds]
    assert len(got) == 5 and set(got) == {0, 1, 2, 3}
    (skip,) = ds.stats()["skipped"]
    assert skip["key"] == "deep"


def test_deep_manifest_row_is_a_manifest_error(tmp_path):
    (tmp_path / "a.jpg").write_bytes(jpeg(1))
    man = tmp_path / "m.jsonl"
    man.write_text(json.dumps({"path": "a.jpg", "label": 1}) + "\n" +
                   '{"path": "a.jpg", "label": %s}\n' % nested(700))
    with pytest.raises(ManifestError, match="line 2"):
        turboloader.ManifestDataset(str(man), str(tmp_path), size_of)


def test_parse_json_bound():
    assert parse_json(nested(MAX_JSON_DEPTH)) == json.loads(nested(MAX_JSON_DEPTH))
    assert parse_json('{"a": [{"b": [1, 2]}], "c": "x"}') == {"a": [{"b": [1, 2]}], "c": "x"}
    for text in (nested(MAX_JSON_DEPTH + 1), nested(5000),
                 '{"a": ' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1)):
        with pytest.raises(ValueError, match="deep"):
            parse_json(text)


def test_own_copy_of_a_value_deeper_than_the_recursion_limit():
    deep = 1
    for i in range(5000):
        deep = [deep, {"i": i, "t": (i, [i])}]
    out = own_copy(deep)
    a, b = deep, out
    while isinstance(a, list):   # equal, and nothing mutable shared
        assert a is not b and a[1] == b[1] and a[1] is not b[1] and a[1]["t"][1] is not b[1]["t"][1]
        a, b = a[0], b[0]
    assert a == b == 1


def test_own_copy_is_deepcopy_for_shallow_values():
    shared = [1, 2]
    value = {"s": (shared, shared), "t": torch.ones(2), "n": None, "k": (1, "x"), "l": [{}]}
    ours, theirs = own_copy(value), copy.deepcopy(value)
    assert ours["s"][0] is ours["s"][1] and ours["s"][0] is not shared
    assert ours["t"] is not value["t"] and torch.equal(ours["t"], theirs["t"])
    assert {k: v for k, v in ours.items() if k != "t"} == {k: v for k, v in theirs.items()
                                                            if k != "t"}
    cycle = []
    cycle.append(cycle)
    copied = own_copy(cycle)
    assert copied[0] is copied and copied is not cycle


def test_a_value_that_cannot_be_copied_is_a_sample_error():
    import threading

    with pytest.raises(SampleError, match="cannot be copied"):
        own_copy({"lock": threading.Lock()})
