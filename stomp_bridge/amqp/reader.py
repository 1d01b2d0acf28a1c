"""A bulk AMQP frame reader for aiormq, with a direct path for deliveries and confirms.

aiormq reads each frame with three ``readexactly`` awaits, decodes it with
pamqp, queues it for the connection, then for the channel, whose reader task
awaits it again: about a dozen awaits and three pamqp decodes per delivered
message. This receiver reads whatever the socket has, cuts every complete
frame out of the buffer, and for every channel that registered
:class:`ChannelHooks` (every channel the bridge opens: ``lean.py``) decodes
basic.deliver, basic.return and basic.get-ok (with their content) and publisher
confirms itself, calling that channel's session synchronously, and hands its
other methods to the lean channel. Channel 0's frames (heart-beats,
connection.blocked, close) take aiormq's usual route, in order.

One AMQP connection carries many STOMP sessions (one channel each), so the
reader never waits for any one client: backpressure towards RabbitMQ is per
channel (see ``channel.AmqpSession``), never a pause of the shared socket.

aiormq creates its receiver inside ``connect()``; ``connect.py`` hands the receiver
its :class:`Hooks` through a context variable set around that call. aiormq uses
this class once ``internals.install`` has put it in place (when a bridge starts).
"""

from __future__ import annotations

import contextvars
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import aiormq.exceptions as amqp_exc
import pamqp.frame
from pamqp.heartbeat import Heartbeat

from stomp_bridge.amqp import internals
from stomp_bridge.amqp.delivery import Delivery
from stomp_bridge.amqp.errors import describe
from stomp_bridge.amqp.codec import (
    BASIC_ACK,
    BASIC_DELIVER,
    BASIC_NACK,
    BASIC_RETURN,
    CLASS_METHOD,
    FRAME_HEADER,
    decode_confirm,
    decode_content_header,
    decode_deliver,
    decode_method,
    decode_return,
)

log = logging.getLogger(__name__)

READ_SIZE = 256 * 1024
FRAME_END = 0xCE
# A delivery's body of this size or more is copied, frame by frame, straight from the read
# buffer into a bytearray of its full size (from the content header): one copy, instead of a
# bytes per body frame (two copies: the slice, then bytes) and their join.
LARGE_BODY = 64 * 1024
_ALIVE = (0, 0, Heartbeat())  # what aiormq gets in place of frames the direct path took
CHANNEL_CLOSE = (20, 40)
BASIC_GET_OK = (60, 71)
DELIVERED, RETURNED, GOT = 0, 1, 2  # what a pending message is

DeliveryHook = Callable[[Delivery], None]
_new_tuple = tuple.__new__  # a Delivery without NamedTuple.__new__'s keyword handling
ConfirmHook = Callable[[int, bool, bool], None]
# basic.return of a mandatory publish: reply code, reply text, exchange, routing key
ReturnHook = Callable[[int, str, str, str], None]


class ChannelHooks:
    """Where the direct path delivers for one channel (one STOMP session)."""

    __slots__ = (
        "on_delivery", "on_confirm", "on_return", "on_batch_end", "on_method", "on_get", "pending", "touched",
        "closed",
    )

    def __init__(
        self, on_delivery: DeliveryHook | None = None, on_confirm: ConfirmHook | None = None,
        on_batch_end: Callable[[], None] | None = None, on_return: ReturnHook | None = None,
    ) -> None:
        self.on_delivery = on_delivery
        self.on_confirm = on_confirm
        # Here, not through aiormq, so that a basic.return is seen before the basic.ack RabbitMQ
        # sends after it for the same message (a RECEIPT must never go out for it).
        self.on_return = on_return
        # After each socket read that brought this channel frames: lets the
        # session send its frames now, not one event-loop pass later.
        self.on_batch_end = on_batch_end
        # The lean channel (lean.py) takes every other method frame of its number (RPC replies,
        # channel.close, basic.cancel) and basic.get's message (None only in the reader's tests).
        self.on_method: Callable[[bytes], None] | None = None
        self.on_get: Callable[[Any, dict[str, Any], bytes], None] | None = None
        # A delivery (or a returned or got message) being assembled: [deliver, return or
        # get-ok args, properties, bytes still due, body parts, DELIVERED / RETURNED / GOT]
        self.pending: list[Any] | None = None
        self.touched = False
        # Set the moment RabbitMQ's channel.close arrives, before the lean channel answers
        # close-ok: from then on nothing may be written on this channel number,
        # or RabbitMQ closes the whole shared connection (CHANNEL_ERROR).
        self.closed = False


