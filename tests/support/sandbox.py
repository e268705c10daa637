"""The provider sandbox as a pytest fixture (import ``sandbox`` into a test module)."""
from __future__ import annotations

import pytest

from opsboard.tools.sandbox import Sandbox


@pytest.fixture
def sandbox():
    """A sandbox on 127.0.0.1, free ports, stopped after the test."""
    sb = Sandbox("127.0.0.1", 0, 0, sms_key="sandbox-sms-key").start()
    yield sb
    sb.stop()
