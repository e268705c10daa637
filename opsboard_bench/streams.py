"""``opsboard bench --scenario streams``: N inbox streams on the stream server, as the demo runs it.

Starts gunicorn and the stream server with the demo's launch code
(:func:`opsboard.tools.demo.start_web`: ``-w 2 --threads 4`` and ``opsboard
streams`` with ``OPSBOARD_STREAMS_PROCESSES`` = ``PROCESSES``), opens ``--streams
N`` streams (default 2,000; the goal of issue 27 is 10,000) straight to the
stream server (one user token each) from ``CLIENTS`` client processes of their
own (:mod:`.stream_client`), then publishes ``ROUNDS`` notifications,
each to every stream's user (one event fanned out to all of them: one inbox
row each, one ``*`` NOTIFY).  Meanwhile a thread asks the web for ``/healthz``
and a signed-in member's inbox page every 50 ms.

Figures: delivery p50/p99 from the fan-out's commit to each open stream's
receipt (every stream, every round), the stream server's RSS (and per
stream), the CPU the stream server and the load client used during the
rounds (the client runs on the same machine: its share is shown), /healthz
and the inbox page p99 during the rounds.
"""
from __future__ import annotations

import http.cookiejar
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from opsboard import auth, outbox
from opsboard.catalogue import active
from opsboard.notifications import fanout as fanoutmod
from opsboard.notifications import inbox, policy

from .notifications import EVENT, _cpu_ticks, _recipients, _rss_kib, seed_members

#: Notifications published to every stream (OPSBOARD_BENCH_ROUNDS: more for a profile).
ROUNDS = int(os.environ.get("OPSBOARD_BENCH_ROUNDS", "3"))
SECRET = "bench-" + "x" * 40
#: Stream server processes (one port, SO_REUSEPORT) and load client processes.
PROCESSES = int(os.environ.get("OPSBOARD_BENCH_STREAM_PROCESSES", "2"))
CLIENTS = int(os.environ.get("OPSBOARD_BENCH_STREAM_CLIENTS", "2"))
#: Seconds with every stream open and nothing published, to measure the heartbeats' cost.
IDLE = 5.0
#: The dashboard page timed meanwhile: a member's inbox, which the broadcast writes to.
PAGE = "/inbox/"
PROBE_EMAIL, PROBE_PASSWORD = "streams-probe@bench.test", "bench-password"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the stream server's processes), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, ()))
    return out


def _pss_kib(pid: int) -> int:
    """A process's proportional set size in KiB (its share of pages shared with its forked siblings), or
    its RSS where the kernel does not tell; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return _rss_kib(pid)


def _backend_pids(conn) -> list[int]:
    """This database's server processes but ``conn``'s own (empty when the server is not on this host)."""
    pids = [r["pid"] for r in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")]
    return [p for p in pids if os.path.exists(f"/proc/{p}")]


def _ticks(pids: list[int]) -> dict[int, int]:
    """User + system CPU clock ticks of each of ``pids`` still running."""
    return {pid: t for pid in pids if (t := _cpu_ticks(pid)) is not None}


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (0 for a process that is gone)."""
    return sum(_ticks(pids).values()) / os.sysconf("SC_CLK_TCK")


class _Clients:
    """The load: ``processes`` client processes (:mod:`.stream_client`), the tokens dealt among them."""

    def __init__(self, port: int, tokens: list[str], processes: int, folder: Path):
        from opsboard.config import ROOT
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.procs = []
        for k in range(processes):
            path = folder / f"tokens-{k}.txt"
            path.write_text("\n".join(tokens[k::processes]))
            self.procs.append(subprocess.Popen([sys.executable, "-m", "opsboard_bench.stream_client",
                                                str(port), str(path)], stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, text=True, env=env))
        self.connected = self.failed = 0

    def wait_connected(self) -> None:
        for p in self.procs:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError("a stream client process ended before connecting")
            got = json.loads(line)
            self.connected += got["connected"]
            self.failed += got["failed"]

    def _ask(self, command: str) -> list[str]:
        for p in self.procs:
            p.stdin.write(command + "\n")
            p.stdin.flush()
        return [p.stdout.readline() for p in self.procs]

    def count(self, r: int) -> int:
        """Streams that received more than ``r`` notifications."""
        return sum(int(line) for line in self._ask(f"count {r}"))

    def dump(self) -> list[list[float]]:
        out = []
        for line in self._ask("dump"):
            out.extend(json.loads(line))
        for p in self.procs:
            p.wait(30)
        return out

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)


