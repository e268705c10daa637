"""Which delivery targets may be reached (the SSRF guard): outbound URLs (webhook
endpoints, Web Push endpoints) must reach only globally routable addresses, also
through a DNS name, unless allow-listed (``OPSBOARD_WEBHOOK_ALLOW``,
``Config.providers.webhook_allow``).

"Global" is ``ipaddress``'s ``is_global`` *and* not in :data:`REFUSED` (the
shared address space 100.64.0.0/10 with the cloud metadata address
100.100.100.200, 6to4, Teredo, documentation, benchmarking, multicast,
reserved...): ``is_global`` differs between Python versions, the list does not.
An IPv4-mapped address (``::ffff:a.b.c.d``) is judged as its IPv4 address; a
NAT64 address (``64:ff9b::a.b.c.d``) is allowed only when the IPv4 address it
carries is.

Checked when an endpoint is registered (a clear refusal for its owner) and
again on every delivery, where the connection is pinned to the address that
was checked (:mod:`opsboard.deliveries.providers.http`, used by webhooks and Web Push).
Names are looked up through :data:`lookup` (tests replace it to play a DNS
answer that changes between registration and delivery).
"""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit


class Refused(Exception):
    """The target is not allowed (not a global address, and not allow-listed)."""


REFUSED = tuple(ipaddress.ip_network(n) for n in (
    # IPv4
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24", "192.88.99.0/24",
    "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "224.0.0.0/4", "240.0.0.0/4",
    # IPv6
    "::/96", "::ffff:0:0/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32",
    "2002::/16", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
))
NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _effective(ip):
    """The IPv4 address a mapped or NAT64 IPv6 address stands for; else ``ip``."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def blocked(ip) -> bool:
    """Whether ``ip`` is an address outbound requests must not reach (not global, or listed)."""
    ip = _effective(ip)
    return (not ip.is_global or ip.is_multicast or ip.is_reserved or ip.is_unspecified
            or any(ip in net for net in REFUSED if net.version == ip.version))


def allowed(ip, allow=()) -> bool:
    """Whether ``ip`` may be reached: global, or inside one of the ``allow`` networks."""
    if not blocked(ip):
        return True
    eff = _effective(ip)
    return any(a in net for net in allow for a in {ip, eff} if a.version == net.version)


def _system_lookup(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"dns: {exc}") from None
    except UnicodeError:  # a label IDNA cannot encode (too long, empty...)
        raise OSError("dns: the host name is not valid") from None
    return [info[4][0] for info in infos]


#: ``lookup(host, port) -> [address, ...]``; raises ``OSError("dns: ...")``.
lookup = _system_lookup


def _literal(host: str):
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return None


def resolve_checked(host: str, port: int, allow=()) -> str:
    """The first address of ``host`` if every address it resolves to is allowed; else :class:`Refused`.

    An address literal is checked as it is. A name that does not resolve
    raises ``OSError("dns: ...")``.
    """
    ip = _literal(host)
    addrs = [ip] if ip is not None else [ipaddress.ip_address(a.split("%")[0]) for a in lookup(host, port)]
    if not addrs:
        raise OSError("dns: no address")
    for ip in addrs:
        if not allowed(ip, allow):
            raise Refused(f"{ip} is not a public address")
    return str(addrs[0])


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
    ip = _literal(hostname)
    if ip is not None:
        if not allowed(ip, allow):
            raise Refused(f"{ip} is not a public address")
        return
    if resolve:
        try:
            resolve_checked(hostname, port, allow)
        except OSError as exc:
            raise Refused(f"the host name does not resolve ({str(exc).removeprefix('dns: ')})") from None
