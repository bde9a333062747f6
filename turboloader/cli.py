"""Deprecated: moved to :mod:`turboloader.tools.cli`; this path is removed in the next release.

``python -m turboloader.cli`` still runs the command line (prefer ``python -m turboloader``).
"""

if __name__ == "__main__":
    from turboloader.tools.cli import main

    raise SystemExit(main())

from turboloader._deprecated import alias_module  # noqa: E402

alias_module(__name__, "turboloader.tools.cli")
