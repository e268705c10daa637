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
    def __init__(self, *, replica_of: "Cluster | None" = None, initdb: bool = True):
        """A new cluster: ``initdb``; or with ``replica_of`` a streaming replica of that (running)
        cluster, copied with ``pg_basebackup -R`` (it starts in standby mode); or with
        ``initdb=False`` an empty ``data`` for a restore (:meth:`base_backup` of another cluster
        into it, then :meth:`configure`)."""
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
        if replica_of is not None:
            # initdb's trust rules let 127.0.0.1 replicate; a replica's settings are then its own
            self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(replica_of.port), "-U", "postgres",
                      "-D", str(self.data), "-R", "-X", "stream", "-c", "fast", "--no-sync")
            self.configure()
        elif initdb:
            # trust on loopback, replication connections included (initdb's pg_hba.conf has the lines;
            # wal_level = replica and max_wal_senders = 10 are the defaults): pg_basebackup works.
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
            self.configure()

    def configure(self, **settings) -> None:
        """Append this cluster's address, port and socket folder (and ``settings``) to its
        postgresql.conf; the last line wins, so a restored copy of another cluster's folder takes
        this one's port."""
        lines = {"listen_addresses": "'127.0.0.1'", "port": str(self.port),
                 "unix_socket_directories": f"'{self.root}'", "fsync": "off", **settings}
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n" + "".join(f"{k} = {v}\n" for k, v in lines.items()))

    def base_backup(self, target: Path) -> None:
        """``pg_basebackup -X stream`` of this running cluster into the empty folder ``target`` (run
        as the cluster's user, like the server): the data folder plus the WAL written during the
        copy, so it starts consistent without an archive."""
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-D", str(target),
                  "-X", "stream", "-c", "fast", "--no-sync")

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
