"""What one channel sends: a batch of encoded frames, written once per chunk of client bytes.

A session's publishes, acks and nacks are encoded by ``codec.py`` into a batch that ``flush``
writes in one go: straight to the socket when nothing waits before it in aiormq's write queue
and the socket keeps up (a task switch to aiormq's writer costs as much as the write), else
through that queue, whose bound is the backpressure: when RabbitMQ stops reading, the queue
fills and ``flush`` waits, so the session stops reading its client instead of buffering
without bound.

A resource alarm: the first publish that reaches RabbitMQ after it makes RabbitMQ stop reading
the whole connection and send connection.blocked. From then on a batch with a publish in it
waits in ``flush`` until connection.unblocked, so the session stops reading its client at once:
the bridge holds the chunk in hand, not aiormq's queue and socket buffer full of publishes
RabbitMQ will not read (about 2.5 MB per connection before).
"""

from __future__ import annotations

import asyncio

from stomp_bridge.amqp import internals
from stomp_bridge.amqp.lean import LeanChannel
from stomp_bridge.amqp.pool import SharedConnection
from stomp_bridge.protocol.errors import BrokerError


# A large body's batch is written straight to the socket (write_behind) while RabbitMQ has
# fewer unsent bytes than this before it: a few large messages in flight keep RabbitMQ's socket
# full, within what aiormq's queue (10 batches) held before.
WRITE_BEHIND = 4 * 1024 * 1024


class ChannelWriter:
    """The batch of one lean channel and how it reaches the socket (see the module docstring).
    A session has one for its channel and, with separate publishers, one for its publishing
    channel."""

    __slots__ = (
        "shared", "connection", "channel", "number", "hooks", "batch", "vectored", "publishes",
        "write_queue", "unblocked", "frame_max",
    )

    def __init__(self, shared: SharedConnection, channel: LeanChannel) -> None:
        self.shared = shared
        connection = self.connection = shared.connection
        self.channel = channel
        self.number = channel.number
        self.hooks = channel.hooks  # the bulk reader's entry for the channel
        self.batch: list[bytes | memoryview] = []
        self.vectored = False  # the batch holds a large body's views: written without a join
        self.publishes = False  # a publish in the batch: it waits while RabbitMQ blocks
        self.write_queue = internals.write_queue(connection)
        self.unblocked = internals.unblocked(connection)
        self.frame_max = connection.connection_tune.frame_max or 131072

    def dead(self) -> bool:
        """RabbitMQ closed this channel (or we did): a frame written on its number now would
        make RabbitMQ close the whole shared connection."""
        return self.hooks.closed or self.channel.is_closed

    async def flush(self) -> None:
        """Write the batch; waits while RabbitMQ blocks the connection and the batch publishes,
        or while aiormq's queue is full."""
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
        if vectored and self.write_behind(batch):
            batch.clear()
            return
        # A drain future makes aiormq's writer wait for the socket to drain after this write:
        # when RabbitMQ stops reading, its queue fills and this flush waits.
        frame = internals.channel_frame(b"".join(batch), self.connection.loop.create_future())
        batch.clear()
        await self.put(frame)

    def try_flush(self) -> bool:
        """``flush`` when it would not wait (the socket takes the batch now); False: not written."""
        batch = self.batch
        if self.publishes and not self.unblocked.is_set():
            return False
        if self.dead():
            batch.clear()
            return True
        if not self.write_now(batch, self.vectored):
            return False
        self.publishes = self.vectored = False
        batch.clear()
        return True

    def flush_nowait(self) -> None:
        """Hand the batch over from a synchronous callback; if aiormq's write queue is full, the
        batch stays for the next flush."""
        batch = self.batch
        if batch and (self.dead() or self.send_nowait(batch)):
            batch.clear()

    async def until_unblocked(self) -> None:
        """Until RabbitMQ unblocks the connection (the alarm cleared) or the connection ends."""
        unblocked = asyncio.ensure_future(self.unblocked.wait())
        try:
            await asyncio.wait((unblocked, self.connection.closing), return_when=asyncio.FIRST_COMPLETED)
        finally:
            unblocked.cancel()

    def write_now(self, parts: list[bytes | memoryview], vectored: bool = False) -> bool:
        """Write to the socket at once if nothing waits before us and RabbitMQ keeps up
        (``Hooks.idle_transport``); False: the frames must go through aiormq's queue."""
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

    def write_behind(self, parts: list[bytes | memoryview]) -> bool:
        """A large body's batch, written to a socket that still has unsent bytes (below
        WRITE_BEHIND) but nothing waiting in aiormq's queue, so it keeps its place: from the
        client's buffers, as write_now would, instead of joined (a copy of the body) and queued.
        Past WRITE_BEHIND unsent bytes (RabbitMQ not keeping up, or not reading at all) False:
        the batch goes through the queue, whose bound holds the session back as before."""
        transport = self.shared.hooks.transport
        if (
            transport is None
            or self.write_queue.qsize()
            or transport.is_closing()
            or transport.get_write_buffer_size() > WRITE_BEHIND
        ):
            return False
        transport.writelines(parts)
        return True

    def send_nowait(self, parts: list[bytes | memoryview]) -> bool:
        """Write now, or queue behind what waits; False if aiormq's queue is full (nothing sent)."""
        if self.write_now(parts):
            return True
        try:
            self.write_queue.put_nowait(internals.channel_frame(b"".join(parts)))
        except asyncio.QueueFull:
            return False
        return True

    async def put(self, frame: object) -> None:
        """Queue an encoded frame for aiormq's writer; waits for room, but not past the
        connection's end: a dead writer never makes room."""
        queue = self.write_queue
        try:
            queue.put_nowait(frame)
        except asyncio.QueueFull:
            put = asyncio.ensure_future(queue.put(frame))
            closing = self.connection.closing
            await asyncio.wait((put, closing), return_when=asyncio.FIRST_COMPLETED)
            if not put.done():
                put.cancel()
                raise BrokerError(
                    "Broker connection lost", "The connection to RabbitMQ closed; reconnect to retry."
                ) from None
