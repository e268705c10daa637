"""Rendering when a message is sent has the preview's bounds (issue 42): an author's template renders in a
render process with a deadline and a memory limit, the shipped texts in the worker's own process; a
template past a bound fails its delivery with a storable code, and the next delivery still renders."""
from __future__ import annotations

import collections
import time

import pytest

from opsboard.notifications import fanout, handlers, render, render_sandbox, templates
from tests.integration.test_notifications import JobStub, _deliveries, _user
from opsboard import outbox
import uuid

KEY = "test_notice.sent"
LOOPS = "{% for a in text %}{% for b in text %}{% for c in text %}{% endfor %}{% endfor %}{% endfor %}done"


@pytest.fixture
def box(monkeypatch):
    """A render pool of the test's own (one process) and an empty cache."""
    sandbox = render_sandbox.RenderSandbox(workers=1, timeout=10)
    monkeypatch.setattr(render_sandbox, "_sending", sandbox)
    monkeypatch.setattr(render_sandbox, "_cache", collections.OrderedDict())
    yield sandbox
    sandbox.close()


def _send(conn, tenant, text):
    uid = _user(conn, tenant, locale="fa")
    ev = outbox.publish(conn, KEY, 1, aggregate=("notice", uuid.uuid4().hex), tenant=tenant["id"],
                        payload={"user_ids": [str(uid)], "text": text})
    fanout.fan_out(conn, ev["id"])
    d = _deliveries(conn, ev["id"])[(uid, "email")]
    outcome = handlers.deliver(JobStub(conn, {"delivery_id": str(d["id"])}, tenant["id"]))
    return outcome, _deliveries(conn, ev["id"])[(uid, "email")]


def test_a_template_past_a_bound_fails_its_delivery_with_the_code_and_the_next_one_renders(conn, tenant, box):
    # Published with a short sample (27 steps); an event's 100-character text makes it 1,000,000.
    templates.seed(conn, KEY, "email", "fa", "loops", LOOPS, "text", {"text": "abc"}, tenant_id=tenant["id"])
    outcome, d = _send(conn, tenant, "x" * 100)
    assert outcome.code == "template_too_many_steps"
    assert (d["status"], d["error_code"], d["template_own"]) == ("failed", "template_too_many_steps", True)
    outcome, d = _send(conn, tenant, "ab")
    assert outcome is None and d["status"] == "queued" and d["provider_ref"]


def test_the_deadline_kills_a_slow_render_and_the_pool_goes_on(conn, tenant, box):
    templates.seed(conn, KEY, "email", "fa", "loops", LOOPS, "text", {"text": "abc"}, tenant_id=tenant["id"])
    assert box.render_many([{"channel": "email", "locale": "fa", "subject": "", "body": "warm",
                             "variables": {}}])[0][0] == "ok"
    box.timeout = 0.02                       # 44**3 = 85,184 steps: under the step bound, over this deadline
    started = time.monotonic()
    outcome, d = _send(conn, tenant, "y" * 44)
    assert time.monotonic() - started < 5
    assert outcome.code == "template_too_slow" and (d["status"], d["error_code"]) == ("failed", "template_too_slow")
    box.timeout = 10
    outcome, d = _send(conn, tenant, "ab")
    assert outcome is None and d["status"] == "queued"


def test_a_published_versions_result_is_cached_and_shipped_texts_render_in_process(conn, tenant, box, monkeypatch):
    row = templates.seed(conn, KEY, "email", "fa", "hello {{ text }}", "<p>{{ text }}</p>", "text", {"text": "x"})
    asked = []
    real = box.render_many
    monkeypatch.setattr(box, "render_many", lambda cells: asked.append(cells) or real(cells))
    for _ in range(3):
        assert render_sandbox.render_for_sending(row["id"], "email", "fa", row["subject"], row["body"],
                                                 {"text": "t"})[0] == "hello t"
    assert len(asked) == 1                   # one round trip for the three renders of one text
    layers = render.Layers(platform={("email", "fa"): row},
                           shipped={("email", "fa"): {"subject": row["subject"], "body": row["body"],
                                                      "version": None}})
    assert layers.is_shipped_text("email", "fa", row)
    assert fanout.render_layers(layers, "email", ["fa"], {"text": "s"})[0] == "hello s"
    assert len(asked) == 1                   # the shipped words: no render process


def test_warm_starts_every_render_process_and_renders_still_work():
    sandbox = render_sandbox.RenderSandbox(workers=2, timeout=10)
    try:
        sandbox.warm()
        slots = [sandbox._idle.get_nowait() for _ in range(2)]
        assert all(s is not None and s.process.is_alive() for s in slots)
        for s in slots:
            sandbox._idle.put(s)
        assert sandbox.render_many([{"channel": "inbox", "locale": "fa", "subject": "s", "body": "{{ 1 + 1 }}",
                                     "variables": {}}]) == [("ok", "s", "2")]
    finally:
        sandbox.close()
