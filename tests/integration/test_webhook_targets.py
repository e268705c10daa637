"""The target guard at connect time: a name is checked again when a request goes out and
the connection goes to the address that was checked (HTTP, HTTPS and Web Push alike).

Names are played by ``targets.lookup`` (the resolver hook); the servers listen on
127.0.0.1 and the system resolver knows none of these names, so a client that
connected by name instead of by the checked address would fail these tests.
"""
import dataclasses
import datetime as dt
import http.server
import ipaddress
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from opsboard import errors, retry
from opsboard.deliveries import messages, targets, webhooks
from opsboard.config import ProviderSettings
from tests.support.delivery import sandbox_settings
from tests.support.sandbox import sandbox  # noqa: F401  (fixture)
from opsboard.deliveries.providers import http as http_provider, push, webhook

ALLOW = (ipaddress.ip_network("127.0.0.1/32"),)
NAME = "hooks.example.test"


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, status=204, location=None, tls=None):
        self.connections = 0
        self.requests = []
        self.sni = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(h):
                h.rfile.read(int(h.headers.get("Content-Length") or 0))
                self.requests.append((h.path, h.headers.get("Host")))
                h.send_response(status)
                if location:
                    h.send_header("Location", location)
                h.send_header("Content-Length", "0")
                h.send_header("Connection", "close")
                h.end_headers()

            def log_message(h, *a):
                pass

        super().__init__(("127.0.0.1", 0), H)
        if tls is not None:
            def remember(sock, name, ctx):
                self.sni.append(name)
            tls.sni_callback = remember
            self.socket = tls.wrap_socket(self.socket, server_side=True)

    def get_request(self):
        self.connections += 1
        return super().get_request()

    @property
    def port(self):
        return self.server_address[1]


def _settings(**changes):
    return ProviderSettings(**{"webhook_allow": ALLOW, "webhook_timeout": 2.0, **changes})


@pytest.fixture
def serve():
    started = []

    def start(**kw):
        s = _Server(**kw)
        threading.Thread(target=s.serve_forever, daemon=True).start()
        started.append(s)
        return s
    http_provider._pool.clear()
    yield start
    for s in started:
        s.shutdown()
        s.server_close()
    http_provider._pool.clear()


@pytest.fixture
def dns(monkeypatch):
    """A DNS the test controls: ``dns[name] = [address, ...]``."""
    answers = {}

    def lookup(host, port):
        if host not in answers:
            raise OSError("dns: unknown name")
        return list(answers[host])
    monkeypatch.setattr(targets, "lookup", lookup)
    return answers


@pytest.fixture
def no_connect(monkeypatch):
    """Records every outbound connection attempt (and makes none)."""
    attempts = []

    def refuse(addr, *a, **kw):
        attempts.append(addr)
        raise ConnectionRefusedError("the test allows no connection")
    monkeypatch.setattr(socket, "create_connection", refuse)
    return attempts


@pytest.mark.parametrize("private", ["127.0.0.1", "10.0.0.7", "100.100.100.200", "::ffff:10.0.0.7"])
def test_rebinding_after_creation_makes_no_connection(serve, dns, private, no_connect):
    dns[NAME] = ["93.184.216.34"]           # global when the endpoint is created
    url = webhooks.check_target(f"http://{NAME}/hook", allow=())
    dns[NAME] = [private]                   # then the name is rebound to a private address
    settings = _settings(webhook_allow=())
    done = webhook.deliver(settings, url, ["whsec_" + "A" * 32], "msg_1", b"{}")
    assert done.outcome.code == "http_target_refused"
    assert no_connect == []


def test_rebinding_to_a_listening_loopback_server_reaches_nothing(serve, dns):
    server = serve()
    dns[NAME] = ["93.184.216.34"]
    url = webhooks.check_target(f"http://{NAME}:{server.port}/hook", allow=())
    dns[NAME] = ["127.0.0.1"]
    with pytest.raises(targets.Refused):
        http_provider.request("POST", url, b"{}", guard=True, allow=())
    assert (server.connections, server.requests) == (0, [])


def test_a_private_target_is_refused_at_creation(dns):
    dns[NAME] = ["100.100.100.200"]
    for url in (f"http://{NAME}/", "http://100.100.100.200/latest/meta-data/", "http://100.64.0.1/"):
        with pytest.raises(errors.OpsError):
            webhooks.check_target(url, allow=())


def test_the_connection_goes_to_the_checked_address_with_the_name_as_host(serve, dns):
    server = serve()
    dns[NAME] = ["127.0.0.1"]               # allow-listed loopback (the tests' sandbox)
    resp = http_provider.request("POST", f"http://{NAME}:{server.port}/hook", b"{}", guard=True, allow=ALLOW)
    assert resp.status == 204
    assert server.requests == [("/hook", f"{NAME}:{server.port}")]


