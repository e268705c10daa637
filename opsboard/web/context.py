"""What blueprints take from the running app: the database, the configuration
and the request id.  Blueprints import this module, never the factory
(:mod:`opsboard.web.app`), so the factory can import them without a cycle.
"""
from __future__ import annotations

from flask import current_app, g

from .. import db as dbmod
from ..config import Config


def get_db() -> dbmod.Database:
    return current_app.extensions["opsboard_db"]


def get_config() -> Config:
    return current_app.extensions["opsboard_config"]


def request_id() -> str:
    return getattr(g, "request_id", "")
