"""What the Apollo/Artemis extensions may use of a session: a small public interface.

``extensions.py`` types its argument with :class:`SessionView` instead of
importing the session module, so the two do not import each other and the
extensions cannot reach into the session's internals; :class:`~.session.Session`
provides all of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from stomp_bridge.amqp.channel import AmqpSession
    from stomp_bridge.session.receipts import ReceiptLedger
    from stomp_bridge.session.subscriptions import Subscription
    from stomp_bridge.settings import Settings


class SessionView(Protocol):
    settings: Settings
    session_id: str
    client_id: str | None  # Artemis durable subscriptions
    closed: bool
    amqp: AmqpSession | None
    ledger: ReceiptLedger  # every publish's sequence number, for the RECEIPTs
    subscriptions: dict[str, Subscription]  # by consumer tag

    def channel(self) -> AmqpSession:
        """The AMQP session, or the "Not connected" error once it is gone."""
        ...

    async def writable(self) -> None:
        """Returns when the client's socket has room (at once without backpressure)."""
        ...

    async def flush(self) -> None:
        """Send what the AMQP channel has batched."""
        ...

    def deliver(self, headers: dict[str, str], body: bytes) -> None:
        """Send the client one MESSAGE (counted as a delivery)."""
        ...
