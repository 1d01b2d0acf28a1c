"""The ack:auto window at work: ``autoack.py``'s rule with its timer, its waits and its writes.

Backpressure without pausing a shared socket: an ``ack:auto`` subscription is consumed with
manual acks and a prefetch of ``auto_ack_window``, which the bridge acknowledges while the
client's socket keeps up. :class:`~stomp_bridge.amqp.autoack.AutoAck` decides (which tags,
when to flush, when to hold); :class:`AutoAcker` does what it says on one session's channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from stomp_bridge.amqp import internals
from stomp_bridge.amqp.autoack import ARM_TIMER, AUTO_ACK_DELAY, HOLD, NOTHING, RELEASE, AutoAck
from stomp_bridge.amqp.codec import encode_ack
from stomp_bridge.amqp.writer import ChannelWriter
from stomp_bridge.protocol.errors import StompError


class AutoAcker:
    """Acknowledges one channel's ack:auto deliveries while the client keeps up."""

    __slots__ = ("rule", "writer", "stopped", "_gate", "_gate_open", "_timer", "_waiter")

    def __init__(self, rule: AutoAck, writer: ChannelWriter) -> None:
        self.rule = rule
        self.writer = writer  # the session's own channel, where its consumers are
        self.stopped = False  # the session ends: nothing more is released
        self._gate: Callable[[], Awaitable[None]] | None = None
        self._gate_open: Callable[[], bool] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None

    def gate(self, writable: Callable[[], Awaitable[None]] | None) -> None:
        """``writable`` returns once the client's socket buffer is below its high-water mark;
        its ``is_open()`` (if it has one) says so without waiting. None: always writable."""
        self._gate = writable
        self._gate_open = getattr(writable, "is_open", None)

    def settle(self, now: bool) -> None:
        """Do what the rule asks at the end of a socket read (``now``: its timer fired): ack
        what the client's socket has taken, arm the timer, or hold while that socket is full."""
        rule = self.rule
        if self.stopped or not rule.pending:
            return
        gate_open = self._gate_open
        step = rule.settle(now, gate_open is None or gate_open())
        if step is NOTHING:
            return
        if step is RELEASE:
            self.release()
        elif step is ARM_TIMER:
            self._timer = self.writer.connection.loop.call_later(AUTO_ACK_DELAY, self._timer_fired)
        elif step is HOLD and not self.writer.dead():
            rule.hold()
            self._waiter = asyncio.ensure_future(self._hold_until_writable())

    def _timer_fired(self) -> None:
        self._timer = None
        self.rule.timer_fired()
        self.settle(True)

    def release(self) -> None:
        """Ack the ack:auto deliveries the client's socket has taken."""
        writer = self.writer
        if self.rule.blocked or self.stopped or writer.dead():
            return
        payload = self.take()
        if writer.send_nowait([payload]):
            return
        self.rule.hold()  # aiormq's queue is full: wait for room, holding the rest meanwhile
        self._waiter = asyncio.ensure_future(self._put_later(payload))

    def take(self) -> bytes:
        """The pending acks as frames (and no timer for them any more)."""
        acks = self.rule.take()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        number = self.writer.number
        return b"".join([encode_ack(number, tag, multiple) for tag, multiple in acks])

    async def _put_later(self, payload: bytes) -> None:
        try:
            if not self.writer.dead():
                await self.writer.put(internals.channel_frame(payload))
        except StompError:
            pass  # the connection is gone; its sessions hear about it from the pool
        finally:
            self._waiter = None
            self.rule.resume()

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
            self.rule.resume()
        if self.rule.pending and not self.stopped:
            self.release()

    async def close(self) -> None:
        """The session closes its channel: ack what the client got (RabbitMQ would otherwise
        requeue it), then stop the timer and any wait."""
        self.stopped = True
        try:
            if self.rule.pending and not self.writer.dead():
                await self.writer.put(internals.channel_frame(self.take()))
        finally:
            if self._waiter is not None:
                self._waiter.cancel()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
