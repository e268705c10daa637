"""Issue 45 in a real browser: the Workflows list and a workflow's page (the DAG drawn), cancelling a
whole workflow with a reason, and replaying a dead task from its workflow's page, which resumes it."""
from __future__ import annotations

import pytest

from opsboard import auth
from opsboard.jobqueue import workflows
from opsboard.jobqueue.workflows import Workflow
from tests.browser.test_operator_actions import _sign_in
from tests.browser.test_ops_journey import PASSWORD, browser, server, shots  # noqa: F401  (fixtures)
from tests.conftest import connect
from tests.support import dashboard as seed

pytestmark = pytest.mark.browser


@pytest.fixture
def ops(app):
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "ops@example.test", PASSWORD, "ops", "operator")
        return seed.tenant(c, "acme")


def test_cancel_a_workflow_and_replay_a_dead_task_from_the_page(app, server, browser, ops, shots):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        broken = Workflow("import-orders").add("fetch", "wft.echo", {}).add("load", "wft.echo", {}, deps=["fetch"]) \
            .add("report", "wft.echo", {}, deps=["load"]).insert(c, tenant=ops)
        # The first task's job died (its attempts used up); the sweeper follows it: downstream cancelled.
        seed.kill(c, [broken["tasks"]["fetch"]], "http_503")
        assert workflows.WorkflowSweeper().run_once(c) == 1
        other = Workflow("nightly").add("x", "wft.echo", {}).add("y", "wft.echo", {}, deps=["x"]).insert(c, tenant=ops)
    page, problems = _sign_in(browser, server, "ops@example.test")

    page.goto(f"{server}/workflows/")
    assert page.locator(f'tr[data-workflow-id="{broken["id"]}"]').get_attribute("data-state") == "failed"
    page.locator(f'tr[data-workflow-id="{other["id"]}"] a').click()
    page.wait_for_url(f"**/workflows/{other['id']}")
    assert page.locator("svg.dag g.node").count() == 2
    shots(page, "running-workflow")
    form = page.locator("form[data-cancel-workflow]")
    form.locator("textarea[name=reason]").fill("the nightly run was started twice")
    form.locator("button", has_text="Cancel workflow").click()
    page.locator('#cancel-result [data-action="cancel_workflow"]').wait_for()
    page.reload()
    assert page.locator("[data-workflow-state]").get_attribute("data-workflow-state") == "cancelled"
    shots(page, "cancelled-workflow")

    page.goto(f"{server}/workflows/{broken['id']}")
    assert page.locator('svg.dag g.node[data-task="fetch"]').get_attribute("data-state") == "dead"
    assert page.locator('tr[data-task="load"]').get_attribute("data-state") == "cancelled"
    shots(page, "failed-workflow")
    replay = page.locator('form[data-replay-task="fetch"]')
    replay.locator("input[name=reason]").fill("the upstream API is back")
    replay.locator("button").click()
    page.wait_for_load_state()
    page.goto(f"{server}/workflows/{broken['id']}")
    assert page.locator("[data-workflow-state]").get_attribute("data-workflow-state") == "running"
    assert page.locator('tr[data-task="fetch"]').get_attribute("data-state") == "ready"
    assert page.locator('tr[data-task="load"]').get_attribute("data-state") == "waiting"
    shots(page, "resumed-workflow")
    with connect(app.extensions["test_db_url"]) as c:
        actions = {r["action"]: r["reason"] for r in c.execute("SELECT action, reason FROM audit_log "
                                                               "WHERE action IN ('workflow.cancel', 'job.replay')")}
    assert actions == {"workflow.cancel": "the nightly run was started twice", "job.replay": "the upstream API is back"}
    assert problems == []
