"""The STOMP core and its driver with no broker, as websockets' tests drive its protocol.

:class:`Harness` stands where the transport stands: it sends the client's frames as bytes
through the real session (``session/session.py``: its one frame loop, its plan runners) and the
real parser into the real core, and reads back the bytes the session writes. Behind the
session, :class:`FakeChannel` answers as RabbitMQ would when all goes well; a test scripts a
refusal or a pause of any kind of plan (``refuse``, ``pause``), RabbitMQ's events
(:meth:`Harness.deliver`, ``confirm``, ``return_``, ``cancel``), and the clock, which moves only
when the test says so (:meth:`Harness.advance`). Every plan the core made, and every publish,
ack and nack the session sent, is in ``plans``, in order.

The harness runs its own event loop and lets it run until nothing moves after each step, so the
tests read as plain sequences.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from stomp_bridge.amqp.delivery import Delivery
from stomp_bridge.core import plans as p
from stomp_bridge.core.machine import StompCore
from stomp_bridge.core.rules import Rules
from stomp_bridge.metrics import Counters
from stomp_bridge.protocol.dialect import Dialect
from stomp_bridge.protocol.errors import BrokerError, StompError
from stomp_bridge.protocol.frames import Frame, encode_frame, joined, serialize
from stomp_bridge.protocol.parser import FrameParser, Limits
from stomp_bridge.session import session as driver


def refusal(text: str = "NOT_FOUND - no queue 'q' in vhost '/'") -> BrokerError:
    """What the AMQP side raises when RabbitMQ closes the channel with ``text``."""
    return BrokerError(text.split(" - ", 1)[0].lower(), text)


class FakeChannel:
    """``amqp.abc.SessionChannel`` with RabbitMQ behind it always saying yes (the harness's
    ``gets``, ``peeks``, ``missing`` and ``streams`` say what it finds)."""

    def __init__(self, harness: Harness) -> None:
        self.h = harness
        self.events: Any = None
        self.broker_version_text = ".".join(map(str, harness.broker))
        self.dialect = Dialect(harness.broker)
        self.frame_max = harness.frame_max
        self.consumed: list[tuple] = []  # (queue, consumer tag, no_ack, auto_ack) consumed on this channel
        self.closed = False

    # events and publishing
    def listen(self, events: Any, writable: Any = None) -> None:
        self.events = events

    @property
    def publisher_ready(self) -> bool:
        return self.h.publisher_open

    async def open_publisher(self) -> None:
        h = self.h
        if not h.publisher_open:
            h.opening = asyncio.get_running_loop().create_future()
            await h.opening

    def publish(self, exchange: str, routing_key: str, properties: dict, body: bytes,
                mandatory: bool = False) -> None:
        plan = p.Publish(exchange, routing_key, properties, body, mandatory)
        h = self.h
        h.plans.append(plan)
        h.seq += 1
        h.published[h.seq] = (plan, h.step if h.reading_step is None else h.reading_step)

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        self.h.plans.append(p.Ack(delivery_tag, multiple))

    def nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        self.h.plans.append(p.Nack(delivery_tag, multiple, requeue))

    async def flush(self) -> None:
        pass

    def flush_nowait(self) -> None:
        pass

    def try_flush(self) -> bool:
        return True

    # RPCs
    async def declare_queue(self, name: str, *, durable: bool = False, exclusive: bool = False,
                            auto_delete: bool = False, arguments: Any = None) -> str:
        if not name:
            self.h.names += 1
            name = f"amq.gen-{self.h.names}"
        return name

    async def bind(self, queue: str, exchange: str, routing_key: str, arguments: Any = None) -> None:
        pass

    async def declare_exchange(self, exchange: str, kind: str, arguments: Any = None) -> None:
        pass

    async def delete_queue(self, queue: str) -> None:
        pass

    async def consume(self, queue: str, consumer_tag: str, *, no_ack: bool, prefetch: int = 0,
                      arguments: Any = None, stream_auto: bool = False, auto_ack: bool = False) -> None:
        self.consumed.append((queue, consumer_tag, no_ack, auto_ack))

    async def open_sibling(self, client_name: str) -> FakeChannel:
        sibling = FakeChannel(self.h)
        self.h.siblings.append(sibling)
        return sibling

    @property
    def login_key(self) -> tuple[Any, ...]:
        return ("guest", "digest", "/")

    async def cancel(self, consumer_tag: str) -> None:
        pass

    async def get(self, queue: str) -> Delivery | None:
        found = self.h.gets.get(queue)
        return Delivery(*found.pop(0)) if found else None

    async def end_browse(self) -> None:
        pass

    async def peek(self, queue: str) -> tuple[dict[str, Any], bytes] | None:
        return self.h.peeks.get(queue)

    async def discard_queue(self, queue: str) -> None:
        pass

    async def queue_exists(self, queue: str) -> bool:
        return queue not in self.h.missing

    async def is_stream(self, queue: str, exact: bool = False) -> bool:
        return queue in self.h.streams

    async def update_secret(self, secret: str) -> None:
        pass

    def release_exclusive(self, queue: str) -> None:
        pass

    async def close(self) -> None:
        self.closed = True


class _Handle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTimers:
    """``session.Timers`` on the harness's clock: timers and sleeps come due in ``advance``."""

    def __init__(self, harness: Harness) -> None:
        self.h = harness
        self.due: list[tuple[float, int, Callable[[], None], _Handle]] = []
        self.made = 0

    def call_later(self, delay: float, callback: Callable[[str], None], name: str) -> Any:
        handle = _Handle()
        self.made += 1
        self.due.append((self.h.now + delay, self.made, lambda: callback(name), handle))
        return handle

    def sleep(self, seconds: float) -> Any:
        future = asyncio.get_running_loop().create_future()
        self.made += 1
        self.due.append((self.h.now + seconds, self.made, lambda: future.done() or future.set_result(None), _Handle()))
        return future

    def next_due(self, end: float) -> tuple[float, Callable[[], None]] | None:
        ready = sorted(entry for entry in self.due if entry[0] <= end and not entry[3].cancelled)
        if not ready:
            return None
        entry = ready[0]
        self.due.remove(entry)
        return entry[0], entry[2]


