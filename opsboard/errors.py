"""Errors shared by the ``opsboard`` command and the tools it runs (bench, demo).

The core raises its own errors; the CLI turns the ones listed here into one
line on standard error and exit status 2.
"""
from __future__ import annotations


class UsageError(Exception):
    """A mistake in how the command was called: exit status 2."""
