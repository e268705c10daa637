"""The webhook fast path: HTTP/1.1 keep-alive pinned to the checked address, and
the started effect of a webhook written without waiting for the WAL flush."""
import http.server
import ipaddress
import threading
import uuid

import pytest

from opsboard import auth, jobqueue
from tests.conftest import connect
import opsboard.deliveries.handlers  # noqa: F401  (declares webhooks' effects resend-reconciled)
from opsboard.deliveries.providers import http as http_provider

ALLOW = (ipaddress.ip_network("127.0.0.1/32"),)


class _Counting(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        self.connections = 0
        self.requests = 0

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(h):
                h.rfile.read(int(h.headers.get("Content-Length") or 0))
                self.requests += 1
                close = h.path.endswith("/close")
                h.send_response(204 if not close else 200)
                h.send_header("Content-Length", "0")
                if close:
                    h.send_header("Connection", "close")
                h.end_headers()

            def log_message(h, *a):
                pass

        super().__init__(("127.0.0.1", 0), H)

    def get_request(self):
        self.connections += 1
        return super().get_request()


@pytest.fixture
def server():
    http_provider._pool.clear()
    s = _Counting()
    t = threading.Thread(target=s.serve_forever, daemon=True)
    t.start()
    yield s
    s.shutdown()
    s.server_close()
    http_provider._pool.clear()


def _post(url, reuse=True):
    return http_provider.request("POST", url, b"{}", {"Content-Type": "application/json"}, timeout=2,
                                 guard=True, allow=ALLOW, reuse=reuse)


def test_reuse_keeps_one_connection_per_endpoint(server):
    base = f"http://127.0.0.1:{server.server_address[1]}"
    for _ in range(5):
        assert _post(f"{base}/hooks/a").status == 204
    assert server.requests == 5 and server.connections == 1
    for _ in range(3):
        _post(f"{base}/hooks/b", reuse=False)   # without reuse: one connection per request
    assert server.connections == 4


def test_a_connection_the_far_side_closes_is_not_reused(server):
    base = f"http://127.0.0.1:{server.server_address[1]}"
    assert _post(f"{base}/hooks/close").status == 200   # answered with Connection: close
    assert _post(f"{base}/hooks/a").status == 204
    assert server.connections == 2 and server.requests == 2


def test_the_guard_runs_on_every_reused_request(server):
    base = f"http://127.0.0.1:{server.server_address[1]}"
    _post(f"{base}/hooks/a")
    with pytest.raises(http_provider.Refused):   # the same target, no longer allow-listed
        http_provider.request("POST", f"{base}/hooks/a", b"{}", timeout=2, guard=True, allow=(), reuse=True)
    assert server.requests == 1


def test_a_webhook_effect_is_started_without_waiting_for_the_flush_and_the_setting_does_not_leak(db_url):
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, f"t-{uuid.uuid4().hex[:8]}")
        job = {"id": uuid.uuid4(), "tenant_id": tenant["id"]}
        seen = []
        c.add_notice_handler(lambda n: None)
        orig = c.execute

        def spy(query, *a, **kw):
            seen.append(str(query))
            return orig(query, *a, **kw)

        c.execute = spy
        row = jobqueue.begin_effect(c, f"webhook:{uuid.uuid4()}", job, "webhooks", relaxed=True)
        assert row["state"] == "started" and row["created"]
        assert any("synchronous_commit = off" in q for q in seen)
        seen.clear()
        jobqueue.begin_effect(c, f"sms:{uuid.uuid4()}", job, "sms_gateway")   # other types: durable
        assert not any("synchronous_commit" in q for q in seen)
        c.execute = orig
        assert c.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"] == "on"
        assert c.execute("SELECT count(*) AS n FROM effects WHERE tenant_id = %s",
                         (tenant["id"],)).fetchone()["n"] == 2
