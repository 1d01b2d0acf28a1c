"""Incremental, I/O-free reader for the PROXY protocol header (v1 text and v2 binary).

A TCP load balancer in front of the bridge prepends one header to each
connection telling who the real client is, as HAProxy's proxy-protocol.txt
specifies and RabbitMQ's STOMP plugin accepts with ``proxy_protocol = true``.
When the bridge expects it, a connection that does not start with a valid
header is refused. The two versions, told apart by their first bytes::

    v1     ::= "PROXY " (tcp | unknown) CRLF          at most 107 bytes, CRLF included
    tcp    ::= ("TCP4" | "TCP6") SP src SP dst SP sport SP dport
                                                      single spaces; TCP4 takes dotted
                                                      quads, TCP6 textual IPv6; ports
                                                      0-65535 without leading zeros
    unknown::= "UNKNOWN" [SP *(any but LF)]           the rest of the line is ignored

    v2     ::= sig ver_cmd fam len block              sig = \\r\\n\\r\\n\\0\\r\\nQUIT\\n (12 bytes)
    ver_cmd::= 0x20 (LOCAL) | 0x21 (PROXY)            high nibble version 2, low command
    fam    ::= 0x00 UNSPEC | 0x11 TCP/IPv4 | 0x21 TCP/IPv6 | 0x31 unix stream
                                                      (0x12, 0x22, 0x32 are datagram
                                                      transports: refused, the bridge is TCP)
    len    ::= 2 bytes, big-endian: size of block
    block  ::= addresses *tlv                         IPv4 4+4+2+2, IPv6 16+16+2+2,
                                                      unix 108+108 bytes; then TLVs
    tlv    ::= type(1) length(2, big-endian) value    must fill the block exactly

A LOCAL command (a health check from the proxy itself) discards the block,
family included, as the spec requires; so do AF_UNSPEC and unix addresses.
In all three cases :class:`ProxyInfo` has no addresses and the connection's
real peer applies. TLV contents (ALPN, TLS details, CRC32C...) are skipped.

Memory is bounded: between calls the parser never holds more than 107 bytes
(v1) or ``16 + max_v2_length`` bytes (v2), and it fails as soon as the bytes
seen so far cannot begin a valid header.

Whoever sends the header chooses the address the bridge then believes
(``loopback_users``, the per-address limits, the logs), so only the load
balancers may send one: :class:`ProxyTrust` holds their networks
(``proxy_protocol_trusted``) and is asked about the connection's real peer
before a byte of it is read, as Squid's ``proxy_protocol_access`` and
HAProxy's ``tcp-request connection expect-proxy layer4 if { src ... }`` do.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from stomp_bridge.protocol.errors import ProtocolError

V1_PREFIX = b"PROXY "
V1_MAX_LINE = 107  # spec 2.1: worst case "PROXY UNKNOWN" + TCP6 fields, CRLF included
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_FIXED = 16  # signature, version/command, family/transport, length
DEFAULT_MAX_V2_LENGTH = 2048

_LOCAL, _PROXY = 0x0, 0x1
# family/transport byte -> (ProxyInfo.family, length of the address part of the block)
_V2_FAMILIES = {
    0x00: ("UNKNOWN", 0),
    0x11: ("TCP4", 12),
    0x21: ("TCP6", 36),
    0x31: ("UNIX", 216),
}
_V2_DATAGRAM = {0x12: "UDP over IPv4", 0x22: "UDP over IPv6", 0x32: "unix datagram"}
_PORT = re.compile(rb"0|[1-9][0-9]{0,4}")  # spec 2.1: decimal, no leading zeros


class ProxyProtocolError(ProtocolError):
    """The connection did not start with a valid PROXY protocol header."""

    def __init__(self, detail: str) -> None:
        super().__init__("Invalid PROXY protocol header", detail)


class UntrustedProxy(ProtocolError):
    """A connection that must start with a PROXY header came from a peer outside the trusted
    networks: it could name any client address, so it is refused before its header is read."""

    def __init__(self, peer: str | None) -> None:
        who = peer or "A peer of unknown address"
        super().__init__(
            "Untrusted PROXY protocol peer",
            f"{who} is not a trusted proxy: with proxy_protocol on, the bridge takes the client "
            "address from a PROXY header only from its load balancers' networks "
            "(proxy_protocol_trusted). Connect through the load balancer; if this peer is one, "
            "add its network to proxy_protocol_trusted.",
        )


@dataclass(frozen=True, slots=True)
class ProxyInfo:
    """What the header says about the proxied connection.

    ``family`` is ``"TCP4"`` or ``"TCP6"`` with both addresses set, or
    ``"UNKNOWN"`` (v1 ``UNKNOWN``, v2 AF_UNSPEC), ``"LOCAL"`` (v2 LOCAL) or
    ``"UNIX"`` (v2 unix socket) with both ``None``: use the real peer address.
    Addresses are in canonical text form (IPv6 compressed, as ``ipaddress``).
    """

    source: tuple[str, int] | None
    destination: tuple[str, int] | None
    family: str


class ProxyHeaderParser:
    """Reads one PROXY header from the start of a connection's bytes.

    :meth:`feed` returns ``None`` until the header is complete, then the
    :class:`ProxyInfo` and the bytes that followed the header (the start of
    the STOMP stream). ``max_v2_length`` bounds a v2 header's ``len`` field
    (addresses plus TLVs); the spec allows up to 65535.
    """

    def __init__(self, max_v2_length: int = DEFAULT_MAX_V2_LENGTH) -> None:
        if not 0 <= max_v2_length <= 0xFFFF:
            raise ValueError("max_v2_length must be between 0 and 65535")
        self.max_v2_length = max_v2_length
        self._buffer = bytearray()
        self._finished = False

    def feed(self, data: bytes) -> tuple[ProxyInfo, bytes] | None:
        """Add bytes; return ``(info, rest)`` once the header is complete, else ``None``.

        Raises :class:`ProxyProtocolError` for an invalid header. The parser
        is single-use: feeding it after it returned a result or raised is a
        programming error (``RuntimeError``).
        """
        if self._finished:
            raise RuntimeError("ProxyHeaderParser already returned a header or an error")
        self._buffer += data
        try:
            parsed = self._parse()
        except ProxyProtocolError:
            self._finish()
            raise
        if parsed is None:
            return None
        info, end = parsed
        rest = bytes(self._buffer[end:])
        self._finish()
        return info, rest

    def _finish(self) -> None:
        self._finished = True
        self._buffer = bytearray()

    def _parse(self) -> tuple[ProxyInfo, int] | None:
        buf = self._buffer
        if not buf:
            return None
        # Decide the version from the first byte, then insist on the whole prefix.
        if buf[0] == V1_PREFIX[0]:
            if buf[: len(V1_PREFIX)] != V1_PREFIX[: len(buf)]:
                raise ProxyProtocolError("v1 header does not start with 'PROXY '")
            return _parse_v1(buf) if len(buf) > len(V1_PREFIX) else None
        if buf[0] == V2_SIGNATURE[0]:
            if buf[: len(V2_SIGNATURE)] != V2_SIGNATURE[: len(buf)]:
                raise ProxyProtocolError("bad v2 signature")
            return _parse_v2(buf, self.max_v2_length)
        raise ProxyProtocolError("connection does not start with a PROXY v1 or v2 header")


# --- v1 -------------------------------------------------------------------------


def _parse_v1(buf: bytearray) -> tuple[ProxyInfo, int] | None:
    # spec 2.1: the line ends with CRLF within the first 107 bytes. It ends at the first
    # LF, so a bare LF is an error even after UNKNOWN, whichever way the bytes arrive.
    lf = buf.find(b"\n", 0, V1_MAX_LINE)
    if lf < 0:
        if len(buf) >= V1_MAX_LINE:
            raise ProxyProtocolError(f"v1 line has no CRLF within {V1_MAX_LINE} bytes")
        return None
    if buf[lf - 1] != 0x0D:
        raise ProxyProtocolError("v1 line ends with LF instead of CRLF")
    cr = lf - 1
    line = bytes(buf[len(V1_PREFIX) : cr])
    end = cr + 2
    # spec 2.1: with UNKNOWN the receiver must ignore everything up to CRLF.
    if line == b"UNKNOWN" or line.startswith(b"UNKNOWN "):
        return ProxyInfo(None, None, "UNKNOWN"), end
    parts = line.split(b" ")
    protocol = parts[0]
    if protocol not in (b"TCP4", b"TCP6"):
        raise ProxyProtocolError(f"v1 protocol {_show(protocol)} is not TCP4, TCP6 or UNKNOWN")
    if len(parts) != 5 or not all(parts):
        raise ProxyProtocolError(
            "v1 line must be 'PROXY <proto> <src> <dst> <sport> <dport>' with single spaces"
        )
    parse_address = _ipv4_text if protocol == b"TCP4" else _ipv6_text
    source = (parse_address(parts[1]), _port_text(parts[3]))
    destination = (parse_address(parts[2]), _port_text(parts[4]))
    return ProxyInfo(source, destination, protocol.decode()), end


def _ipv4_text(raw: bytes) -> str:
    try:
        # ipaddress takes exactly four decimal octets and refuses leading zeros.
        return str(ipaddress.IPv4Address(raw.decode("ascii")))
    except (UnicodeDecodeError, ValueError):
        raise ProxyProtocolError(f"v1 TCP4 address {_show(raw)} is not a dotted quad") from None


def _ipv6_text(raw: bytes) -> str:
    try:
        text = raw.decode("ascii")
        if "%" in text:  # ipaddress accepts scope ids; the spec's textual form has none
            raise ValueError(text)
        return str(ipaddress.IPv6Address(text))
    except (UnicodeDecodeError, ValueError):
        raise ProxyProtocolError(f"v1 TCP6 address {_show(raw)} is not an IPv6 address") from None


def _port_text(raw: bytes) -> int:
    if _PORT.fullmatch(raw) is None or int(raw) > 0xFFFF:
        raise ProxyProtocolError(
            f"v1 port {_show(raw)} is not a decimal 0-65535 without leading zeros"
        )
    return int(raw)


def _show(raw: bytes) -> str:
    """A short, printable rendering of client bytes for an error detail."""
    return repr(raw[:48].decode("ascii", "backslashreplace")) + ("..." if len(raw) > 48 else "")


# --- v2 -------------------------------------------------------------------------


def _parse_v2(buf: bytearray, max_length: int) -> tuple[ProxyInfo, int] | None:
    # Check each fixed byte as soon as it arrives, so garbage fails early.
    if len(buf) <= 12:
        return None
    version, command = buf[12] >> 4, buf[12] & 0x0F
    if version != 2:
        raise ProxyProtocolError(f"v2 version is {version}, expected 2")
    if command not in (_LOCAL, _PROXY):
        raise ProxyProtocolError(f"v2 command is {command:#x}, expected 0 (LOCAL) or 1 (PROXY)")
    if len(buf) <= 13:
        return None
    family_byte = buf[13]
    # spec 2.2: with LOCAL the family is ignored, so only PROXY checks it.
    if command == _PROXY:
        if family_byte in _V2_DATAGRAM:
            raise ProxyProtocolError(
                f"v2 transport {_V2_DATAGRAM[family_byte]} ({family_byte:#04x}) "
                "is not supported: the bridge serves stream connections"
            )
        if family_byte not in _V2_FAMILIES:
            raise ProxyProtocolError(f"v2 family/transport byte {family_byte:#04x} is invalid")
    if len(buf) <= 14:
        return None
    if buf[14] << 8 > max_length:  # the high length byte alone can break the limit
        raise ProxyProtocolError(
            f"v2 header length {buf[14] << 8}+ exceeds the limit of {max_length}"
        )
    if len(buf) < V2_FIXED:
        return None
    length = int.from_bytes(buf[14:16], "big")
    if length > max_length:
        raise ProxyProtocolError(f"v2 header length {length} exceeds the limit of {max_length}")
    end = V2_FIXED + length
    if command == _LOCAL:
        return (ProxyInfo(None, None, "LOCAL"), end) if len(buf) >= end else None
    family, address_length = _V2_FAMILIES[family_byte]
    if length < address_length:
        raise ProxyProtocolError(
            f"v2 length {length} is too short for {family} addresses ({address_length} bytes)"
        )
    if len(buf) < end:
        return None
    block = bytes(buf[V2_FIXED:end])
    if family in ("UNKNOWN", "UNIX"):
        # spec 2.2: AF_UNSPEC carries nothing to use; unix paths mean nothing here.
        return ProxyInfo(None, None, family), end
    _check_tlvs(block, address_length)
    size = (address_length - 4) // 2  # src addr, dst addr, src port, dst port
    ip = ipaddress.IPv4Address if family == "TCP4" else ipaddress.IPv6Address
    ports = 2 * size
    source = (str(ip(block[:size])), int.from_bytes(block[ports : ports + 2], "big"))
    destination = (str(ip(block[size:ports])), int.from_bytes(block[ports + 2 : ports + 4], "big"))
    return ProxyInfo(source, destination, family), end


def _check_tlvs(block: bytes, offset: int) -> None:
    """spec 2.2.7: after the addresses, type-length-value records fill the block."""
    while offset < len(block):
        if offset + 3 > len(block):
            raise ProxyProtocolError(f"v2 TLV at offset {offset} is truncated")
        tlv_type = block[offset]
        offset += 3 + int.from_bytes(block[offset + 1 : offset + 3], "big")
        if offset > len(block):
            raise ProxyProtocolError(f"v2 TLV of type {tlv_type:#04x} overruns the header length")


# --- trust ----------------------------------------------------------------------

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_network(text: str) -> Network:
    """One trusted network: CIDR (``10.0.0.0/8``, ``fd00::/8``) or a single address (``/32``,
    ``/128``). Host bits set (``10.1.2.3/8``) are refused rather than guessed at: the reader
    of the setting should see the network that is trusted."""
    entry = text.strip()
    try:
        return ipaddress.ip_network(entry)
    except ValueError:
        pass
    try:
        network = ipaddress.ip_network(entry, strict=False)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a network in CIDR form (e.g. 10.0.0.0/8, 192.0.2.10/32 or fd00::/8)"
        ) from None
    raise ValueError(f"{text!r} has host bits set; the network is {network}")


class ProxyTrust:
    """The peers that may send a PROXY header: an address in one of ``networks``.

    An IPv4 client of a dual-stack (``::``) listener shows up as an IPv4-mapped IPv6
    address (``::ffff:10.0.0.5``); it is checked as the IPv4 address it is, so
    ``10.0.0.0/8`` covers it. No networks: nobody is trusted.
    """

    __slots__ = ("networks",)

    def __init__(self, networks: Iterable[Network]) -> None:
        self.networks = tuple(networks)

    @classmethod
    def from_cidrs(cls, cidrs: Iterable[str]) -> ProxyTrust:
        """From ``proxy_protocol_trusted``'s entries; ValueError names a bad one."""
        return cls(parse_network(c) for c in cidrs)

    def trusts(self, peer: str | None) -> bool:
        """Whether ``peer`` (the socket's peer address, as ``getpeername`` gives it) is trusted."""
        if not peer:
            return False
        try:
            # A link-local IPv6 peer carries its scope ("fe80::1%eth0"); networks have none.
            address = ipaddress.ip_address(peer.split("%", 1)[0])
        except ValueError:
            return False
        candidates: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...] = (address,)
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            candidates = (address.ipv4_mapped, address)
        return any(a in n for a in candidates for n in self.networks if a.version == n.version)
