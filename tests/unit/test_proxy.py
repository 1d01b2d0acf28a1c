"""ProxyHeaderParser: v1 and v2 headers, early failure, limits, incremental feeding, fuzzing;
ProxyTrust: which peers may send a header."""

from __future__ import annotations

import ipaddress
import itertools
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stomp_bridge.protocol.errors import ProtocolError
from stomp_bridge.protocol.proxy import (
    V2_SIGNATURE,
    ProxyHeaderParser,
    ProxyInfo,
    ProxyProtocolError,
    ProxyTrust,
    UntrustedProxy,
    parse_network,
)

STOMP = b"CONNECT\naccept-version:1.2\nhost:/\n\n\0"


def v2(
    block: bytes = b"", *, command: int = 0x21, family: int = 0x11, length: int | None = None
) -> bytes:
    size = len(block) if length is None else length
    return V2_SIGNATURE + bytes([command, family]) + struct.pack("!H", size) + block


def v4_block(src: str, dst: str, sport: int, dport: int) -> bytes:
    return (
        ipaddress.IPv4Address(src).packed
        + ipaddress.IPv4Address(dst).packed
        + struct.pack("!HH", sport, dport)
    )


def v6_block(src: str, dst: str, sport: int, dport: int) -> bytes:
    return (
        ipaddress.IPv6Address(src).packed
        + ipaddress.IPv6Address(dst).packed
        + struct.pack("!HH", sport, dport)
    )


def tlv(kind: int, value: bytes) -> bytes:
    return bytes([kind]) + struct.pack("!H", len(value)) + value


def parse(data: bytes, **kwargs: int) -> tuple[ProxyInfo, bytes] | None:
    return ProxyHeaderParser(**kwargs).feed(data)


def parse_in_chunks(data: bytes, cuts: list[int], **kwargs: int) -> tuple[ProxyInfo, bytes] | None:
    """Feed ``data`` split at ``cuts``; after a result, the remaining chunks are STOMP bytes."""
    parser = ProxyHeaderParser(**kwargs)
    bounds = [0, *sorted(set(cuts)), len(data)]
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]
    for i, chunk in enumerate(chunks):
        result = parser.feed(chunk)
        if result is not None:
            info, rest = result
            return info, rest + b"".join(chunks[i + 1 :])
    return None


TCP4 = ProxyInfo(("192.0.2.1", 56324), ("198.51.100.7", 61613), "TCP4")
TCP6 = ProxyInfo(("2001:db8::1", 56324), ("2001:db8::2", 61613), "TCP6")
UNKNOWN = ProxyInfo(None, None, "UNKNOWN")
LOCAL = ProxyInfo(None, None, "LOCAL")

VALID = [
    # --- v1 ---
    (b"PROXY TCP4 192.0.2.1 198.51.100.7 56324 61613\r\n", TCP4),
    (b"PROXY TCP6 2001:db8::1 2001:db8::2 56324 61613\r\n", TCP6),
    (b"PROXY TCP6 2001:0db8:0:0:0:0:0:1 2001:db8::2 56324 61613\r\n", TCP6),  # canonicalised
    (
        b"PROXY TCP4 0.0.0.0 255.255.255.255 0 65535\r\n",
        ProxyInfo(("0.0.0.0", 0), ("255.255.255.255", 65535), "TCP4"),
    ),
    (
        b"PROXY TCP6 ::ffff:192.0.2.1 :: 1 2\r\n",
        ProxyInfo(("::ffff:c000:201", 1), ("::", 2), "TCP6"),
    ),
    (b"PROXY UNKNOWN\r\n", UNKNOWN),
    (b"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n", UNKNOWN),
    (b"PROXY UNKNOWN \xff\x00 anything\r\n", UNKNOWN),
    # the spec's worst cases: TCP6 with the longest addresses (104 bytes), UNKNOWN (107)
    (
        b"PROXY TCP6 " + b"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff " * 2 + b"65535 65535\r\n",
        ProxyInfo(
            ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535),
            ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535),
            "TCP6",
        ),
    ),
    (
        b"PROXY UNKNOWN " + b"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff " * 2 + b"65535 65535\r\n",
        UNKNOWN,
    ),
    # --- v2 ---
    (v2(v4_block("192.0.2.1", "198.51.100.7", 56324, 61613)), TCP4),
    (v2(v6_block("2001:db8::1", "2001:db8::2", 56324, 61613), family=0x21), TCP6),
    (
        v2(
            v4_block("192.0.2.1", "198.51.100.7", 56324, 61613)
            + tlv(0x01, b"stomp")
            + tlv(0x04, b"")
            + tlv(0x20, b"\x05" + b"\0" * 4)
        ),
        TCP4,
    ),
    (
        v2(
            v6_block("2001:db8::1", "2001:db8::2", 56324, 61613) + tlv(0xEE, b"x" * 300),
            family=0x21,
        ),
        TCP6,
    ),
    (v2(command=0x20, family=0x00), LOCAL),
    # LOCAL discards the block and ignores the family, whatever they hold
    (v2(v4_block("192.0.2.1", "198.51.100.7", 1, 2), command=0x20, family=0x11), LOCAL),
    (v2(b"\xff" * 7, command=0x20, family=0x12), LOCAL),
    (v2(command=0x21, family=0x00), UNKNOWN),
    (v2(b"ignored", command=0x21, family=0x00), UNKNOWN),
    (
        v2(b"/tmp/a".ljust(108, b"\0") + b"/tmp/b".ljust(108, b"\0"), family=0x31),
        ProxyInfo(None, None, "UNIX"),
    ),
]


