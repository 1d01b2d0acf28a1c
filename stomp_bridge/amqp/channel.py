"""The AMQP 0-9-1 side of one STOMP connection: a channel on a shared connection.

aiormq owns the sockets, the handshake, heart-beats and RPCs (declare, bind,
consume, qos); ``connect.py`` logs in, ``pool.py`` shares connections between
STOMP sessions with the same credentials, one channel per session. The
per-message paths bypass aiormq's generic API, which costs a lock, a future and
a random ``message_id`` per publish and a task per delivery:

* publishes and acks are encoded by ``codec.py`` into a batch that is
  written once per chunk of client bytes (``flush``): straight to the socket
  when aiormq's write queue is empty and the socket keeps up (a task switch to
  aiormq's writer costs as much as the write), else through that queue, whose
  bound is the backpressure; publisher confirms are tracked by delivery-tag
  ranges in the session, not by futures;
* deliveries and confirms are cut out of the socket's bytes by ``reader.py``
  and handed synchronously to ``on_delivery``/``on_confirm`` (aiormq's channel
  reader is the fallback if that reader is not installed).

Every aiormq internal those paths use goes through ``internals.py``.

A resource alarm: the first publish that reaches RabbitMQ after it makes
RabbitMQ stop reading the whole connection and send connection.blocked. From
then on a batch with a publish in it waits in ``flush`` until
connection.unblocked, so the session stops reading its client at once: the
bridge holds the chunk in hand, not aiormq's queue and socket buffer full of
publishes RabbitMQ will not read (about 2.5 MB per connection before).
RabbitMQ reads nothing more of that connection, ACKs included, so a session
publishes on a channel of its own on a publishing connection (``pool.py``,
``open_publisher``, at its first SEND), and the connection that carries its
consumers and ACKs, and other sessions', is never blocked: consumers keep
going through an alarm, as under the plugin. ``amqp_separate_publishers =
false`` puts publishes back on the session's one channel (fewer connections;
a blocked publisher then holds back the sessions that share its connection).

Backpressure without pausing a shared socket: every consumer acknowledges.
A client-ack subscription is bounded by its prefetch-count or its window (see
the session); an ``ack:auto`` subscription is consumed with manual acks and a
prefetch of ``auto_ack_window``, which the bridge acknowledges while the
client's socket keeps up: ``autoack.py`` holds that rule (which tags, when to
flush, when to hold), this module its timer, its waits and its writes.

A closed channel is never reopened. RabbitMQ closes a channel on a channel
error (404, 403, 406 …), and that ends the STOMP session with the reason, as
the plugin's session ends with its channel; the ERRORs after which the plugin
keeps a connection open (an unknown destination, a bad header …) are refused
by the bridge before any AMQP command, so the channel stays usable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

import aiormq
import aiormq.exceptions as amqp_exc
from pamqp import commands as spec

from stomp_bridge.amqp import internals
from stomp_bridge.amqp.autoack import ARM_TIMER, AUTO_ACK_DELAY, HOLD, NOTHING, RELEASE, AutoAck
from stomp_bridge.amqp.lean import GetResult, LeanChannel
from stomp_bridge.amqp.codec import encode_ack, encode_nack, publish_frames
from stomp_bridge.amqp.delivery import Delivery
from stomp_bridge.amqp.errors import broker_error
from stomp_bridge.amqp.pool import AmqpPool, SharedConnection, closing_reason
from stomp_bridge.amqp.reader import ChannelHooks, DeliveryHook
from stomp_bridge.protocol.dialect import Dialect, version_tuple
from stomp_bridge.protocol.errors import BrokerError, ProtocolError, StompError

log = logging.getLogger(__name__)

__all__ = ["AUTO_ACK_DELAY", "AmqpSession", "Delivery", "broker_error", "properties_dict"]


_PROPERTY_FIELDS = frozenset(spec.Basic.Properties.__slots__)


def properties_dict(props: spec.Basic.Properties) -> dict[str, Any]:
    """Only the properties that are set, timestamps as epoch seconds."""
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


class _Writer:
    """What one channel sends: the batch of frames written once per chunk of client bytes
    (``flush``), straight to the socket when nothing waits before it and RabbitMQ keeps up, else
    through aiormq's write queue, whose bound is the backpressure. A session has one for its
    channel and, with separate publishers, one for its publishing channel."""

    __slots__ = (
        "shared", "connection", "channel", "number", "hooks", "batch", "vectored", "publishes",
        "write_queue", "unblocked", "frame_max",
    )

    def __init__(self, shared: SharedConnection, channel: aiormq.Channel | LeanChannel, hooks: ChannelHooks | None):
        self.shared = shared
        connection = self.connection = shared.connection
        self.channel = channel
        self.number = channel.number
        self.hooks = hooks  # the bulk reader's entry for the channel, if it has one
        self.batch: list[bytes | memoryview] = []
        self.vectored = False  # the batch holds a large body's views: written without a join
        self.publishes = False  # a publish in the batch: it waits while RabbitMQ blocks
        self.write_queue = internals.write_queue(connection)
        self.unblocked = internals.unblocked(connection)
        self.frame_max = connection.connection_tune.frame_max or 131072

    def dead(self) -> bool:
        """RabbitMQ closed this channel: a frame written on its number now would make
        RabbitMQ close the whole shared connection."""
        hooks = self.hooks
        return (hooks is not None and hooks.closed) or self.channel.is_closed

    async def flush(self) -> None:
        """Write the batch; waits while RabbitMQ blocks the connection and the batch publishes
        (see the module docstring), or while aiormq's queue is full."""
        batch = self.batch
        if self.publishes and not self.unblocked.is_set():
            await self.until_unblocked()
        if self.dead():
            batch.clear()
            return
        self.publishes = False
        vectored, self.vectored = self.vectored, False
        if self.write_now(batch, vectored):
            batch.clear()
            return
        # A drain future makes aiormq's writer wait for the socket to drain after
        # this write: when RabbitMQ stops reading, its queue fills and this flush
        # waits, so the session stops reading from the client instead of buffering
        # without bound.
        frame = internals.channel_frame(b"".join(batch), self.connection.loop.create_future())
        batch.clear()
        await self.put(frame)

    async def until_unblocked(self) -> None:
        """Until RabbitMQ unblocks the connection (the alarm cleared) or the connection ends."""
        unblocked = asyncio.ensure_future(self.unblocked.wait())
        try:
            await asyncio.wait((unblocked, self.connection.closing), return_when=asyncio.FIRST_COMPLETED)
        finally:
            unblocked.cancel()

    def write_now(self, parts: list[bytes | memoryview], vectored: bool = False) -> bool:
        """Write to the socket at once if nothing waits before us and RabbitMQ keeps up
        (``Hooks.idle_transport``); False: the batch goes through aiormq's queue, whose bound
        stops the session."""
        transport = self.shared.hooks.idle_transport(self.write_queue)
        if transport is None:
            return False
        if vectored:  # large bodies: the socket takes them from the client's buffers
            transport.writelines(parts)
        elif len(parts) > 1:
            transport.write(b"".join(parts))
        else:
            transport.write(parts[0])
        return True

    async def put(self, frame: Any) -> None:
        queue = self.write_queue
        try:
            queue.put_nowait(frame)
        except asyncio.QueueFull:
            # Wait for room, but not past the connection's end: a dead writer never makes room.
            put = asyncio.ensure_future(queue.put(frame))
            closing = self.connection.closing
            await asyncio.wait((put, closing), return_when=asyncio.FIRST_COMPLETED)
            if not put.done():
                put.cancel()
                raise BrokerError(
                    "Broker connection lost", "The connection to RabbitMQ closed; reconnect to retry."
                )