class Hooks:
    """The channels of one AMQP connection that take the direct path, by number."""

    __slots__ = ("channels", "transport")

    def __init__(self) -> None:
        self.channels: dict[int, ChannelHooks] = {}
        # The connection's socket, for writes that need not queue for aiormq's writer task.
        self.transport: Any = None

    def idle_transport(self, write_queue: Any) -> Any:
        """The socket, when a frame written to it now keeps its place: nothing waits in
        aiormq's ``write_queue`` (its writer has written all it took) and the socket has no
        unsent bytes (RabbitMQ keeps reading); else None, and the frame goes through the queue,
        whose bound holds the writer back while RabbitMQ does not read (a resource alarm)."""
        transport = self.transport
        if (
            transport is None
            or write_queue.qsize()
            or transport.get_write_buffer_size()
            or transport.is_closing()
        ):
            return None
        return transport


current_hooks: contextvars.ContextVar[Hooks | None] = contextvars.ContextVar(
    "stomp_bridge_amqp_hooks", default=None
)


class BulkFrameReceiver(internals.FrameReceiver):
    def __init__(self, reader: Any) -> None:
        super().__init__(reader)
        self.hooks = current_hooks.get()
        if self.hooks is not None:
            self.hooks.transport = internals.stream_transport(reader)
        self._buf = bytearray()
        self._frames: deque[tuple[int, int, Any]] = deque()
        self._touched: list[ChannelHooks] = []  # channels that got frames in this read
        self._surfaced = 0.0  # when aiormq last got a frame from us
        # With hooks (the bridge's connections), every chunk is cut into frames in the socket's
        # data_received: a delivery reaches its session, a confirm its RECEIPT, in the event
        # loop's pass that read them, not one pass later in aiormq's reader task, which is
        # woken only when a frame is for aiormq (channel 0, an RPC reply) or it must see one.
        self._waiter: Any = None
        self._error: BaseException | None = None
        self._diverted = self.hooks is not None and reader is not None
        if self._diverted:
            self._buf += internals.divert_stream(reader, self._feed, self._wake)

    async def get_frame(self) -> Any:
        frames = self._frames
        if self._diverted:
            if self._buf and not frames:  # bytes the reader had before it was diverted
                self._feed(b"")
            while not frames:
                if self._error is not None:
                    raise self._error
                exc = self.reader.exception()
                if exc is not None:
                    raise amqp_exc.AMQPConnectionError(f"Server connection error: {describe(exc)}") from exc
                if self.reader.at_eof():
                    raise amqp_exc.AMQPConnectionError("Server connection unexpectedly closed")
                self._waiter = waiter = self.loop.create_future()
                try:
                    await waiter
                finally:
                    self._waiter = None
            self._surfaced = self.loop.time()
            return frames.popleft()
        while not frames:
            try:
                data = await self.reader.read(READ_SIZE)
            except (ConnectionError, OSError) as exc:
                raise amqp_exc.AMQPConnectionError(f"Server connection error: {describe(exc)}") from exc
            if not data:
                raise amqp_exc.AMQPConnectionError("Server connection unexpectedly closed")
            self._buf += data
            self._parse()
            self._end_batch()
            if not frames:
                # aiormq judges the connection alive by the frames it sees, and RabbitMQ
                # sends no heart-beats while deliveries flow: without this, a consumer fed
                # steadily for 3 heart-beat intervals was closed as "stuck".
                now = self.loop.time()
                if now - self._surfaced >= 1.0:
                    self._surfaced = now
                    return _ALIVE
        self._surfaced = self.loop.time()
        return frames.popleft()

    def _end_batch(self) -> None:
        """The chunk's frames are handled: each channel they reached flushes once (on_batch_end)."""
        touched = self._touched
        if touched:
            for target in touched:
                target.touched = False
                if target.on_batch_end is not None:
                    self._call(target.on_batch_end)
            touched.clear()

    def _feed(self, data: bytes) -> None:
        """A chunk from the socket (the StreamReader's ``feed_data``): its frames handled now."""
        if self._error is not None:
            return
        try:
            if self.started:
                if self._buf:  # a frame begun in an earlier chunk
                    self._take(data)
                else:  # the usual case: the chunk begins with a frame, cut where it is
                    pos = self._parse(data)
                    if pos < len(data):
                        with memoryview(data) as view:
                            self._buf += view[pos:]
            else:  # the first frames: the protocol header check reads the buffer
                self._buf += data
                self._parse()
        except Exception as exc:  # noqa: BLE001 - aiormq's reader task raises it and closes
            self._error = exc
            self._wake()
            return
        self._end_batch()
        frames = self._frames
        if not frames:
            # aiormq judges the connection alive by the frames it sees (see get_frame)
            now = self.loop.time()
            if now - self._surfaced < 1.0:
                return
            self._surfaced = now
            frames.append(_ALIVE)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _take(self, data: bytes) -> None:
        """A chunk's frames, cut where they are: only the bytes of a frame that spans two chunks
        are copied into the buffer (the rest of it from this chunk, the start of one the chunk
        ends in), not the whole chunk (for a large delivery, a copy of every byte fewer)."""
        buf = self._buf
        with memoryview(data) as view:
            size = len(view)
            start = 0
            while buf and start < size:  # the frame begun in an earlier chunk: its missing bytes
                have = len(buf)
                need = 7 - have if have < 7 else FRAME_HEADER.unpack_from(buf)[2] + 8 - have
                buf += view[start : start + need]
                start = min(start + need, size)
                if len(buf) >= 8:
                    self._parse()
            if start < size:
                pos = self._parse(view[start:] if start else view)
                if start + pos < size:
                    buf += view[start + pos :]

    def _parse(self, source: Any = None) -> int:
        """Cut and handle every complete frame at the start of ``source`` (a chunk's view),
        and return how many bytes they took; without ``source``, of the buffer, whose frames are
        then removed from it."""
        buf = self._buf if source is None else source
        size_now = len(buf)
        pos = 0
        hooks = self.hooks
        direct = hooks.channels if hooks is not None else {}
        while size_now - pos >= 8:
            if not self.started and bytes(buf[:4]) == b"AMQP":
                raise amqp_exc.ProtocolSyntaxError("Unexpected AMQP protocol header")
            frame_type, channel, size = FRAME_HEADER.unpack_from(buf, pos)
            end = pos + 7 + size
            if end >= size_now:
                break
            if buf[end] != FRAME_END:
                raise amqp_exc.InvalidFrameError(f"frame of type {frame_type} does not end with 0xCE")
            self.started = True
            target = direct.get(channel) if channel else None
            if target is not None:
                pending = target.pending
                if pending is not None and frame_type == 3:  # a message's body: _direct's part, inlined (held to it: test_amqp_reader's splits)
                    body = pending[3]
                    if type(body) is bytearray:  # a large body: this frame's bytes to their place
                        due = pending[2]
                        offset = len(body) - due
                        taken = min(size, due)
                        with memoryview(buf) as view:
                            body[offset : offset + taken] = view[pos + 7 : pos + 7 + taken]
                        pending[2] = due - taken
                    else:
                        body.append(bytes(buf[pos + 7 : end]))
                        pending[2] -= size
                    if pending[2] <= 0:
                        self._deliver(target, pending)
                    handled = True
                else:
                    handled = self._direct(target, frame_type, bytes(buf[pos + 7 : end]))
                if handled:
                    if not target.touched:
                        target.touched = True
                        self._touched.append(target)
                    pos = end + 1
                    continue
            self._frames.append(pamqp.frame.unmarshal(bytes(buf[pos : end + 1])))
            pos = end + 1
        if pos and source is None:
            del buf[:pos]
        return pos

    def _direct(self, target: ChannelHooks, frame_type: int, payload: bytes) -> bool:
        """Handle a frame of a registered channel; False hands it to aiormq."""
        pending = target.pending
        if frame_type == 1:
            method = CLASS_METHOD.unpack_from(payload)
            if method == BASIC_DELIVER:
                target.pending = [decode_deliver(payload), None, 0, [], DELIVERED]
                return True
            if method == BASIC_RETURN and target.on_return is not None:
                target.pending = [decode_return(payload), None, 0, [], RETURNED]
                return True
            if method == BASIC_ACK or method == BASIC_NACK:
                tag, multiple = decode_confirm(payload)
                if target.on_confirm is not None:
                    self._call(target.on_confirm, tag, multiple, method == BASIC_NACK)
                return True
            if method == CHANNEL_CLOSE:
                target.closed = True
            if target.on_method is None:
                return False
            if method == BASIC_GET_OK:
                target.pending = [decode_method(payload), None, 0, [], GOT]
                return True
            self._call(target.on_method, payload)
            return True
        if pending is None:
            return False
        if frame_type == 2:
            pending[2], pending[1] = decode_content_header(payload)
            if pending[2] == 0:
                self._deliver(target, pending)
            elif pending[2] >= LARGE_BODY and pending[4] == DELIVERED:
                pending[3] = bytearray(pending[2])  # filled by _parse, frame by frame
            return True
        return False  # a body frame (type 3) of a pending message is _parse's (one per delivery)

    def _deliver(self, target: ChannelHooks, pending: list[Any]) -> None:
        target.pending = None
        kind = pending[4]
        if kind == RETURNED:  # a returned message: only where it was going matters
            self._call(target.on_return, *pending[0])
            return
        parts = pending[3]
        if type(parts) is bytearray:
            body = parts
        else:
            body = parts[0] if len(parts) == 1 else b"".join(parts)
        if kind == GOT:
            self._call(target.on_get, pending[0], pending[1], body)
            return
        hook = target.on_delivery
        if hook is not None:
            try:  # _call's guard, inlined: one call less per delivery pays for the Delivery
                hook(_new_tuple(Delivery, pending[0] + (pending[1], body)))
            except Exception:  # noqa: BLE001 - one session's bug must not kill the reader
                log.exception("delivery hook failed")

    @staticmethod
    def _call(hook: Callable[..., None], *args: Any) -> None:
        try:
            hook(*args)
        except Exception:  # noqa: BLE001 - one session's bug must not kill the reader
            log.exception("delivery hook failed")

