"""The target guard refuses every address that is not global, by range (hypothesis over each range)."""
import ipaddress

import pytest
from hypothesis import given, settings, strategies as st

from opsboard.deliveries import targets

REFUSED_RANGES = [
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
    "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    "::/128", "::1/128", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8", "2001:db8::/32", "2002::/16",
    "2001::/32", "100::/64", "64:ff9b:1::/48",
]
PRIVATE_V4 = ["10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
              "192.168.0.0/16", "0.0.0.0/8"]


def _in(net: str):
    n = ipaddress.ip_network(net)
    return st.integers(0, n.num_addresses - 1).map(lambda i: n[i])


def _refused_url(addr) -> bool:
    host = f"[{addr}]" if addr.version == 6 else str(addr)
    try:
        targets.check_url(f"http://{host}/hook", allow=())
    except targets.Refused:
        return True
    return False


@pytest.mark.parametrize("net", REFUSED_RANGES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_address_of_a_refused_range_is_refused(net, data):
    addr = data.draw(_in(net))
    assert targets.blocked(addr)
    assert _refused_url(addr)


@pytest.mark.parametrize("net", PRIVATE_V4)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_mapped_and_nat64_addresses_are_judged_by_their_ipv4(net, data):
    v4 = data.draw(_in(net))
    mapped = ipaddress.IPv6Address(f"::ffff:{v4}")
    nat64 = ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | int(v4))
    assert _refused_url(mapped) and _refused_url(nat64)


def test_cloud_metadata_and_shared_space_are_refused():
    for url in ("http://100.100.100.200/latest/meta-data/", "http://100.64.0.1/", "http://[2002:a00:1::1]/"):
        with pytest.raises(targets.Refused):
            targets.check_url(url)


@pytest.mark.parametrize("addr", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8",
                                  "64:ff9b::808:808"])
def test_global_addresses_pass(addr):
    assert not targets.blocked(ipaddress.ip_address(addr))
    assert not _refused_url(ipaddress.ip_address(addr))


def test_the_allow_list_lets_loopback_through_also_mapped():
    allow = (ipaddress.ip_network("127.0.0.1/32"),)
    targets.check_url("http://127.0.0.1:8080/x", allow)
    targets.check_url("http://[::ffff:127.0.0.1]:8080/x", allow)
    with pytest.raises(targets.Refused):
        targets.check_url("http://127.0.0.2:8080/x", allow)


def test_every_answer_of_a_name_is_checked(monkeypatch):
    monkeypatch.setattr(targets, "lookup", lambda host, port: ["93.184.216.34", "10.0.0.1"])
    with pytest.raises(targets.Refused):
        targets.resolve_checked("hooks.example.test", 443)
    monkeypatch.setattr(targets, "lookup", lambda host, port: ["93.184.216.34"])
    assert targets.resolve_checked("hooks.example.test", 443) == "93.184.216.34"
