"""Configuration, read once from the environment and validated.

Every setting comes from an ``OPSBOARD_``-prefixed variable (plus
``DATABASE_URL``).  A bad value raises :class:`ConfigError` with one line that
names the variable; the CLI turns that into exit status 2.
"""
from __future__ import annotations

import ipaddress
import os
import re
import secrets
from dataclasses import dataclass, field, fields
from importlib.resources import files
from pathlib import Path

_PARENT = Path(__file__).resolve().parent.parent
#: The source checkout this package runs from (an editable install), or None
#: when it is installed from a wheel.
CHECKOUT: Path | None = _PARENT if (_PARENT / "pyproject.toml").is_file() else None
#: Working folder of the processes that tests, bench and demo start, and parent
#: of the default instance folder: the checkout, else the current directory.
ROOT = CHECKOUT or Path.cwd()


def resource_dir(name: str) -> Path:
    """``migrations``, ``templates`` or ``static``: inside the installed package
    (the wheel carries them there), else beside the packages in a checkout."""
    packaged = Path(str(files("opsboard") / name))
    if packaged.is_dir() or CHECKOUT is None:
        return packaged
    return CHECKOUT / name

MODES = ("production", "development", "demo", "test")
#: What sits between opsboard and PostgreSQL on ``DATABASE_URL`` (``OPSBOARD_DATABASE_POOLER``):
#: ``none`` (a direct connection, or a pooler in session mode) or ``transaction`` (PgBouncer's
#: transaction pooling: no session state, no server-side prepared statements; see docs/operations.md).
POOLERS = ("none", "transaction")

#: The queues, in the order pages list them: ``critical`` (OTP, financial: its
#: slots are reserved, never used by other queues), ``default``, and ``bulk``
#: (reports, exports).  The one definition: the database, the worker's slots,
#: the dashboard's filters and the metrics all take the names from here.
QUEUE_NAMES = ("critical", "default", "bulk")
#: The most slots a worker runs for one queue (OPSBOARD_WORKER_QUEUES, and an operator's live change).
QUEUE_SLOTS_MAX = 1000

#: Seconds the oldest ready job of each queue may wait: past it, the queue's
#: row turns red (opsboard.metrics) and the ``queue_age`` alert fires
#: (opsboard.alerts).  A queue not listed uses DEFAULT_QUEUE_AGE_TARGET.
QUEUE_AGE_TARGETS: dict[str, float] = {"critical": 30.0, "default": 300.0, "bulk": 1800.0}
DEFAULT_QUEUE_AGE_TARGET = 300.0


def queue_age_target(queue: str) -> float:
    """Seconds the oldest ready job of ``queue`` may wait (see QUEUE_AGE_TARGETS)."""
    return float(QUEUE_AGE_TARGETS.get(queue, DEFAULT_QUEUE_AGE_TARGET))

#: A worker whose row was refreshed within this many seconds is live: the
#: workers page flags the others stale, the ``no_worker`` alert and the
#: ``opsboard_workers`` gauge count only live ones.  A worker refreshes its row
#: every min(lease / 3, 10) seconds, so this is many missed heartbeats.
WORKER_LIVE_SECONDS = 60


class ConfigError(Exception):
    """A setting is missing or malformed; the message is one line for the operator."""


