"""The Swaptacular peer profile: CONNECT's checks, which bind a peer to its certificate.

Rules from "STOMP Message Transport for the Swaptacular Messaging Protocol"
(v1.0, seeds/002): STOMP 1.2 only; every SEND carries ``receipt``, ``type``,
``content-type`` and ``persistent:true``; the client substitutes its node id for
``${NODE_ID}`` in the manifest's ``host`` and ``destination``. The peer's node id
is taken from its verified client certificate (``swpt_peer_id_from``, by default
the subject's serialNumber), so a peer can only claim its own id and only post
to its own destination. A RECEIPT confirms every earlier message on the
connection: the bridge's receipts already do (they leave in frame order, each
after all earlier publishes are confirmed).

:meth:`SwaptacularProfile.bind` gives the connection's :class:`~stomp_bridge.core.peer.PeerPolicy`,
which the STOMP core holds and checks every SEND against (``core/peer.py``: those rules are pure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stomp_bridge.core.peer import JSON, PeerPolicy, media_type, render
from stomp_bridge.protocol.errors import AccessRefused, ProtocolError
from stomp_bridge.tls import PeerCertificate

if TYPE_CHECKING:
    from stomp_bridge.settings.sections import SwaptacularSettings


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
