"""``python -m turboloader``: the command line (same as the ``turboloader`` script)."""

from turboloader.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
