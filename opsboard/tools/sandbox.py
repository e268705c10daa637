"""The provider sandbox: one local process that plays every provider opsboard talks to.

* **SMTP** (aiosmtpd) on its own port: accepts any sender, recipient and
  credentials; answers ``250 queued as <id>``.  For a recipient given an outcome
  (:meth:`Sandbox.email_outcome`: ``failed`` -- the far side bounced it -- or
  ``delivered``) it plays the remote mail host and the bounce address's inbound
  service: it writes the DSN (RFC 3464) a mail host returns to the envelope sender
  and POSTs it, signed (``Opsboard-Signature``), to ``email_report_url`` -- before it
  answers 250, so the report reaches the product before the sender records
  ``sent`` (the harder order: a late ``sent`` must not undo it).
* **HTTP** on one port:

  ============================================  ==========================================
  ``POST /sms/messages``                        SMS gateway: send (JSON, bearer key)
  ``GET  /sms/messages?client_id=X``            SMS gateway: status query by client id
  ``POST /push/<subscription id>``              Web Push service (decrypts with the key
                                                it generated for that subscription)
  ``POST /hooks/<any name>``                    a webhook receiver (any number of them)
  ``GET  /_sandbox/records[?kind=&route=]``     everything received, as JSON
  ``DELETE /_sandbox/records``                  forget the records
  ``POST /_sandbox/faults``                     inject a fault on a route (see below)
  ``DELETE /_sandbox/faults``                   clear every fault
  ``POST /_sandbox/push/subscriptions``         create a push subscription (keys returned)
  ``POST /_sandbox/email/outcomes``             ``{"address", "action": "failed"|"delivered"}``:
                                                mail to it is reported back by a DSN
  ``GET  /_sandbox/``                           an HTML page of the records and faults
  ============================================  ==========================================

It deduplicates nothing: two sends with the same SMS client id or the same
``webhook-id`` are two records, so that a test sees duplicates.

**Faults** (JSON to ``POST /_sandbox/faults``)::

    {"route": "/hooks/a",        # path prefix, or "smtp"
     "kind": "status",           # status | timeout | reset | drop | latency
     "status": 503,              # kind=status: the HTTP status (or SMTP code for route "smtp")
     "retry_after": "5",         # kind=status: Retry-After header
     "delay_ms": 0,              # wait before handling (any kind)
     "hold_ms": 0,               # after recording, wait before answering (a window to kill a client)
     "count": null}              # apply this many times, then vanish (null: until cleared)

``timeout`` holds the connection without answering (nothing recorded);
``reset`` closes with a TCP reset (nothing recorded); ``drop`` records the
request, then closes without answering (the ambiguous case: the provider
accepted, the client never learns it); ``latency`` only delays.

Start it in a thread (tests: ``Sandbox().start()`` on port 0) or as
``opsboard sandbox``.
"""
from __future__ import annotations

import base64
import html
import itertools
import json
import logging
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from email import message_from_bytes
from email.policy import default as default_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("opsboard.sandbox")
# aiosmtpd logs every SMTP command at INFO: the records are the sandbox's log.
logging.getLogger("mail.log").setLevel(logging.WARNING)

#: Largest request body the sandbox reads.
MAX_BODY = 1024 * 1024

FAULT_KINDS = ("status", "timeout", "reset", "drop", "latency")


@dataclass
class Fault:
    route: str
    kind: str = "status"
    status: int = 503
    retry_after: str | None = None
    delay_ms: int = 0
    hold_ms: int = 0
    count: int | None = None
    id: int = 0

    @classmethod
    def from_json(cls, data: dict) -> "Fault":
        if not isinstance(data, dict) or not isinstance(data.get("route"), str) or not data["route"]:
            raise ValueError("a fault needs a route (a path prefix or 'smtp')")
        kind = data.get("kind", "status")
        if kind not in FAULT_KINDS:
            raise ValueError(f"kind must be one of {', '.join(FAULT_KINDS)}")
        count = data.get("count")
        if count is not None and (not isinstance(count, int) or count < 1):
            raise ValueError("count must be a positive integer or null")
        ra = data.get("retry_after")
        return cls(route=data["route"], kind=kind, status=int(data.get("status", 503)),
                   retry_after=None if ra is None else str(ra), delay_ms=int(data.get("delay_ms", 0)),
                   hold_ms=int(data.get("hold_ms", 0)), count=count)

    def as_json(self) -> dict:
        return {"id": self.id, "route": self.route, "kind": self.kind, "status": self.status,
                "retry_after": self.retry_after, "delay_ms": self.delay_ms, "hold_ms": self.hold_ms,
                "count": self.count}


