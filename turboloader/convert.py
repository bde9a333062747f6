"""Deprecated: moved to :mod:`turboloader.tools.convert`; this path is removed in the next release."""

from turboloader._deprecated import alias_module

alias_module(__name__, "turboloader.tools.convert")
