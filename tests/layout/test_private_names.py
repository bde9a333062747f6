"""No private name crosses a room: what one room (``turboloader.io``, ``.decode``,
``.transforms``, ``.data``, ``.loader``, ...) needs from another is public in its home.

Counted over the AST of every module: ``from turboloader.<room>.<module> import <name>`` from
another room, where the module path has a private part (``_plan``) or the name is private
(``_decode_array``). The compiled extensions (``turboloader._native``) are the floor every room
stands on and are not counted, nor is a dunder (``__version__``). None is left (issue 41 made
each one public in its home); a new one fails.
"""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "turboloader"

# none left (issue 41): what one room needs from another is public in its home
KNOWN: set[str] = set()


def _private(name):
    # a dunder (``__version__``) is the public spelling of a module attribute
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _room(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def private_crossings(pkg=PKG):
    """``{"importer -> module.name"}`` of every private name imported across rooms."""
    found = set()
    for path in sorted(pkg.rglob("*.py")):
        parts = path.relative_to(pkg.parent).with_suffix("").parts
        me = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                    node.module.startswith("turboloader."):
                if _room(node.module) in (_room(me), "_native"):
                    continue
                private_module = any(p.startswith("_") for p in node.module.split(".")[2:])
                for alias in node.names:
                    if private_module or _private(alias.name):
                        found.add(f"{me} -> {node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    t = alias.name
                    if t.startswith("turboloader.") and _room(t) not in (_room(me), "_native") \
                            and any(p.startswith("_") for p in t.split(".")[2:]):
                        found.add(f"{me} -> {t}")
    return found


def test_the_count_sees_crossings(tmp_path):
    # a parser that finds nothing cannot fail: crossings planted in a module are found, and
    # what is not one (the same room, the compiled floor, a dunder) is not
    (tmp_path / "turboloader" / "data").mkdir(parents=True)
    (tmp_path / "turboloader" / "data" / "planted.py").write_text(
        "from turboloader.decode.image import _slot_of\n"
        "from turboloader.transforms._plan import Plan\n"
        "import turboloader.loader._dataloader\n"
        "from turboloader._version import __version__\n"
        "from turboloader._native import _jpeg\n"
        "from turboloader.data._buffers import BufferPool\n")
    assert private_crossings(tmp_path / "turboloader") == {
        "turboloader.data.planted -> turboloader.decode.image._slot_of",
        "turboloader.data.planted -> turboloader.transforms._plan.Plan",
        "turboloader.data.planted -> turboloader.loader._dataloader"}


def test_no_private_name_crosses_a_room():
    new = sorted(private_crossings() - KNOWN)
    assert not new, ("private names imported from another room (make them public in their "
                     "home, listed in its __all__):\n" + "\n".join(new))