@dataclass
class PushSubscription:
    id: str
    private_key: object
    auth: bytes
    public_b64: str
    auth_b64: str
    gone: bool = False


@dataclass
class State:
    """What the sandbox received, its faults and its push subscriptions (thread-safe)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    records: list = field(default_factory=list)
    faults: list = field(default_factory=list)
    subscriptions: dict = field(default_factory=dict)
    #: number -> the final status the SMS status query reports for it (default "delivered").
    sms_status: dict = field(default_factory=dict)
    #: email address -> (DSN Action, Status) the sandbox reports for mail to it (none: no report).
    email_outcomes: dict = field(default_factory=dict)
    seq: itertools.count = field(default_factory=lambda: itertools.count(1))
    fault_seq: itertools.count = field(default_factory=lambda: itertools.count(1))
    max_records: int = 100_000

    def record(self, kind: str, route: str, **data) -> dict:
        rec = {"seq": 0, "kind": kind, "route": route, "at": time.time(), **data}
        with self.lock:
            rec["seq"] = next(self.seq)
            self.records.append(rec)
            if len(self.records) > self.max_records:
                del self.records[: len(self.records) - self.max_records]
        return rec

    def select(self, kind: str | None = None, route: str | None = None) -> list[dict]:
        with self.lock:
            return [r for r in self.records
                    if (kind is None or r["kind"] == kind) and (route is None or r["route"].startswith(route))]

    def add_fault(self, fault: Fault) -> Fault:
        with self.lock:
            fault.id = next(self.fault_seq)
            self.faults.append(fault)
        return fault

    def take_fault(self, route: str) -> Fault | None:
        """The most specific fault matching ``route`` (longest prefix), consuming one use of it."""
        with self.lock:
            matches = [f for f in self.faults if route.startswith(f.route)]
            if not matches:
                return None
            f = max(matches, key=lambda f: (len(f.route), f.id))
            if f.count is not None:
                f.count -= 1
                if f.count <= 0:
                    self.faults.remove(f)
            return f

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()


# ---------------------------------------------------------------- HTTP


class _Handler(BaseHTTPRequestHandler):
    server_version = "opsboard-sandbox/1"
    protocol_version = "HTTP/1.1"
    # The headers and the body go out in two writes: with Nagle's algorithm the
    # second waits for the client's (delayed, up to 40 ms) ACK of the first on a
    # kept-alive connection.  TCP_NODELAY sends both at once.
    disable_nagle_algorithm = True

    @property
    def state(self) -> State:
        return self.server.state  # type: ignore[attr-defined]

    def log_message(self, fmt, *args):  # quiet: records are the log
        log.debug("%s " + fmt, self.address_string(), *args)

    # -- plumbing

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(min(length, MAX_BODY)) if length > 0 else b""

    def _send(self, status: int, body=None, headers: dict | None = None, content_type="application/json"):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if data:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    def _reset(self) -> None:
        # SO_LINGER with a zero timeout: close() sends RST instead of FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def _drop(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.connection.close()
        self.close_connection = True

    def _fault_before(self, route: str) -> Fault | None:
        """Apply a fault's first half; returns the fault when the request goes on, or ``"done"``."""
        fault = self.state.take_fault(route)
        if fault is None:
            return None
        if fault.delay_ms:
            time.sleep(fault.delay_ms / 1000)
        if fault.kind == "timeout":
            self.server.stopping.wait(max(fault.hold_ms, 60_000) / 1000)  # type: ignore[attr-defined]
            self._drop()
            return "done"  # type: ignore[return-value]
        if fault.kind == "reset":
            self._reset()
            return "done"  # type: ignore[return-value]
        return fault

    def _fault_after(self, fault: Fault | None) -> bool:
        """After recording: hold, drop or answer the fault's status; True when the answer was given."""
        if fault is None:
            return False
        if fault.hold_ms:
            self.server.stopping.wait(fault.hold_ms / 1000)  # type: ignore[attr-defined]
        if fault.kind == "drop":
            self._drop()
            return True
        if fault.kind == "status":
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            self._send(fault.status, {"error": f"injected_{fault.status}"}, headers)
            return True
        return False

    # -- dispatch

    def do_GET(self):
        url = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if url.path in ("/_sandbox", "/_sandbox/", "/"):
            return self._send(200, _page(self.state).encode(), content_type="text/html; charset=utf-8")
        if url.path == "/_sandbox/records":
            return self._send(200, {"records": self.state.select(q.get("kind"), q.get("route"))})
        if url.path == "/_sandbox/faults":
            with self.state.lock:
                return self._send(200, {"faults": [f.as_json() for f in self.state.faults]})
        if url.path == "/sms/messages":
            return self._sms_status(q)
        self._send(404, {"error": "not_found"})

    def do_DELETE(self):
        path = urlsplit(self.path).path
        if path == "/_sandbox/records":
            with self.state.lock:
                self.state.records.clear()
            return self._send(204)
        if path == "/_sandbox/faults":
            self.state.clear_faults()
            return self._send(204)
        if path.startswith("/_sandbox/push/subscriptions/"):
            sub = self.state.subscriptions.get(path.rsplit("/", 1)[-1])
            if sub:
                sub.gone = True
            return self._send(204 if sub else 404)
        self._send(404, {"error": "not_found"})

    def do_POST(self):
        path = urlsplit(self.path).path
        if path.startswith("/_sandbox/"):
            return self._control(path)
        body = self._body()
        fault = self._fault_before(path)
        if fault == "done":
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        if path == "/sms/messages":
            return self._sms_send(path, headers, body, fault)
        if path.startswith("/push/"):
            return self._push(path, headers, body, fault)
        if path.startswith("/hooks/"):
            self.state.record("webhook", path, headers=headers, body=body.decode("utf-8", "replace"),
                              webhook_id=headers.get("webhook-id"), answered=_answer(fault, 200))
            if not self._fault_after(fault):
                self._send(200, {"ok": True})
            return
        self._send(404, {"error": "not_found"})

    def _control(self, path: str):
        try:
            data = json.loads(self._body() or b"{}")
        except ValueError:
            return self._send(400, {"error": "invalid_json", "message": "the body is not JSON"})
        if path == "/_sandbox/faults":
            try:
                fault = self.state.add_fault(Fault.from_json(data))
            except (ValueError, TypeError) as exc:
                return self._send(400, {"error": "invalid_fault", "message": str(exc)})
            return self._send(201, fault.as_json())
        if path == "/_sandbox/email/outcomes":
            address, action = data.get("address"), data.get("action", "failed")
            if not isinstance(address, str) or "@" not in address or action not in ("failed", "delivered"):
                return self._send(400, {"error": "invalid_outcome",
                                        "message": "address (an email address) and action (failed | delivered)"})
            self.server.sandbox.email_outcome(address, action)  # type: ignore
            return self._send(201, {"address": address, "action": action})
        if path == "/_sandbox/push/subscriptions":
            host = self.headers.get("Host") or f"127.0.0.1:{self.server.server_address[1]}"
            return self._send(201, self.server.sandbox.new_push_subscription(f"http://{host}"))  # type: ignore
        self._send(404, {"error": "not_found"})

    # -- SMS gateway

    def _sms_send(self, path, headers, body, fault):
        if self.server.sandbox.sms_key and headers.get("authorization") != f"Bearer {self.server.sandbox.sms_key}":  # type: ignore
            return self._send(401, {"error": "unauthorized"})
        try:
            data = json.loads(body)
            client_id, to, text = data["client_id"], data["to"], data["text"]
        except (ValueError, KeyError, TypeError):
            return self._send(400, {"error": "invalid_request"})
        msg_id = "sm_" + uuid.uuid4().hex[:16]
        # An SMS answered with an injected error status was refused: recorded (visible), but the
        # gateway does not have it, so a status query does not find it.
        self.state.record("sms", path, id=msg_id, client_id=client_id, to=to, text=text,
                          answered=_answer(fault, 202), refused=bool(fault and fault.kind == "status"))
        if not self._fault_after(fault):
            self._send(202, {"id": msg_id, "client_id": client_id, "status": "queued"})

    def _sms_status(self, q: dict):
        client_id = q.get("client_id")
        if not client_id:
            return self._send(400, {"error": "client_id_required"})
        fault = self._fault_before("/sms/status")
        if fault == "done" or self._fault_after(fault):
            return
        found = [r for r in self.state.select("sms") if r["client_id"] == client_id and not r["refused"]]
        # The handset's receipt: "delivered" unless a test set another final status for the number.
        self._send(200, {"messages": [{"id": r["id"], "client_id": client_id,
                                       "status": self.state.sms_status.get(r["to"], "delivered")}
                                      for r in found]})

    # -- Web Push

    def _push(self, path, headers, body, fault):
        sub = self.state.subscriptions.get(path.rsplit("/", 1)[-1])
        if sub is None or sub.gone:
            self.state.record("push", path, status=410, subscription=path.rsplit("/", 1)[-1], payload=None)
            return self._send(410 if sub else 404, {"error": "subscription_gone"})
        payload, error = None, None
        try:
            import http_ece
            plain = http_ece.decrypt(body, private_key=sub.private_key, auth_secret=sub.auth, version="aes128gcm")
            payload = plain.decode("utf-8", "replace")
        except Exception as exc:  # a broken encryption is recorded, not a crash
            error = type(exc).__name__
        auth = headers.get("authorization", "")
        self.state.record("push", path, subscription=sub.id, payload=payload, decrypt_error=error,
                          vapid=auth.startswith("vapid "), ttl=headers.get("ttl"),
                          urgency=headers.get("urgency"))
        if error:
            return self._send(400, {"error": "decryption_failed"})
        if not self._fault_after(fault):
            self._send(201, headers={"Location": f"{path}/m/{uuid.uuid4().hex[:12]}"})


