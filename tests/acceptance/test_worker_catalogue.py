"""The worker resolves every handler of its catalogue when it starts and refuses to start,
with one line and exit status 2, when one points nowhere; with a sound catalogue it runs."""
from __future__ import annotations

import subprocess
import sys

import pytest

from opsboard.config import ROOT
from tests.conftest import TEST_MODULES, worker_env


@pytest.mark.parametrize("broken, expected", [
    ("module", "job type broken.module v1: handler 'tests.support.no_such_module:run' cannot be imported "
               "(ModuleNotFoundError: No module named 'tests.support.no_such_module')"),
    ("function", "job type broken.function v1: handler 'tests.support.jobs:no_such_handler': the module has no "
                 "'no_such_handler'"),
])
def test_a_handler_that_points_nowhere_stops_the_worker_at_start(db_url, broken, expected):
    env = worker_env(db_url, OPSBOARD_JOB_MODULES=",".join([*TEST_MODULES, "tests.support.broken_types"]),
                     BROKEN=broken)
    done = subprocess.run([sys.executable, "-m", "worker", "--queues", "default=1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [f"opsboard: {expected}"], done.stderr
    assert "Traceback" not in done.stderr


def test_an_extension_module_without_register_stops_the_worker_at_start(db_url):
    env = worker_env(db_url, OPSBOARD_JOB_MODULES="json")
    done = subprocess.run([sys.executable, "-m", "worker"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "opsboard: OPSBOARD_JOB_MODULES: 'json' has no register(catalogue) function"
