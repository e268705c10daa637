"""The notifications feature's one ``register(catalogue)``: its categories and job types
(:func:`.policy.register`) and the start hook that publishes the shipped templates."""
from __future__ import annotations

from ..catalogue import Catalogue
from . import policy, templates


def register(cat: Catalogue) -> None:
    """Register the notification tier in ``cat`` (policies come with the features whose events they notify)."""
    policy.register(cat)
    cat.start_hooks["shipped_templates"] = templates.seed_at_start
