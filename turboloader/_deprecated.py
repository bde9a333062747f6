"""Old import paths kept for one release: each is an alias of the module's new home."""

import importlib
import sys
import warnings


def alias_module(old, new):
    """Make the module being imported as ``old`` the module ``new`` itself, with a warning.

    The old name then *is* the new module (``sys.modules``), so its classes, their pickles
    and monkeypatches are shared, and private names resolve too.
    """
    module = importlib.import_module(new)
    # stacklevel 3: the importing line (the import machinery's frames are skipped)
    warnings.warn(f"{old} moved to {new}; import it from there (the old path is removed in "
                  "the next release)", DeprecationWarning, stacklevel=3)
    sys.modules[old] = module
    return module
