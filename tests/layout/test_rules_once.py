"""Each rule written once: the manifest label rule, the normalize fold, the seed names, the
way a small file is replaced whole."""

import pytest

import turboloader
from turboloader.compat import seeds
from turboloader.compat.names import SEED_NAMES, TOP_LEVEL_SEED_NAMES
from turboloader.decode.executor import normalize_affine
from turboloader.io.manifest import int_label


def test_a_manifest_label_is_read_by_one_rule():
    assert [int_label(v) for v in (" -3", 7, "cat", True, "", "--3", 3.0)] == \
        [-3, 7, None, None, None, None, None]
    from turboloader.tools.sources import _column_int

    # a label column also takes integral floats; "--3" is not an int (it raised ValueError)
    assert [_column_int(v) for v in (3.0, 2.5, "--3", "4", None, False)] == \
        [3, None, None, 4, None, None]


def test_the_normalize_fold():
    scale, bias = normalize_affine((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    x = 200.0
    for c, (m, s) in enumerate(zip((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))):
        assert x * scale[c] + bias[c] == pytest.approx((x / 255 - m) / s, rel=1e-12)
    # the fused plan folds its Normalize with it
    import torch

    from turboloader import transforms as T

    plan = T.plan(T.Compose([T.CenterCrop(8), T.ToTensor(),
                             T.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.4))]))
    assert plan._fused.affine == normalize_affine((0.5, 0.4, 0.3), (0.2, 0.3, 0.4))
    assert torch.float32 is plan._fused.output_dtype


def test_the_seed_names_are_written_once():
    assert set(seeds.__all__) >= set(SEED_NAMES)
    for name in TOP_LEVEL_SEED_NAMES:
        assert getattr(turboloader, name) is getattr(seeds, name)
        assert name not in turboloader.__all__
    from turboloader import data

    # one route to the shard list and the shard cache: turboloader.io (the top level too)
    assert turboloader.ShardCache is turboloader.io.ShardCache
    for name in ("ShardCache", "expand_urls", "braceexpand"):
        assert not hasattr(data, name)


def test_a_small_file_is_replaced_whole_by_one_helper():
    # every write-then-rename of a small file goes through io.files.replace_file; the three
    # writers that stream a large file into their temporary name (a converted TAR shard, a
    # TBL file, a shard the ShardCache downloads) rename it themselves
    import ast
    import pathlib

    root = pathlib.Path(turboloader.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("replace", "rename")
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "os"):
                found.add(path.relative_to(root).as_posix())
    assert found == {"io/files.py", "io/tbl.py", "tools/sinks.py", "io/shard_cache.py"}
