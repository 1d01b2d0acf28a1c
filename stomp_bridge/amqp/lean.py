"""A lean AMQP channel for a STOMP session, on the bulk reader's direct path.

aiormq's ``Channel`` costs about 14 kB per channel (tracemalloc): two ``asyncio.Queue``s,
three ``asyncio.Event``s, a reader task and its future stores, most of which the bridge never
uses: deliveries, confirms and returns already go from the bulk reader (``reader.py``) straight
to the session. This channel keeps what a session needs and nothing else: its number, RPCs
(method out, the reply in order: AMQP answers a channel's synchronous methods in the order they
were sent), RabbitMQ's channel.close and basic.cancel, and basic.get's content. Every frame of
its number reaches it through the bulk reader, so aiormq's connection never sees them.

It is the bridge's one channel class: a session's channel, its publishing channel and the
short-lived side channel of a peek are all lean channels. Its RPCs keep the method names and
the exceptions of ``aiormq.Channel`` (a channel error is the exception aiormq raises for
RabbitMQ's channel.close, ``internals.channel_error``), so ``errors.broker_error`` reads one
family of errors for connections and channels alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import aiormq
import aiormq.exceptions as amqp_exc
import pamqp.frame
from pamqp import commands as spec

from stomp_bridge.amqp import internals
from stomp_bridge.amqp.codec import decode_method
from stomp_bridge.amqp.reader import ChannelHooks

if TYPE_CHECKING:
    from stomp_bridge.amqp.pool import SharedConnection


class GetResult(NamedTuple):
    """What ``basic_get`` returns for a message: get-ok, its properties (pamqp-named, decoded by
    ``codec.decode_content_header``) and its body; GetEmpty for an empty queue."""

    delivery: spec.Basic.GetOk
    properties: dict[str, Any]
    body: bytes


class LeanChannel:
    """One channel of a shared AMQP connection (see the module docstring)."""

    __slots__ = (
        "connection", "number", "hooks", "closing", "on_cancel", "_replies",
        "_closed", "_close_ok", "_transport_hooks",
    )

    def __init__(self, connection: aiormq.Connection, number: int, hooks: ChannelHooks, transport_hooks: Any) -> None:
        self.connection = connection
        self.number = number
        self.hooks = hooks
        self._transport_hooks = transport_hooks  # reader.Hooks: the socket, for direct writes
        loop = connection.loop
        # Done when the channel or its connection closed: the exception says why.
        self.closing: asyncio.Future[None] = loop.create_future()
        self.closing.add_done_callback(_retrieve)
        self.on_cancel: Callable[[str], None] | None = None  # RabbitMQ cancelled this consumer tag
        # (the reply classes expected, the future the caller waits on), in the order sent
        # A list, not a deque: a few RPCs wait at most, and an empty deque costs ~600 bytes
        # more on each of thousands of idle connections.
        self._replies: list[tuple[tuple[type, ...], asyncio.Future[Any]]] = []
        self._closed = False
        self._close_ok: asyncio.Future[None] | None = None
        hooks.on_method = self._on_method
        hooks.on_get = self._on_get

    @classmethod
    async def open(
        cls, connection: aiormq.Connection, number: int, transport_hooks: Any, channels: dict[int, ChannelHooks],
        sessions: dict[int, Any], *, confirms: bool = True,
    ) -> LeanChannel:
        """channel.open, then confirm.select (publisher confirms) unless ``confirms`` is false.
        ``channels``: the bulk reader's table, where the channel's frames are routed from now
        on; ``sessions``: the shared connection's, where the channel holds its number (and hears
        of the connection's loss, see :meth:`connection_lost`) until its session takes the place."""
        channel = cls(connection, number, ChannelHooks(), transport_hooks)
        channels[number] = channel.hooks
        sessions[number] = channel
        try:
            await channel._call(spec.Channel.Open(), (spec.Channel.OpenOk,))
            if confirms:
                await channel._call(spec.Confirm.Select(), (spec.Confirm.SelectOk,))
        except BaseException as exc:
            channel._closed = True
            if isinstance(exc, amqp_exc.AMQPError):  # RabbitMQ closed it, and has our close-ok
                channels.pop(number, None)
                if sessions.get(number) is channel:
                    del sessions[number]
            # Otherwise (timed out, cancelled) RabbitMQ may still open it: a channel.open on that
            # number again would close the whole shared connection. The number stays held by
            # this closed channel, which absorbs late replies, until the connection ends.
            raise
        return channel

    @classmethod
    def open_on(cls, shared: SharedConnection, *, confirms: bool = True) -> Awaitable[LeanChannel]:
        """:meth:`open` on a free channel number of a pool's shared connection."""
        hooks = shared.hooks
        return cls.open(
            shared.connection, shared.free_number(), hooks, hooks.channels, shared.sessions, confirms=confirms,
        )

    # -- RPCs, named as aiormq.Channel's ------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self._closed

    async def queue_declare(
        self, queue: str = "", *, passive: bool = False, durable: bool = False, exclusive: bool = False,
        auto_delete: bool = False, arguments: dict[str, Any] | None = None,
    ) -> spec.Queue.DeclareOk:
        return await self._call(
            spec.Queue.Declare(queue=queue, passive=passive, durable=durable, exclusive=exclusive,
                               auto_delete=auto_delete, arguments=arguments),
            (spec.Queue.DeclareOk,),
        )

    async def queue_bind(
        self, queue: str, exchange: str, routing_key: str = "", arguments: dict[str, Any] | None = None,
    ) -> spec.Queue.BindOk:
        return await self._call(
            spec.Queue.Bind(queue=queue, exchange=exchange, routing_key=routing_key, arguments=arguments),
            (spec.Queue.BindOk,),
        )

    async def exchange_declare(
        self, exchange: str, *, exchange_type: str = "direct", durable: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> spec.Exchange.DeclareOk:
        return await self._call(
            spec.Exchange.Declare(exchange=exchange, exchange_type=exchange_type, durable=durable, arguments=arguments),
            (spec.Exchange.DeclareOk,),
        )

    async def queue_delete(self, queue: str = "") -> spec.Queue.DeleteOk:
        return await self._call(spec.Queue.Delete(queue=queue), (spec.Queue.DeleteOk,))

    async def basic_qos(self, *, prefetch_count: int = 0) -> spec.Basic.QosOk:
        return await self._call(spec.Basic.Qos(prefetch_count=prefetch_count), (spec.Basic.QosOk,))

    async def basic_consume(
        self, queue: str, consumer_callback: Any = None, *, no_ack: bool = False, consumer_tag: str | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> spec.Basic.ConsumeOk:
        """``consumer_callback`` is ignored: deliveries take the direct path."""
        return await self._call(
            spec.Basic.Consume(queue=queue, no_ack=no_ack, consumer_tag=consumer_tag or "", arguments=arguments),
            (spec.Basic.ConsumeOk,),
        )

    async def basic_cancel(self, consumer_tag: str) -> spec.Basic.CancelOk:
        return await self._call(spec.Basic.Cancel(consumer_tag=consumer_tag), (spec.Basic.CancelOk,))

    async def basic_get(self, queue: str = "", *, no_ack: bool = False) -> GetResult | spec.Basic.GetEmpty:
        """GetEmpty, or GetOk with its content (assembled by the bulk reader, see ``_on_get``)."""
        return await self._call(spec.Basic.Get(queue=queue, no_ack=no_ack), (GetResult, spec.Basic.GetEmpty))

    async def close(self) -> None:
        """channel.close and its close-ok: RabbitMQ requeues the channel's unacked messages."""
        if self._closed:
            return
        self._closed = True
        self._close_ok = self.connection.loop.create_future()
        try:
            await self._write(spec.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
            await asyncio.shield(self._close_ok)
        finally:
            self._finish(ConnectionError("channel closed"))

    # -- frames from the bulk reader -------------------------------------------------------

    def _on_method(self, payload: bytes) -> None:
        frame = decode_method(payload)
        if isinstance(frame, spec.Channel.Close):
            # RabbitMQ closed the channel (a channel error): answer, then fail what waits.
            self._closed = True
            self._send_now(pamqp.frame.marshal(spec.Channel.CloseOk(), self.number))
            self._finish(internals.channel_error(frame))
            return
        if isinstance(frame, spec.Channel.CloseOk):
            if self._close_ok is not None and not self._close_ok.done():
                self._close_ok.set_result(None)
            return
        if isinstance(frame, spec.Basic.Cancel):  # RabbitMQ cancelled a consumer (queue deleted …)
            if self.on_cancel is not None and frame.consumer_tag:
                self.on_cancel(frame.consumer_tag)
            return
        if isinstance(frame, spec.Channel.Flow):
            self._send_now(pamqp.frame.marshal(spec.Channel.FlowOk(active=frame.active), self.number))
            return
        self._reply(frame)

    def _on_get(self, get_ok: spec.Basic.GetOk, properties: dict[str, Any], body: bytes) -> None:
        self._reply(GetResult(get_ok, properties, body))

    def _reply(self, frame: Any) -> None:
        replies = self._replies
        if not replies:
            return  # no one asked (a reply after its caller gave up): nothing to resolve
        expected, future = replies.pop(0)
        if future.done():
            return
        if isinstance(frame, expected):
            future.set_result(frame)
        else:
            future.set_exception(amqp_exc.InvalidFrameError(
                f"unexpected {type(frame).__name__} on channel {self.number}, expected "
                f"{' or '.join(e.__name__ for e in expected)}"))

    # -- the end ---------------------------------------------------------------------------

    def connection_lost(self, exc: BaseException) -> None:
        """The shared connection closed (the pool tells every session on it, and the session
        its channel): what waits fails with the reason."""
        self._closed = True
        self._finish(exc)

    def _finish(self, exc: BaseException) -> None:
        """Fail every RPC still waiting, and tell the session (once)."""
        while self._replies:
            _, future = self._replies.pop(0)
            if not future.done():
                future.set_exception(exc)
        if self._close_ok is not None and not self._close_ok.done():
            self._close_ok.set_result(None)
        if not self.closing.done():
            self.closing.set_exception(exc)

    # -- writing ---------------------------------------------------------------------------

    async def _call(self, method: Any, expected: tuple[type, ...]) -> Any:
        if self._closed:
            raise amqp_exc.ChannelInvalidStateError(f"channel {self.number} is closed")
        future: asyncio.Future[Any] = self.connection.loop.create_future()
        # Read once done: the connection may fail this reply while its method still waits for
        # the writer, and a caller that then gives up never awaits it (asyncio would log that).
        future.add_done_callback(_retrieve)
        self._replies.append((expected, future))
        try:
            await self._write(method)
        except BaseException:
            if (expected, future) in self._replies:
                self._replies.remove((expected, future))
            raise
        return await future

    async def _write(self, method: Any) -> None:
        data = pamqp.frame.marshal(method, self.number)
        frame_max = self.connection.connection_tune.frame_max
        if frame_max and len(data) > frame_max:  # RabbitMQ would close the whole (shared) connection
            raise ValueError(f"{method.name} would take {len(data)} bytes, over RabbitMQ's frame_max of "
                             f"{frame_max}: send shorter header values, or raise frame_max in rabbitmq.conf")
        if not self._send_now(data):
            await internals.write_queue(self.connection).put(internals.channel_frame(data))

    def _send_now(self, data: bytes) -> bool:
        """Write at once (``Hooks.idle_transport``), or behind what waits in aiormq's queue
        (order kept); False when the queue is full (the caller waits for room)."""
        queue = internals.write_queue(self.connection)
        transport = self._transport_hooks.idle_transport(queue)
        if transport is not None:
            transport.write(data)
            return True
        try:
            queue.put_nowait(internals.channel_frame(data))
        except asyncio.QueueFull:
            return False
        return True


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Read a closing future's exception, so that asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()
