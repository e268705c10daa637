"""The workflow pages (issue 45): list with filters, the DAG drawn as SVG with states and the critical
path, cancel (audited, a reason, the tenant's permission), a dead task's replay from the page."""
from __future__ import annotations

import html
import uuid

from opsboard import auth
from opsboard.jobqueue.workflows import Workflow
from tests.conftest import connect


def _insert(app, slug="acme"):
    with connect(app.extensions["test_db_url"]) as c:
        t = auth.ensure_tenant(c, slug)["id"]
        wf = (Workflow("nightly").add("a", "wft.echo", {}).add("b", "wft.echo", {}, deps=["a"])
              .add("c", "wft.echo", {}, deps=["a"]).add("d", "wft.total", {}, deps=["b", "c"]))
        return wf.insert(c, tenant=t), t


def test_the_list_and_the_page_draw_the_dag(client, login_as, app):
    row, tenant = _insert(app)
    login_as("ops")
    page = client.get("/workflows/").get_data(as_text=True)
    assert f'data-workflow-id="{row["id"]}"' in page and 'data-state="running"' in page
    assert f'data-workflow-id="{row["id"]}"' not in client.get("/workflows/?state=succeeded").get_data(as_text=True)
    assert f'data-workflow-id="{row["id"]}"' in client.get(f"/workflows/?tenant={tenant}&kind=workflow").get_data(as_text=True)
    assert client.get("/workflows/?state=bogus").status_code == 400
    page = client.get(f"/workflows/{row['id']}").get_data(as_text=True)
    assert "<svg" in page and page.count('class="node"') == 4
    assert 'data-task="a" data-state="ready"' in page and 'data-task="d" data-state="waiting"' in page
    assert client.get(f"/workflows/{uuid.uuid4()}").status_code == 404


def test_cancel_needs_a_reason_is_audited_and_checked_in_the_tenant(client, login_as, app):
    row, _ = _insert(app)
    login_as("ops")
    url = f"/workflows/{row['id']}/cancel"
    assert client.post(url, data={"reason": "x", "request_key": "key-0000"}).status_code in (400, 403)  # no CSRF
    r = client.post(url, data={"csrf_token": client.csrf, "reason": "", "request_key": "key-1111"})
    assert r.status_code == 400
    r = client.post(url, data={"csrf_token": client.csrf, "reason": "wrong night", "request_key": "key-2222"})
    assert r.status_code == 200 and 'data-action="cancel_workflow"' in r.get_data(as_text=True)
    with connect(app.extensions["test_db_url"]) as c:
        a = c.execute("SELECT * FROM audit_log WHERE action = 'workflow.cancel'").fetchone()
        assert a["reason"] == "wrong night" and a["target_id"] == str(row["id"])
    page = html.unescape(client.get(f"/workflows/{row['id']}").get_data(as_text=True))
    assert 'data-workflow-state="cancelled"' in page and "data-cancel-workflow" not in page


def test_another_tenants_member_cannot_see_or_cancel(client, login_as, app):
    row, _ = _insert(app)
    login_as("ops", tenant="beta", operator=False)
    assert client.get(f"/workflows/{row['id']}").status_code == 404
    r = client.post(f"/workflows/{row['id']}/cancel", data={"csrf_token": client.csrf, "reason": "no",
                                                             "request_key": "key-3333"})
    assert r.status_code in (403, 404)
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'workflow.cancel'").fetchone()["n"] == 0