def _answer(fault: Fault | None, ok: int):
    """The status the sandbox will answer (None: the connection is dropped without an answer)."""
    if fault is None or fault.kind == "latency":
        return ok
    return fault.status if fault.kind == "status" else None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512


# ---------------------------------------------------------------- SMTP


class _SmtpHandler:
    def __init__(self, state: State):
        self.state = state

    async def handle_DATA(self, server, session, envelope):
        import asyncio

        fault = self.state.take_fault("smtp")
        if fault is not None and fault.delay_ms:
            await asyncio.sleep(fault.delay_ms / 1000)
        if fault is not None and fault.kind == "status":
            code = fault.status if 400 <= fault.status < 600 else 451
            return f"{code} {'4.3.0 try again later' if code < 500 else '5.1.1 rejected'} (injected)"
        msg = message_from_bytes(envelope.original_content or envelope.content, policy=default_policy)
        body = msg.get_body(("plain", "html"))
        queue_id = uuid.uuid4().hex[:12].upper()
        self.state.record("email", "smtp", queue_id=queue_id, tls=bool(getattr(session, "ssl", None) or _implicit_tls(server)),
                          mail_from=envelope.mail_from,
                          rcpt_to=list(envelope.rcpt_tos), subject=str(msg.get("Subject", "")),
                          message_id=str(msg.get("Message-ID", "")),
                          headers={k.lower(): str(v) for k, v in msg.items()},
                          body=body.get_content() if body is not None else "",
                          raw=(envelope.original_content or envelope.content).decode("utf-8", "replace"),
                          user=getattr(session, "auth_data", None) and getattr(session.auth_data, "login", b"").decode(
                              "utf-8", "replace"))
        for rcpt in envelope.rcpt_tos:
            outcome = self.state.email_outcomes.get(rcpt.lower())
            if outcome is not None:
                # The report goes out before the 250 (see the module docstring).
                await asyncio.get_running_loop().run_in_executor(
                    None, self._report, server, msg, rcpt, *outcome)
        if fault is not None and fault.hold_ms:
            await asyncio.sleep(fault.hold_ms / 1000)
        if fault is not None and fault.kind in ("drop", "reset"):
            # Accepted and recorded, but the client never hears back.
            server.transport.close()
            return "421 closing"
        return f"250 2.0.0 Ok: queued as {queue_id}"


    def _report(self, server, msg, rcpt: str, action: str, status: str) -> None:
        """POST the DSN of ``msg`` for ``rcpt`` to the product's report URL (recorded as kind ``dsn``)."""
        import urllib.request

        from opsboard.deliveries import dsn

        sandbox = getattr(self, "sandbox", None)
        headers = "\r\n".join(f"{k}: {v}" for k, v in msg.items())
        raw = dsn.build(headers, rcpt, action, status,
                        "550 5.1.1 mailbox unavailable" if action == "failed" else "250 2.0.0 delivered")
        url = sandbox.email_report_url if sandbox else ""
        answered = None
        if url:
            req = urllib.request.Request(url, data=raw, method="POST", headers={
                "Content-Type": "message/rfc822",
                dsn.SIGNATURE_HEADER: dsn.sign(sandbox.email_report_secret, raw)})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    answered = resp.status
            except urllib.error.HTTPError as exc:
                answered = exc.code
            except OSError:
                answered = None
        self.state.record("dsn", "smtp", rcpt_to=rcpt, action=action, status=status,
                          message_id=str(msg.get("Message-ID", "")), answered=answered, raw=raw.decode())