@dataclass(frozen=True)
class ProviderSettings:
    """Deliveries to providers (SMTP, SMS gateway, Web Push, webhooks) and their circuit breakers.

    Part of :class:`Config` (``config.providers``), parsed and validated with
    the rest by :meth:`Config.from_env`; the worker hands it to each handler in
    the job context (``JobContext.settings``), the web app passes what a core
    function needs of it (the allow-list) as an argument.
    """
    smtp_host: str = "127.0.0.1"
    smtp_port: int = 25
    #: none | starttls | ssl (implicit TLS)
    smtp_security: str = "none"
    smtp_user: str = ""
    smtp_password: str = field(default="", repr=False)
    smtp_from: str = "opsboard@localhost"
    smtp_timeout: float = 10.0
    #: CA certificates (PEM) trusted for STARTTLS/SSL instead of the system ones (a private relay).
    smtp_ca_file: str = ""
    #: Shared secret that signs forwarded email delivery reports (DSNs); empty: none accepted.
    email_report_secret: str = field(default="", repr=False)
    sms_url: str = "http://127.0.0.1:8025/sms"
    sms_key: str = field(default="", repr=False)
    sms_timeout: float = 10.0
    vapid_private_key: str = field(default="", repr=False)
    vapid_subject: str = "mailto:ops@localhost"
    push_timeout: float = 10.0
    webhook_timeout: float = 10.0
    webhook_max_response: int = 64 * 1024
    #: Networks a webhook (or Web Push endpoint) may target although private/loopback (e.g. 127.0.0.1, 10.0.0.0/8).
    webhook_allow: tuple = ()
    breaker_failures: int = 5
    breaker_failure_rate: float = 0.5
    breaker_min_calls: int = 20
    breaker_window: float = 60.0
    breaker_cooldown: float = 30.0
    breaker_cooldown_max: float = 600.0
    #: An endpoint failing without a single success for this long is disabled.
    endpoint_disable_after: float = 3 * 24 * 3600.0
    #: ``OPSBOARD_PUBLIC_URL``: the address people open the dashboard at (``https://ops.example.com``);
    #: emails carry absolute links and pushes a deep link built on it.  Empty: links stay paths.
    public_url: str = ""

    @classmethod
    def from_env(cls, env=None) -> "ProviderSettings":
        """Parse the ``OPSBOARD_SMTP_*``, ``_SMS_*``, ``_VAPID_*``, ``_PUSH_*``, ``_WEBHOOK_*`` and
        ``_BREAKER_*`` variables; a bad value is a one-line :class:`ConfigError` naming the variable."""
        env = os.environ if env is None else env
        security = env.get("OPSBOARD_SMTP_SECURITY", "") or "none"
        if security not in ("none", "starttls", "ssl"):
            raise ConfigError(f"OPSBOARD_SMTP_SECURITY={security!r} must be none, starttls or ssl")
        allow = []
        for part in filter(None, (p.strip() for p in env.get("OPSBOARD_WEBHOOK_ALLOW", "").split(","))):
            try:
                allow.append(ipaddress.ip_network(part, strict=False))
            except ValueError:
                raise ConfigError(f"OPSBOARD_WEBHOOK_ALLOW: {part!r} is not an address or network") from None
        sms_url = (env.get("OPSBOARD_SMS_URL", "") or "http://127.0.0.1:8025/sms").rstrip("/")
        scheme, sep, rest = sms_url.partition("://")
        if scheme not in ("http", "https") or not sep or not rest.split("/")[0]:
            raise ConfigError(f"OPSBOARD_SMS_URL={sms_url!r} is not an http(s) URL")
        smtp_from = env.get("OPSBOARD_SMTP_FROM", "") or "opsboard@localhost"
        if "@" not in smtp_from or any(c in smtp_from for c in "\r\n"):
            raise ConfigError(f"OPSBOARD_SMTP_FROM={smtp_from!r} is not an email address")
        ca_file = env.get("OPSBOARD_SMTP_CA_FILE", "")
        if ca_file and not Path(ca_file).is_file():
            raise ConfigError(f"OPSBOARD_SMTP_CA_FILE={ca_file!r} is not a readable file")
        vapid = env.get("OPSBOARD_VAPID_PRIVATE_KEY", "").strip()
        if vapid:
            import base64
            import binascii
            try:
                raw = base64.urlsafe_b64decode(vapid + "=" * (-len(vapid) % 4))
            except (binascii.Error, ValueError):
                raw = b""
            if len(raw) != 32 and not raw.startswith(b"\x30"):  # raw P-256 scalar, or DER
                raise ConfigError("OPSBOARD_VAPID_PRIVATE_KEY is not a base64url P-256 private key "
                                  "(generate one with `opsboard vapid`)")
        subject = env.get("OPSBOARD_VAPID_SUBJECT", "") or "mailto:ops@localhost"
        if not subject.startswith(("mailto:", "https://")):
            raise ConfigError(f"OPSBOARD_VAPID_SUBJECT={subject!r} must start with mailto: or https://")
        public_url = (env.get("OPSBOARD_PUBLIC_URL", "") or "").strip().rstrip("/")
        if public_url:
            p_scheme, p_sep, p_rest = public_url.partition("://")
            if p_scheme not in ("http", "https") or not p_sep or not p_rest or any(
                    c in p_rest for c in "?#\\ \r\n") or p_rest.startswith("/"):
                raise ConfigError(f"OPSBOARD_PUBLIC_URL={public_url!r} is not an http(s) address without a "
                                  "query or fragment (e.g. https://ops.example.com)")
        rate = _float(env, "OPSBOARD_BREAKER_FAILURE_RATE", 0.5, 0.01, 1.0)
        cooldown = _float(env, "OPSBOARD_BREAKER_COOLDOWN", 30.0, 0.01, 86400)
        cooldown_max = _float(env, "OPSBOARD_BREAKER_COOLDOWN_MAX", 600.0, 0.01, 86400)
        if cooldown_max < cooldown:
            raise ConfigError(f"OPSBOARD_BREAKER_COOLDOWN_MAX={cooldown_max} is smaller than "
                              f"OPSBOARD_BREAKER_COOLDOWN={cooldown}")
        return cls(
            smtp_host=env.get("OPSBOARD_SMTP_HOST", "") or "127.0.0.1",
            smtp_port=_int(env, "OPSBOARD_SMTP_PORT", 25, 1, 65535),
            smtp_security=security,
            smtp_user=env.get("OPSBOARD_SMTP_USER", ""),
            smtp_password=env.get("OPSBOARD_SMTP_PASSWORD", ""),
            smtp_from=smtp_from,
            smtp_timeout=_float(env, "OPSBOARD_SMTP_TIMEOUT", 10.0, 0.1, 300),
            smtp_ca_file=ca_file,
            email_report_secret=env.get("OPSBOARD_EMAIL_REPORT_SECRET", ""),
            sms_url=sms_url,
            sms_key=env.get("OPSBOARD_SMS_KEY", ""),
            sms_timeout=_float(env, "OPSBOARD_SMS_TIMEOUT", 10.0, 0.1, 300),
            vapid_private_key=vapid,
            vapid_subject=subject,
            push_timeout=_float(env, "OPSBOARD_PUSH_TIMEOUT", 10.0, 0.1, 300),
            webhook_timeout=_float(env, "OPSBOARD_WEBHOOK_TIMEOUT", 10.0, 0.1, 300),
            webhook_max_response=_int(env, "OPSBOARD_WEBHOOK_MAX_RESPONSE", 64 * 1024, 0, 16 * 1024 * 1024),
            webhook_allow=tuple(allow),
            breaker_failures=_int(env, "OPSBOARD_BREAKER_FAILURES", 5, 1, 10000),
            breaker_failure_rate=rate,
            breaker_min_calls=_int(env, "OPSBOARD_BREAKER_MIN_CALLS", 20, 1, 100000),
            breaker_window=_float(env, "OPSBOARD_BREAKER_WINDOW", 60.0, 1, 86400),
            breaker_cooldown=cooldown,
            breaker_cooldown_max=cooldown_max,
            endpoint_disable_after=_float(env, "OPSBOARD_WEBHOOK_DISABLE_AFTER", 3 * 24 * 3600.0, 1, 365 * 86400),
            public_url=public_url,
        )