@pytest.mark.parametrize(("header", "expected"), VALID)
def test_valid_header_gives_info_and_keeps_the_stomp_bytes(
    header: bytes, expected: ProxyInfo
) -> None:
    assert parse(header + STOMP) == (expected, STOMP)


@pytest.mark.parametrize(("header", "expected"), VALID)
def test_valid_header_alone_leaves_empty_rest(header: bytes, expected: ProxyInfo) -> None:
    assert parse(header) == (expected, b"")


@pytest.mark.parametrize(("header", "expected"), VALID)
def test_valid_header_fed_a_byte_at_a_time(header: bytes, expected: ProxyInfo) -> None:
    parser = ProxyHeaderParser()
    data = header + STOMP
    for i in range(len(header) - 1):
        assert parser.feed(data[i : i + 1]) is None
    assert parser.feed(data[len(header) - 1 :]) == (expected, STOMP)


@pytest.mark.parametrize(("header", "expected"), VALID)
def test_every_strict_prefix_of_a_valid_header_waits(header: bytes, expected: ProxyInfo) -> None:
    for n in range(len(header)):
        assert parse(header[:n]) is None


def test_payload_bytes_that_look_like_a_header_are_not_reparsed() -> None:
    header = b"PROXY UNKNOWN\r\n"
    assert parse(header + header + b"\r\n\r\n") == (UNKNOWN, header + b"\r\n\r\n")


def test_empty_feed_waits() -> None:
    assert ProxyHeaderParser().feed(b"") is None


# --- invalid headers ----------------------------------------------------------------