class AmqpSession:
    """The channel that serves one STOMP connection, on a shared AMQP connection."""

    __slots__ = (
        "pool", "shared", "connection", "channel", "broker_version_text", "broker_version", "dialect",
        "publish_seq", "_main", "_out", "_channel_number", "_credentials", "_opening_publisher",
        "on_delivery", "on_confirm",
        "on_returned", "on_closed", "on_cancelled", "on_batch_end", "_hooks", "_closing", "_prefetch",
        "_auto", "_gate", "_gate_open", "_waiter", "_ack_timer", "_rpcs", "_lost", "_consuming",
    )

    def __init__(
        self, pool: AmqpPool, shared: SharedConnection, channel: aiormq.Channel | LeanChannel, bulk: bool = True,
        credentials: tuple[Any, ...] | None = None,
    ) -> None:
        self.pool = pool
        self.shared = shared
        connection = shared.connection
        self.connection = connection
        self.channel = channel
        version = connection.server_properties.get("version", "0")
        self.broker_version_text = version.decode() if isinstance(version, bytes) else str(version)
        self.broker_version = version_tuple(self.broker_version_text)
        self.dialect = Dialect(self.broker_version)  # the plugin rules of this broker's version
        self.publish_seq = 0  # the broker numbers confirms from 1 on the publishing channel
        self._channel_number = channel.number
        # Where publishes go: this channel's writer, or (separate publishers, see the module
        # docstring) a channel on a publishing connection, opened by ``open_publisher``.
        self._credentials = credentials if bulk and pool.separate_publishers else None
        self._opening_publisher: asyncio.Lock | None = None
        self.on_delivery: DeliveryHook | None = None
        self.on_confirm: Callable[[int, bool, bool], None] | None = None
        # A mandatory publish no queue took: reply code, reply text, exchange, routing key
        # (before the confirm RabbitMQ sends for it; the bulk reader keeps that order).
        self.on_returned: Callable[[int, str, str, str], None] | None = None
        self.on_closed: Callable[[StompError], None] | None = None
        self.on_cancelled: Callable[[str], None] | None = None
        self.on_batch_end: Callable[[], None] | None = None
        self._closing = False
        self._rpcs = 0  # RPCs awaiting RabbitMQ's answer: a channel error reaches their caller
        self._lost: BaseException | None = None  # a close that an RPC in flight will report
        self._prefetch = 0  # the per-consumer prefetch the channel applies to new consumers
        self._consuming = asyncio.Lock()  # a qos and its consume, one pair at a time
        # ack:auto consumers, acknowledged by the bridge (autoack.py).
        self._auto = AutoAck(pool.auto_ack_window)
        self._ack_timer: asyncio.TimerHandle | None = None
        self._gate: Callable[[], Awaitable[None]] | None = None
        self._gate_open: Callable[[], bool] | None = None
        self._waiter: asyncio.Task[None] | None = None
        # The lean paths: see the module docstring. With the bulk reader the
        # frames never reach aiormq's channel; the overrides are the fallback.
        self._hooks: ChannelHooks | None = None
        if isinstance(channel, LeanChannel):  # every frame of its number comes through its hooks
            hooks = self._hooks = channel.hooks
            hooks.on_delivery, hooks.on_confirm = self._deliver, self._confirm
            hooks.on_batch_end, hooks.on_return = self._batch_end, self._returned
        else:
            if bulk:
                self._hooks = ChannelHooks(self._deliver, self._confirm, self._batch_end, self._returned)
                shared.hooks.channels[channel.number] = self._hooks
            internals.override_channel(channel, self._on_deliver_frame, self._on_confirm_frame)
        self._main = self._out = _Writer(shared, channel, self._hooks)
        shared.sessions[channel.number] = self
        channel.on_consumer_cancel_callbacks.add(self._on_cancel)
        channel.closing.add_done_callback(self._on_channel_closing)

    @classmethod
    async def open(
        cls,
        pool: AmqpPool,
        login: str,
        passcode: str,
        vhost: str,
        *,
        client_name: str,
        timeout: float = 10.0,
        context: ssl.SSLContext | None = None,
        external: bool = False,
    ) -> AmqpSession:
        """A channel for the STOMP user: on a shared connection that RabbitMQ
        authenticated with these exact credentials, or on a new one (``pool``: the bridge's,
        see ``connect.make_pool``); ``timeout`` bounds the channel's opening."""
        shared = await pool.acquire(login, passcode, vhost, client_name, context=context, external=external)
        bulk = internals.bulk_reader()
        try:
            number = shared.free_number()
            if bulk:  # the bridge's own lean channel (lean.py), on the bulk reader's direct path
                opening: Awaitable[aiormq.Channel | LeanChannel] = LeanChannel.open(
                    shared.connection, number, shared.hooks, shared.hooks.channels, shared.sessions)
            else:
                opening = shared.connection.channel(channel_number=number, publisher_confirms=True)
            channel = await asyncio.wait_for(opening, timeout)
        except BaseException as exc:
            await pool.release(shared)
            if isinstance(exc, (amqp_exc.AMQPError, ConnectionError, RuntimeError, asyncio.TimeoutError)):
                raise broker_error(exc) from exc
            raise
        return cls(pool, shared, channel, bulk, (login, passcode, vhost, client_name, context, external, timeout))

    # -- the lean per-message paths -------------------------------------------------

    @property
    def publisher_ready(self) -> bool:
        """``publish`` may be called: this channel publishes, or its publishing channel is open."""
        return self._credentials is None or self._out is not self._main

    async def open_publisher(self) -> None:
        """The channel this session publishes on, on one of its login's publishing connections
        (``pool.py``): a resource alarm then blocks that connection, never the one this
        session's and other sessions' consumers acknowledge on. Opened at the first SEND, so a
        session that only consumes costs no more than before.

        If RabbitMQ will not open one (the password changed since this session logged in, the
        user's connection limit, a node down), the session publishes on its own channel, as
        without separate publishers: RabbitMQ accepted this session, and the plugin would let
        it publish."""
        if self.publisher_ready:
            return
        if self._opening_publisher is None:
            self._opening_publisher = asyncio.Lock()
        async with self._opening_publisher:
            if self.publisher_ready:
                return
            if self._closing:
                raise BrokerError("Broker connection lost", "The connection to RabbitMQ closed; reconnect to retry.")
            assert self._credentials is not None
            login, passcode, vhost, client_name, context, external, timeout = self._credentials
            pool = self.pool
            try:
                shared = await pool.acquire(
                    login, passcode, vhost, f"{client_name} publishing", context=context, external=external,
                    publishing=True, near=self.shared.node,
                )
            except Exception as exc:  # noqa: BLE001 - whatever RabbitMQ said, this session may publish
                self._publish_here(exc)
                return
            try:
                channel = await asyncio.wait_for(LeanChannel.open(
                    shared.connection, shared.free_number(), shared.hooks, shared.hooks.channels, shared.sessions,
                ), timeout)
            except BaseException as exc:
                await pool.release(shared)
                if not isinstance(exc, Exception):
                    raise  # cancelled
                self._publish_here(exc)
                return
            hooks = channel.hooks
            hooks.on_confirm, hooks.on_batch_end, hooks.on_return = self._confirm, self._batch_end, self._returned
            self._out = _Writer(shared, channel, hooks)
            channel.closing.add_done_callback(self._on_publisher_closing)
            if self._closing:  # the session ended while the channel opened
                await self._close_publisher()

    def _publish_here(self, exc: BaseException) -> None:
        """No publishing connection: this session publishes on its own channel from now on."""
        self._credentials = None
        log.info("publishing on the session's channel: RabbitMQ opened no publishing connection",
                 extra={"reason": repr(exc)})

    def publish(
        self, exchange: str, routing_key: str, properties: dict[str, Any], body: bytes, mandatory: bool = False
    ) -> int:
        """Queue a publish in the current batch; returns its confirm sequence number.

        ``properties`` are pamqp-named basic properties (see ``codec.py``). ``mandatory``: a
        message no queue takes comes back through ``on_returned`` (with the bulk reader, which
        every bridge installs; aiormq's own reader would drop the return). With separate
        publishers, ``open_publisher`` first (``publisher_ready``).
        """
        out = self._out
        if publish_frames(out.batch, out.number, exchange, routing_key, properties, body, out.frame_max, mandatory):
            out.vectored = True
        out.publishes = True
        self.publish_seq += 1
        return self.publish_seq

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        if multiple:  # RabbitMQ counts our pending ack:auto deliveries in this multiple ack
            self._auto.client_acked(delivery_tag, multiple)
        self._main.batch.append(encode_ack(self._channel_number, delivery_tag, multiple))

    def nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        batch = self._main.batch
        if multiple:  # it would requeue ack:auto deliveries the client already has: ack them first
            for tag in self._auto.client_nacked(delivery_tag, multiple):
                batch.append(encode_ack(self._channel_number, tag, False))
        batch.append(encode_nack(self._channel_number, delivery_tag, multiple, requeue))

    async def flush(self) -> None:
        """Hand the batches to RabbitMQ: this channel's (ACKs, NACKs) first, then the
        publishing channel's, which waits while a resource alarm blocks its connection; and
        either waits while aiormq's write queue is full. Those waits are the backpressure: the
        session stops reading from the client."""
        main = self._main
        if main.batch:
            await main.flush()
        out = self._out
        if out is not main and out.batch:
            await out.flush()

    def _dead(self) -> bool:
        return self._main.dead()

    def shares_connection(self) -> bool:
        """Other sessions use this channel's AMQP connection, so what it owns (exclusive
        queues) outlives this session unless deleted; and this channel still works."""
        return len(self.shared.sessions) > 1 and not self._dead()

    def _deliver(self, delivery: Delivery) -> None:
        callback = self.on_delivery
        if callback is not None:
            callback(delivery)
        auto = self._auto
        if delivery[0] in auto.consumers:  # AutoAck.delivered, inlined: the per-delivery path
            auto.pending.append(delivery[1])

    def _returned(self, reply_code: int, reply_text: str, exchange: str, routing_key: str) -> None:
        callback = self.on_returned
        if callback is not None:
            callback(reply_code, reply_text, exchange, routing_key)

    def _confirm(self, delivery_tag: int, multiple: bool, nack: bool) -> None:
        callback = self.on_confirm
        if callback is not None:
            callback(delivery_tag, multiple, nack)

    def listen(self, events: Any, writable: Callable[[], Awaitable[None]] | None = None) -> None:
        """Send every event to ``events`` (``abc.ChannelEvents``) from now on."""
        self.on_delivery = events.delivered
        self.on_confirm = events.confirmed
        self.on_returned = events.returned
        self.on_closed = events.closed
        self.on_cancelled = events.cancelled
        self.on_batch_end = events.batch_ended
        if writable is not None:
            self.set_backpressure(writable)

    def set_backpressure(self, wait_writable: Callable[[], Awaitable[None]]) -> None:
        """Acknowledge ack:auto deliveries only while the client keeps up.

        ``wait_writable`` returns once the client's socket buffer is below its
        high-water mark; its ``is_open()`` (if it has one) says so without waiting.
        """
        self._gate = wait_writable
        self._gate_open = getattr(wait_writable, "is_open", None)

    def _batch_end(self) -> None:
        callback = self.on_batch_end
        if callback is not None:
            callback()
        self._settle_auto(False)

    def _settle_auto(self, now: bool) -> None:
        """Do what the ack:auto window asks (autoack.py): ack what the client's socket has
        taken, arm the timer, or hold while that socket is full."""
        auto = self._auto
        if self._closing or not auto.pending:
            return
        gate_open = self._gate_open
        step = auto.settle(now, gate_open is None or gate_open())
        if step is NOTHING:
            return
        if step is RELEASE:
            self._release_auto()
        elif step is ARM_TIMER:
            self._ack_timer = self.connection.loop.call_later(AUTO_ACK_DELAY, self._ack_timer_fired)
        elif step is HOLD and not self._dead():
            auto.hold()
            self._waiter = asyncio.ensure_future(self._hold_until_writable())

    def _ack_timer_fired(self) -> None:
        self._ack_timer = None
        self._auto.timer_fired()
        self._settle_auto(True)

    def _release_auto(self) -> None:
        """Ack the ack:auto deliveries the client's socket has taken."""
        if self._auto.blocked or self._closing or self._dead():
            return
        frame = self._auto_ack_frame()
        main = self._main
        if main.write_now([frame.payload]):
            return
        try:
            main.write_queue.put_nowait(frame)
        except asyncio.QueueFull:
            self._auto.hold()
            self._waiter = asyncio.ensure_future(self._put_later(frame))

    def _auto_ack_frame(self) -> Any:
        acks = self._auto.take()
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        number = self._channel_number
        return internals.channel_frame(b"".join([encode_ack(number, tag, multiple) for tag, multiple in acks]))

    async def _put_later(self, frame: Any) -> None:
        try:
            if not self._dead():
                await self._main.put(frame)
        except StompError:
            pass  # the connection is gone; its sessions hear about it from the pool
        finally:
            self._waiter = None
            self._auto.resume()

    async def _hold_until_writable(self) -> None:
        """The client stopped keeping up: its ack:auto deliveries stay unacknowledged, so their
        window fills and RabbitMQ stops sending this channel more; once the client has drained
        its socket, they are acknowledged. (Client-ack consumers are bounded by their prefetch
        or their window, see the session: RabbitMQ 4.3 denies the channel-wide QoS that could
        pause them here.) Once per stall, not per message."""
        try:
            if self._gate is not None:
                await self._gate()
        finally:
            self._waiter = None
            self._auto.resume()
        if self._auto.pending and not self._closing:
            self._release_auto()

    async def _on_deliver_frame(self, frame: spec.Basic.Deliver) -> None:
        header, body = await internals.read_content(self.channel, frame)
        self._deliver(Delivery(
            frame.consumer_tag or "", frame.delivery_tag or 0, bool(frame.redelivered),
            frame.exchange or "", frame.routing_key or "", properties_dict(header.properties),
            body,
        ))
        self._batch_end()

    async def _on_confirm_frame(self, frame: spec.Basic.Ack | spec.Basic.Nack) -> None:
        self._confirm(frame.delivery_tag or 0, bool(frame.multiple), isinstance(frame, spec.Basic.Nack))

    def _on_cancel(self, frame: spec.Basic.Cancel) -> None:
        if self.on_cancelled is not None and frame.consumer_tag:
            self.on_cancelled(frame.consumer_tag)

    def _on_channel_closing(self, future: asyncio.Future) -> None:
        self.connection_lost(closing_reason(future, "channel closed"))

    def connection_lost(self, exc: BaseException) -> None:
        """The channel or the whole connection closed: the session ends with the reason. While
        an RPC waits, the reason reaches the session through that RPC instead, where the
        command that caused it is known (the plugin words some refusals differently)."""
        if isinstance(self.channel, LeanChannel):  # what waits on the channel fails with the reason
            self.channel.connection_lost(exc)
        self._end(exc)

    def _on_publisher_closing(self, future: asyncio.Future) -> None:
        """RabbitMQ closed the publishing channel (a publish it refused: 404, 403 …) or its
        connection: the session ends with the reason, as if its one channel had closed."""
        self._end(closing_reason(future, "channel closed"))

    def _end(self, exc: BaseException) -> None:
        if self._closing or self.on_closed is None:
            return
        self._closing = True
        if self._rpcs:
            self._lost = exc
        else:
            self.on_closed(broker_error(exc))

    # -- RPCs: the batch goes first so the broker sees frames in client order -------

    async def _rpc(self, coro_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        await self.flush()
        self._rpcs += 1
        try:
            result = await coro_fn(*args, **kwargs)
        except StompError:
            raise
        except (amqp_exc.AMQPError, amqp_exc.ChannelInvalidStateError, ConnectionError) as exc:
            raise broker_error(exc) from exc
        except ValueError as exc:  # pamqp refuses a name or value it cannot encode
            raise ProtocolError("Invalid header", f"RabbitMQ cannot be sent this value: {exc}") from exc
        finally:
            self._rpcs -= 1
            lost, self._lost = self._lost, None  # raised: the caller has the reason already
        if lost is not None and self.on_closed is not None:
            self.on_closed(broker_error(lost))  # the channel closed after this RPC's answer
        return result

    # -- exclusive queues belong to the session, not to the shared connection ------------

    def _check_exclusive(self, queue: str) -> None:
        """Another session's exclusive queue on this connection: RabbitMQ's own answer to another
        connection, which is what the plugin's client gets (a channel error: the session ends)."""
        owner = self.shared.exclusive.get(queue)
        if owner is not None and owner != self._channel_number:
            raise BrokerError(
                "resource_locked",
                f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}' in vhost "
                f"'{self.shared.key[2]}'. It could be originally declared on another connection or the "
                "exclusive property value does not match that of the original declaration.",
            )

    def release_exclusive(self, queue: str) -> None:
        """``queue`` is gone (deleted, or an auto-delete queue lost its last consumer)."""
        if self.shared.exclusive.get(queue) == self._channel_number:
            del self.shared.exclusive[queue]

    async def declare_queue(
        self,
        name: str,
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> str:
        if name:
            self._check_exclusive(name)
        ok = await self._rpc(
            self.channel.queue_declare,
            name,
            passive=passive,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=arguments or None,
        )
        if exclusive and not passive:
            self.shared.exclusive[ok.queue] = self._channel_number
        return ok.queue

    async def bind(
        self, queue: str, exchange: str, routing_key: str, arguments: dict[str, Any] | None = None
    ) -> None:
        self._check_exclusive(queue)
        await self._rpc(self.channel.queue_bind, queue, exchange, routing_key=routing_key, arguments=arguments)

    async def delete_queue(self, queue: str) -> None:
        self._check_exclusive(queue)
        await self._rpc(self.channel.queue_delete, queue)
        self.release_exclusive(queue)

    async def consume(
        self,
        queue: str,
        consumer_tag: str,
        *,
        no_ack: bool,
        prefetch: int = 0,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        """Consume with ``prefetch`` (0: unlimited); an ack:auto (``no_ack``) consumer is acked
        by the bridge within ``auto_ack_window`` instead.

        Except on a stream (``x-stream-…`` arguments): RabbitMQ refuses ack:auto
        there, and the client must get that refusal as from the plugin. RabbitMQ's
        per-consumer qos applies to the consumers created after it, so qos and consume go
        together, one pair at a time (a session may add a consumer while it handles a frame).
        """
        self._check_exclusive(queue)
        bridge_acks = no_ack and not (arguments and any(k.startswith("x-stream-") for k in arguments))
        async with self._consuming:
            if bridge_acks:
                prefetch = self._auto.window
                self._auto.add_consumer(consumer_tag)
            elif not no_ack:
                self._auto.individual = True
            try:
                if prefetch != self._prefetch:
                    await self._rpc(self.channel.basic_qos, prefetch_count=prefetch)
                    self._prefetch = prefetch
                await self._rpc(
                    self.channel.basic_consume,
                    queue,
                    _unused_consumer,
                    no_ack=no_ack and not bridge_acks,
                    consumer_tag=consumer_tag,
                    arguments=arguments or None,
                )
            except BaseException:
                self._auto.discard_consumer(consumer_tag)
                raise

    async def cancel(self, consumer_tag: str) -> None:
        await self._rpc(self.channel.basic_cancel, consumer_tag)

    async def get(self, queue: str) -> Delivery | None:
        """basic.get without auto-ack (browsing), or None when the queue is empty; the
        delivery's consumer tag is empty."""
        self._check_exclusive(queue)
        self._auto.individual = True  # a multiple ack of our own would take the browsed messages
        message = await self._rpc(self.channel.basic_get, queue, no_ack=False)
        if isinstance(message, GetResult):  # the lean channel: properties already decoded
            frame, properties = message.delivery, message.properties
        elif isinstance(message, spec.Basic.GetEmpty) or not isinstance(message.delivery, spec.Basic.GetOk):
            return None
        else:  # aiormq's channel
            frame, properties = message.delivery, properties_dict(message.header.properties)
        return Delivery(
            "", frame.delivery_tag or 0, bool(frame.redelivered), frame.exchange or "",
            frame.routing_key or "", properties, message.body,
        )

    @contextlib.asynccontextmanager
    async def _side_channel(self) -> AsyncIterator[aiormq.Channel]:
        """A short-lived channel on this session's connection, for what may fail with NOT_FOUND:
        that closes the channel it is sent on, and the session's own must stay open."""
        shared = self.shared
        number = shared.free_number()
        shared.sessions[number] = self  # holds the number (aiormq's own choice can pass channel_max)
        try:
            channel = await self.connection.channel(channel_number=number, publisher_confirms=False)
        except (amqp_exc.AMQPError, ConnectionError, RuntimeError) as exc:
            shared.sessions.pop(number, None)
            raise broker_error(exc) from exc
        try:
            yield channel
        finally:
            try:
                if not channel.is_closed:
                    await channel.close()
            finally:
                shared.sessions.pop(number, None)

    async def peek(self, queue: str) -> tuple[dict[str, Any], bytes] | None:
        """The first message of ``queue`` left in place, or None if it is empty or missing: read
        on a side channel, whose close hands the message back."""
        self._check_exclusive(queue)
        await self.flush()
        async with self._side_channel() as channel:
            try:
                message = await channel.basic_get(queue, no_ack=False)
            except amqp_exc.ChannelNotFoundEntity:
                return None
            except (amqp_exc.AMQPError, ConnectionError) as exc:
                raise broker_error(exc) from exc
        if not isinstance(message.delivery, spec.Basic.GetOk):
            return None
        return properties_dict(message.header.properties), message.body

    async def update_secret(self, secret: str) -> None:
        """A new secret (an OAuth 2 token) for this session's AMQP connection
        (connection.update-secret). The connection is no longer offered to new logins: one
        with the old token or the new one gets a connection RabbitMQ checked for it, never this
        one on another client's token. RabbitMQ refuses a token for another user by closing
        the connection. The session's publishing connection, if it has one, gets it too, and
        one opened later logs in with it."""
        if self._credentials is not None:
            login, _, *rest = self._credentials
            self._credentials = (login, secret, *rest)
        writers = (self._main,) if self._out is self._main else (self._main, self._out)
        for writer in writers:
            writer.shared.retired = True
            try:
                await writer.connection.update_secret(secret, reason="stomp-bridge: the client sent a new token")
            except (amqp_exc.AMQPError, ConnectionError) as exc:
                raise broker_error(exc) from exc

    async def discard_queue(self, queue: str) -> None:
        """Delete ``queue`` on a channel of its own, whatever becomes of it: after a failed
        SUBSCRIBE, whose error closed the session's channel (the plugin's maybe_clean_up_queue)."""
        try:
            async with self._side_channel() as channel:
                await channel.queue_delete(queue)
        except Exception as exc:  # noqa: BLE001 - best effort, as the plugin's
            log.debug("could not delete queue %r after a failed subscribe: %r", queue, exc)
        self.release_exclusive(queue)

    async def queue_exists(self, queue: str) -> bool:
        """Whether ``queue`` exists now (a passive declare, on a side channel)."""
        async with self._side_channel() as channel:
            try:
                await channel.queue_declare(queue, passive=True)
            except amqp_exc.ChannelNotFoundEntity:
                return False
            except (amqp_exc.AMQPError, ConnectionError) as exc:
                raise broker_error(exc) from exc
        return True

    def flush_nowait(self) -> None:
        """Hand the batch to the writer from a synchronous callback (the ack of a delivery a
        selector dropped); if aiormq's write queue is full, the batch goes with the next flush."""
        main = self._main
        batch = main.batch
        if not batch:
            return
        if main.dead() or main.write_now(batch):
            batch.clear()
            return
        frame = internals.channel_frame(b"".join(batch))
        try:
            main.write_queue.put_nowait(frame)
        except asyncio.QueueFull:
            return
        batch.clear()

    async def close(self) -> None:
        """Close the channel (RabbitMQ requeues its unacked messages) and give back the slot."""
        if self._closing and self.shared.sessions.get(self._channel_number) is not self:
            return
        self._closing = True
        shared = self.shared
        try:
            await self.flush()
            if self._auto.pending and not self._dead():
                await self._main.put(self._auto_ack_frame())
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        if self._waiter is not None:
            self._waiter.cancel()
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        try:
            if not self.channel.is_closed:
                await asyncio.wait_for(self.channel.close(), timeout=5)
        except Exception as exc:  # noqa: BLE001 - the broker may already be gone
            log.debug("amqp channel close failed: %r", exc)
        finally:
            shared.hooks.channels.pop(self._channel_number, None)
            mine = [queue for queue, owner in shared.exclusive.items() if owner == self._channel_number]
            for queue in mine:  # deleted by the session, or gone with the channel's consumers
                del shared.exclusive[queue]
            if shared.sessions.get(self._channel_number) is self:
                del shared.sessions[self._channel_number]
                await self.pool.release(shared)
            await self._close_publisher()

    async def _close_publisher(self) -> None:
        """Close the publishing channel, if the session opened one, and give back its slot."""
        out = self._out
        if out is self._main:
            return
        self._out = self._main
        channel = out.channel
        try:
            if not channel.is_closed:
                await asyncio.wait_for(channel.close(), timeout=5)
        except Exception as exc:  # noqa: BLE001 - the broker may already be gone
            log.debug("amqp publishing channel close failed: %r", exc)
        finally:
            shared = out.shared
            shared.hooks.channels.pop(out.number, None)
            if shared.sessions.get(out.number) is channel:
                del shared.sessions[out.number]
                await self.pool.release(shared)


async def _unused_consumer(message: Any) -> None:  # pragma: no cover - never called
    """aiormq wants a callback per consumer; deliveries go through ``on_delivery``."""
