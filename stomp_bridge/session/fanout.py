"""Fan-out at the edge (``edge_fanout``): subscriptions of one login to one binding share one
AMQP queue and consumer, and the bridge copies each delivery to every subscriber.

Without it RabbitMQ routes a copy of each message into every subscriber's own queue and
delivers each one: its work grows with subscribers. With it RabbitMQ routes one copy per bridge:
a :class:`Group` (one per login, exchange, binding key and binding arguments) declares one
transient queue (exclusive, auto-delete, named as the plugin names a subscription's), binds it
once, and consumes it with RabbitMQ's own acknowledgements on a channel of the login's, opened
through the pool like a session's. Each delivery becomes one :class:`SharedMessage`, its common
part encoded once per STOMP version, and every subscriber's MESSAGE is its own few first headers
in front of it (``core/fanout.py``), not copied.

Which SUBSCRIBEs share, and that RabbitMQ checks each one as its own, is the core's decision
(``core/fanout.py``, ``subscribe.subscribe_shared``): this module only joins, copies and leaves.

A subscriber that does not take what it is sent gets ``fanout_subscriber_buffer`` bytes queued
(its socket's buffer and what waits to go in it), then ERROR ``Slow subscriber`` and the end of
its connection: it never holds back the others, nor the group's consumer (which has no
prefetch to fill), nor grows the bridge. When RabbitMQ cancels the group's consumer (its queue
deleted) every subscriber gets the plugin's ``Server cancelled subscription``, and when the
group's channel closes, the channel's error, as each would from a queue of its own.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import TYPE_CHECKING, Any, Protocol

from stomp_bridge.amqp.abc import SessionChannel
from stomp_bridge.amqp.errors import describe
from stomp_bridge.metrics import Counters
from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol.errors import ProtocolError, StompError
from stomp_bridge.protocol.headers import SharedMessage

if TYPE_CHECKING:
    from stomp_bridge.amqp.delivery import Delivery

log = logging.getLogger(__name__)

CONSUMER_TAG = "stomp-bridge.fanout"  # the group channel's one consumer

Key = tuple[Any, ...]


class Session(Protocol):
    """What a group needs of a subscriber's session (``session.Session``)."""

    @property
    def closed(self) -> bool: ...
    @property
    def frame_end(self) -> bytes: ...
    def channel(self) -> SessionChannel: ...
    def fanned_out(self, consumer_tag: str, shared: SharedMessage) -> int: ...
    def flush_out(self) -> None: ...
    def backlog(self) -> int: ...
    def fail(self, error: StompError) -> None: ...
    def cancelled(self, consumer_tag: str) -> None: ...
    def joined(self, group: Group, consumer_tag: str) -> None: ...