INVALID = [
    # neither version
    (b"CONNECT\n\n\0", "does not start with a PROXY"),
    (b"\x16\x03\x01\x02\x00", "does not start with a PROXY"),  # a TLS ClientHello
    (b"proxy TCP4", "does not start with a PROXY"),
    (b"PROXY\tTCP4", "'PROXY '"),
    (b"PROX\r\n", "'PROXY '"),
    (b"\r\n\r\n\x00\r\nQUIX", "signature"),
    (b"\r\n\r\n\r\n", "signature"),
    # v1 grammar
    (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "TCP4, TCP6 or UNKNOWN"),
    (b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n", "TCP4, TCP6 or UNKNOWN"),
    (b"PROXY UNKNOWNX\r\n", "TCP4, TCP6 or UNKNOWN"),
    (b"PROXY \r\n", "TCP4, TCP6 or UNKNOWN"),
    (b"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n", "TCP4, TCP6 or UNKNOWN"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "single spaces"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", "single spaces"),
    (b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", "single spaces"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", "single spaces"),
    (b"PROXY TCP4 1.2.3.4\t5.6.7.8 1 2\r\n", "single spaces"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "LF instead of CRLF"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n", "port"),
    (b"PROXY UNKNOWN \n\r\n", "LF instead of CRLF"),
    (b"PROXY UNKNOWN\n", "LF instead of CRLF"),
    (b"PROXY \n", "LF instead of CRLF"),
    # v1 addresses
    (b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", "dotted quad"),
    (b"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n", "dotted quad"),
    (b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", "dotted quad"),
    (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", "dotted quad"),
    (b"PROXY TCP4 1.2.3.4 example.com 1 2\r\n", "dotted quad"),
    (b"PROXY TCP4 1.2.3.\xd9\xa4 5.6.7.8 1 2\r\n", "dotted quad"),  # Arabic-Indic digit
    (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", "IPv6"),
    (b"PROXY TCP6 ::1 fe80::1%eth0 1 2\r\n", "IPv6"),
    (b"PROXY TCP6 ::1 ::g 1 2\r\n", "IPv6"),
    (b"PROXY TCP6 1:2:3:4:5:6:7:8:9 ::1 1 2\r\n", "IPv6"),
    # v1 ports
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n", "port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", "port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 00\r\n", "port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", "port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n", "port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 0x10 2\r\n", "port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 100000 2\r\n", "port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 \xd9\xa1 2\r\n", "port"),
    # v1 length: 108 bytes with the CRLF, or no CRLF in 107 bytes
    (b"PROXY UNKNOWN " + b"x" * 92 + b"\r\n", "107 bytes"),
    (b"PROXY UNKNOWN " + b"x" * 93, "107 bytes"),
    # v2 fixed part
    (V2_SIGNATURE + b"\x11", "version is 1"),
    (V2_SIGNATURE + b"\x31", "version is 3"),
    (V2_SIGNATURE + b"\x22", "command is 0x2"),
    (V2_SIGNATURE + b"\x2f", "command is 0xf"),
    (V2_SIGNATURE + b"\x21\x12", "UDP over IPv4"),
    (V2_SIGNATURE + b"\x21\x22", "UDP over IPv6"),
    (V2_SIGNATURE + b"\x21\x32", "unix datagram"),
    (V2_SIGNATURE + b"\x21\x10", "0x10 is invalid"),
    (V2_SIGNATURE + b"\x21\x13", "0x13 is invalid"),
    (V2_SIGNATURE + b"\x21\x41", "0x41 is invalid"),
    (V2_SIGNATURE + b"\x21\x01", "0x01 is invalid"),
    # v2 lengths
    (v2(b"\0" * 11, family=0x11), "too short for TCP4"),
    (v2(b"\0" * 35, family=0x21), "too short for TCP6"),
    (v2(b"\0" * 12, family=0x21), "too short for TCP6"),
    (v2(b"\0" * 215, family=0x31), "too short for UNIX"),
    (v2(family=0x11, length=0), "too short for TCP4"),
    # v2 TLVs must fill the block exactly
    (v2(v4_block("1.2.3.4", "5.6.7.8", 1, 2) + b"\x01"), "truncated"),
    (v2(v4_block("1.2.3.4", "5.6.7.8", 1, 2) + b"\x01\x00"), "truncated"),
    (v2(v4_block("1.2.3.4", "5.6.7.8", 1, 2) + b"\x01\x00\x05abcd"), "type 0x01 overruns"),
    (
        v2(v4_block("1.2.3.4", "5.6.7.8", 1, 2) + tlv(0x02, b"ok") + b"\xee\xff\xff"),
        "type 0xee overruns",
    ),
]


@pytest.mark.parametrize(("data", "detail"), INVALID)
def test_invalid_header_raises_with_a_detail(data: bytes, detail: str) -> None:
    with pytest.raises(ProxyProtocolError) as caught:
        parse(data)
    assert caught.value.message == "Invalid PROXY protocol header"
    assert detail in caught.value.detail


def test_proxy_protocol_error_is_a_protocol_error() -> None:
    assert issubclass(ProxyProtocolError, ProtocolError)


@pytest.mark.parametrize(
    "prefix",
    [
        b"G",  # "GET / HTTP/1.1": ruled out by the first byte
        b"C",
        b"\x00",
        b"PROXY_",
        b"PX",
        b"\r\n\r\n\x00\r\nQ\x00",
        b"\r\r",
        V2_SIGNATURE + b"\x11",  # version
        V2_SIGNATURE + b"\x21\x12",  # UDP: refused before the length arrives
        V2_SIGNATURE + b"\x21\x11\xff",  # too long: refused before the block arrives
        V2_SIGNATURE + b"\x21\x11\x00\x02",  # too short for its family
    ],
)
def test_fails_as_soon_as_the_prefix_cannot_become_a_header(prefix: bytes) -> None:
    with pytest.raises(ProxyProtocolError):
        parse(prefix)


# --- limits ---------------------------------------------------------------------


def test_v2_length_above_the_default_limit_is_refused_before_buffering() -> None:
    header = v2(family=0x11, length=2049)
    with pytest.raises(ProxyProtocolError, match="2049 exceeds the limit of 2048"):
        parse(header)


def test_v2_length_at_the_limit_is_accepted() -> None:
    block = v4_block("192.0.2.1", "198.51.100.7", 56324, 61613)
    block += tlv(0xEE, b"x" * (2048 - len(block) - 3))
    assert parse(v2(block) + STOMP) == (TCP4, STOMP)


def test_max_v2_length_is_configurable() -> None:
    block = v4_block("192.0.2.1", "198.51.100.7", 56324, 61613) + tlv(0x01, b"h2")
    assert parse(v2(block), max_v2_length=len(block)) == (TCP4, b"")
    with pytest.raises(ProxyProtocolError, match="exceeds the limit"):
        parse(v2(block), max_v2_length=len(block) - 1)
    big = v2(block + tlv(0xEE, b"x" * 60000))
    assert parse(big, max_v2_length=0xFFFF) == (TCP4, b"")


@pytest.mark.parametrize("bad", [-1, 0x10000])
def test_max_v2_length_outside_the_length_field_range_is_a_value_error(bad: int) -> None:
    with pytest.raises(ValueError):
        ProxyHeaderParser(max_v2_length=bad)


def test_v1_line_of_107_bytes_is_the_longest_accepted() -> None:
    assert len(VALID[9][0]) == 107 and VALID[9][1] == UNKNOWN
    assert parse(b"PROXY UNKNOWN " + b"x" * 91 + b"\r\n") == (UNKNOWN, b"")
    with pytest.raises(ProxyProtocolError, match="107 bytes"):
        parse(b"PROXY UNKNOWN " + b"x" * 92 + b"\r\n")


def test_v1_never_buffers_past_107_bytes() -> None:
    parser = ProxyHeaderParser()
    # 106 bytes: a CRLF may still come
    assert parser.feed(b"PROXY UNKNOWN " + b"x" * 92) is None
    with pytest.raises(ProxyProtocolError, match="107 bytes"):
        parser.feed(b"\r")


def test_v2_waits_only_for_the_declared_length() -> None:
    block = v4_block("192.0.2.1", "198.51.100.7", 56324, 61613)
    parser = ProxyHeaderParser()
    assert parser.feed(v2(block)[:-1]) is None
    assert parser.feed(block[-1:] + b"SEND") == (TCP4, b"SEND")


# --- single use ---------------------------------------------------------------------


def test_feeding_after_a_result_is_a_programming_error() -> None:
    parser = ProxyHeaderParser()
    assert parser.feed(b"PROXY UNKNOWN\r\n") == (UNKNOWN, b"")
    with pytest.raises(RuntimeError):
        parser.feed(b"more")


def test_feeding_after_an_error_is_a_programming_error() -> None:
    parser = ProxyHeaderParser()
    with pytest.raises(ProxyProtocolError):
        parser.feed(b"GET / HTTP/1.1\r\n")
    with pytest.raises(RuntimeError):
        parser.feed(b"PROXY UNKNOWN\r\n")


# --- properties ---------------------------------------------------------------------

ports = st.integers(0, 0xFFFF)
ipv4 = st.ip_addresses(v=4)
ipv6 = st.ip_addresses(v=6)
tlvs = st.lists(
    st.tuples(st.integers(0, 255), st.binary(max_size=40)).map(lambda t: tlv(*t)), max_size=5
).map(b"".join)


@st.composite
def headers(draw: st.DrawFn) -> tuple[bytes, ProxyInfo]:
    """A valid header of any kind and the info it must parse to."""
    kind = draw(
        st.sampled_from(["v1-4", "v1-6", "v1-unknown", "v2-4", "v2-6", "v2-local", "v2-unspec"])
    )
    sport, dport = draw(ports), draw(ports)
    if kind in ("v1-4", "v2-4", "v1-6", "v2-6"):
        addrs = ipv4 if kind.endswith("4") else ipv6
        src, dst = draw(addrs), draw(addrs)
        family = "TCP4" if kind.endswith("4") else "TCP6"
        info = ProxyInfo((str(src), sport), (str(dst), dport), family)
        if kind.startswith("v1"):
            # exploded IPv6 text parses to the same canonical address
            text = [a.exploded if draw(st.booleans()) else str(a) for a in (src, dst)]
            line = f"PROXY {family} {text[0]} {text[1]} {sport} {dport}\r\n"
            return line.encode(), info
        block = src.packed + dst.packed + struct.pack("!HH", sport, dport) + draw(tlvs)
        return v2(block, family=0x11 if family == "TCP4" else 0x21), info
    if kind == "v1-unknown":
        tail = draw(st.binary(max_size=90).filter(lambda b: b"\n" not in b))
        return b"PROXY UNKNOWN" + (b" " + tail if tail else b"") + b"\r\n", UNKNOWN
    if kind == "v2-local":
        return v2(
            draw(st.binary(max_size=64)), command=0x20, family=draw(st.integers(0, 255))
        ), LOCAL
    return v2(draw(st.binary(max_size=64)), family=0x00), UNKNOWN


@settings(max_examples=400)
@given(headers(), st.binary(max_size=64), st.lists(st.integers(0, 400), max_size=8))
def test_any_split_of_header_and_payload_gives_the_same_result(
    case: tuple[bytes, ProxyInfo], payload: bytes, cuts: list[int]
) -> None:
    header, info = case
    data = header + payload
    cuts = [c for c in cuts if c <= len(data)]
    assert parse_in_chunks(data, cuts) == (info, payload)


@settings(max_examples=300)
@given(headers(), st.data())
def test_any_strict_prefix_of_a_valid_header_waits(
    case: tuple[bytes, ProxyInfo], data: st.DataObject
) -> None:
    header, _ = case
    assert parse(header[: data.draw(st.integers(0, len(header) - 1))]) is None


def _run_fuzz(data: bytes, cuts: list[int]) -> None:
    try:
        result = parse_in_chunks(data, cuts)
    except ProxyProtocolError:
        return
    if result is not None:
        info, rest = result
        assert isinstance(info, ProxyInfo)
        assert data.endswith(rest)


@settings(max_examples=1000)
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=6))
def test_random_bytes_only_ever_raise_proxy_protocol_error(data: bytes, cuts: list[int]) -> None:
    _run_fuzz(data, cuts)


_prefixes = st.sampled_from(
    [
        b"PROXY ",
        b"PROXY TCP4 ",
        b"PROXY TCP6 ",
        b"PROXY UNKNOWN",
        V2_SIGNATURE,
        V2_SIGNATURE + b"\x21\x11",
        V2_SIGNATURE + b"\x21\x21",
        V2_SIGNATURE + b"\x20",
    ]
)


@settings(max_examples=1000)
@given(_prefixes, st.binary(max_size=200), st.lists(st.integers(0, 300), max_size=6))
def test_garbage_after_a_valid_prefix_only_ever_raises_proxy_protocol_error(
    prefix: bytes, tail: bytes, cuts: list[int]
) -> None:
    _run_fuzz(prefix + tail, cuts)


@settings(max_examples=500)
@given(headers(), st.data())
def test_a_mutated_valid_header_only_ever_raises_proxy_protocol_error(
    case: tuple[bytes, ProxyInfo], data: st.DataObject
) -> None:
    header, _ = case
    mutated = bytearray(header)
    for _ in range(data.draw(st.integers(1, 3))):
        mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    _run_fuzz(bytes(mutated), data.draw(st.lists(st.integers(0, len(mutated)), max_size=4)))


# -- trust: who may send the header (proxy_protocol_trusted) -----------------------------------

TRUSTED = ProxyTrust.from_cidrs(["10.0.0.0/8", "127.0.0.1/32", "fd00::/8", "2001:db8:1::/48"])

TRUST_CASES = [
    # (peer address as getpeername gives it, trusted?)
    ("10.1.2.3", True),  # v4 inside a v4 network
    ("10.255.255.255", True),
    ("11.0.0.1", False),  # v4 just outside
    ("127.0.0.1", True),  # a /32
    ("127.0.0.2", False),  # loopback, but not the trusted address
    ("192.0.2.7", False),
    ("fd00::1", True),  # v6 inside a v6 network
    ("fd12:3456::9", True),
    ("fe80::1", False),
    ("fe80::1%eth0", False),  # link-local with a scope id: parsed, not trusted
    ("2001:db8:1:ff::1", True),
    ("2001:db8:2::1", False),
    ("::1", False),  # v6 loopback is not 127.0.0.1/32
    ("::ffff:10.1.2.3", True),  # v4-mapped v6 (a dual-stack listener): checked as 10.1.2.3
    ("::ffff:127.0.0.1", True),
    ("::ffff:11.0.0.1", False),
    ("::ffff:203.0.113.5", False),
    ("", False),  # no address at all
    (None, False),
    ("not-an-address", False),
    ("10.1.2.3:40000", False),  # never a host:port string
]


@pytest.mark.parametrize(("peer", "trusted"), TRUST_CASES)
def test_only_peers_in_the_trusted_networks_may_send_a_header(peer: str | None, trusted: bool) -> None:
    assert TRUSTED.trusts(peer) is trusted


def test_no_trusted_networks_trust_nobody() -> None:
    nobody = ProxyTrust.from_cidrs([])
    assert not any(nobody.trusts(peer) for peer, _ in TRUST_CASES)


def test_a_v6_network_of_mapped_addresses_covers_v4_peers_seen_mapped() -> None:
    mapped = ProxyTrust.from_cidrs(["::ffff:10.0.0.0/104"])
    assert mapped.trusts("::ffff:10.9.8.7")
    assert not mapped.trusts("::ffff:11.0.0.1")


@pytest.mark.parametrize(
    ("entry", "network"),
    [
        ("10.0.0.0/8", "10.0.0.0/8"),
        (" 10.0.0.0/8 ", "10.0.0.0/8"),
        ("192.0.2.10", "192.0.2.10/32"),  # one address
        ("0.0.0.0/0", "0.0.0.0/0"),  # everyone, but said explicitly
        ("FD00::/8", "fd00::/8"),
        ("2001:db8::1", "2001:db8::1/128"),
    ],
)
def test_a_trusted_entry_is_a_network_in_cidr_form(entry: str, network: str) -> None:
    assert str(parse_network(entry)) == network


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("10.0.0.0/33", "is not a network in CIDR form"),
        ("10.0.0/8", "is not a network in CIDR form"),
        ("256.0.0.0/8", "is not a network in CIDR form"),
        ("fd00::/129", "is not a network in CIDR form"),
        ("10.0.0.0/8/8", "is not a network in CIDR form"),
        ("lb.example.com", "is not a network in CIDR form"),  # names are not resolved
        ("", "is not a network in CIDR form"),
        ("*", "is not a network in CIDR form"),
        ("10.1.2.3/8", "has host bits set; the network is 10.0.0.0/8"),
        ("fd00::1/8", "has host bits set; the network is fd00::/8"),
    ],
)
def test_a_bad_trusted_entry_says_what_is_wrong(entry: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)) as caught:
        ProxyTrust.from_cidrs(["10.0.0.0/8", entry])
    assert repr(entry) in str(caught.value)


def test_an_untrusted_peer_is_told_which_setting_trusts_proxies() -> None:
    error = UntrustedProxy("192.0.2.7")
    assert isinstance(error, ProtocolError) and error.fatal
    assert error.message == "Untrusted PROXY protocol peer"
    assert "192.0.2.7 is not a trusted proxy" in error.detail
    assert "proxy_protocol_trusted" in error.detail
