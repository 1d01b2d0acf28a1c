"""The ack:auto window: which deliveries the bridge acknowledges for the client, and when.

An ``ack:auto`` subscription is consumed with manual acks and a prefetch of
``auto_ack_window``; the bridge acks its deliveries once they are in the client's
socket buffer and that buffer is below ``write_buffer_high``. A client that stops
reading therefore stops only its own channel (RabbitMQ sends no more than the window
unacknowledged), with at most the window buffered in the bridge, while other sessions
on the shared AMQP connection go on.

Those acks go out in one frame when a quarter of the window is pending or
``AUTO_ACK_DELAY`` after the first of them: one frame per delivery would cost
RabbitMQ and the bridge a write each (a third of the writes of a request/reply round
trip), while a crash in between only redelivers what the client may already hold, as
any lost ack does.

:class:`AutoAck` is that rule and nothing else: no I/O, no clock, no asyncio. The
channel (``channel.py``) feeds it deliveries, the client's own acks and nacks, and the
end of each socket read; :meth:`AutoAck.settle` answers with the one thing to do
(:data:`RELEASE` the acks now, :data:`ARM_TIMER`, :data:`HOLD` until the client's
socket drains, or :data:`NOTHING`), and :meth:`AutoAck.take` hands over the acks.
"""

from __future__ import annotations

AUTO_ACK_DELAY = 0.02  # seconds an ack:auto delivery may wait for its ack to share a frame

# What settle() asks the channel to do.
NOTHING = "nothing"
RELEASE = "release"  # take() the acks and write them now
ARM_TIMER = "arm timer"  # call settle(now=True) after AUTO_ACK_DELAY (see timer_fired)
HOLD = "hold"  # the client's socket is full: hold() until it drains, then resume() and release

NO_CONSUMERS: frozenset[str] = frozenset()  # every AutoAck's consumers until its first


class AutoAck:
    """The ack:auto deliveries of one channel that the bridge still has to acknowledge."""

    __slots__ = ("window", "flush_at", "consumers", "pending", "individual", "timer_armed", "blocked")

    def __init__(self, window: int) -> None:
        self.window = window  # the prefetch of every ack:auto consumer
        self.flush_at = max(1, window // 4)  # pending acks that go out at once
        # consumer tags whose deliveries the bridge acks (a set from the first: an empty set is
        # 216 bytes of every idle session, and most have no ack:auto consumer)
        self.consumers: set[str] = NO_CONSUMERS  # type: ignore[assignment]
        self.pending: list[int] = []  # their delivery tags, in delivery order, not yet acked
        # A client-ack consumer (or a browse) shares the channel: a multiple ack of ours would
        # settle its deliveries too, so each pending tag is acked on its own.
        self.individual = False
        self.timer_armed = False
        self.blocked = False  # the channel waits (the client's socket, or aiormq's write queue)

    def add_consumer(self, consumer_tag: str) -> None:
        if self.consumers is NO_CONSUMERS:
            self.consumers = set()
        self.consumers.add(consumer_tag)

    def discard_consumer(self, consumer_tag: str) -> None:
        if self.consumers:
            self.consumers.discard(consumer_tag)

    def delivered(self, consumer_tag: str, delivery_tag: int) -> None:
        """A delivery went to the client; the bridge acks it if its consumer is ack:auto."""
        if consumer_tag in self.consumers:
            self.pending.append(delivery_tag)

    def settle(self, now: bool, writable: bool) -> str:
        """What to do after a socket read (``now=False``) or when the timer fires (``now=True``),
        given whether the client's socket buffer is below its high-water mark."""
        if self.blocked or not self.pending:
            return NOTHING
        if not writable:
            return HOLD
        if now or len(self.pending) >= self.flush_at:
            return RELEASE
        if not self.timer_armed:
            self.timer_armed = True
            return ARM_TIMER
        return NOTHING

    def timer_fired(self) -> None:
        self.timer_armed = False

    def hold(self) -> None:
        """The channel waits before it may write the acks (no settle answers until resume)."""
        self.blocked = True

    def resume(self) -> None:
        self.blocked = False

    def take(self) -> list[tuple[int, bool]]:
        """The acks to send for every pending delivery, as (delivery tag, multiple); the
        window is then empty and the timer no longer needed."""
        pending, self.pending = self.pending, []
        self.timer_armed = False
        if not pending:
            return []
        if self.individual:
            return [(tag, False) for tag in pending]
        return [(pending[-1], True)]

    def client_acked(self, delivery_tag: int, multiple: bool) -> None:
        """The client's multiple ACK (AMQP: every delivery up to ``delivery_tag``) settles the
        pending ack:auto deliveries it covers too."""
        if multiple and self.pending:
            self.pending = [tag for tag in self.pending if tag > delivery_tag]

    def client_nacked(self, delivery_tag: int, multiple: bool) -> list[int]:
        """The client's multiple NACK would requeue the ack:auto deliveries it covers, which the
        client already has: returns those to ack, each on its own, before the nack."""
        if not (multiple and self.pending):
            return []
        first = [tag for tag in self.pending if tag < delivery_tag]
        self.pending = [tag for tag in self.pending if tag > delivery_tag]
        return first
