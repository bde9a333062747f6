"""``python -m turboloader``: the command line (same as the ``turboloader`` script)."""

from turboloader.tools.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
