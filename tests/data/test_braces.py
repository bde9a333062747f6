"""Shard lists expand braces with WebDataset's semantics (the ``braceexpand`` package, which
webdataset itself uses): stepped ranges, nested groups, escapes, zero padding."""

import braceexpand as oracle
import pytest

from turboloader.io.shards import braceexpand, expand_urls

PATTERNS = [
    "train-{00000..00003}.tar", "{0..6..2}", "{00..10..5}", "{10..0..5}", "{3..1}",
    "{8..11}", "{08..11}", "{a..e}", "{a,{b,c}}-x", "a{b,{c,{d,e}}}f", "{a,b}/{1..2}.tar",
    r"lit-\{x,y\}.tar", r"{a,b}\{1\}", "plain.tar", "{single}", "s3://b/p-{0..2}.tar",
    "{-2..2}", "x{,y}z", "{0..3}{a,b}",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_braceexpand_matches_webdataset(pattern):
    assert braceexpand(pattern) == list(oracle.braceexpand(pattern))


def test_stated_cases():
    assert braceexpand("{0..6..2}") == ["0", "2", "4", "6"]
    assert braceexpand("a{b,{c,d}}e") == ["abe", "ace", "ade"]
    assert braceexpand(r"\{x,y\}") == ["{x,y}"]
    assert braceexpand("{00..10..5}") == ["00", "05", "10"]


def test_unbalanced_is_a_value_error():
    with pytest.raises(ValueError, match="unbalanced"):
        braceexpand("train-{0..3.tar")


def test_expand_urls_uses_it(tmp_path):
    for i in (0, 2, 4):
        (tmp_path / f"s-{i}.tar").write_bytes(b"")
    assert expand_urls(str(tmp_path / "s-{0..4..2}.tar")) == [
        str(tmp_path / f"s-{i}.tar") for i in (0, 2, 4)]