class Group:
    """One shared queue and its subscribers (see the module docstring)."""

    __slots__ = ("hub", "key", "channel", "queue", "members", "ready", "closing", "touched", "_end")

    def __init__(self, hub: FanoutHub, key: Key) -> None:
        self.hub = hub
        self.key = key
        self.channel: SessionChannel | None = None
        self.queue = ""
        # (session, its subscription's consumer tag), in the order they joined
        self.members: dict[tuple[Session, str], None] = {}
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ready.add_done_callback(_retrieve)
        self.closing = False
        self.touched: set[Session] = set()  # sessions a read of the channel queued MESSAGEs for
        self._end: bytes = b""

    async def open(self, session: Session, exchange: str, routing_key: str, arguments: dict[str, Any] | None) -> None:
        """The group's channel (the first subscriber's login), queue, binding and consumer."""
        try:
            channel = self.channel = await session.channel().open_sibling(
                f"stomp-bridge fan-out {exchange}/{routing_key}")
            self._end = session.frame_end
            channel.listen(self)
            self.queue = await channel.declare_queue(
                dest.subscription_queue_name(routing_key, secrets.token_bytes(16)), durable=False, exclusive=True,
                auto_delete=True)
            await channel.bind(self.queue, exchange, routing_key, arguments)
            await channel.consume(self.queue, CONSUMER_TAG, no_ack=True, auto_ack=True)
        except BaseException as exc:
            self.ready.set_exception(exc if isinstance(exc, StompError) else StompError(
                "Processing error", "Processing error", private=f"{type(exc).__name__}: {describe(exc)}"))
            self.hub.forget(self)
            await self._close_channel()
            raise
        self.ready.set_result(None)
        self.hub.counters.fanout_queues += 1

    # -- the channel's events (amqp.abc.ChannelEvents) -------------------------------------------

    def delivered(self, delivery: Delivery) -> None:
        _, delivery_tag, redelivered, exchange, routing_key, properties, body = delivery
        shared = SharedMessage(delivery_tag, redelivered, exchange, routing_key, properties, body, self._end)
        touched = self.touched
        copied = 0
        for session, tag in self.members:
            if session.fanned_out(tag, shared):
                copied += 1
                touched.add(session)
        self.hub.counters.fanout_copies += copied

    def batch_ended(self) -> None:
        """Every subscriber a read made MESSAGEs for gets them written; one that has more than
        ``fanout_subscriber_buffer`` bytes it has not taken is closed."""
        touched, self.touched = self.touched, set()
        limit = self.hub.subscriber_buffer
        for session in touched:
            session.flush_out()
            if session.backlog() > limit and not session.closed:
                self.hub.counters.fanout_slow_subscribers += 1
                session.fail(ProtocolError(
                    "Slow subscriber",
                    f"More than {limit} bytes of MESSAGEs waited for this client to read them: it was "
                    "closed so that it holds back no one else. Read faster, or subscribe with "
                    "ack:client and a prefetch-count (a queue of its own, which RabbitMQ holds for it).",
                ))

    def confirmed(self, tag: int, multiple: bool, nack: bool) -> None:
        pass  # the group publishes nothing

    def returned(self, reply_code: int, reply_text: str, exchange: str, routing_key: str) -> None:
        pass

    def cancelled(self, consumer_tag: str) -> None:
        """RabbitMQ cancelled the consumer (its queue was deleted): every subscriber's, as its own."""
        for session, tag in list(self.members):
            session.cancelled(tag)
        self._ended()

    def closed(self, error: StompError) -> None:
        """The channel or its connection closed under the group: each subscriber gets the error."""
        for session, _ in list(self.members):
            session.fail(error)
        self._ended()

    # -- joining and leaving -------------------------------------------------------------------

    def join(self, session: Session, consumer_tag: str) -> None:
        self.members[session, consumer_tag] = None
        self.hub.counters.fanout_subscribers += 1

    def leave(self, session: Session, consumer_tag: str) -> None:
        if self.members.pop((session, consumer_tag), 0) is None:
            self.hub.counters.fanout_subscribers -= 1
            if not self.members:
                self.hub.forget(self)
                self.hub.start(self._close_channel())

    def _ended(self) -> None:
        self.hub.counters.fanout_subscribers -= len(self.members)
        self.members.clear()
        self.hub.forget(self)
        self.hub.start(self._close_channel())

    async def _close_channel(self) -> None:
        """The consumer cancelled (the auto-delete queue goes with it) and the channel closed."""
        if self.closing:
            return
        self.closing = True
        channel, self.channel = self.channel, None
        if self.queue:
            self.hub.counters.fanout_queues -= 1
        if channel is not None:
            try:
                await channel.close()
            except Exception as exc:  # noqa: BLE001 - RabbitMQ is gone: the queue went with it
                log.debug("closing a fan-out channel failed: %r", exc)


class FanoutHub:
    """The bridge's shared subscriptions, by login and binding (one per bridge process)."""

    __slots__ = ("counters", "subscriber_buffer", "_groups", "_tasks")

    def __init__(self, counters: Counters, subscriber_buffer: int) -> None:
        self.counters = counters
        self.subscriber_buffer = subscriber_buffer
        self._groups: dict[Key, Group] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def groups(self) -> int:
        return len(self._groups)

    async def join(self, session: Session, consumer_tag: str, exchange: str, routing_key: str,
                   arguments: dict[str, Any] | None) -> None:
        """``session``'s subscription ``consumer_tag`` takes its MESSAGEs from the group of its
        login and binding (made now by the first: RabbitMQ's refusal then raised to it)."""
        key = (session.channel().login_key, exchange, routing_key,
               None if arguments is None else tuple(sorted(arguments.items())))
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = Group(self, key)
            await group.open(session, exchange, routing_key, arguments)
        else:
            await asyncio.shield(group.ready)
        if session.closed:
            return
        group.join(session, consumer_tag)
        session.joined(group, consumer_tag)

    def forget(self, group: Group) -> None:
        if self._groups.get(group.key) is group:
            del self._groups[group.key]

    def start(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
