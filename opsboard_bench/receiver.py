"""A lean webhook receiver for ``opsboard bench --scenario webhooks``: one asyncio process that
verifies every delivery's Standard Webhooks signature (:func:`opsboard.deliveries.webhooks.verify`,
the product's own check, timestamp tolerance included) and answers at once.

Why not the provider sandbox (:mod:`opsboard.tools.sandbox`): its ``http.server`` receivers take a
thread per connection and parse each request with the :mod:`email` package, 0.18-0.33 ms of CPU per
request -- a quarter of the machine's CPU per delivery in that scenario, on the same two cores as the
workers it measures.  This one spends a fraction of that per request, so the figure measures the
platform rather than the receiver; ``OPSBOARD_BENCH_RECEIVER=sandbox`` measures with the sandbox
as before (see docs/performance.md, webhooks part 2).

Control, on the same port: ``POST /_bench/routes`` with ``{"<path>": {"secret": "whsec_...",
"status": 503}}`` (status optional, default 200) sets what each path expects and answers;
``GET /_bench/counts`` returns ``{"<path>": {"requests": n, "verified": n, "bad": n}}`` (a request
whose signature fails counts as ``bad`` and is answered 400).  ``python -m
opsboard_bench.receiver`` prints its URL and serves until its stdin closes.
"""
from __future__ import annotations

import asyncio
import json
import sys

from opsboard.deliveries.webhooks import WebhookVerificationError, verify

_MAX_HEAD = 64 * 1024
_MAX_BODY = 1024 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}


class State:
    def __init__(self):
        self.routes: dict[str, dict] = {}
        self.counts: dict[str, dict] = {}

    def handle(self, method: str, path: str, headers: dict, body: bytes) -> tuple[int, bytes]:
        if path == "/_bench/routes" and method == "POST":
            self.routes.update(json.loads(body))
            return 200, b"{}"
        if path == "/_bench/counts":
            return 200, json.dumps(self.counts).encode()
        route = self.routes.get(path)
        if route is None or method != "POST":
            return 404, b""
        c = self.counts.get(path)
        if c is None:
            c = self.counts[path] = {"requests": 0, "verified": 0, "bad": 0}
        c["requests"] += 1
        try:
            verify(route["secret"], headers, body)
        except WebhookVerificationError:
            c["bad"] += 1
            return 400, b""
        c["verified"] += 1
        return route.get("status", 200), b""


class _Protocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive, Content-Length bodies (what the platform's client sends)."""

    def __init__(self, state: State):
        self.state, self.buf, self.transport = state, b"", None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > _MAX_HEAD:
                    self.transport.close()
                return
            lines = self.buf[:end].decode("latin-1").split("\r\n")
            try:
                method, path, _ = lines[0].split(" ", 2)
            except ValueError:
                self.transport.close()
                return
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                length = -1
            if not 0 <= length <= _MAX_BODY or "chunked" in headers.get("transfer-encoding", ""):
                self.transport.close()   # not what the platform sends
                return
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4:end + 4 + length]
            self.buf = self.buf[end + 4 + length:]
            status, out = self.state.handle(method, path, headers, body)
            close = headers.get("connection", "").lower() == "close"
            self.transport.write(b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\nContent-Type: application/json\r\n%s\r\n%s"
                                 % (status, _REASONS.get(status, "X").encode(), len(out),
                                    b"Connection: close\r\n" if close else b"", out))
            if close:
                self.transport.close()
                return


async def _main() -> None:
    state = State()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Protocol(state), "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    # Serve until stdin closes (the bench ends it so).
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()


if __name__ == "__main__":
    asyncio.run(_main())