def test_a_redirect_to_a_private_address_is_not_followed(serve, dns):
    inner = serve()
    outer = serve(status=302, location=f"http://10.0.0.7:{inner.port}/admin")
    dns[NAME] = ["127.0.0.1"]
    done = webhook.deliver(_settings(), f"http://{NAME}:{outer.port}/hook",
                           ["whsec_" + "A" * 32], "msg_2", b"{}")
    assert (done.status, done.outcome.code) == (302, "http_302")
    assert len(outer.requests) == 1 and inner.connections == 0


def _self_signed(tmp_path, name):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


@pytest.fixture
def tls_server(serve, dns, tmp_path, monkeypatch):
    cert, key = _self_signed(tmp_path, NAME)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    server = serve(tls=server_ctx)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(http_provider, "tls_context", lambda: client_ctx)
    dns[NAME] = ["127.0.0.1"]
    return server


def test_https_connects_to_the_checked_address_keeping_sni_and_host(tls_server):
    done = webhook.deliver(_settings(), f"https://{NAME}:{tls_server.port}/hook",
                           ["whsec_" + "A" * 32], "msg_3", b"{}")
    assert done.status == 204, done.outcome
    assert tls_server.sni == [NAME]
    assert tls_server.requests == [("/hook", f"{NAME}:{tls_server.port}")]


def test_https_still_verifies_the_certificate_name(tls_server, dns):
    dns["other.example.test"] = ["127.0.0.1"]
    with pytest.raises(ssl.SSLCertVerificationError):
        http_provider.request("POST", f"https://other.example.test:{tls_server.port}/hook", b"{}",
                              guard=True, allow=ALLOW)
    assert tls_server.requests == []


# ------------------------------------------------------------------ Web Push


def _push_subscription(sandbox):
    sub = sandbox.new_push_subscription()
    return {"endpoint": sub["endpoint"].replace("127.0.0.1", "push.example.test"), **sub["keys"]}


def test_web_push_connects_to_the_checked_address(sandbox, dns):
    private, _ = messages.generate_vapid_keys()
    settings = sandbox_settings(sandbox, vapid_private_key=private)
    dns["push.example.test"] = ["127.0.0.1"]
    sub = _push_subscription(sandbox)
    outcome = push.send(settings, sub, {"title": "t"})
    assert isinstance(outcome, retry.Success), outcome
    assert len(sandbox.records("push")) == 1


def test_web_push_refuses_a_rebound_name_without_connecting(sandbox, dns, no_connect):
    private, _ = messages.generate_vapid_keys()
    settings = dataclasses.replace(sandbox_settings(sandbox, vapid_private_key=private), webhook_allow=())
    dns["push.example.test"] = ["93.184.216.34"]
    sub = _push_subscription(sandbox)
    for private_addr in ("10.0.0.7", "127.0.0.1", "100.100.100.200"):
        dns["push.example.test"] = [private_addr]
        outcome = push.send(settings, sub, {"title": "t"})
        assert outcome.code == "push_target_refused"
    assert no_connect == []
    assert sandbox.records("push") == []


# ------------------------------------------------------------------ pinning, more


def test_a_name_with_one_private_address_among_public_ones_is_refused_without_connecting(dns, no_connect):
    dns[NAME] = ["93.184.216.34", "10.0.0.7"]     # every address is checked, not only the first
    with pytest.raises(targets.Refused):
        http_provider.request("POST", f"http://{NAME}/hook", b"{}", guard=True, allow=())
    assert no_connect == []


def test_the_connection_goes_to_the_address_checked_not_to_another_one(dns):
    """A server on 127.0.0.2 only: the name resolves (through the test's DNS) to that address,
    so a client that connected to any other address, or by name, would not reach it."""
    seen = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_POST(h):
            h.rfile.read(int(h.headers.get("Content-Length") or 0))
            seen.append((h.client_address[0], h.server.server_address[0], h.headers.get("Host")))
            h.send_response(204)
            h.send_header("Content-Length", "0")
            h.end_headers()

        def log_message(h, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        dns[NAME] = ["127.0.0.2"]
        resp = http_provider.request("POST", f"http://{NAME}:{port}/hook", b"{}", guard=True,
                                     allow=(ipaddress.ip_network("127.0.0.0/8"),))
        assert resp.status == 204
        assert seen == [(seen[0][0], "127.0.0.2", f"{NAME}:{port}")]
    finally:
        server.shutdown()
        server.server_close()
        http_provider._pool.clear()
