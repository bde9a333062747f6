"""Fixtures of the native kernels' tests."""

import pytest

from helpers.isa import LEVELS, enter_level


@pytest.fixture(params=LEVELS)
def level(request):
    """Each dispatch level in turn, its kernels selected for the test (skipped where this CPU
    lacks the level: its instructions cannot run here)."""
    with enter_level(request.param):
        yield request.param
