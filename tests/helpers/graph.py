"""The package's modules and the imports between them, read from the source with ``ast``."""

import ast
import pathlib

import turboloader

PACKAGE = pathlib.Path(turboloader.__file__).resolve().parent

# the module paths before the layout (turboloader.tar, .jpeg, ...): the package was never
# released, so no alias answers for them; nothing may import them, and no file is left there
ALIASES = {
    "turboloader.tar": "turboloader.io.tar",
    "turboloader.tbl": "turboloader.io.tbl",
    "turboloader.data.shards": "turboloader.io.shards",
    "turboloader.data.remote": "turboloader.io.remote",
    "turboloader.jpeg": "turboloader.decode.jpeg",
    "turboloader.fused": "turboloader.decode.fused",
    "turboloader.seeds": "turboloader.compat.seeds",
    "turboloader.cli": "turboloader.tools.cli",
    "turboloader.convert": "turboloader.tools.convert",
    "turboloader.demo": "turboloader.tools.demo",
    "turboloader.synthetic": "turboloader.tools.synthetic",
    "turboloader.data.policy": "turboloader.data.failures",
}


def modules():
    """{module name: path} for every Python module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    # compiled extensions are modules too (targets only)
    for path in PACKAGE.rglob("*.so"):
        parts = path.relative_to(PACKAGE.parent).parts
        found[".".join(parts[:-1] + (path.name.split(".")[0],))] = None
    return found


MODULES = modules()


def resolve(name):
    """The longest prefix of dotted ``name`` that is a module of the package."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module, path):
    """Every package module ``module`` imports, anywhere in its source."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module if is_pkg else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            # `from pkg import sub` imports the module pkg.sub
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value.startswith("turboloader.") and " " not in node.value:
            # lazy tables and alias targets: module names resolved by importlib
            if node.value in MODULES:
                targets = [node.value]
        for target in targets:
            if target in ALIASES:
                out.add(target)
            elif target == "turboloader" or target.startswith("turboloader."):
                resolved = resolve(target)
                if resolved is not None and resolved != module:
                    out.add(resolved)
    return out


GRAPH = {m: imports(m, p) for m, p in MODULES.items() if p is not None}