def parse_queue_slots(text: str) -> dict[str, int]:
    """Parse ``critical=2,default=8,bulk=2`` into ``{"critical": 2, ...}``."""
    slots: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, count = part.partition("=")
        name = name.strip()
        if not sep or name not in QUEUE_NAMES:
            raise ConfigError(
                f"queue slots: {part!r} is not NAME=COUNT with NAME one of {', '.join(QUEUE_NAMES)}")
        try:
            n = int(count)
        except ValueError:
            raise ConfigError(f"queue slots: {count.strip()!r} for {name} is not a whole number") from None
        if not 0 < n <= QUEUE_SLOTS_MAX:
            raise ConfigError(f"queue slots: {name}={n} must be between 1 and {QUEUE_SLOTS_MAX}")
        if name in slots:
            raise ConfigError(f"queue slots: {name} is given twice")
        slots[name] = n
    if not slots:
        raise ConfigError("queue slots: at least one queue is needed, e.g. default=8")
    return slots


def parse_high_water(text: str) -> dict[str, int]:
    """Parse ``critical=200000,default=1000000`` (OPSBOARD_HIGH_WATER) into ``{"critical": 200000, ...}``."""
    marks: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, value = part.partition("=")
        if not sep or name.strip() not in QUEUE_NAMES or not value.strip().isdigit() or int(value) < 1:
            raise ConfigError(f"OPSBOARD_HIGH_WATER: {part!r} is not QUEUE=JOBS (a positive whole number) "
                              f"with QUEUE one of {', '.join(QUEUE_NAMES)}")
        marks[name.strip()] = int(value)
    return marks


