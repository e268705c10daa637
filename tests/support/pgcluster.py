"""A throwaway PostgreSQL server of a test's own, to stop and start at will.

Never the shared server: outage tests stop this one.  Binaries from
``/usr/lib/postgresql/*/bin``; data in a temporary folder; a free port on
127.0.0.1.  ``initdb`` refuses root, so as root the cluster runs as the
unprivileged user ``pgtest`` (created when missing: CI machines are fresh).
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

USER = "pgtest"


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def available() -> bool:
    return _bin_dir() is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, *, replica_of: "Cluster | None" = None):
        """A new cluster: ``initdb``, or with ``replica_of`` a streaming replica of that
        (running) cluster, copied with ``pg_basebackup -R`` (it starts in standby mode)."""
        self.bin = _bin_dir()
        if self.bin is None:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
        self.root = Path(tempfile.mkdtemp(prefix="opsboard-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            try:
                pwd.getpwnam(USER)
            except KeyError:
                subprocess.run(["useradd", "-m", USER], check=True)
            shutil.chown(self.root, USER, USER)
        os.chmod(self.root, 0o755)
        if replica_of is None:
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        else:  # initdb's trust rules let 127.0.0.1 replicate; a replica's settings are then its own
            self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(replica_of.port), "-U", "postgres",
                      "-D", str(self.data), "-R", "-X", "stream", "-c", "fast", "--no-sync")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                       f"unix_socket_directories = '{self.root}'\nfsync = off\n")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", USER, "--", *cmd]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip()[-500:]}")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        except RuntimeError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)
