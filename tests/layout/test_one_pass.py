"""One pass with a grouping value (issue 41): ``TarDataset`` sets a pass up in one place,
``_pass`` (epoch -> topology -> items -> resume -> lease -> cursor -> grouping), whatever
the pass yields; ``batched()`` and ``bucketed()`` are grouping values behind thin views that
set up nothing and state nothing of their own.

Checked over the AST of the package: the steps of a pass are called from one place each,
and the views define none of the pass's or the checkpoint's methods."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "turboloader"


def _tree(rel):
    return ast.parse((PKG / rel).read_text())


def _callers(name):
    """``{"module.Class.function"}`` of every function of ``turboloader.data`` (where the
    datasets' passes are) that calls ``name`` (a plain name or an attribute)."""
    out = set()
    for path in sorted((PKG / "data").rglob("*.py")):
        mod = ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
        tree = ast.parse(path.read_text())
        for cls in [None, *[n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]]:
            body = tree.body if cls is None else cls.body
            for fn in body:
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call):
                        f = node.func
                        called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                        if called == name:
                            where = mod if cls is None else f"{mod}.{cls.name}"
                            out.add(f"{where}.{fn.name}")
    return out


def test_a_pass_is_set_up_in_one_place():
    td = "turboloader.data.tar_dataset.TarDataset"
    assert _callers("_take_resume") == {f"{td}._pass"}
    assert _callers("_worker_items") <= {f"{td}._pass", "turboloader.data.buckets.Bucketed.marks"}
    assert _callers("_stream") == {f"{td}._pass"}
    assert _callers("_Cursor") == {f"{td}._stream"}
    # the two entries (torch's worker processes, the thread backend's worker streams)
    assert _callers("_pass") == {f"{td}._iter", f"{td}.worker_stream"}
    assert _callers("_pass_epoch") == {f"{td}._iter"}


def test_the_views_are_a_dataset_and_a_grouping():
    pass_methods = {"__iter__", "worker_stream", "worker_sizes", "state_dict",
                    "load_state_dict", "_open", "_stream", "_marks", "_sent"}
    for rel, name in (("data/tar_dataset.py", "TarBatches"), ("data/buckets.py", "TarBuckets")):
        (cls,) = [n for n in ast.walk(_tree(rel)) if isinstance(n, ast.ClassDef)
                  and n.name == name]
        assert [b.id for b in cls.bases if isinstance(b, ast.Name)] == ["GroupedView"], name
        own = {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
        assert not own & pass_methods, (name, sorted(own & pass_methods))
    # and the checkpoint rule is written once: no state dict is assembled outside it
    for rel in ("data/tar_dataset.py", "data/buckets.py", "data/grouping.py"):
        text = (PKG / rel).read_text()
        assert '"turboloader.TarDataset/1"' not in text, rel
