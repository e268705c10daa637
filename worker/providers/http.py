"""A small HTTP client for providers: bounded time, capped body, no redirects, optional SSRF guard.

The standard library's ``http.client`` is used directly so that the connection
goes to the address that was checked (a DNS answer cannot change between the
check and the connect) while TLS still verifies the host's name.
"""
from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from opsboard import retry


class Refused(Exception):
    """The target is not allowed (private, loopback, link-local... and not allow-listed)."""


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes


def _blocked(ip: ipaddress._BaseAddress) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_reserved
            or ip.is_unspecified or getattr(ip, "is_site_local", False))


def resolve_checked(host: str, port: int, allow=()) -> str:
    """The first address of ``host`` if every address it resolves to is allowed; else :class:`Refused`."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"dns: {exc}") from None
    addrs = []
    for info in infos:
        ip = ipaddress.ip_address(info[4][0].split("%")[0])
        if _blocked(ip) and not any(ip in net for net in allow):
            raise Refused(f"{ip} is a private, loopback or link-local address")
        addrs.append(str(ip))
    if not addrs:
        raise OSError("dns: no address")
    return addrs[0]


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host, ip, port, timeout):
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._ip = ip

    def connect(self):
        sock = socket.create_connection((self._ip, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def request(method: str, url: str, body: bytes | None = None, headers: dict | None = None, *,
            timeout: float = 10.0, max_body: int = 64 * 1024, guard: bool = False, allow=()) -> Response:
    """One request, no redirects followed; the response body is read up to ``max_body`` bytes.

    Raises :class:`Refused`, ``OSError`` (connect, reset, timeout) or ``http.client.HTTPException``.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused("only http(s) URLs")
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    ip = resolve_checked(host, port, allow) if guard else host
    deadline = time.monotonic() + timeout
    if parts.scheme == "https":
        conn = _PinnedHTTPS(host, ip, port, timeout)
    else:
        conn = http.client.HTTPConnection(ip, port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        hdrs = {"Host": parts.netloc, "User-Agent": "opsboard", "Connection": "close", **(headers or {})}
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        chunks, size = [], 0
        while size < max_body:
            if time.monotonic() > deadline:
                raise socket.timeout("response body too slow")
            chunk = resp.read(min(16384, max_body - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, b"".join(chunks))
    finally:
        conn.close()


def retry_after(headers: dict, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or an HTTP date)."""
    value = (headers or {}).get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - (now or time.time()))
        except (TypeError, ValueError):
            return None


def classify(status: int, headers: dict, prefix: str = "http") -> retry.Outcome:
    """2xx success; 408/429/5xx retryable (Retry-After honoured); other statuses permanent."""
    if 200 <= status < 300:
        return retry.Success(ref=f"{prefix}_{status}")
    if status in (408, 429) or status >= 500:
        return retry.Retryable(f"{prefix}_{status}", retry_after=retry_after(headers))
    return retry.Permanent(f"{prefix}_{status}")


def classify_error(exc: BaseException, prefix: str = "http", sent: bool = True) -> retry.Outcome:
    """An exception of :func:`request` as an outcome.

    A timeout or a dropped connection after the request went out is
    ``Unknown``: the far side may have acted on it.
    """
    if isinstance(exc, Refused):
        return retry.Permanent(f"{prefix}_target_refused", detail=str(exc))
    if isinstance(exc, ConnectionRefusedError):
        return retry.Retryable(f"{prefix}_connect_refused")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return retry.Unknown(f"{prefix}_timeout")
    if isinstance(exc, http.client.RemoteDisconnected):  # a subclass of ConnectionResetError: first
        return retry.Unknown(f"{prefix}_connection_dropped")
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return retry.Unknown(f"{prefix}_connection_reset")
    if isinstance(exc, OSError) and str(exc).startswith("dns:"):
        return retry.Retryable(f"{prefix}_dns")
    return retry.Unknown(f"{prefix}_{type(exc).__name__.lower()}")