@dataclass(frozen=True)
class EventStreamSettings:
    """Events exported to NATS JetStream (``opsboard/outbox/export.py``): off while ``url`` is empty."""

    #: ``OPSBOARD_EVENT_STREAM_URL``: ``nats://host:port`` (or ``tls://``); empty: no export.
    url: str = ""
    #: ``OPSBOARD_EVENT_STREAM_NAME``: the JetStream stream (made when missing).
    name: str = "OPSBOARD_EVENTS"
    #: ``OPSBOARD_EVENT_SUBJECT_PREFIX``: subjects are ``<prefix>.<tenant slug>.<event type>``.
    subject_prefix: str = "opsboard.events"

    @classmethod
    def from_env(cls, env) -> "EventStreamSettings":
        url = (env.get("OPSBOARD_EVENT_STREAM_URL", "") or "").strip()
        if url:
            scheme, sep, rest = url.partition("://")
            host = rest.rsplit("@", 1)[-1].split("/", 1)[0]
            port = host.rpartition(":")[2] if ":" in host else "4222"
            if scheme not in ("nats", "tls") or not sep or not host or host.startswith(":") \
                    or not port.isdigit() or not 0 < int(port) < 65536 or any(c in rest for c in " \r\n?#"):
                raise ConfigError("OPSBOARD_EVENT_STREAM_URL is not a nats:// or tls:// address "
                                  "(e.g. nats://127.0.0.1:4222)")
        name = env.get("OPSBOARD_EVENT_STREAM_NAME", "") or "OPSBOARD_EVENTS"
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,100}", name):
            raise ConfigError(f"OPSBOARD_EVENT_STREAM_NAME={name!r} must be letters, digits, '_' or '-'")
        prefix = env.get("OPSBOARD_EVENT_SUBJECT_PREFIX", "") or "opsboard.events"
        if not re.fullmatch(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*", prefix) or len(prefix) > 100:
            raise ConfigError(f"OPSBOARD_EVENT_SUBJECT_PREFIX={prefix!r} must be dot-separated tokens of "
                              "letters, digits, '_' or '-'")
        return cls(url=url, name=name, subject_prefix=prefix)


@dataclass(frozen=True)
class Config:
    mode: str = "production"
    database_url: str | None = None
    #: ``OPSBOARD_DATABASE_POOLER``: ``transaction`` when DATABASE_URL goes through a transaction pooler.
    database_pooler: str = "none"
    #: ``OPSBOARD_DIRECT_DATABASE_URL``: a connection that bypasses the pooler, for what is bound to a
    #: session (LISTEN, the leader's advisory lock, migrations, the CLI).  None: ``database_url``.
    direct_database_url: str | None = None
    secret_key: str = ""
    #: Instance folder: embedded PostgreSQL data, logs of the demo.
    instance_dir: Path = ROOT / "instance"
    #: Embedded PostgreSQL data folder (used only without DATABASE_URL).
    data_dir: Path | None = None
    pool_min: int = 1
    pool_max: int = 10
    #: ``OPSBOARD_WEB_LOCK_TIMEOUT`` / ``OPSBOARD_WEB_STATEMENT_TIMEOUT``: seconds the web's statements
    #: wait for a lock / run at most (then 503 with Retry-After), well under gunicorn's 30 s timeout, so
    #: that a held table lock or a slow plan cannot hold every web thread (issue 51).
    web_lock_timeout: float = 2.0
    web_statement_timeout: float = 10.0
    #: A streaming replica for the dashboard's heavy reads and /metrics (None: all reads on the primary).
    read_database_url: str | None = None
    #: Seconds a replica may be behind before its reads go to the primary.
    read_max_lag: float = 10.0
    worker_queues: dict[str, int] = field(default_factory=lambda: {"critical": 2, "default": 8, "bulk": 2})
    #: Seconds a claimed job's lease lasts before the reaper may recover it.
    lease_seconds: int = 30
    #: Seconds running handlers get to finish after SIGTERM.
    shutdown_grace_seconds: int = 20
    poll_interval: float = 1.0
    #: Days succeeded jobs are kept before the pruner deletes them.
    retention_days: float = 7.0
    #: Days dead jobs are kept before the pruner deletes them (0: kept until purged by hand).  A dead job
    #: that a surviving replay names stays while that replay does (OPSBOARD_DEAD_RETENTION_DAYS).
    dead_retention_days: float = 90.0
    #: Extra modules that define job types (comma separated).
    job_modules: tuple[str, ...] = ()
    log_format: str = "text"
    login_max_failures_account: int = 5
    login_max_failures_address: int = 20
    login_window_seconds: int = 900
    #: Bearer token that lets a scraper read /metrics without a session (empty: sign-in needed).
    metrics_token: str = ""
    #: Waiting jobs per queue above which the HTTP API answers 503 (unset queues: the core's defaults).
    high_water: dict[str, int] = field(default_factory=dict)
    #: Report results and attachments (local storage); None: <instance_dir>/storage.
    storage_dir: Path | None = None
    #: Most source rows one report chunk reads (and holds) at once.
    report_chunk_rows: int = 50_000
    #: Largest recorded job result (a handler's returned JSON), in bytes; larger fails as result_too_large.
    job_result_max_bytes: int = 64 * 1024
    #: Largest ticket attachment accepted, in bytes.
    ticket_attachment_max_bytes: int = 2 * 1024 * 1024
    #: Content types a ticket attachment may have (sniffed from the bytes).
    ticket_attachment_types: tuple[str, ...] = ("image/png", "image/jpeg", "image/gif", "image/webp",
                                                "application/pdf", "text/plain")
    #: Assign new tickets round-robin among the tenant's active support agents.
    ticket_round_robin: bool = False
    #: A signed-in customer's writes on their ticket pages (/my/tickets: open, reply, reopen, cancel):
    #: a token bucket per user, shared by every web process (429 with Retry-After past it).
    portal_writes_per_minute: float = 20.0
    portal_write_burst: int = 20
    #: Host names the web app answers to (``Host`` header); others get 400.
    #: Empty: any host.  Redirects are relative (web.security.relative_redirect); set it in production
    #: anyway, so that a request for another host name is refused (400).
    trusted_hosts: tuple[str, ...] = ()
    #: Public base URL of the stream server (``opsboard streams``): ``/inbox/stream`` and
    #: ``/api/v1/inbox/stream`` answer a 307 to it.  None: the web serves streams itself, capped.
    streams_url: str | None = None
    #: Dashboard origins the stream server answers CORS with credentials for (``https://dash.example.com``).
    streams_origins: tuple[str, ...] = ()
    #: Open streams one stream server process holds; the next client gets 503 with Retry-After.
    streams_max: int = 10_000
    #: Stream server processes on the one ``--bind`` address (SO_REUSEPORT: the kernel spreads the
    #: connections), each with its own LISTEN connection, pools and ``streams_max``.
    streams_processes: int = 1
    #: Streams one web (gunicorn) process serves itself when ``streams_url`` is unset: each holds a
    #: thread, so keep it well under the threads per process (the demo's 4 threads: 2 stay for pages).
    sse_max_streams: int = 2
    #: Deliveries to providers: SMTP, SMS, Web Push, webhooks, breakers.
    providers: ProviderSettings = field(default_factory=ProviderSettings)
    #: Events exported to NATS JetStream (off unless ``OPSBOARD_EVENT_STREAM_URL`` is set).
    event_stream: EventStreamSettings = field(default_factory=EventStreamSettings)

    @property
    def pgdata(self) -> Path:
        return self.data_dir or (self.instance_dir / "pgdata")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, *, mode: str | None = None) -> "Config":
        """Build the configuration from ``environ`` (default ``os.environ``)."""
        env = os.environ if environ is None else environ
        mode = mode or env.get("OPSBOARD_ENV", "production")
        if mode not in MODES:
            raise ConfigError(f"OPSBOARD_ENV={mode!r} is not one of {', '.join(MODES)}")
        secret = env.get("OPSBOARD_SECRET_KEY", "")
        if not secret:
            # Production keeps it empty: require_secret() stops the web app's start.
            if mode != "production":
                secret = "dev-" + secrets.token_hex(16) if mode == "test" else "opsboard-dev-secret-not-for-production"
        elif mode == "production" and len(secret) < 32:
            raise ConfigError("OPSBOARD_SECRET_KEY is too short; use at least 32 characters")

        instance = Path(env.get("OPSBOARD_INSTANCE_DIR", str(ROOT / "instance")))
        data_dir = env.get("OPSBOARD_DATA_DIR")
        log_format = env.get("OPSBOARD_LOG_FORMAT", "json" if mode == "production" else "text")
        if log_format not in ("json", "text"):
            raise ConfigError(f"OPSBOARD_LOG_FORMAT={log_format!r} must be json or text")
        pool_min = _int(env, "OPSBOARD_POOL_MIN", 1, 0, 100)
        pool_max = _int(env, "OPSBOARD_POOL_MAX", 10, 1, 500)
        if pool_min > pool_max:
            raise ConfigError(f"OPSBOARD_POOL_MIN={pool_min} is larger than OPSBOARD_POOL_MAX={pool_max}")
        web_lock_timeout = _float(env, "OPSBOARD_WEB_LOCK_TIMEOUT", 2.0, 0.01, 600)
        web_statement_timeout = _float(env, "OPSBOARD_WEB_STATEMENT_TIMEOUT", 10.0, 0.01, 600)
        if web_lock_timeout > web_statement_timeout:
            raise ConfigError(f"OPSBOARD_WEB_LOCK_TIMEOUT={web_lock_timeout} is longer than "
                              f"OPSBOARD_WEB_STATEMENT_TIMEOUT={web_statement_timeout}")
        pooler = env.get("OPSBOARD_DATABASE_POOLER", "") or "none"
        if pooler not in POOLERS:
            raise ConfigError(f"OPSBOARD_DATABASE_POOLER={pooler!r} is not one of {', '.join(POOLERS)}")
        direct = env.get("OPSBOARD_DIRECT_DATABASE_URL") or None
        if pooler == "transaction" and not direct:
            # LISTEN and a session advisory lock through a transaction pooler fail silently
            # (notifications lost, two leaders): refuse to start rather than run like that.
            raise ConfigError("OPSBOARD_DATABASE_POOLER=transaction needs OPSBOARD_DIRECT_DATABASE_URL "
                              "(a connection past the pooler, for LISTEN and the leader's lock)")
        return cls(
            mode=mode,
            database_url=env.get("DATABASE_URL") or None,
            database_pooler=pooler,
            direct_database_url=direct,
            secret_key=secret,
            instance_dir=instance,
            data_dir=Path(data_dir) if data_dir else None,
            pool_min=pool_min,
            pool_max=pool_max,
            web_lock_timeout=web_lock_timeout,
            web_statement_timeout=web_statement_timeout,
            read_database_url=env.get("OPSBOARD_READ_DATABASE_URL") or None,
            read_max_lag=_float(env, "OPSBOARD_READ_MAX_LAG", 10.0, 0.0, 86400),
            worker_queues=_queue_slots(env),
            lease_seconds=_int(env, "OPSBOARD_LEASE_SECONDS", 30, 2, 86400),
            shutdown_grace_seconds=_int(env, "OPSBOARD_SHUTDOWN_GRACE_SECONDS", 20, 0, 3600),
            poll_interval=_float(env, "OPSBOARD_POLL_INTERVAL", 1.0, 0.01, 60),
            retention_days=_float(env, "OPSBOARD_RETENTION_DAYS", 7.0, 0.0, 3650),
            dead_retention_days=_float(env, "OPSBOARD_DEAD_RETENTION_DAYS", 90.0, 0.0, 3650),
            job_modules=tuple(m.strip() for m in env.get("OPSBOARD_JOB_MODULES", "").split(",") if m.strip()),
            log_format=log_format,
            login_max_failures_account=_int(env, "OPSBOARD_LOGIN_MAX_FAILURES_ACCOUNT", 5, 1, 1000),
            login_max_failures_address=_int(env, "OPSBOARD_LOGIN_MAX_FAILURES_ADDRESS", 20, 1, 10000),
            login_window_seconds=_int(env, "OPSBOARD_LOGIN_WINDOW_SECONDS", 900, 1, 86400),
            metrics_token=env.get("OPSBOARD_METRICS_TOKEN", ""),
            high_water=parse_high_water(env.get("OPSBOARD_HIGH_WATER", "")),
            storage_dir=Path(env["OPSBOARD_STORAGE_DIR"]) if env.get("OPSBOARD_STORAGE_DIR") else None,
            report_chunk_rows=_int(env, "OPSBOARD_REPORT_CHUNK_ROWS", 50_000, 100, 10_000_000),
            job_result_max_bytes=_int(env, "OPSBOARD_JOB_RESULT_MAX_BYTES", 64 * 1024, 2, 16 * 1024 * 1024),
            ticket_attachment_max_bytes=_int(env, "OPSBOARD_TICKET_ATTACHMENT_MAX_BYTES", 2 * 1024 * 1024, 1,
                                             100 * 1024 * 1024),
            **({"ticket_attachment_types": tuple(t.strip() for t in env["OPSBOARD_TICKET_ATTACHMENT_TYPES"].split(",")
                                                 if t.strip())}
               if env.get("OPSBOARD_TICKET_ATTACHMENT_TYPES") else {}),
            ticket_round_robin=env.get("OPSBOARD_TICKET_ROUND_ROBIN", "") in ("1", "true", "yes"),
            portal_writes_per_minute=_float(env, "OPSBOARD_PORTAL_WRITES_PER_MINUTE", 20.0, 0.01, 100_000.0),
            portal_write_burst=_int(env, "OPSBOARD_PORTAL_WRITE_BURST", 20, 1, 100_000),
            trusted_hosts=_hosts(env.get("OPSBOARD_TRUSTED_HOSTS", "")),
            streams_url=_origin_url(env, "OPSBOARD_STREAMS_URL", base=True),
            streams_origins=tuple(_origin_url({"O": o.strip()}, "O", name="OPSBOARD_STREAMS_ORIGINS")
                                  for o in env.get("OPSBOARD_STREAMS_ORIGINS", "").split(",") if o.strip()),
            streams_max=_int(env, "OPSBOARD_STREAMS_MAX", 10_000, 0, 1_000_000),
            streams_processes=_int(env, "OPSBOARD_STREAMS_PROCESSES", 1, 1, 64),
            sse_max_streams=_int(env, "OPSBOARD_SSE_MAX_STREAMS", 2, 0, 100_000),
            providers=ProviderSettings.from_env(env),
            event_stream=EventStreamSettings.from_env(env),
        )

    def require_secret(self) -> None:
        """The web app signs sessions: refuse to start production without a real secret."""
        if not self.secret_key:
            raise ConfigError(
                "OPSBOARD_SECRET_KEY is not set; production mode needs a long random secret "
                "(python -c 'import secrets; print(secrets.token_hex(32))'), or set OPSBOARD_ENV=development")

    def web_bounds(self) -> dict[str, str]:
        """The web's ``lock_timeout`` and ``statement_timeout``, as PostgreSQL settings (milliseconds)."""
        return {"lock_timeout": f"{max(1, round(self.web_lock_timeout * 1000))}ms",
                "statement_timeout": f"{max(1, round(self.web_statement_timeout * 1000))}ms"}

    def replace(self, **changes) -> "Config":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Config(**values)


