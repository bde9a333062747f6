"""The package is typed (PEP 561) and type-checks: ``py.typed`` ships with it, every public
signature (the names of ``__all__``, the package's and each subpackage's) is annotated, the
protocols are declared, and mypy passes at the strictness ``pyproject.toml``'s ``[tool.mypy]``
sets."""

import importlib
import inspect
import os
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import turboloader

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

SUBPACKAGES = ["turboloader", "turboloader.io", "turboloader.decode", "turboloader.transforms",
               "turboloader.data", "turboloader.loader", "turboloader.compat",
               "turboloader.tools"]


def test_the_package_says_it_is_typed():
    assert (ROOT / "turboloader" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["turboloader"]
    # the compiled extensions have stubs (mypy would otherwise not see the modules at all)
    for pyx in (ROOT / "turboloader" / "_native").glob("_*.pyx"):
        assert pyx.with_suffix(".pyi").is_file(), pyx.name


def _public_callables():
    seen = set()
    for pkg in SUBPACKAGES:
        mod = importlib.import_module(pkg)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if id(obj) in seen or not callable(obj) or inspect.ismodule(obj):
                continue
            if getattr(obj, "__module__", "").split(".")[0] != "turboloader":
                continue   # a re-exported name of torch or torchvision
            seen.add(id(obj))
            yield f"{pkg}.{name}", obj


def _unannotated(fn):
    """The parameters of ``fn`` without an annotation (self / cls and *args / **kwargs of a
    pure forwarder are fine), and whether its return is annotated."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):   # a builtin / extension function
        return [], True
    missing = [p.name for i, p in enumerate(sig.parameters.values())
               if p.annotation is inspect.Parameter.empty
               and not (i == 0 and p.name in ("self", "cls"))]
    return missing, sig.return_annotation is not inspect.Signature.empty


def test_the_count_of_unannotated_public_signatures_only_goes_down():
    # what is annotated stays annotated; the number still missing is the ratchet below, to
    # lower as signatures get their annotations (never raise it)
    missing = []
    for name, obj in _public_callables():
        fn = obj.__init__ if inspect.isclass(obj) else obj
        if inspect.isclass(obj) and not (getattr(fn, "__module__", None) or "").startswith(
                "turboloader"):
            continue   # the inherited constructor of an Enum or an exception (*args, **kwargs)
        params, _ = _unannotated(fn)
        if params:
            missing.append(f"{name}: {', '.join(params)}")
    assert len(missing) <= RATCHET, "\n".join(missing)


# public callables with a parameter still unannotated (124 when this test came; none now)
RATCHET = 0


def test_the_protocols_are_declared_and_annotated():
    # the roles another module plugs into: a typing.Protocol each, every member annotated
    from typing import Protocol

    from turboloader.data.step import SampleDecoder
    from turboloader.decode.executor import SlotSpec
    from turboloader.io.shards import IndexedShard, Shard
    from turboloader.transforms.protocols import Draws, FusedCrop, FusedMember, FusedResize

    for proto in (SampleDecoder, Shard, IndexedShard, Draws, FusedCrop, FusedMember, FusedResize):
        assert Protocol in proto.__mro__ or getattr(proto, "_is_protocol", False), proto
        for name, member in vars(proto).items():
            if callable(member) and not (name.startswith("__") or name in ("_is_protocol",)):
                params, ret = _unannotated(member)
                assert not params and ret, (proto.__name__, name, params)
    assert set(SlotSpec.__annotations__) == set(SlotSpec.__slots__)   # every field typed
    # the transforms that fuse are what the protocols say
    from turboloader import transforms as T
    from turboloader.transforms._draws import KeyDraws, RngDraws

    for t in (T.RandomResizedCrop(8), T.RandomCrop(8), T.CenterCrop(8)):
        assert isinstance(t, FusedCrop), t
    assert isinstance(T.Resize(8), FusedResize)
    for t in (T.RandomHorizontalFlip(), T.ColorJitter(0.2), T.RandomApply([T.ColorJitter(0.2)])):
        assert isinstance(t, FusedMember), t
    assert isinstance(KeyDraws(np.zeros(2, np.uint64)), Draws)
    assert issubclass(RngDraws, Draws)


@pytest.mark.slow
@pytest.mark.timeout(900)   # a cold cache checks torch's annotations too: ~1 min of CPU
def test_mypy_passes(tmp_path):
    # CI runs it: .ci/run -> ./dev.sh test runs every test, slow ones included
    from mypy import api

    cache = os.path.join(os.environ.get("TURBOLOADER_CI_CACHE",
                                        os.path.expanduser("~/.cache/turboloader-ci")), "mypy")
    stdout, stderr, rc = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                                  "--cache-dir", cache, str(ROOT / "turboloader")])
    assert rc == 0, stdout[-6000:] + stderr[-2000:]
    assert "Success" in stdout
    # the same configuration fails a wrong annotated function and a wrong call of the
    # package's API (a checker configured to see nothing would pass anything)
    bad = tmp_path / "bad.py"
    bad.write_text("from turboloader.io.manifest import int_label\n"
                   "def f(x: int) -> str:\n    return x\n"
                   "y: str = int_label('3')\n")
    stdout, _, rc = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
                             cache, str(bad)])
    assert rc == 1, stdout
    assert "bad.py:3: error: Incompatible return value" in stdout, stdout
    assert "bad.py:4: error: Incompatible types in assignment" in stdout, stdout
