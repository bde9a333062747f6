"""Running native kernels at one ISA level at a time (turboloader._native._cpu's dispatch)."""

import contextlib

import pytest

from turboloader._native import _cpu

LEVELS = _cpu.LEVELS


@contextlib.contextmanager
def at_level(name):
    """Dispatch every kernel at ``name`` (a level this CPU supports) inside the block."""
    previous = _cpu._set_isa(name)
    try:
        yield
    finally:
        _cpu._set_isa(previous)


def enter_level(name):
    """For a fixture parametrized by level: skip where this CPU lacks ``name`` (its kernels
    cannot run here), else the context of :func:`at_level`."""
    if name not in _cpu.supported():
        pytest.skip(f"this CPU lacks {name} (supported: {_cpu.supported()})")
    return at_level(name)
