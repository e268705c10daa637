"""The stream server (``opsboard streams``) as a real subprocess, and a raw SSE client."""
from __future__ import annotations

import http.client
import subprocess
import sys
import time

from opsboard.config import ROOT
from tests.conftest import worker_env

SECRET = "test-secret-" + "x" * 32  # the app fixture's (tests.conftest.make_config): the cookie is the web's


def start_streams(db_url: str, log_path, **env) -> tuple[subprocess.Popen, int]:
    """``opsboard streams --bind 127.0.0.1:0``; returns the process and the port it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "opsboard.cli", "streams", "--bind", "127.0.0.1:0"], cwd=ROOT,
                            env=worker_env(db_url, OPSBOARD_SECRET_KEY=SECRET, **env), stdout=subprocess.PIPE,
                            stderr=open(log_path, "wb"))
    line = proc.stdout.readline().decode()
    assert "listening on http://127.0.0.1:" in line, (line, open(log_path).read())
    port = int(line.split("http://127.0.0.1:")[1].split()[0])
    wait_listening(port)
    return proc, port


def wait_listening(port: int, timeout: float = 30.0) -> None:
    """Until the server's one LISTEN connection is up (a notification before it would only be resynced)."""
    import json
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/healthz")
        if json.loads(c.getresponse().read())["listening"]:
            c.close()
            return
        c.close()
        time.sleep(0.1)
    raise AssertionError("the stream server never listened")


class SSE:
    """A raw SSE client: the response, then events read line by line."""

    def __init__(self, port: int, path: str, headers: dict):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.c.request("GET", path, headers={"Accept": "text/event-stream", **headers})
        self.r = self.c.getresponse()
        self.comments: list[str] = []

    def next_event(self) -> dict | None:
        """The next event (``id``, ``event``, ``data``), or None at the end of the stream."""
        ev: dict = {}
        while True:
            raw = self.r.fp.readline()
            if not raw:
                return None
            line = raw.decode().rstrip("\n")
            if line.startswith(":"):
                self.comments.append(line)
            elif line == "" and "data" in ev:
                return ev
            elif ":" in line:
                k, _, v = line.partition(":")
                ev[k] = v.strip()

    def wait_connected(self) -> None:
        while not any("connected at cursor" in c for c in self.comments):
            raw = self.r.fp.readline()
            assert raw, "the stream ended before it connected"
            if raw.startswith(b":"):
                self.comments.append(raw.decode().rstrip("\n"))

    def close(self) -> None:
        self.c.close()