def _any_credentials(server, session, envelope, mechanism, auth_data):
    from aiosmtpd.smtp import AuthResult
    return AuthResult(success=True, auth_data=auth_data)  # any credentials; the login is recorded


def _self_signed(host: str):
    """A throwaway certificate for ``host`` (and localhost): (PEM path, server SSL context)."""
    import datetime
    import ipaddress
    import ssl
    import tempfile

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "opsboard sandbox")])
    now = datetime.datetime.now(datetime.timezone.utc)
    alt = [x509.DNSName("localhost")]
    try:
        alt.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        alt.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    folder = tempfile.mkdtemp(prefix="opsboard-sandbox-")
    cert_path, key_path = f"{folder}/cert.pem", f"{folder}/key.pem"
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_path, key_path)
    return cert_path, ctx


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _implicit_tls(server) -> bool:
    transport = getattr(server, "transport", None)
    return transport is not None and transport.get_extra_info("sslcontext") is not None


class Sandbox:
    """The sandbox's HTTP and SMTP servers, run in background threads."""

    def __init__(self, host: str = "127.0.0.1", http_port: int = 0, smtp_port: int = 0, *, sms_key: str = "",
                 smtp: bool = True, smtp_starttls: bool = False, smtp_ssl: bool = False):
        self.host, self.http_port, self.smtp_port = host, http_port, smtp_port
        self.sms_key = sms_key
        self.state = State()
        self.with_smtp = smtp
        #: With smtp_starttls, SMTP offers STARTTLS with a fresh self-signed certificate (its PEM file).
        self.smtp_starttls = smtp_starttls
        #: With smtp_ssl, SMTP speaks implicit TLS (SMTPS) from the first byte, same kind of certificate.
        self.smtp_ssl = smtp_ssl
        self.smtp_ca_file: str | None = None
        #: Where DSNs go (the product's ``/api/providers/email/dsn``) and the secret that signs them.
        self.email_report_url = ""
        self.email_report_secret = ""
        self._http: _Server | None = None
        self._smtp = None
        self._thread: threading.Thread | None = None
        self.stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    def start(self) -> "Sandbox":
        self._http = _Server((self.host, self.http_port), _Handler)
        self._http.state = self.state  # type: ignore[attr-defined]
        self._http.sandbox = self  # type: ignore[attr-defined]
        self._http.stopping = self.stopping  # type: ignore[attr-defined]
        self.http_port = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="sandbox-http", daemon=True)
        self._thread.start()
        if self.with_smtp:
            from aiosmtpd.controller import Controller

            port = self.smtp_port or _free_port(self.host)
            extra = {}
            if self.smtp_starttls:
                self.smtp_ca_file, extra["tls_context"] = _self_signed(self.host)
            elif self.smtp_ssl:
                self.smtp_ca_file, extra["ssl_context"] = _self_signed(self.host)
            handler = _SmtpHandler(self.state)
            handler.sandbox = self
            self._smtp = Controller(handler, hostname=self.host, port=port,
                                    authenticator=_any_credentials, auth_require_tls=False,
                                    auth_required=False, **extra)
            self._smtp.start()
            self.smtp_port = port
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._smtp is not None:
            self._smtp.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- for tests and the demo (same process)

    def records(self, kind: str | None = None, route: str | None = None) -> list[dict]:
        return self.state.select(kind, route)

    def fault(self, route: str, kind: str = "status", **kw) -> Fault:
        return self.state.add_fault(Fault.from_json({"route": route, "kind": kind, **kw}))

    def clear_faults(self) -> None:
        self.state.clear_faults()

    def sms_final_status(self, number: str, status: str) -> None:
        """What the status query reports for SMS to ``number`` from now on (``failed``, ``queued``...)."""
        self.state.sms_status[number] = status

    def email_outcome(self, address: str, action: str = "failed", status: str | None = None) -> None:
        """Mail to ``address`` is reported back by a DSN: ``failed`` (a bounce, 5.1.1) or ``delivered`` (2.0.0)."""
        self.state.email_outcomes[address.lower()] = (action, status or ("5.1.1" if action == "failed" else "2.0.0"))

    def new_push_subscription(self, base_url: str | None = None) -> dict:
        """A Web Push subscription this sandbox can decrypt: ``{endpoint, keys: {p256dh, auth}}``."""
        import os

        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        key = ec.generate_private_key(ec.SECP256R1())
        pub = key.public_key().public_bytes(serialization.Encoding.X962,
                                            serialization.PublicFormat.UncompressedPoint)
        auth = os.urandom(16)
        b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()  # noqa: E731
        sub = PushSubscription(uuid.uuid4().hex, key, auth, b64(pub), b64(auth))
        with self.state.lock:
            self.state.subscriptions[sub.id] = sub
        return {"endpoint": f"{base_url or self.url}/push/{sub.id}",
                "keys": {"p256dh": sub.public_b64, "auth": sub.auth_b64}}


