"""Extension modules whose job types a worker cannot run (tests of the worker's start-up check).

``OPSBOARD_JOB_MODULES=tests.support.broken_types`` registers a type whose handler's module
does not exist;
with ``BROKEN=function`` in the environment it registers one whose module lacks the function.
"""
from __future__ import annotations

import os

from opsboard.jobtypes import define


def register(cat) -> None:
    if os.environ.get("BROKEN") == "function":
        define(cat, "broken.function", handler="tests.support.jobs:no_such_handler")
    else:
        define(cat, "broken.module", handler="tests.support.no_such_module:run")
