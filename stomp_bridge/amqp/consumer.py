"""One queue consumed with manual acks and a prefetch: AMQP for what is not a STOMP session.

``stomp-bridge forward`` (``swaptacular/forwarder.py``) moves a local queue to a peer and acks
each message only once the peer has receipted it. It needs one connection, one channel, a
prefetch that bounds what waits for receipts, acks that settle ranges, and rejects; this module
gives exactly that, through aiormq's public API, with :class:`~.delivery.Delivery` values and
the bridge's own errors, so that no module outside ``amqp/`` knows aiormq or pamqp.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import aiormq
import aiormq.abc
import aiormq.exceptions as amqp_exc
from pamqp import commands as spec

from stomp_bridge.amqp.delivery import Delivery
from stomp_bridge.amqp.errors import broker_error

_PROPERTY_FIELDS = frozenset(spec.Basic.Properties.__slots__)


def properties_dict(props: spec.Basic.Properties) -> dict[str, Any]:
    """Only the properties that are set, pamqp-named as the bulk reader's, timestamps as
    epoch seconds."""
    out = {}
    for name in _PROPERTY_FIELDS:
        value = getattr(props, name, None)
        if value is None:
            continue
        if isinstance(value, datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=timezone.utc)
            value = int(value.timestamp())
        out[name] = value
    return out


@contextlib.contextmanager
def _as_broker_errors() -> Iterator[None]:
    """aiormq's exceptions as the bridge's BrokerError (a StompError): callers catch one family."""
    try:
        yield
    except amqp_exc.AMQPError as exc:
        raise broker_error(exc) from exc


class QueueConsumer:
    """A connection with one channel consuming one queue; deliveries wait in :meth:`next`."""

    __slots__ = ("connection", "channel", "consumer_tag", "_deliveries")

    def __init__(self, connection: aiormq.abc.AbstractConnection, channel: aiormq.abc.AbstractChannel) -> None:
        self.connection = connection
        self.channel = channel
        self.consumer_tag: str | None = None
        self._deliveries: asyncio.Queue[Delivery] = asyncio.Queue()

    @classmethod
    async def open(
        cls, url: str, *, prefetch: int, client_name: str, heartbeat: int = 60, timeout: float = 10.0,
        context: ssl.SSLContext | None = None,
    ) -> QueueConsumer:
        """Connect to ``url`` (its own credentials and vhost), open a channel, and let at most
        ``prefetch`` deliveries wait for their acks. Raises OSError, asyncio.TimeoutError or
        BrokerError."""
        sep = "&" if "?" in url else "?"
        with _as_broker_errors():
            connection = await asyncio.wait_for(
                aiormq.connect(f"{url}{sep}heartbeat={heartbeat}", context=context,
                               client_properties={"connection_name": client_name}),
                timeout,
            )
            try:
                channel = await connection.channel()
                await channel.basic_qos(prefetch_count=prefetch)
            except BaseException:
                await connection.close()
                raise
        return cls(connection, channel)

    async def consume(self, queue: str) -> None:
        """Start consuming ``queue`` with manual acks."""
        with _as_broker_errors():
            ok = await self.channel.basic_consume(queue, self._delivered, no_ack=False)
        self.consumer_tag = ok.consumer_tag

    async def _delivered(self, message: aiormq.abc.DeliveredMessage) -> None:
        self._deliveries.put_nowait(Delivery(
            message.consumer_tag or "", message.delivery_tag or 0, bool(message.redelivered),
            message.exchange or "", message.routing_key or "", properties_dict(message.header.properties),
            message.body,
        ))

    async def next(self) -> Delivery:
        """The next delivery, in the order RabbitMQ sent them."""
        return await self._deliveries.get()

    async def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        """Acknowledge ``delivery_tag`` (and, ``multiple``, every earlier one)."""
        with _as_broker_errors():
            await self.channel.basic_ack(delivery_tag, multiple=multiple)

    async def reject(self, delivery_tag: int, requeue: bool) -> None:
        """Refuse one delivery: back to the queue, or (not ``requeue``) dead-lettered or dropped."""
        with _as_broker_errors():
            await self.channel.basic_reject(delivery_tag, requeue=requeue)

    async def cancel(self) -> None:
        """Stop deliveries; what was delivered stays ours to ack."""
        if self.consumer_tag is not None:
            with _as_broker_errors():
                await self.channel.basic_cancel(self.consumer_tag)

    async def close(self, timeout: float = 5.0) -> None:
        """Close the connection: RabbitMQ requeues every unacked delivery. Never raises (the
        broker may be gone already)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.connection.close(), timeout)
