"""The package version (one place: ``turboloader.__version__`` and the command line read it)."""

__version__ = "0.1.0"
