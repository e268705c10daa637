"""The providers' HTTP client parses an answer's headers without the email parser
(opsboard.deliveries.providers.http.parse_headers): what a provider's answer says must read the same
as through http.client's own parser (status, Retry-After, Connection, lengths)."""
from __future__ import annotations

import http.client
import io
import socket

import pytest

from opsboard.deliveries.providers import http as http_provider

BLOCKS = [
    b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n",
    b"Retry-After:  120 \r\nConnection: close\r\n\r\n",
    # repeated header, a folded value, no space after the colon, bare \n line ends
    b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nX-Long: first\r\n  second\r\nX-Tight:v\n\n",
    b"Transfer-Encoding: chunked\r\nServer: sandbox/1.0 (x)\r\nEmpty:\r\n\r\n",
    b"\r\n",
    b"",   # the far side closed at once
]


@pytest.mark.parametrize("block", BLOCKS)
def test_headers_read_as_http_client_reads_them(block):
    ours = http_provider.parse_headers(io.BytesIO(block))
    theirs = http.client.parse_headers(io.BytesIO(block))
    assert ours.items() == theirs.items()
    for name in ("content-length", "retry-after", "connection", "transfer-encoding", "set-cookie", "x-long"):
        assert ours.get(name) == theirs.get(name)
        assert ours.get_all(name) == theirs.get_all(name)


def test_the_limits_of_http_client_hold():
    with pytest.raises(http.client.LineTooLong):
        http_provider.parse_headers(io.BytesIO(b"X: " + b"a" * 70000 + b"\r\n\r\n"))
    with pytest.raises(http.client.HTTPException):
        http_provider.parse_headers(io.BytesIO(b"".join(b"X%d: 1\r\n" % i for i in range(101)) + b"\r\n"))


def _answer(raw: bytes, method: str = "POST") -> http.client.HTTPResponse:
    a, b = socket.socketpair()
    try:
        a.sendall(raw)
        a.shutdown(socket.SHUT_WR)
        resp = http_provider._Response(b, method=method)
        resp.begin()
        body = resp.read()
        return resp, body
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("raw,status,body,will_close", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, b"ok", False),
    (b"HTTP/1.1 503 Busy\r\nRetry-After: 5\r\nContent-Length: 0\r\n\r\n", 503, b"", False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", 200, b"ok", False),
    (b"HTTP/1.1 100 Continue\r\nX: y\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", 204, b"", False),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 200, b"ok", True),
    (b"HTTP/1.0 200 OK\r\n\r\nuntil close", 200, b"until close", True),
    (b"HTTP/1.1 200 OK\r\n\r\nno length", 200, b"no length", True),
])
def test_an_answer_reads_as_http_client_reads_it(raw, status, body, will_close):
    resp, got = _answer(raw)
    a, b = socket.socketpair()
    try:
        a.sendall(raw)
        a.shutdown(socket.SHUT_WR)
        std = http.client.HTTPResponse(b, method="POST")
        std.begin()
        std_body = std.read()
    finally:
        a.close()
        b.close()
    assert (resp.status, got, resp.will_close) == (status, body, will_close)
    assert (std.status, std_body, std.will_close, std.getheaders()) == (resp.status, got, resp.will_close,
                                                                         resp.getheaders())
