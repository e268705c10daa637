"""NATS JetStream for the event export's tests: the shared server at 127.0.0.1:4222 (a test's own stream
name and subject prefix, deleted at the end), a throwaway ``nats-server -js`` of a test's own that it
can stop and restart, and reading a stream back."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

SHARED = "nats://127.0.0.1:4222"
NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


def shared_nats() -> str:
    """The shared NATS's URL; FAILS (never skips) when nothing answers: CI starts one (.ci/run)."""
    try:
        socket.create_connection(("127.0.0.1", 4222), 2).close()
    except OSError as exc:
        pytest.fail(f"no NATS JetStream answers at 127.0.0.1:4222 ({exc}); start one with "
                    "`nats-server -js &` (Debian package nats-server) -- .ci/run does it when missing")
    return SHARED


def unique_names() -> tuple[str, str]:
    """A stream name and a subject prefix of this test's own (parallel runs share the server)."""
    tag = uuid.uuid4().hex[:10]
    return f"T_{tag}", f"test{tag}.events"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NatsServer:
    """``nats-server -js`` on a free port with a store folder of its own; :meth:`stop` / :meth:`start`
    keep the port and the store (a restart, not a new server)."""

    def __init__(self, tmp: Path):
        if not os.path.exists(NATS_SERVER):
            pytest.fail(f"{NATS_SERVER} is missing: install Debian's nats-server package (.ci/run does)")
        self.port = free_port()
        self.store = tmp / f"nats-{self.port}"
        self.store.mkdir(parents=True, exist_ok=True)
        self.log = tmp / f"nats-{self.port}.log"
        self.proc: subprocess.Popen | None = None
        self.url = f"nats://127.0.0.1:{self.port}"

    def start(self) -> "NatsServer":
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([NATS_SERVER, "-js", "-a", "127.0.0.1", "-p", str(self.port),
                                          "-sd", str(self.store)], stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise AssertionError(f"nats-server exited: {self.log.read_text()[-2000:]}")
                time.sleep(0.05)
        raise AssertionError("nats-server did not answer in 15 s")

    def stop(self, kill: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill() if kill else self.proc.terminate()
            self.proc.wait(15)
        self.proc = None


def read_stream(url: str, stream: str) -> list[dict]:
    """Every message of ``stream``, in stream order: ``seq``, ``subject``, ``headers``, ``body`` (parsed)."""
    async def read():
        import nats
        nc = await nats.connect(url, connect_timeout=3, allow_reconnect=False, max_reconnect_attempts=1)
        try:
            js = nc.jetstream(timeout=10)
            info = await js.stream_info(stream)
            out = []
            if info.state.messages:
                for seq in range(info.state.first_seq, info.state.last_seq + 1):
                    m = await js.get_msg(stream, seq)
                    out.append({"seq": m.seq, "subject": m.subject, "headers": m.headers or {},
                                "body": json.loads(m.data)})
            return out
        finally:
            await nc.close()
    return asyncio.run(read())


def delete_stream(url: str, stream: str) -> None:
    async def drop():
        import nats
        from nats.js.errors import NotFoundError
        nc = await nats.connect(url, connect_timeout=3, allow_reconnect=False, max_reconnect_attempts=1)
        try:
            try:
                await nc.jetstream().delete_stream(stream)
            except NotFoundError:
                pass
        finally:
            await nc.close()
    try:
        asyncio.run(drop())
    except Exception:
        pass
