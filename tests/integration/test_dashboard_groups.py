"""A dead job in an ordered group does not block it, and the job page says so."""
from opsboard import auth, jobqueue
from tests.conftest import connect


def test_job_page_shows_dead_predecessors_in_its_group(app, client, login_as):
    with connect(app.extensions["test_db_url"]) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        ids = jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {"n": i}, t, group_key="order-7") for i in range(3)])
        first = jobqueue.claim_batch(c, "default", "w1", 10, 30)
        assert [r["id"] for r in first] == [ids[0]]
        jobqueue.record_outcomes(c, "w1", [jobqueue.OutcomeRecord(ids[0], 1, "dead", first[0]["started_at"],
                                                            code="http_410")])
        # The group moves on: the next job is claimable although the first died.
        assert [r["id"] for r in jobqueue.claim_batch(c, "default", "w1", 10, 30)] == [ids[1]]
    login_as("ops")
    html = client.get(f"/jobs/{ids[2]}").get_data(as_text=True)
    assert "order-7" in html
    assert "data-group-dead" in html and str(ids[0]) in html and "http_410" in html
    assert str(ids[1]) in html  # still running: listed as unfinished in the group
    first_page = client.get(f"/jobs/{ids[0]}").get_data(as_text=True)
    assert "data-group-dead" not in first_page
