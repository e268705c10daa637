"""The real processes of a journey, as pytest fixtures: the web app under gunicorn, ``python -m worker``
subprocesses, the provider sandbox, all pointed at one database of the test's own.

``stack`` (import it, with ``sandbox`` and ``start_worker`` from their homes) gives a :class:`Stack`:
its ``env`` is what both the web and the workers read (the database, the tests' job modules, every
provider pointed at the sandbox, a VAPID key), ``web`` starts gunicorn (``-k gthread``: SSE streams
hold a thread each) on a free loopback port and waits for ``/readyz``, ``worker`` starts
``python -m worker`` (the ``start_worker`` fixture of ``tests/conftest.py``), ``api`` calls the HTTP
API with a bearer key.  Everything started is stopped (SIGKILL if need be) after the test.
"""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import pytest

from opsboard.config import ROOT
from opsboard.deliveries import messages
from tests.conftest import connect, wait_for, worker_env

SECRET_KEY = "journey-secret-" + "x" * 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Answer:
    status: int
    body: dict | str
    headers: dict = field(default_factory=dict)


@dataclass
class Stack:
    db_url: str
    sandbox: object
    tmp_path: object
    start_worker: object
    env: dict
    url: str | None = None
    procs: list = field(default_factory=list)

    def web(self, **extra) -> str:
        """gunicorn serving ``opsboard.web.wsgi:app``; returns its base URL once ``/readyz`` answers."""
        port = free_port()
        log_path = self.tmp_path / f"gunicorn-{len(self.procs)}.log"
        log = open(log_path, "wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-k", "gthread", "-w", "1", "--threads", "16",
             "--graceful-timeout", "2", "-b", f"127.0.0.1:{port}", "opsboard.web.wsgi:app"],
            cwd=ROOT, env=worker_env(self.db_url, **{**self.env, **extra}), stdout=log, stderr=subprocess.STDOUT)
        proc.log_path = log_path
        self.procs.append(proc)
        url = f"http://127.0.0.1:{port}"

        def ready():
            if proc.poll() is not None:
                raise AssertionError(f"gunicorn exited {proc.returncode}: {log_path.read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=5) as r:
                    return json.loads(r.read()).get("status") == "ready"
            except OSError:
                return False

        wait_for(ready, timeout=45, interval=0.2, message="gunicorn to answer /readyz")
        self.url = url
        return url

    def worker(self, *args: str, **extra) -> subprocess.Popen:
        """``python -m worker`` against the stack's database, providers pointed at the sandbox."""
        return self.start_worker(self.db_url, *args, **{**self.env, **extra})

    def api(self, method: str, path: str, token: str, body: dict | None = None,
            headers: dict | None = None) -> Answer:
        data = json.dumps(body).encode() if body is not None else None
        h = {"Authorization": f"Bearer {token}", **({"Content-Type": "application/json"} if data else {}),
             **(headers or {})}
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(request, timeout=15) as r:
                status, raw, hdrs = r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as exc:
            status, raw, hdrs = exc.code, exc.read(), dict(exc.headers)
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = raw.decode("utf-8", "replace")
        return Answer(status, parsed, hdrs)

    def db(self):
        return connect(self.db_url)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.send_signal(signal.SIGKILL)
                    p.wait(10)


def provider_env(sb) -> dict:
    """The providers of every process pointed at the sandbox (the loopback allowed as a target)."""
    private, _public = messages.generate_vapid_keys()
    return {"OPSBOARD_SMTP_HOST": "127.0.0.1", "OPSBOARD_SMTP_PORT": str(sb.smtp_port),
            "OPSBOARD_SMTP_FROM": "opsboard@journeys.test",
            "OPSBOARD_SMS_URL": f"{sb.url}/sms", "OPSBOARD_SMS_KEY": sb.sms_key,
            "OPSBOARD_VAPID_PRIVATE_KEY": private, "OPSBOARD_WEBHOOK_ALLOW": "127.0.0.1",
            "OPSBOARD_SMTP_TIMEOUT": "5", "OPSBOARD_SMS_TIMEOUT": "5", "OPSBOARD_PUSH_TIMEOUT": "5",
            "OPSBOARD_WEBHOOK_TIMEOUT": "5"}


@pytest.fixture
def stack(db_url, sandbox, start_worker, tmp_path):
    """A journey's processes (see the module docstring); the web app is not started until asked."""
    env = {**provider_env(sandbox), "OPSBOARD_SECRET_KEY": SECRET_KEY, "OPSBOARD_POLL_INTERVAL": "0.2",
           "OPSBOARD_LEASE_SECONDS": "5"}
    s = Stack(db_url, sandbox, tmp_path, start_worker, env)
    yield s
    s.stop()
