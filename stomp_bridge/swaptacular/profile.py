"""The Swaptacular peer profile: pure checks for CONNECT and SEND.

Rules from "STOMP Message Transport for the Swaptacular Messaging Protocol"
(v1.0, seeds/002): STOMP 1.2 only; every SEND carries ``receipt``, ``type``,
``content-type`` and ``persistent:true``; the client substitutes its node id for
``${NODE_ID}`` in the manifest's ``host`` and ``destination``. The peer's node id
is taken from its verified client certificate (``swpt_peer_id_from``, by default
the subject's serialNumber), so a peer can only claim its own id and only post
to its own destination. A RECEIPT confirms every earlier message on the
connection: the bridge's receipts already do (they leave in frame order, each
after all earlier publishes are confirmed).

The session holds one :class:`PeerPolicy` per connection and calls
``check_send`` from its SEND handler; connections without the profile hold
None and pay one attribute test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from stomp_bridge.protocol.errors import AccessRefused, ProtocolError
from stomp_bridge.tls import PeerCertificate

if TYPE_CHECKING:
    from stomp_bridge.settings.sections import SwaptacularSettings

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


class SwaptacularProfile:
    def __init__(self, settings: SwaptacularSettings) -> None:
        self.peer_id_from = settings.swpt_peer_id_from
        self.host = settings.swpt_host
        self.vhost = settings.swpt_vhost
        self.destination = settings.swpt_destination
        self.accepted = frozenset([JSON, *(media_type(t) for t in settings.swpt_accepted_content_types)])

    def node_id(self, cert: PeerCertificate | None) -> str:
        if cert is None:
            raise AccessRefused("Bad CONNECT", "Swaptacular peers must present a client certificate\n")
        node_id = cert.attribute(self.peer_id_from)
        if not node_id:
            raise AccessRefused(
                "Bad CONNECT",
                f"Your certificate's subject has no {self.peer_id_from}, which names your node here\n",
            )
        return node_id

    def bind(self, cert: PeerCertificate | None, headers: dict[str, str], version: str) -> PeerPolicy:
        """CONNECT checks; the policy for the rest of the connection."""
        if version != "1.2":
            raise ProtocolError(
                "Bad CONNECT", "Swaptacular peers speak STOMP 1.2 only: send accept-version:1.2\n"
            )
        node_id = self.node_id(cert)
        expected = render(self.host, node_id)
        if headers.get("host") != expected:
            raise AccessRefused(
                "Bad CONNECT",
                f"host must be {expected!r} (the manifest's host with your node id), not "
                f"{headers.get('host')!r}\n",
            )
        return PeerPolicy(node_id, self.vhost, render(self.destination, node_id), self.accepted)
