"""CONNECT rules that need no I/O: version negotiation, heart-beat agreement, loopback peers."""

from __future__ import annotations

import ipaddress

from stomp_bridge.protocol.errors import ProtocolError
from stomp_bridge.protocol.frames import VERSIONS
from stomp_bridge.protocol.integers import parse_int

SUPPORTED_VERSIONS = VERSIONS  # what the bridge speaks: every STOMP version


def negotiate_version(accept: str | None) -> str:
    """STOMP 1.1: absent accept-version means 1.0; pick the highest common one."""
    if accept is None:
        return "1.0"
    offered = {v.strip() for v in accept.split(",")}
    for version in reversed(SUPPORTED_VERSIONS):
        if version in offered:
            return version
    raise ProtocolError("Version mismatch", f"Supported versions are {','.join(SUPPORTED_VERSIONS)}\n")


def heartbeat_seconds(ms: int) -> int:
    """The plugin's rounding: heart-beats are whole seconds, at least 1 when asked for."""
    if ms <= 0:
        return 0
    if ms < 1000:
        return 1
    return ms // 1000


def parse_heartbeat(value: str) -> tuple[int, int]:
    numbers = [parse_int(part, lenient=True) for part in value.split(",")]
    if len(numbers) != 2 or None in numbers:
        raise ProtocolError(
            "Invalid heart-beat header",
            f"heart-beat must be two comma-separated integers (milliseconds), got {value!r}",
        )
    cx, cy = numbers
    if cx < 0 or cy < 0:
        raise ProtocolError("Invalid heart-beat header", f"negative heart-beat value in {value!r}")
    return cx, cy


def is_loopback(peer: str | None) -> bool:
    if not peer:
        return False
    try:
        return ipaddress.ip_address(peer.split("%", 1)[0]).is_loopback
    except ValueError:
        return False
