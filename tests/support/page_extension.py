"""An extension that adds a dashboard page through ``OPSBOARD_JOB_MODULES`` alone (docs/extending.md):
its blueprint, its link in the navigation, its permission; nothing in the product knows it."""
from __future__ import annotations

from flask import Blueprint, render_template_string

from opsboard.web.security import current_scope, requires

bp = Blueprint("capacity", __name__, url_prefix="/capacity")


@bp.get("/")
@requires("jobs.view")
def index():
    scope = current_scope("jobs.view")
    return render_template_string(
        '{% extends "base.html" %}{% block content %}<h1 id="capacity">Capacity plan</h1>'
        "<p>{{ n }}</p>{% endblock %}", n="all tenants" if scope.all else "own tenant")


def register(cat) -> None:
    cat.add_page("capacity", "tests.support.page_extension:bp", endpoint="capacity.index", permission="jobs.view",
                 labels={"en": "Capacity", "fa": "ظرفیت"})
