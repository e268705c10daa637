"""Which delivery targets may be reached (the SSRF guard): outbound URLs (webhook
endpoints, Web Push endpoints) must not reach private, loopback, link-local,
multicast or reserved addresses, also through a DNS name, unless allow-listed
(``OPSBOARD_WEBHOOK_ALLOW``, ``Config.providers.webhook_allow``).

Checked when an endpoint is registered (a clear refusal for its owner) and
again on every delivery, where the connection is pinned to the address that
was checked (:mod:`worker.providers.http`).
"""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit


class Refused(Exception):
    """The target is not allowed (private, loopback, link-local... and not allow-listed)."""


def blocked(ip: ipaddress._BaseAddress) -> bool:
    """Whether ``ip`` is an address outbound requests must not reach."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_reserved
            or ip.is_unspecified or getattr(ip, "is_site_local", False))


def resolve_checked(host: str, port: int, allow=()) -> str:
    """The first address of ``host`` if every address it resolves to is allowed; else :class:`Refused`.

    A name that does not resolve raises ``OSError("dns: ...")``.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"dns: {exc}") from None
    except UnicodeError:  # a label IDNA cannot encode (too long, empty...)
        raise OSError("dns: the host name is not valid") from None
    addrs = []
    for info in infos:
        ip = ipaddress.ip_address(info[4][0].split("%")[0])
        if blocked(ip) and not any(ip in net for net in allow):
            raise Refused(f"{ip} is a private, loopback or link-local address")
        addrs.append(str(ip))
    if not addrs:
        raise OSError("dns: no address")
    return addrs[0]


def check_url(url: str, allow=(), *, resolve: bool = True) -> None:
    """Refuse (:class:`Refused`) a URL that is not http(s) or targets a forbidden address.

    With ``resolve`` the host name is looked up; a name that does not resolve is
    refused too (at registration, a typo is better reported than retried).
    """
    try:
        parts = urlsplit(url or "")
        hostname, port = parts.hostname, parts.port
    except ValueError:
        raise Refused("the URL is not valid") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise Refused("only http(s) URLs with a host are allowed")
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        ip = ipaddress.ip_address(hostname.split("%")[0])
    except ValueError:
        ip = None
    if ip is not None:
        if blocked(ip) and not any(ip in net for net in allow):
            raise Refused(f"{ip} is a private, loopback or link-local address")
        return
    if resolve:
        try:
            resolve_checked(hostname, port, allow)
        except OSError as exc:
            raise Refused(f"the host name does not resolve ({str(exc).removeprefix('dns: ')})") from None
