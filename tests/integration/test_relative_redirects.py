"""Redirects are relative (issue 51): werkzeug's slash redirect took its host from the Host header
(``Host: evil.example`` -> ``Location: http://evil.example/jobs/``) when OPSBOARD_TRUSTED_HOSTS was unset."""


def test_the_slash_redirect_is_relative_whatever_the_host(app, client, login_as):
    login_as("ops")
    for host in ("evil.example", "localhost"):
        r = client.get("/jobs?status=dead", headers={"Host": host})
        assert r.status_code == 308, r.status_code
        assert r.headers["Location"] == "/jobs/?status=dead", r.headers["Location"]
    r = client.get("/jobs", base_url="http://evil.example")
    assert r.headers["Location"] == "/jobs/"
    assert "evil" not in r.get_data(as_text=True)
