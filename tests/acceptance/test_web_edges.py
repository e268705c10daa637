"""The web's edges through the real gunicorn (issue 51): a body over the cap, chunked or not, is a 413
with a JSON error code answered before the connection closes."""
from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest

from opsboard import apikeys, audit, auth
from tests.conftest import connect
from tests.support.processes import stack  # noqa: F401  (fixture)
from tests.support.sandbox import sandbox  # noqa: F401  (fixture)


def _post(url, path, body: bytes, headers: dict, chunked: bool):
    split = urlsplit(url)
    conn = http.client.HTTPConnection(split.hostname, split.port, timeout=30)
    try:
        if chunked:
            conn.putrequest("POST", path)
            for k, v in {**headers, "Transfer-Encoding": "chunked"}.items():
                conn.putheader(k, v)
            conn.endheaders()
            step = 64 * 1024
            try:
                for i in range(0, len(body), step):
                    part = body[i:i + step]
                    conn.send(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                conn.send(b"0\r\n\r\n")
            except OSError:
                pass  # the server answered and closed before the whole body went: read its answer
        else:
            conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_json_body_over_the_cap_is_a_413_with_a_json_code(stack, chunked):  # noqa: F811
    with connect(stack.db_url) as c:
        t = auth.ensure_tenant(c, "edges")
        key, _ = apikeys.create(c, t["id"], "edges", audit.Actor("test"))
    url = stack.web()
    body = json.dumps({"type": "diag.noop", "payload": {"x": "a" * (2 * 1024 * 1024)}}).encode()
    status, answer = _post(url, "/api/v1/jobs", body,
                           {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}, chunked)
    assert (status, answer.get("error")) == (413, "too_large"), (status, answer)
    # A small body on the same route still works.
    status, answer = _post(url, "/api/v1/jobs", json.dumps({"type": "diag.noop", "payload": {}}).encode(),
                           {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}, chunked)
    assert status == 202, answer