def _sign_in(base: str, email: str, password: str) -> urllib.request.OpenerDirector:
    """An opener with a dashboard session of ``email`` (the sign-in form, its CSRF token and cookie)."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    page = opener.open(base + "/login", timeout=30).read().decode()
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"email": email, "password": password, "csrf_token": token}).encode()
    opener.open(base + "/login", form, timeout=30).read()
    if opener.open(base + PAGE, timeout=30).status != 200:
        raise RuntimeError("the bench user could not open the inbox page")
    return opener


def _probe(base: str, opener, stop: threading.Event, out: dict[str, list[float]]) -> None:
    """Time /healthz and a signed-in user's inbox page every 50 ms until ``stop`` (what a person would
    be loading meanwhile; the page reads the inbox the broadcast is writing to)."""
    plain = urllib.request.build_opener()
    while not stop.wait(0.05):
        for path, client in (("/healthz", plain), (PAGE, opener)):
            t = time.perf_counter()
            try:
                client.open(base + path, timeout=30).read()
                out[path].append(time.perf_counter() - t)
            except OSError:
                out.setdefault(path + " failed", []).append(time.perf_counter() - t)


def _server_gaps(streams_port: int, processes: int) -> float:
    """The stream server's own NOTIFY -> last write of the last round: the largest over its processes
    (each answers /healthz for itself; a new connection lands on any of them)."""
    gaps: dict[int, float] = {}
    for _ in range(8 * processes):
        health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{streams_port}/healthz", timeout=30).read())
        gaps[health.get("pid", 0)] = health["last_notify_to_last_write_ms"] or float("nan")
        if len(gaps) >= processes:
            break
    return max(gaps.values())


def streams(b) -> None:
    """N streams (--streams, default 2,000) on the stream server beside the demo's gunicorn: delivery p50/p99
    to every stream, stream server RSS, /healthz and the inbox page p99 meanwhile."""
    from opsboard.config import ROOT
    from opsboard.tools.demo import start_web, stop_children

    n = getattr(b, "streams", None) or 2000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 2 * n + 1000))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # the client's sockets; children inherit it
    if want < n // CLIENTS + 200:
        raise RuntimeError(f"open files limited to {want}: too few for {n} streams (raise ulimit -n)")

    outbox.define_event(active(), EVENT, 1, aggregate="notice", fields={}, description="Bench: a notice to every member.")
    policy.declare(active(), EVENT, category="system", channels=("inbox",), recipients=_recipients)
    tenant = b.tenants(3)[2]
    print(f"  streams: seeding {n} users and tokens", flush=True)
    with b.conn() as c:
        with c.transaction():
            ids = seed_members(c, tenant, n, "stream")
            tokens = [inbox.create_token(c, uid, "bench")[0] for uid in ids]
            slug = c.execute("SELECT slug FROM tenants WHERE id = %s", (tenant,)).fetchone()["slug"]
            auth.create_user(c, PROBE_EMAIL, PROBE_PASSWORD, "member", slug)
        c.execute("ANALYZE users; ANALYZE memberships; ANALYZE user_tokens")

    port, streams_port = _free_port(), _free_port()
    logs = Path(tempfile.mkdtemp(prefix="opsboard-bench-streams-"))
    per_process = -(-n // PROCESSES)
    env = dict(os.environ, DATABASE_URL=b.app_url or b.url, OPSBOARD_ENV="development", OPSBOARD_SECRET_KEY=SECRET,
               OPSBOARD_STREAMS_MAX=str(per_process + max(100, per_process // 4)),
               OPSBOARD_STREAMS_PROCESSES=str(PROCESSES), OPSBOARD_LOG_FORMAT="text", PYTHONPATH=str(ROOT))
    children = start_web(env, "127.0.0.1", port, streams_port, logs)
    base = f"http://127.0.0.1:{port}"
    stop = threading.Event()
    probes: dict[str, list[float]] = {"/healthz": [], PAGE: []}
    clients = None
    rounds: list[float] = []
    server_ms: list[float] = []  # per round: the stream server's notify -> its last write
    try:
        deadline = time.monotonic() + 60
        for url in (base + "/healthz", f"http://127.0.0.1:{streams_port}/healthz"):
            while True:
                try:
                    urllib.request.urlopen(url, timeout=2).read()
                    break
                except OSError:
                    if time.monotonic() > deadline or any(c.poll() is not None for c in children):
                        raise RuntimeError(f"the web or stream server did not start; see {logs}") from None
                    time.sleep(0.2)
        opener = _sign_in(base, PROBE_EMAIL, PROBE_PASSWORD)
        opener.open(base + PAGE, timeout=10).read()  # both gunicorn workers warm (roughly)
        server = _tree(children[0].pid)
        rss_before = sum(_pss_kib(p) for p in server)
        started = time.perf_counter()
        clients = _Clients(streams_port, tokens, CLIENTS, logs)
        clients.wait_connected()
        connect_s = time.perf_counter() - started
        time.sleep(1.0)
        server = _tree(children[0].pid)
        rss_after = sum(_pss_kib(p) for p in server)
        idle0 = (_cpu_s(server), time.monotonic())
        time.sleep(IDLE)  # every stream open, nothing published: what the heartbeats cost
        idle_cpu = (_cpu_s(server) - idle0[0]) / (time.monotonic() - idle0[1])
        prober = threading.Thread(target=_probe, args=(base, opener, stop, probes), daemon=True)
        prober.start()
        time.sleep(1.0)  # the probe's quiet baseline
        load = os.getloadavg()[0]
        cpu0 = (_cpu_s(server), _cpu_s([p.pid for p in clients.procs]), time.monotonic())
        in_rounds = 0.0  # the stream server's CPU from each commit until every stream has the row
        # From each commit until every stream has its row: the CPU of the stream server, the load
        # clients and this database's backends (the stream server's reads; the probe's few), for the floor.
        round_cpu = {"server": 0.0, "clients": 0.0, "postgres": 0.0}
        hz = os.sysconf("SC_CLK_TCK")
        with b.conn() as c:
            backends = _backend_pids(c)
            for r in range(ROUNDS):
                before = _cpu_s(server)
                with c.transaction():
                    ev = outbox.publish(c, EVENT, 1, aggregate=("notice", f"streams-{r}"), tenant=tenant, payload={})
                fanoutmod.fan_out(c, ev["id"])  # commits: one row per user, one '*' NOTIFY
                rounds.append(time.monotonic())
                at_commit = (_cpu_s(server), _cpu_s([p.pid for p in clients.procs]), _ticks(backends))
                wait_until = time.monotonic() + 60
                while time.monotonic() < wait_until and clients.count(r) < clients.connected:
                    time.sleep(0.02)
                in_rounds += _cpu_s(server) - before
                db_ticks = _ticks(backends := _backend_pids(c))
                round_cpu["server"] += _cpu_s(server) - at_commit[0]
                round_cpu["clients"] += _cpu_s([p.pid for p in clients.procs]) - at_commit[1]
                round_cpu["postgres"] += sum(t - at_commit[2].get(pid, 0) for pid, t in db_ticks.items()) / hz
                time.sleep(0.5)
                server_ms.append(_server_gaps(streams_port, PROCESSES))
        cpu1 = (_cpu_s(server), _cpu_s([p.pid for p in clients.procs]), time.monotonic())
        stop.set()
        prober.join(35)
        received = clients.dump()
    finally:
        stop.set()
        if clients is not None:
            clients.stop()
        stop_children(children, grace=20)

    latencies = [got[r] - rounds[r] for got in received for r in range(min(len(got), len(rounds)))]
    expected = clients.connected * len(rounds)
    wall = cpu1[2] - cpu0[2]
    procs = f"{PROCESSES} process{'es' if PROCESSES > 1 else ''}"
    b.add("streams", "streams open", clients.connected, "streams",
          f"of {n} on {procs} (OPSBOARD_STREAMS_PROCESSES), opened in {connect_s:.1f} s by {CLIENTS} clients")
    b.add("streams", "deliveries received", len(latencies), "events", f"of {expected} ({ROUNDS} rounds)")
    b.add("streams", "commit -> every stream, p50", _percentile(latencies, 0.5) * 1000, "ms")
    b.add("streams", "commit -> every stream, p99", _percentile(latencies, 0.99) * 1000, "ms")
    b.add("streams", "commit -> last stream (max)", max(latencies, default=float("nan")) * 1000, "ms")
    if round_cpu["postgres"] > 0:  # the server runs on this host: every part of a round's CPU is known
        cores = os.cpu_count() or 1
        spent = sum(round_cpu.values()) / max(len(rounds), 1)
        b.add("streams", "CPU floor: commit -> every stream on every core", spent / cores * 1000, "ms",
              f"a round's CPU over {cores} cores: stream server {round_cpu['server'] / len(rounds) * 1000:.0f}, "
              f"load clients {round_cpu['clients'] / len(rounds) * 1000:.0f}, "
              f"PostgreSQL {round_cpu['postgres'] / len(rounds) * 1000:.0f} ms a round")
    b.add("streams", "server: NOTIFY -> last stream written", _percentile(server_ms, 0.5), "ms",
          f"median of {len(server_ms)} rounds, slowest process (the client's reading is not in it)")
    b.add("streams", "stream server memory (PSS)", rss_after / 1024, "MiB",
          f"all {len(server)} processes (PSS: pages they share counted once)")
    b.add("streams", "stream server memory per open stream", (rss_after - rss_before) / max(clients.connected, 1),
          "KiB")
    b.add("streams", "stream server CPU during the rounds", cpu1[0] - cpu0[0], "s",
          f"of {wall:.1f} s wall x {os.cpu_count()} CPUs; load average {load:.1f} before")
    b.add("streams", "stream server CPU per delivery", in_rounds / max(len(latencies), 1) * 1e6, "µs",
          "from each commit to the last receipt (clock ticks of 10 ms): the load-independent figure")
    b.add("streams", "stream server CPU while idle (heartbeats)", idle_cpu * 1000, "ms/s",
          f"over {IDLE:.0f} s with every stream open: a beat and a re-read per stream every 15 s")
    b.add("streams", "load client CPU during the rounds", cpu1[1] - cpu0[1], "s",
          f"{CLIENTS} processes: the client's share of the machine")
    for path, metric in (("/healthz", "/healthz p99 meanwhile"), (PAGE, "dashboard page p99 meanwhile")):
        values = probes[path]
        b.add("streams", metric, _percentile(values, 0.99) * 1000, "ms",
              f"GET {path}: {len(values)} requests, {len(probes.get(path + ' failed', []))} failed")