def _queue_slots(env) -> dict[str, int]:
    """OPSBOARD_WORKER_QUEUES, with the variable named in its error."""
    raw = env.get("OPSBOARD_WORKER_QUEUES", "critical=2,default=8,bulk=2")
    try:
        return parse_queue_slots(raw)
    except ConfigError as exc:
        raise ConfigError(f"OPSBOARD_WORKER_QUEUES={raw!r}: {exc}") from None


def _hosts(raw: str) -> tuple[str, ...]:
    """``dash.example.com,.example.org`` -> host names (a leading dot: any subdomain too)."""
    hosts = tuple(h.strip().lower() for h in raw.split(",") if h.strip())
    for h in hosts:
        if any(c in h for c in "/ @?#") or h.strip(".") == "":
            raise ConfigError(f"OPSBOARD_TRUSTED_HOSTS: {h!r} is not a host name (e.g. dash.example.com)")
    return hosts


def _origin_url(env, key: str, *, base: bool = False, name: str | None = None) -> str | None:
    """An ``http(s)://host[:port]`` origin (``base``: a path may follow, no query), without a trailing slash."""
    from urllib.parse import urlsplit

    raw = (env.get(key) or "").strip()
    if not raw:
        return None
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
            or parts.fragment or parts.username or (parts.path not in ("", "/") and not base):
        kind = "a base URL (http(s)://host[:port][/path])" if base else "an origin (http(s)://host[:port])"
        raise ConfigError(f"{name or key}={raw!r} is not {kind}")
    return raw.rstrip("/")


def _int(env, name: str, default: int, lo: int, hi: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={value} must be between {lo} and {hi}")
    return value


def _float(env, name: str, default: float, lo: float, hi: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={value} must be between {lo} and {hi}")
    return value
