"""Old import paths kept for one release, as aliases of the modules' new homes.

No file is left at an old path (so version control sees the moves as renames): an import
hook at the end of ``sys.meta_path``, installed by ``turboloader/__init__.py``, answers for
the old names only. ``import turboloader.tar`` then gives the module ``turboloader.io.tar``
itself (its classes, their pickles and monkeypatches are shared; private names resolve too)
with a DeprecationWarning, and ``python -m turboloader.cli`` still runs the command line.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: old module path -> new module path
MOVED = {
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
}


def _warn(old, new):
    # stacklevel 3: past this function and the loader's method to the importing line (the
    # import machinery's own frames are not counted)
    warnings.warn(f"{old} moved to {new}; import it from there (the old path is removed in "
                  "the next release)", DeprecationWarning, stacklevel=3)


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new):
        self.new = new

    def create_module(self, spec):
        _warn(spec.name, self.new)
        return importlib.import_module(self.new)

    def exec_module(self, module):
        pass  # the new module is already executed

    def get_code(self, fullname):
        # runpy (`python -m <old name>`) runs the new module's code as __main__
        _warn(fullname, self.new)
        return importlib.util.find_spec(self.new).loader.get_code(self.new)


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


def install():
    """Answer for the old paths (once per interpreter)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
