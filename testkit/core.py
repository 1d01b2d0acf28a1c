"""The STOMP core driven with no broker, as websockets' tests drive its protocol.

:class:`Harness` stands where the driver (``session/session.py``) stands: it feeds the core
client frames and RabbitMQ's events, answers each plan as RabbitMQ would when all goes well
(or as a test scripts it: a refusal, a pause), and parses the frames the core writes. A fake
clock moves only when the test says so.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from stomp_bridge.core import plans as p
from stomp_bridge.core.context import Job
from stomp_bridge.core.machine import StompCore
from stomp_bridge.core.rules import Rules
from stomp_bridge.metrics import Counters
from stomp_bridge.protocol.dialect import Dialect
from stomp_bridge.protocol.errors import BrokerError, StompError
from stomp_bridge.protocol.frames import Frame, joined
from stomp_bridge.protocol.parser import FrameParser, Limits




def refusal(text: str = "NOT_FOUND - no queue 'q' in vhost '/'") -> BrokerError:
    """What the AMQP side raises when RabbitMQ closes the channel with ``text``."""
    return BrokerError(text.split(" - ", 1)[0].lower(), text)


class Harness:
    """One STOMP connection's core and a fake RabbitMQ behind it."""

    def __init__(self, rules: Rules | None = None, *, peer: str | None = "127.0.0.1",
                 broker: tuple[int, ...] = (4, 3, 6), **changes: Any) -> None:
        if rules is None:
            rules = Rules(**changes)
        self.broker = broker  # the RabbitMQ version the login reports (its Dialect)
        self.now = 1000.0  # both clocks, in seconds
        self.counters = Counters()
        self.core = StompCore(
            rules, self.counters, peer=peer, peer_name="test", clock=lambda: self.now,
            wall=lambda: self.now, new_session_id=lambda: "session-test",
        )
        self.closes = 0
        self.core.on_close = self._closed
        self.frame_max = 131072  # what RabbitMQ's tune says, as the login reports it
        self.plans: list[Any] = []  # every plan the core made, in order
        self.seq = 0  # publishes so far: the confirm numbers
        self.names = 0  # server-named queues so far
        self.refuse: dict[type, deque[StompError]] = {}  # the next plans of a type fail with these
        self.pause: set[type] = set()  # plans of these types wait for resume()
        self.paused: list[tuple[Job, Any]] = []
        self.ready: list[tuple[Job, Any]] = []  # outcomes that came in while a job waited
        self.sleeping: list[tuple[float, Job]] = []
        self.gets: dict[str, list[tuple]] = {}  # what basic.get finds, by queue
        self.peeks: dict[str, tuple[dict, bytes]] = {}  # retained messages, by retained queue
        self.missing: set[str] = set()  # queues QueueExists says are gone
        self.streams: set[str] = set()  # queues IsStream says are streams
        self.unread: deque[tuple[Frame, int]] = deque()  # frames sent while an earlier one's job waits
        self.reading: Job | None = None  # that job
        self.reading_step: int | None = None  # the step its frame came at
        self.step = 0  # which client frame or event the test is at (publishes are marked with it)
        self.published: dict[int, tuple[Any, int]] = {}  # publish number -> (Publish, step)
        self.parser = FrameParser(Limits(max_frame_size=1 << 30, max_headers=10_000, max_header_length=1 << 20))
        # Consumer tags consuming now on the session's channel, as RabbitMQ keeps them: a Consume
        # of one of these is what RabbitMQ answers by closing the whole connection (530), so
        # every test fails on it.
        self.consuming: set[str] = set()

    def _closed(self) -> None:
        self.closes += 1

    # -- the client ----------------------------------------------------------------------

    def frame(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        """A client frame; it waits (as the driver reads no more) while an earlier frame's job waits."""
        self.unread.append((Frame(command, dict(headers or {}), body), self.step))
        self._read()
        self.pump()

    def _read(self) -> None:
        while self.unread and self.reading is None:
            frame, step = self.unread.popleft()
            job = self.core.frame_received(frame)
            self._outbox(step)
            if job is not None:
                self.reading, self.reading_step = job, step
                self._run(job, job.first)

    def connect(self, **headers: str) -> Frame:
        """CONNECT (1.2 unless told), and the CONNECTED frame."""
        self.frame("CONNECT", {"accept-version": "1.2", "host": "/", **headers})
        frames = self.frames()
        assert [f.command for f in frames] == ["CONNECTED"], frames
        return frames[0]

    def frames(self) -> list[Frame]:
        """The frames the core wrote since the last call, parsed as a client would."""
        self.parser.feed(joined(self.core.data_to_send()))
        out = []
        while (frame := self.parser.next_frame()) is not None:
            out.append(frame)
        return out

    def commands(self) -> list[str]:
        return [f.command for f in self.frames()]

    # -- RabbitMQ ------------------------------------------------------------------------

    def confirm(self, tag: int, multiple: bool = False, nack: bool = False) -> None:
        self.core.confirmed(tag, multiple, nack)
        self.pump()

    def return_(self, exchange: str, routing_key: str, text: str = "NO_ROUTE") -> None:
        self.core.returned(312, text, exchange, routing_key)
        self.pump()

    def deliver(self, tag: str, delivery_tag: int, body: bytes = b"x", **properties: Any) -> None:
        props = {"headers": {}, **properties}
        self.core.delivered((tag, delivery_tag, False, "", "q", props, body))
        self.pump()

    def cancel(self, tag: str) -> None:
        """RabbitMQ cancelled consumer ``tag`` (its queue went, say)."""
        self.consuming.discard(tag)
        self.core.cancelled(tag)
        self.pump()

    def advance(self, seconds: float) -> None:
        """Time passes: sleeping jobs due by then wake, in order."""
        end = self.now + seconds
        while True:
            due = sorted((t, i) for i, (t, _) in enumerate(self.sleeping) if t <= end)
            if not due:
                break
            at, index = due[0]
            _, job = self.sleeping.pop(index)
            self.now = max(self.now, at)
            self._run(job, job.advance(None))
            self.pump()
        self.now = end

    def resume(self, result: Any = None, error: StompError | None = None) -> None:
        """The oldest paused plan gets its outcome."""
        job, _ = self.paused.pop(0)
        self._run(job, job.advance(result, error))
        self.pump()

    def _outbox(self, made: int | None) -> None:
        """The publishes, acks and nacks the core queued, in order among its plans (as the driver
        sends them); each publish numbered and marked with the step of the frame that made it."""
        for plan in self.core.to_amqp:
            self.plans.append(plan)
            if type(plan) is p.Publish:
                self.seq += 1
                self.published[self.seq] = (plan, self.step if made is None else made)
        self.core.to_amqp.clear()

    def pump(self) -> None:
        """Run what the core started or unblocked: its own jobs, settled publishes."""
        self._outbox(None)
        while self.core.jobs or self.ready:
            jobs, self.core.jobs = self.core.jobs, []
            for job in jobs:
                self._run(job, job.first)
            ready, self.ready = self.ready, []
            for job, result in ready:
                self._run(job, job.advance(result))

    def of(self, kind: type) -> list[Any]:
        return [plan for plan in self.plans if type(plan) is kind]

    # -- answering plans ----------------------------------------------------------------

    def _run(self, job: Job, plan: Any) -> None:
        self._steps(job, plan)
        if job is self.reading and self.reading_done:
            self.reading = None
            self._read()

    def _steps(self, job: Job, plan: Any) -> None:
        self.reading_done = False
        made = self.reading_step if job is self.reading else None
        while plan is not None:
            self._outbox(made)
            self.plans.append(plan)
            kind = type(plan)
            queued = self.refuse.get(kind)
            if queued:
                plan = job.advance(None, queued.popleft())
                continue
            if kind in self.pause:
                self.paused.append((job, plan))
                return
            if kind is p.Sleep:
                self.sleeping.append((self.now + plan.seconds, job))
                return
            if kind is p.Consume:
                assert plan.consumer_tag not in self.consuming, (
                    f"consumer tag {plan.consumer_tag!r} is consuming already: RabbitMQ closes the connection (530)")
                self.consuming.add(plan.consumer_tag)
            elif kind is p.Cancel:
                self.consuming.discard(plan.consumer_tag)
            if kind is p.Settled:  # resumed by pump() once RabbitMQ's verdict is in
                self.core.when_settled(plan.seq, lambda ok, job=job: self.ready.append((job, ok)))
                return
            plan = job.advance(self._answer(plan))
        self._outbox(made)
        self.reading_done = True

    def _answer(self, plan: Any) -> Any:
        kind = type(plan)
        if kind is p.Declare:
            name = plan.declare.queue
            if not name:
                self.names += 1
                name = f"amq.gen-{self.names}"
            return name
        if kind is p.ResolveSecurity:
            return None, None
        if kind is p.OpenAmqp:
            return p.Opened(plan.vhost, ".".join(map(str, self.broker)), Dialect(self.broker), self.frame_max)
        if kind is p.Get:
            found = self.gets.get(plan.queue)
            return found.pop(0) if found else None
        if kind is p.Peek:
            return self.peeks.get(plan.queue)
        if kind is p.QueueExists:
            return plan.queue not in self.missing
        if kind is p.IsStream:
            return plan.queue in self.streams
        if kind is p.Disconnect:
            return None
        return None
