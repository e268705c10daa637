"""The catalogue is built on purpose: importing a module registers nothing, and
:func:`opsboard.features.build_catalogue` registers every feature in a fixed order."""
from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys

import pytest

import opsboard
from opsboard import catalogue, jobtypes, outbox
from opsboard.config import ConfigError
from opsboard.features import build_catalogue
from opsboard.notifications import policy


def _core_modules() -> list[str]:
    """Every module of the core package (not the web app or the tools, which are not the core)."""
    names = []
    for info in pkgutil.walk_packages(opsboard.__path__, "opsboard."):
        if info.name.startswith(("opsboard.web", "opsboard.tools", "opsboard.cli")):
            continue
        names.append(info.name)
    return sorted(names)


def test_importing_every_core_module_registers_nothing():
    modules = _core_modules()
    assert "opsboard.jobtypes" in modules and "opsboard.outbox" in modules and len(modules) > 30
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "from opsboard import catalogue\n"
            "print(json.dumps(catalogue.active().summary()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OPSBOARD_JOB_MODULES": ""})
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary and set(summary.values()) == {0}, summary


def test_the_worker_and_the_web_app_modules_register_nothing_either():
    code = ("import json, worker.runner, worker.cli, opsboard.web.app, opsboard.cli\n"
            "from opsboard import catalogue, jobtypes, outbox\n"
            "print(json.dumps([len(jobtypes.all_types()), len(outbox.event_types()), len(outbox.subscriptions())]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [0, 0, 0]


def test_build_registers_every_feature_in_order_and_activates_nothing_by_itself():
    before = catalogue.active()
    cat = build_catalogue(modules=())
    assert catalogue.active() is before  # building is not activating
    assert cat.registered == ["diagnostics", "deliveries", "notifications", "tickets", "reports", "alerts",
                              "workflows", "event_export"]
    assert "workflow_sweeper" in cat.services and "workflows" in cat.pages
    names = {name for name, _ in cat.job_types}
    assert {"diag.noop", "webhook.deliver", "email.send", "sms.otp", "notifications.fanout",
            "tickets.sla_check", "reports.chunk"} <= names
    assert {"smtp", "sms_gateway", "webpush", "webhooks"} <= set(cat.providers)
    assert {"ticket.created", "ticket.sla_breached"} <= {name for name, _ in cat.event_types}
    assert {"otp", "security", "ticket"} <= set(cat.categories)
    assert "ticket.assigned" in cat.policies
    assert {"job_activity", "ticket_sla"} <= set(cat.report_kinds)
    assert "reports.nightly_activity" in cat.schedules
    # A policy subscribes its event to the fan-out in the same catalogue, not in the active one.
    assert [s.job_type for s in cat.subscriptions["ticket.assigned"]] == ["notifications.fanout"]


def test_two_catalogues_do_not_share_entries():
    a, b = catalogue.Catalogue(), catalogue.Catalogue()
    jobtypes.define(a, "only.here", handler="m:f")
    outbox.define_event(a, "only.happened", aggregate="thing", fields={})
    policy.define_category(a, "only")
    assert ("only.here", 1) in a.job_types and not b.job_types
    assert not b.event_types and not b.categories


def test_lookups_read_the_active_catalogue():
    cat = catalogue.Catalogue()
    jobtypes.define(cat, "swap.me", handler="m:f", concurrency=2)
    previous = catalogue.activate(cat)
    try:
        assert jobtypes.get("swap.me").policy.concurrency == 2
        assert jobtypes.concurrency_limits("default").types == ("swap.me",)
        with pytest.raises(jobtypes.UnknownJobType):
            jobtypes.get("diag.noop")
        # A change to the catalogue is seen by the cached claim limits at once.
        jobtypes.define(cat, "swap.too", handler="m:f", concurrency=1)
        assert jobtypes.concurrency_limits("default").types == ("swap.me", "swap.too")
    finally:
        catalogue.activate(previous)
    assert jobtypes.get("diag.noop").name == "diag.noop"


@pytest.mark.parametrize("module, message", [
    ("tests.support.no_such_module", "cannot import"),
    ("tests.support.limits.overlap", "cannot import"),
    ("json", r"has no register\(catalogue\) function"),
])
def test_an_extension_module_that_cannot_register_is_a_config_error(module, message):
    with pytest.raises(ConfigError, match=message):
        build_catalogue(modules=[module])


def test_a_handler_must_be_a_module_function_path():
    for bad in ("opsboard.diagnostics", "worker handlers:noop", ":noop", "x:"):
        with pytest.raises(ValueError, match="module:function"):
            jobtypes.define(catalogue.Catalogue(), "bad.path", handler=bad)


def test_every_replay_and_cancel_hook_names_a_query_with_the_parameters_it_is_given():
    """A type's on_replay / on_cancel is run by name (jobqueue.replay, jobqueue.cancel): a name that points
    at no query, or a query wanting another parameter, would fail only when an operator acts."""
    import re
    from opsboard import db
    from opsboard.config import Config
    cat = build_catalogue(Config.from_env(mode="development"))
    given = {"on_replay": {"tenant_id", "payload", "now"}, "on_cancel": {"job_ids", "now"}}
    hooks = [(hook, getattr(jt, hook)) for jt in cat.job_types.values() for hook in given if getattr(jt, hook)]
    assert {h for h, _ in hooks} == set(given)          # the shipped types use both
    for hook, name in hooks:
        assert name in db.queries, (hook, name)
        assert set(re.findall(r"%\((\w+)\)s", db.queries[name])) <= given[hook], (hook, name)


def test_a_handler_given_as_a_function_is_kept_with_its_path():
    from opsboard import diagnostics
    jt = jobtypes.define(catalogue.Catalogue(), "fn.handler", handler=diagnostics.noop)
    assert jt.run is diagnostics.noop and jt.handler == "opsboard.diagnostics:noop"


@pytest.mark.parametrize("path, message", [
    ("opsboard.no_such_module:run", "cannot be imported"),
    ("opsboard.diagnostics:no_such_function", "has no 'no_such_function'"),
    ("opsboard.diagnostics:MAX", "has no"),
])
def test_a_handler_path_that_points_nowhere_fails_when_the_catalogue_is_built(path, message):
    cat = catalogue.Catalogue()
    jobtypes.define(cat, "wrong.handler", handler=path)
    with pytest.raises(ConfigError, match=message):
        jobtypes.resolve_handlers(cat)


def test_build_catalogue_resolves_every_handler_path():
    cat = build_catalogue(modules=[])
    assert all(jt.run is not None for jt in cat.job_types.values())
    assert all(jt.prepare is not None for jt in cat.job_types.values() if jt.prepare_batch)
