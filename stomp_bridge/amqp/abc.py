"""The AMQP side as the session's driver sees it: one typed channel interface, no aiormq names.

As aiormq's and aio-pika's ``abc.py``: the driver (``session/``) talks to :class:`SessionChannel`
and hears from it through one :class:`ChannelEvents` object, so a fake stands in for RabbitMQ in
tests, and the driver cannot reach into the channel's internals. ``channel.AmqpSession`` is the
one implementation.

Ordering promises the STOMP core relies on (RECEIPTs and ERRORs depend on them):

* publishes are numbered 1, 2, 3 … in the order ``publish`` is called, on one channel for the
  whole session, and ``confirmed`` names those numbers;
* a mandatory publish no queue took is ``returned`` before the ``confirmed`` that covers it,
  and returns come in publish order;
* frames handed to ``publish``/``ack``/``nack`` reach RabbitMQ before any later RPC's method
  (an RPC flushes the batch first), so RabbitMQ sees them in the client's order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from stomp_bridge.amqp.delivery import Delivery
from stomp_bridge.protocol.dialect import Dialect
from stomp_bridge.protocol.errors import StompError


class ChannelEvents(Protocol):
    """What RabbitMQ tells a session: plain calls, never awaited, from the AMQP reader (or, for
    ``closed``, a callback one loop pass after the channel's end, or the RPC that saw it)."""

    def delivered(self, delivery: Delivery) -> None:
        """basic.deliver on one of the session's consumers."""

    def confirmed(self, tag: int, multiple: bool, nack: bool) -> None:
        """basic.ack / basic.nack of publish ``tag`` (and every earlier one if ``multiple``)."""

    def returned(self, reply_code: int, reply_text: str, exchange: str, routing_key: str) -> None:
        """basic.return of a mandatory publish no queue took (before its confirm)."""

    def cancelled(self, consumer_tag: str) -> None:
        """RabbitMQ cancelled a consumer (its queue was deleted, a node went down …)."""

    def closed(self, error: StompError) -> None:
        """The channel or its connection closed; ``error`` is the ERROR the plugin would send."""

    def batch_ended(self) -> None:
        """The end of one socket read that brought this session frames: write what they made."""


class SessionChannel(Protocol):
    """One STOMP session's AMQP channel (and, with separate publishers, its publishing one)."""

    broker_version_text: str  # RabbitMQ's version, as its server properties say it
    dialect: Dialect  # the plugin rules of that version
    frame_max: int  # the largest frame RabbitMQ takes on this channel's connection (its tune)

    def listen(self, events: ChannelEvents, writable: Callable[[], Awaitable[None]] | None = None) -> None:
        """Send every event to ``events`` from now on. ``writable`` returns once the client's
        socket has room (its ``is_open()``, if it has one, says so without waiting): ack:auto
        deliveries are acknowledged only while the client keeps up."""

    # -- per message: batched, written by flush -----------------------------------------

    @property
    def publisher_ready(self) -> bool:
        """``publish`` may be called now (else ``open_publisher`` first)."""

    async def open_publisher(self) -> None:
        """Open the channel publishes go on (once per session, at its first publish)."""

    def publish(
        self, exchange: str, routing_key: str, properties: dict[str, Any], body: bytes, mandatory: bool = False,
    ) -> None:
        """Queue a publish (RabbitMQ confirms them 1, 2, 3 … per session, as the core numbers them)."""

    def ack(self, delivery_tag: int, multiple: bool = False) -> None: ...

    def nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None: ...

    async def flush(self) -> None:
        """Write what is batched; waits while RabbitMQ blocks a publishing connection or its
        write queue is full (the backpressure towards the client)."""

    def flush_nowait(self) -> None:
        """Write what is batched from a synchronous callback, if that can be done at once."""

    def try_flush(self) -> bool:
        """Write what is batched now if nothing would make ``flush`` wait; False: nothing was
        written that could not be, and ``flush`` must be awaited (in order, the same batches)."""

    # -- RPCs: RabbitMQ's answer, or a StompError (the plugin's ERROR for it) ---------------

    async def declare_queue(
        self, name: str, *, durable: bool = False, exclusive: bool = False, auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> str:
        """queue.declare; the queue's name (RabbitMQ's choice for ``""``)."""

    async def bind(self, queue: str, exchange: str, routing_key: str, arguments: dict[str, Any] | None = None) -> None:
        ...

    async def declare_exchange(self, exchange: str, kind: str, arguments: dict[str, Any] | None = None) -> None:
        """exchange.declare of a durable exchange (the scheduled-delivery topology)."""

    async def delete_queue(self, queue: str) -> None: ...

    async def consume(
        self, queue: str, consumer_tag: str, *, no_ack: bool, prefetch: int = 0,
        arguments: dict[str, Any] | None = None, stream_auto: bool = False, auto_ack: bool = False,
    ) -> None:
        """``stream_auto``: ack:auto on a stream, acked by the bridge (a named stream subscription);
        ``auto_ack``: RabbitMQ acknowledges (a shared subscription's queue)."""

    async def open_sibling(self, client_name: str) -> SessionChannel:
        """Another channel of the same login (a shared subscription's consumer)."""

    @property
    def login_key(self) -> tuple[Any, ...]:
        """Who the session logged in as: sessions with the same may share a subscription."""

    async def cancel(self, consumer_tag: str) -> None: ...

    async def get(self, queue: str) -> Delivery | None:
        """basic.get without auto-ack (a browse; where a stream's refusal costs only this
        session); None when the queue is empty."""

    async def end_browse(self) -> None:
        """Hand back what ``get`` took (requeued)."""

    async def peek(self, queue: str) -> tuple[dict[str, Any], bytes] | None:
        """The first message of ``queue`` left in place (properties, body); None if empty or missing."""

    async def discard_queue(self, queue: str) -> None:
        """Delete ``queue`` on a channel of its own, ignoring failures (the session's channel may
        be closed by the error that made the queue useless)."""

    async def queue_exists(self, queue: str) -> bool: ...

    async def is_stream(self, queue: str, exact: bool = False) -> bool:
        """Whether ``queue`` is a stream, asked in a way that costs no shared connection
        (``sidechannel.is_stream``; ``exact``: even for a queue that holds messages, by a
        basic.get on a connection of its own); RabbitMQ's refusal (a missing queue …) raised."""

    async def update_secret(self, secret: str) -> None:
        """connection.update-secret (a new OAuth 2 token) on the session's connections."""

    def release_exclusive(self, queue: str) -> None:
        """``queue``, exclusive to this session, is gone: its name is free for others."""

    async def close(self) -> None:
        """Close the channel(s): RabbitMQ requeues what the client did not acknowledge."""