class Harness:
    """One STOMP connection's session and core, and a fake RabbitMQ behind them."""

    def __init__(self, rules: Rules | None = None, *, peer: str | None = "127.0.0.1",
                 broker: tuple[int, ...] = (4, 3, 6), hub: Any = None, loop: asyncio.AbstractEventLoop | None = None,
                 **changes: Any) -> None:
        if rules is None:
            rules = Rules(**changes)
        self.broker = broker  # the RabbitMQ version the login reports (its Dialect)
        self.now = 1000.0  # both clocks, in seconds
        self.counters = Counters()
        self.frame_max = 131072  # what RabbitMQ's tune says, as the login reports it
        self.closes = 0
        # every plan the core made and publish/ack/nack sent since the connection was accepted
        self.plans: list[Any] = []
        self.seq = 0  # publishes so far: the confirm numbers
        self.names = 0  # server-named queues so far
        self.refuse: dict[type, deque[StompError]] = {}  # the next plans of a type fail with these
        self.pause: set[type] = set()  # plans of these types wait for resume()
        self.paused: list[tuple[Any, asyncio.Future[Any]]] = []
        self.gets: dict[str, list[tuple]] = {}  # what basic.get finds, by queue
        self.peeks: dict[str, tuple[dict, bytes]] = {}  # retained messages, by retained queue
        self.missing: set[str] = set()  # queues QueueExists says are gone
        self.streams: set[str] = set()  # queues IsStream says are streams
        self.writable = True  # the client's socket takes more
        self.publisher_open = True  # the session's publishing channel is open (open_publisher())
        self.opening: asyncio.Future[None] | None = None
        self.step = 0  # which client frame or event the test is at (publishes are marked with it)
        self.reading_step: int | None = None  # the step of the frame the session handles now
        self.published: dict[int, tuple[Any, int]] = {}  # publish number -> (Publish, step)
        self.written: list[bytes] = []
        self.parser = FrameParser(Limits(max_frame_size=1 << 30, max_headers=10_000, max_header_length=1 << 20))
        # Consumer tags consuming now on the session's channel, as RabbitMQ keeps them: a Consume
        # of one of these is what RabbitMQ answers by closing the whole connection (530), so
        # every test fails on it.
        self.consuming: set[str] = set()
        self.loop = loop or asyncio.new_event_loop()  # sessions sharing a hub share a loop
        self._own_loop = loop is None
        self.siblings: list[FakeChannel] = []  # channels opened beside the session's (a fan-out group's)
        self.backlog = 0  # bytes the client has not taken (a fan-out subscriber's)
        self.timers = FakeTimers(self)
        self.channel = FakeChannel(self)
        self.core = StompCore(
            rules, self.counters, peer=peer, peer_name="test", clock=lambda: self.now,
            wall=lambda: self.now, new_session_id=lambda: "session-test",
        )
        runners = {kind: self._runner(kind, run) for kind, run in driver.RUNNERS.items()}
        self.session = driver.Session(
            rules, None, self.counters, write=self.written.extend, close_transport=self._closed,
            open_timeout=10.0, writable=lambda: self.writable, wait_writable=self._wait_writable, peer=peer,
            peer_name="test", timers=self.timers, open_channel=self._open_channel, core=self.core, runners=runners,
            hub=hub, backlog=lambda: self.backlog,
        )
        self._chunks: deque[tuple[bytes, int]] = deque()
        self._room: asyncio.Future[None] | None = None
        self._reading: asyncio.Task[None] | None = None
        self._call(self.session.start)
        self.started, self.plans = self.plans, []  # the connect timeout's timer
    def _closed(self) -> None:
        self.closes += 1

    # -- running the loop ------------------------------------------------------------------

    def _call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` in the harness's loop, then the loop until nothing moves."""
        async def call() -> Any:
            return fn()
        result = self.loop.run_until_complete(call())
        self.pump()
        return result

    def pump(self) -> None:
        """Let the loop run until nothing moves: what the last step started is all done, or
        waits (for a paused plan, the clock, the client's room)."""
        idle = 0
        last = None
        while idle < 3:
            self.loop.run_until_complete(asyncio.sleep(0))
            now = (len(self.plans), len(self.written), len(self._chunks), self.core.state, len(self.paused),
                   len(self.timers.due))
            idle = idle + 1 if now == last else 0
            last = now

    def close(self) -> None:
        """The connection ends (the transport's close): the session releases what it holds."""
        self._call(lambda: None)
        self.loop.run_until_complete(self.session.close())
        self.pump()
        if self._own_loop:
            self.loop.close()

    # -- the client ----------------------------------------------------------------------

    def frame(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        """A client frame, as bytes (with the headers given: a ``content-length`` only if one is
        given, or the body holds a NUL); the session reads it once it has handled the frames
        before (and their jobs: a paused one holds it back, as the driver reads no more)."""
        headers = dict(headers or {})
        if "content-length" in headers or b"\0" in body:
            self.send(serialize(Frame(command, headers, body), "1.2"))
        else:
            self.send(encode_frame(command, headers, b"", "1.2")[:-1] + body + b"\0")

    def send(self, data: bytes) -> None:
        """Client bytes, as they came: as a TCP link hands them over, once logged in in the pass
        that read them (``Session.receive_now``) while nothing is left to handle, else to the
        session's loop (``Session.receive``) after what came before."""
        idle = self._reading is None or self._reading.done()
        if idle and self.session.logged_in and self.writable:
            self.reading_step = self.step
            try:
                done = self._call(lambda: self.session.receive_now(data))
            finally:
                self.reading_step = None
            if done is None:  # not taken (a frame begun earlier): the loop reads it
                self._chunks.append((data, self.step))
                self._reading = self.loop.create_task(self._read())
            elif not done:
                self._chunks.append((b"", self.step))  # what receive_now began
                self._reading = self.loop.create_task(self._read())
        else:
            self._chunks.append((data, self.step))
            if idle:
                self._reading = self.loop.create_task(self._read())
        self.pump()

    async def _read(self) -> None:
        while self._chunks:
            data, step = self._chunks.popleft()
            self.reading_step = step
            try:
                await self.session.receive(data)
            finally:
                self.reading_step = None

    def connect(self, **headers: str) -> Frame:
        """CONNECT (1.2 unless told), and the CONNECTED frame."""
        self.frame("CONNECT", {"accept-version": "1.2", "host": "/", **headers})
        frames = self.frames()
        assert [f.command for f in frames] == ["CONNECTED"], frames
        return frames[0]

    def frames(self) -> list[Frame]:
        """The frames the session wrote since the last call, parsed as a client would."""
        self.parser.feed(joined(self.written))
        self.written.clear()
        out = []
        while (frame := self.parser.next_frame()) is not None:
            out.append(frame)
        return out

    def commands(self) -> list[str]:
        return [f.command for f in self.frames()]

    def room(self) -> None:
        """The client took what it was sent: the socket has room again."""
        self.writable = True
        if self._room is not None and not self._room.done():
            self._room.set_result(None)
        self.pump()

    def open_publisher(self) -> None:
        """RabbitMQ opened the session's publishing channel."""
        self.publisher_open = True
        if self.opening is not None and not self.opening.done():
            self.opening.set_result(None)
        self.pump()

    async def _wait_writable(self) -> None:
        if not self.writable:
            self._room = asyncio.get_running_loop().create_future()
            await self._room

    # -- RabbitMQ ------------------------------------------------------------------------

    def _event(self, name: str, *args: Any) -> None:
        """One event from the channel, then the end of its read (as the AMQP reader reports)."""
        events = self.channel.events
        self._call(lambda: (getattr(events, name)(*args), events.batch_ended()))

    def confirm(self, tag: int, multiple: bool = False, nack: bool = False) -> None:
        self._event("confirmed", tag, multiple, nack)

    def return_(self, exchange: str, routing_key: str, text: str = "NO_ROUTE") -> None:
        self._event("returned", 312, text, exchange, routing_key)

    def deliver(self, tag: str, delivery_tag: int, body: bytes = b"x", exchange: str = "", routing_key: str = "q",
                redelivered: bool = False, **properties: Any) -> None:
        props = {"headers": {}, **properties}
        self._event("delivered", Delivery(tag, delivery_tag, redelivered, exchange, routing_key, props, body))

    def cancel(self, tag: str) -> None:
        """RabbitMQ cancelled consumer ``tag`` (its queue went, say)."""
        self.consuming.discard(tag)
        self._call(lambda: self.channel.events.cancelled(tag))

    def amqp_closed(self, error: StompError) -> None:
        self._call(lambda: self.channel.events.closed(error))

    def advance(self, seconds: float) -> None:
        """Time passes: timers and sleeps due by then fire, in order."""
        end = self.now + seconds
        while (due := self.timers.next_due(end)) is not None:
            at, fire = due
            self.now = max(self.now, at)
            self._call(fire)
        self.now = end

    def resume(self, result: Any = None, error: StompError | None = None) -> None:
        """The oldest paused plan gets its outcome."""
        _, future = self.paused.pop(0)
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
        self.pump()

    def of(self, kind: type) -> list[Any]:
        return [plan for plan in self.plans if type(plan) is kind]

    # -- answering plans ----------------------------------------------------------------

    async def _open_channel(self, pool: Any, user: str, passcode: str, vhost: str, **options: Any) -> FakeChannel:
        self.channel.frame_max = self.frame_max
        return self.channel

    def _runner(self, kind: type, run: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """The session's runner of ``kind``, recording each plan, refusing or pausing it when the
        test says so."""
        async def runner(session: Any, plan: Any) -> Any:
            self.plans.append(plan)
            queued = self.refuse.get(kind)
            if queued:
                raise queued.popleft()
            if kind is p.Consume:
                assert plan.consumer_tag not in self.consuming, (
                    f"consumer tag {plan.consumer_tag!r} is consuming already: RabbitMQ closes the connection (530)")
                self.consuming.add(plan.consumer_tag)
            elif kind is p.Cancel:
                self.consuming.discard(plan.consumer_tag)
            if kind in self.pause:
                future = asyncio.get_running_loop().create_future()
                self.paused.append((plan, future))
                return await future
            return await run(session, plan)
        return runner
