"""Chaos across every feature: the fixtures (the processes' homes) and the run's size.

``--long`` (an option of ``tests/conftest.py``) multiplies the run's duration and volume by 4 and
keeps one provider down for a minute; ``OPSBOARD_CHAOS_SCALE`` multiplies it again.
"""
import os

import pytest

from tests.support.sandbox import sandbox  # noqa: F401  (the provider sandbox)


@pytest.fixture
def chaos_scale(request) -> float:
    """How much bigger than the default run: 4 under ``--long``, times ``OPSBOARD_CHAOS_SCALE``."""
    return (4.0 if request.config.getoption("--long") else 1.0) * float(os.environ.get("OPSBOARD_CHAOS_SCALE", "1"))
