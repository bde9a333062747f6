"""Public names a package imports on first use (PEP 562's module ``__getattr__``)."""

import importlib

__all__ = ["lazy_names"]


def lazy_names(package, table, namespace):
    """``(__getattr__, __dir__)`` for ``package``, whose lazy public names ``table`` maps to
    the module defining each (a name mapped to the submodule ``f"{package}.{name}"`` is that
    submodule). ``namespace`` is the package's ``globals()``: a resolved name is stored there,
    so it is imported once.

    The returned ``__getattr__`` raises AttributeError, naming the package, for any other name.
    """

    def __getattr__(name):
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module)
        value = imported if module == f"{package}.{name}" else getattr(imported, name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(namespace["__all__"]))

    return __getattr__, __dir__