def _page(state: State) -> str:
    with state.lock:
        records = list(state.records[-300:])
        faults = [f.as_json() for f in state.faults]
    counts: dict[str, int] = {}
    for r in state.records:
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1

    def summary(r: dict) -> str:
        if r["kind"] == "email":
            return f"to {', '.join(r['rcpt_to'])}: {r['subject']} ({r['message_id']})"
        if r["kind"] == "sms":
            return f"{r['client_id']} to {r['to']}: {r['text']}"
        if r["kind"] == "push":
            return f"{r.get('subscription')}: {r.get('payload') or r.get('status')}"
        return f"webhook-id {r.get('webhook_id')}: {r.get('body', '')[:200]}"

    rows = "\n".join(
        f"<tr><td>{r['seq']}</td><td>{time.strftime('%H:%M:%S', time.localtime(r['at']))}</td>"
        f"<td>{html.escape(r['kind'])}</td><td>{html.escape(r['route'])}</td>"
        f"<td>{html.escape(summary(r))}</td></tr>" for r in reversed(records))
    fault_rows = "".join(f"<li>{html.escape(json.dumps(f))}</li>" for f in faults) or "<li>none</li>"
    count_text = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "nothing yet"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>opsboard provider sandbox</title>
<meta http-equiv="refresh" content="3">
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:left}}</style></head><body>
<h1>Provider sandbox</h1><p>Received: {html.escape(count_text)}. JSON: <a href="/_sandbox/records">/_sandbox/records</a></p>
<h2>Faults</h2><ul>{fault_rows}</ul>
<h2>Last {len(records)} records (newest first)</h2>
<table><tr><th>#</th><th>at</th><th>kind</th><th>route</th><th>what</th></tr>{rows}</table></body></html>"""


def serve(host: str = "127.0.0.1", http_port: int = 8025, smtp_port: int = 8026, sms_key: str = "",
          ready=None, email_report_url: str = "", email_report_secret: str = "") -> None:
    """Run the sandbox in the foreground until interrupted (``opsboard sandbox``)."""
    sb = Sandbox(host, http_port, smtp_port, sms_key=sms_key)
    sb.email_report_url, sb.email_report_secret = email_report_url, email_report_secret
    sb.start()
    print(f"sandbox: HTTP {sb.url} (page {sb.url}/_sandbox/), SMTP {host}:{sb.smtp_port}", flush=True)
    if ready:
        ready(sb)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        sb.stop()
