"""Pure rules of the session: version negotiation and heart-beat agreement."""

import pytest

from stomp_bridge.protocol.errors import ProtocolError
from stomp_bridge.protocol.connect import heartbeat_seconds, is_loopback, negotiate_version, parse_heartbeat


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, "1.0"),
        ("1.0", "1.0"),
        ("1.1", "1.1"),
        ("1.0,1.1", "1.1"),
        ("1.0,1.1,1.2", "1.2"),
        ("1.2,1.0", "1.2"),
        ("1.1, 2.0", "1.1"),
    ],
)
def test_highest_common_version_is_chosen(accept, expected):
    assert negotiate_version(accept) == expected


def test_no_common_version_is_an_error_listing_supported_ones():
    with pytest.raises(ProtocolError) as info:
        negotiate_version("2.0,3.0")
    assert info.value.message == "Version mismatch"
    assert "1.0,1.1,1.2" in info.value.detail


@pytest.mark.parametrize(
    ("ms", "seconds"), [(0, 0), (-5, 0), (1, 1), (999, 1), (1000, 1), (1999, 1), (2000, 2), (10500, 10)]
)
def test_heartbeats_round_to_whole_seconds_like_the_plugin(ms, seconds):
    assert heartbeat_seconds(ms) == seconds


@pytest.mark.parametrize("value", ["", "1000", "a,b", "1,2,3", "-1,0"])
def test_malformed_heartbeat_header_is_a_protocol_error(value):
    with pytest.raises(ProtocolError):
        parse_heartbeat(value)


def test_heartbeat_header_tolerates_blanks():
    assert parse_heartbeat(" 100 , 200 ") == (100, 200)


@pytest.mark.parametrize(("peer", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("fe80::1%eth0", False),
    ("192.0.2.1", False), ("", False), (None, False), ("not-an-ip", False),
])
def test_loopback_peers(peer, loopback):
    assert is_loopback(peer) is loopback
