"""The Swaptacular peer rules a STOMP connection is held to once CONNECT bound it: pure checks.

Rules from "STOMP Message Transport for the Swaptacular Messaging Protocol"
(v1.0, seeds/002): every SEND carries ``receipt``, ``type``, ``content-type`` and
``persistent:true``, and posts only to the peer's own destination (the manifest's with
its node id). ``swaptacular/profile.py`` binds a :class:`PeerPolicy` to a verified
certificate at CONNECT; the core checks each SEND against it (connections without the
profile hold None and pay one attribute test).
"""

from __future__ import annotations

from dataclasses import dataclass

from stomp_bridge.protocol.errors import ProtocolError

NODE_ID = "${NODE_ID}"
JSON = "application/json"
REQUIRED_SEND_HEADERS = ("receipt", "type", "content-type", "persistent")


def render(template: str, node_id: str) -> str:
    """Substitute every ``${NODE_ID}`` (the spec's only placeholder)."""
    return template.replace(NODE_ID, node_id)


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def check_send_headers(headers: dict[str, str], destination: str, accepted: frozenset[str]) -> None:
    """The profile's SEND rules; raises ProtocolError naming the first broken one."""
    for name in REQUIRED_SEND_HEADERS:
        if name not in headers:
            raise ProtocolError(
                "Missing header",
                f"SEND must include the '{name}' header (Swaptacular STOMP transport: every SEND "
                "carries receipt, type, content-type and persistent:true)\n",
            )
    if headers["persistent"] != "true":
        raise ProtocolError(
            "Invalid header", f"'persistent' must be 'true', not {headers['persistent']!r} (Swaptacular)\n"
        )
    if not headers["type"]:
        raise ProtocolError("Invalid header", "'type' must name the SMP message type\n")
    if media_type(headers["content-type"]) not in accepted:
        raise ProtocolError(
            "Unsupported content type",
            f"content-type {headers['content-type']!r} is not accepted here; accepted: "
            f"{', '.join(sorted(accepted))}\n",
        )
    if headers.get("destination") != destination:
        raise ProtocolError(
            "Invalid destination",
            f"This peer may only SEND to {destination!r} (the manifest's destination with your node "
            f"id), not {headers.get('destination')!r}\n",
        )


@dataclass(frozen=True, slots=True)
class PeerPolicy:
    """One peer connection's rules, bound to the node id in its certificate."""

    node_id: str
    vhost: str
    destination: str
    accepted: frozenset[str]

    def check_send(self, headers: dict[str, str]) -> None:
        check_send_headers(headers, self.destination, self.accepted)
