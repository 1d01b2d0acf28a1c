"""One STOMP connection's driver: it runs what the STOMP core decides, and decides nothing.

The transport (``transport/connection.py``) hands the client's bytes to :meth:`Session.receive`
(or, in the event loop's pass that read them, :meth:`Session.receive_now`) and gets its frames
written back through ``write``; it talks to the session only. The core
(``stomp_bridge.core``) takes the bytes and RabbitMQ's answers and gives frames and plans; this
module feeds it, handles the client's frames a fair share at a time (one loop for every link),
runs each kind of plan in one place (:data:`RUNNERS`) against the session's AMQP channel
(``amqp/abc.py``'s ``SessionChannel``), its timers and its tasks, feeds each outcome back, and
writes what the core queued for the client: it owns the wake-ups. RabbitMQ's events
(deliveries, confirms, returns, cancels, a closed channel) reach the core from the AMQP reader
through the session's event hooks (``_listen``); at the end of each AMQP read the acks and
jobs they made are run here, and the frames written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from stomp_bridge.amqp.abc import SessionChannel
from stomp_bridge.amqp.channel import AmqpSession
from stomp_bridge.amqp.errors import broker_error
from stomp_bridge.amqp.pool import AmqpPool
from stomp_bridge.core import login
from stomp_bridge.core.context import Job, first_step
from stomp_bridge.core.machine import FAIR_SHARE, StompCore
from stomp_bridge.core.plans import (
    Ack, Bind, Cancel, Consume, Declare, DeclareExchange, DeleteQueue, Disconnect, EndBrowse, Flush, Get, IsStream,
    JoinFanout, LeaveFanout,
    OpenAmqp, Opened, OpenPublisher, Peek, Publish, QueueExists, ReceiptsSent, ReleaseExclusive, ResolveSecurity,
    SetTimer, Settled, Sleep, UpdateSecret, WaitWritable,
)
from stomp_bridge.core.rules import Rules
from stomp_bridge.core.state import CLOSED, LOGIN
from stomp_bridge.logs import log_frame
from stomp_bridge.metrics import Counters
from stomp_bridge.protocol.errors import AccessRefused, BrokerError, StompError
from stomp_bridge.protocol.frames import Frame
from stomp_bridge.session.login_turn import login_turn

if TYPE_CHECKING:
    from stomp_bridge.protocol.headers import SharedMessage
    from stomp_bridge.session.fanout import FanoutHub, Group
    from stomp_bridge.session.throttle import LoginThrottle
    from stomp_bridge.session.tracing import Tracing
    from stomp_bridge.swaptacular.certlogin import AmqpLogin, ConnectSecurity
    from stomp_bridge.tls import PeerCertificate

log = logging.getLogger(__name__)


class Timers(Protocol):
    """Time as the session waits on it: the event loop's, or a test's clock."""

    def call_later(self, delay: float, callback: Callable[[str], None], name: str) -> asyncio.TimerHandle: ...
    def sleep(self, seconds: float) -> Awaitable[None]: ...


class LoopTimers:
    """The event loop's time."""

    __slots__ = ()

    def call_later(self, delay: float, callback: Callable[[str], None], name: str) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay, callback, name)

    def sleep(self, seconds: float) -> Awaitable[None]:
        return asyncio.sleep(seconds)


LOOP_TIMERS = LoopTimers()
YIELD: Any = object()  # receive_now handled a fair share: receive() gives the event loop back first


class Session:
    """Runs one connection's :class:`~stomp_bridge.core.machine.StompCore`."""

    __slots__ = (
        "core", "amqp", "pool", "counters", "_open_timeout", "_write", "_writable", "_wait_writable",
        "_on_open", "_security", "_peer_cert", "_throttle", "_tasks", "_timers", "_tracer", "_pending",
        "_clock", "_open_channel", "_share", "_runners", "_hub", "_backlog", "_shared",
    )

    def __init__(
        self,
        rules: Rules,
        pool: AmqpPool | None,
        counters: Counters,
        *,
        write: Callable[[list[bytes]], None],
        close_transport: Callable[[], None],
        open_timeout: float,
        writable: Callable[[], bool] = lambda: True,
        wait_writable: Callable[[], Awaitable[None]] | None = None,
        on_open: Callable[[], None] | None = None,
        peer: str | None = None,
        peer_name: str = "",
        credentials: tuple[str | None, str | None] | None = None,
        peer_cert: PeerCertificate | None = None,
        security: ConnectSecurity | None = None,
        throttle: LoginThrottle | None = None,
        tracing: Tracing | None = None,
        timers: Timers = LOOP_TIMERS,
        open_channel: Callable[..., Awaitable[SessionChannel]] = AmqpSession.open,
        core: StompCore | None = None,
        runners: dict[type, Callable[[Session, Any], Awaitable[Any]]] | None = None,
        hub: FanoutHub | None = None,
        backlog: Callable[[], int] = lambda: 0,
    ) -> None:
        """``timers``, ``open_channel``, ``core`` and ``runners`` (the table plans run through,
        :data:`RUNNERS`) are where a test stands in for time, RabbitMQ and the plans' outcomes
        (``testkit.core.Harness``)."""
        trace = None
        if log.isEnabledFor(logging.DEBUG):
            def trace(direction: str, frame: Frame) -> None:
                log_frame(log, direction, self.core.peer_name, frame.command, frame.headers, frame.body)
        self.core = core or StompCore(rules, counters, peer=peer, peer_name=peer_name, credentials=credentials,
                                      trace=trace)
        self.core.on_close = close_transport
        self.core.on_open = self._opened
        self.core.wakeup = self._wakeup
        self.amqp: SessionChannel | None = None
        self.pool = pool
        self.counters = counters
        self._open_timeout = open_timeout
        self._write = write  # the transport's: frames to the client's socket
        self._writable = writable  # the client's socket takes more now
        self._wait_writable = wait_writable  # until it does
        self._on_open = on_open  # the transport's: logged in (heart-beats start)
        self._security = security
        self._peer_cert = peer_cert
        self._throttle = throttle  # failed logins per (client address, user): password guessing
        # the core's own jobs, cancelled by close(); made with the first (an empty set is 216 bytes)
        self._tasks: set[asyncio.Task[None]] | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}  # the core's timers by name (a token's expiry …)
        self._clock = timers
        self._open_channel = open_channel
        self._pending: Any = None  # receive_now's job for receive() to run (or YIELD)
        self._share = 0  # frames receive() handled since it last gave the event loop back
        self._runners = RUNNERS if runners is None else runners
        self._hub = hub  # the bridge's shared subscriptions (edge_fanout), or None
        self._backlog = backlog  # bytes written to the client's socket that it has not taken
        self._shared: dict[str, Group] | None = None  # this session's shared subscriptions' groups
        # OpenTelemetry spans (the tracing setting): the core tells the tracer what happens
        self._tracer = None if tracing is None else tracing.connection(self.core.peer_name)
        self.core.observer = self._tracer

    # -- what the transport asks ------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.core.state is CLOSED

    @property
    def logged_in(self) -> bool:
        return self.core.state is not LOGIN

    @property
    def heartbeat(self) -> tuple[int, int]:
        """(the bridge sends every, the bridge expects every) ms, as CONNECT agreed."""
        return self.core.heartbeat

    def start(self) -> None:
        """The connection was accepted: the core's first work (its connect timeout)."""
        job = self.core.started()
        if job is not None:
            self._start(self._background(job))

    def channel(self) -> SessionChannel:
        if self.amqp is None:
            raise BrokerError("Not connected", "The AMQP connection is gone; reconnect.")
        return self.amqp

    # -- the client's bytes: one loop for every link ------------------------------------------

    def receive_now(self, data: bytes | memoryview) -> bool | None:
        """Bytes that arrived while the transport waited for some: their frames handled, their
        publishes and answers written, in this pass of the event loop. False if anything is left
        to wait for (a frame's job, the publishing channel, a full socket, more frames than a fair
        share): then :meth:`receive` carries on from here. None: not taken (the session ended, or
        a frame begun earlier, whose rest the loop gathers: :meth:`receive` takes them)."""
        core = self.core
        parser = core.parser
        if parser.buffered or core.state is CLOSED:  # frame_begun() and closed, without two calls
            return None
        parser.feed(data)  # core.receive_data's one line, without its call
        budget = FAIR_SHARE - self._share
        if budget <= 0:  # a fair share was handled just before, maybe in this very pass
            self._pending = YIELD
            return False
        before = core.frames_handled
        result = core.handle_frames(budget)
        self._share = core.frames_handled - before  # a chunk more in this pass gets the rest
        if result is not True and result is not False:
            self._pending = result
            return False
        if core.to_amqp and not self._to_amqp():
            return False  # a publish waits for its channel: receive() opens it
        if result is False:
            if self.try_flush():
                self.flush_out()
                return True
            return False
        self._pending = YIELD  # a fair share handled in this pass: receive() lets the others in first
        return False

    async def receive(self, data: bytes | memoryview = b"") -> None:
        """The client's bytes (b"": those ``receive_now`` began), handled: frames in order, each
        frame's job run before the next frame, a fair share of frames at a time (then the other
        clients' turn, or the client takes what it was sent first); then the AMQP batch and the
        answers written."""
        core = self.core
        if data:
            core.receive_data(data)
        job, self._pending = self._pending, None
        if job is YIELD:
            self.flush_out()
            await asyncio.sleep(0)
            self._share = 0
            job = None
        # frames handled since the event loop was last given back (by this call, or one just before
        # it that found more bytes waiting: the transport's read returns them without a pass)
        since = core.frames_handled - self._share
        while True:
            if job is not None:
                await self.run(job)
            if core.to_amqp:
                await self._to_amqp_opening()
            result = core.handle_frames(max(1, FAIR_SHARE - (core.frames_handled - since)))
            if core.to_amqp:
                await self._to_amqp_opening()
            if result is False:
                break
            if result is True:  # others' turn, or the client's to take its frames
                await self.flush()
                self.flush_out()
                if self._writable():
                    await asyncio.sleep(0)
                elif self._wait_writable is not None:  # read no more until the client takes them
                    self.counters.reads_held += 1
                    await self._wait_writable()
                since = core.frames_handled
                job = None
            else:
                job = result
        await self.flush()
        self.flush_out()
        # A fast-path chunk may still come in this pass of the event loop: it gets what is left
        self._share = core.frames_handled - since

    def flush_out(self) -> None:
        """Write what the core queued for the client."""
        if self.core.out:
            self._write(self.core.data_to_send())

    def _wakeup(self) -> None:  # a bound method: a closure was ~190 bytes of every connection
        """The core queued a frame for the client outside the loops that write (a timer's, a
        task's): written in the event loop's next pass, with whatever joins it."""
        asyncio.get_running_loop().call_soon(self.flush_out)

    # -- shared subscriptions (session/fanout.py) ------------------------------------------------

    @property
    def frame_end(self) -> bytes:
        return self.core.eol

    def fanned_out(self, consumer_tag: str, shared: SharedMessage) -> int:
        """A shared delivery for one of this session's subscriptions: the bytes queued (written at
        the end of the group's read: ``flush_out``)."""
        return self.core.fanned_out(consumer_tag, shared)

    def joined(self, group: Group, consumer_tag: str) -> None:
        if self._shared is None:
            self._shared = {}
        self._shared[consumer_tag] = group

    def backlog(self) -> int:
        return self._backlog()

    def cancelled(self, consumer_tag: str) -> None:
        """RabbitMQ cancelled the consumer of subscription ``consumer_tag`` (its own, or its group's)."""
        self._cancelled(consumer_tag)
        self.flush_out()

    def send_heartbeat(self) -> None:
        """A heart-beat EOL, written now (in order behind any frame queued)."""
        self.core.emit(b"\n")
        self.flush_out()

    def _opened(self) -> None:
        if self._on_open is not None:
            self._on_open()

    # -- what a TCP link reads itself (transport.TcpLink's receiver) --------------------------------

    def feed(self, data: bytes | memoryview) -> None:
        """Bytes taken now, handled by the next :meth:`receive`."""
        self.core.receive_data(data)

    def receiving_body(self) -> bool:
        return self.core.parser.large_body is not None

    def body_window(self) -> memoryview | None:
        return self.core.parser.body_window()

    def body_filled(self, nbytes: int) -> None:
        self.core.parser.body_filled(nbytes)

    def frame_begun(self) -> bool:
        """Part of a frame is received (its next bytes are not to be handled on their own)."""
        return self.core.parser.buffered

    # -- running plans ---------------------------------------------------------------------------

    async def run(self, job: Job) -> None:
        """Run ``job``'s plans in order, each outcome back to it, until it is done."""
        core = self.core
        if core.to_amqp:
            await self._to_amqp_opening()
        plan = job.first
        while plan is not None:
            try:
                result = await self._runners[type(plan)](self, plan)
            except StompError as exc:
                plan = job.advance(None, exc)
            else:
                plan = job.advance(result)
            if core.to_amqp:  # in the client's order, before the job's next plan
                await self._to_amqp_opening()
        if core.jobs:
            self._after_event()

    async def flush(self) -> None:
        """Write what the AMQP channel has batched (after each chunk of client bytes)."""
        if self.amqp is not None and not self.closed:
            try:
                await self.amqp.flush()
            except Exception as exc:  # noqa: BLE001
                raise broker_error(exc) from exc

    def try_flush(self) -> bool:
        """``flush`` when it would not wait; False: ``flush`` must be awaited."""
        amqp = self.amqp
        return amqp is None or self.closed or amqp.try_flush()

    def fail(self, error: StompError) -> None:
        """The transport's ERRORs (heart-beat timeout, shutdown …): the core writes them."""
        self.core.fail(error)
        self.flush_out()

    @property
    def receipts_pending(self) -> int:
        return self.core.receipts_pending

    async def receipts_sent(self) -> None:
        """Returns once every held RECEIPT went out, or the session ended without them."""
        if self.closed:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.core.ledger.when_empty(lambda: done.done() or done.set_result(None))
        await done

    # -- RabbitMQ's events (amqp.abc.ChannelEvents) -----------------------------------------

    def _listen(self, amqp: SessionChannel) -> None:
        """The channel's events: deliveries and confirms straight to the core's inputs (one call
        per delivery fewer), the rest here, where what they made is run and written."""
        events = _Events()
        core = self.core
        events.delivered, events.confirmed, events.returned = core.delivered, core.confirmed, core.returned
        events.cancelled, events.closed, events.batch_ended = self._cancelled, self._amqp_closed, self._batch_ended
        amqp.listen(events, self._wait_writable)

    def _cancelled(self, consumer_tag: str) -> None:
        self.core.cancelled(consumer_tag)
        self._after_event()

    def _amqp_closed(self, error: StompError) -> None:
        self.core.amqp_closed(error)
        self.flush_out()

    def _batch_ended(self) -> None:
        core = self.core
        if core.to_amqp or core.jobs:
            self._after_event()
        self.flush_out()

    def _to_amqp(self) -> bool:
        """Send the publishes, acks and nacks the core queued, in order, into the channel's batch;
        False if a publish waits for the publishing channel to open (``_to_amqp_opening``)."""
        core = self.core
        out = core.to_amqp
        amqp = self.amqp
        if amqp is None or core.state is CLOSED:
            out.clear()
            return True
        index = 0
        for plan in out:
            kind = type(plan)
            if kind is Publish:
                if not amqp.publisher_ready:
                    del out[:index]
                    return False
                amqp.publish(*plan)
            elif kind is Ack:
                amqp.ack(*plan)
            else:
                amqp.nack(*plan)
            index += 1
        out.clear()
        return True

    async def _to_amqp_opening(self) -> None:
        while not self._to_amqp():
            await self.channel().open_publisher()

    def _after_event(self) -> None:
        """After RabbitMQ's events: send the acks they made and start the jobs of the core's own
        (a window, a resubscribe)."""
        core = self.core
        if core.to_amqp:
            if self._to_amqp():
                if self.amqp is not None:
                    self.amqp.flush_nowait()
            else:  # a publish (a stream offset stored) waits for the publishing channel
                self._start(self._background(first_step(core, _open_publisher(), None)))
        if core.jobs:
            jobs, core.jobs = core.jobs, []
            for job in jobs:
                self._start(self._background(job))

    def _start(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        tasks = self._tasks
        if tasks is None:
            tasks = self._tasks = set()
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _background(self, job: Job | None) -> None:
        if job is None:
            return
        try:
            await self.run(job)
            await self.flush()
        except StompError as exc:
            self.core.fail(exc)
        finally:
            job.cancel()
            self.flush_out()

    def _timer_fired(self, name: str) -> None:
        self._timers.pop(name, None)
        self.core.timer_fired(name)
        self._after_event()
        self.flush_out()

    # -- the end -----------------------------------------------------------------------------

    def ended(self) -> tuple[str, dict[str, Any]]:
        """Why the connection closed, and what the transport's log line says of it."""
        core = self.core
        reason = core.close_reason or "client closed"
        return reason, {"peer": core.peer_name, "user": core.user, "vhost": core.vhost, "reason": reason,
                        "detail": core.close_detail}

    async def close(self) -> None:
        """Release everything the connection holds; idempotent."""
        self.core.close()
        shared, self._shared = self._shared, None
        for tag, group in (shared or {}).items():
            group.leave(self, tag)
        self.core.parser.clear()  # a frame in progress, freed now rather than by the garbage collector
        if self._tracer is not None:
            self._tracer.close()
        for task in list(self._tasks or ()):
            task.cancel()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        await self._close_amqp()

    async def _close_amqp(self) -> None:
        amqp, self.amqp = self.amqp, None
        if amqp is None:
            return
        # Deleted here even on a connection of its own: RabbitMQ deletes a closed connection's
        # exclusive queues after its close-ok, so the client, already gone, could reconnect and
        # find the name still taken (RESOURCE_LOCKED).
        for queue in self.core.queues_to_delete():
            try:
                await amqp.delete_queue(queue)
            except Exception:  # noqa: BLE001 - a dead channel: the queue goes with its connection
                break
        for queue in self.core.discard_on_close:
            await amqp.discard_queue(queue)
        await amqp.close()

    # -- the plans ---------------------------------------------------------------------------

    async def _open_amqp(self, plan: OpenAmqp) -> Opened:
        """The AMQP session for the login, in the login's turn with the throttle (login_turn.py:
        it may wait, or refuse at once)."""
        user, passcode, vhost, cert_login = plan.user, plan.passcode, plan.vhost, plan.cert_login
        try:
            async with login_turn(self._throttle, self.core.peer, user, passcode, self.counters):
                try:
                    amqp = await self._open_session_channel(user, passcode, vhost, cert_login)
                except AccessRefused as exc:
                    if plan.fallback_vhost is None or not login.vhost_refused(exc):
                        raise
                    vhost = plan.fallback_vhost  # opt-in: an unknown host goes to the default vhost
                    amqp = await self._open_session_channel(user, passcode, vhost, cert_login)
        except BrokerError:
            self.counters.amqp_connection_failures += 1
            raise
        self.amqp = amqp
        self._listen(amqp)
        return Opened(vhost, amqp.broker_version_text, amqp.dialect, amqp.frame_max)

    async def _open_session_channel(
        self, user: str, passcode: str, vhost: str, cert_login: AmqpLogin | None,
    ) -> SessionChannel:
        security = self._security
        return await self._open_channel(
            self.pool, user, passcode, vhost,
            client_name=f"stomp-bridge {self.core.peer_name} ({user})",
            timeout=self._open_timeout,
            # amqps://: verify RabbitMQ; EXTERNAL: also the certificate signed for this user
            context=cert_login.context if cert_login is not None else (
                security.amqp_context if security is not None else None),
            external=cert_login is not None and cert_login.external,
        )

    async def _resolve_security(self, plan: ResolveSecurity) -> tuple[Any, Any]:
        if self._security is None:
            return None, None
        return await self._security.resolve(self._peer_cert, plan.headers, plan.version)

    async def _set_timer(self, plan: SetTimer) -> None:
        timer = self._timers.pop(plan.name, None)
        if timer is not None:
            timer.cancel()
        if plan.delay is not None:
            self._timers[plan.name] = self._clock.call_later(plan.delay, self._timer_fired, plan.name)

    async def _settled(self, plan: Settled) -> bool:
        await self.channel().flush()  # the publish must reach RabbitMQ to be confirmed
        verdict: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.core.when_settled(plan.seq, lambda ok: verdict.done() or verdict.set_result(ok))
        return await verdict

    async def _wait(self, plan: WaitWritable) -> None:
        self.flush_out()
        if self._wait_writable is not None:
            await self._wait_writable()

    async def _disconnect(self, plan: Disconnect) -> None:
        await self._close_amqp()

    async def _sleep(self, plan: Sleep) -> None:
        await self._clock.sleep(plan.seconds)

    async def _flush(self, plan: Flush) -> None:
        await self.flush()

    async def _receipts(self, plan: ReceiptsSent) -> None:
        self.flush_out()
        await self.receipts_sent()

    async def _open_publisher(self, plan: OpenPublisher) -> None:
        await self._to_amqp_opening()

    async def _join_fanout(self, plan: JoinFanout) -> None:
        if self._hub is None:
            raise BrokerError("Processing error", "Processing error", private="a shared subscription without a hub")
        await self._hub.join(self, plan.consumer_tag, plan.exchange, plan.routing_key, plan.arguments)

    async def _leave_fanout(self, plan: LeaveFanout) -> None:
        group = self._shared.pop(plan.consumer_tag, None) if self._shared is not None else None
        if group is not None:
            group.leave(self, plan.consumer_tag)


def _open_publisher() -> Any:
    """A job of the session's own: its publishing channel, for a publish that waits for it."""
    yield OpenPublisher()


class _Events:
    """Where the AMQP channel sends its events (``amqp.abc.ChannelEvents``)."""

    __slots__ = ("delivered", "confirmed", "returned", "cancelled", "closed", "batch_ended")


# -- one runner per kind of plan, each calling the typed channel (amqp.abc.SessionChannel) --------


async def _declare(session: Session, plan: Declare) -> str:
    d = plan.declare
    return await session.channel().declare_queue(
        d.queue, durable=d.durable, exclusive=d.exclusive, auto_delete=d.auto_delete, arguments=d.arguments,
    )


async def _bind(session: Session, plan: Bind) -> None:
    await session.channel().bind(plan.queue, plan.exchange, plan.routing_key, plan.arguments)


async def _declare_exchange(session: Session, plan: DeclareExchange) -> None:
    await session.channel().declare_exchange(plan.exchange, plan.kind, plan.arguments)


async def _consume(session: Session, plan: Consume) -> None:
    await session.channel().consume(
        plan.queue, plan.consumer_tag, no_ack=plan.no_ack, prefetch=plan.prefetch, arguments=plan.arguments,
        stream_auto=plan.stream_auto,
    )


async def _cancel(session: Session, plan: Cancel) -> None:
    await session.channel().cancel(plan.consumer_tag)


async def _delete_queue(session: Session, plan: DeleteQueue) -> None:
    await session.channel().delete_queue(plan.queue)


async def _release(session: Session, plan: ReleaseExclusive) -> None:
    session.channel().release_exclusive(plan.queue)


async def _get(session: Session, plan: Get) -> Any:
    return await session.channel().get(plan.queue)


async def _end_browse(session: Session, plan: EndBrowse) -> None:
    await session.channel().end_browse()


async def _peek(session: Session, plan: Peek) -> Any:
    return await session.channel().peek(plan.queue)


async def _queue_exists(session: Session, plan: QueueExists) -> bool:
    return await session.channel().queue_exists(plan.queue)


async def _is_stream(session: Session, plan: IsStream) -> bool:
    return await session.channel().is_stream(plan.queue, plan.exact)


async def _update_secret(session: Session, plan: UpdateSecret) -> None:
    await session.channel().update_secret(plan.secret)


RUNNERS: dict[type, Callable[[Session, Any], Awaitable[Any]]] = {
    Declare: _declare,
    Bind: _bind,
    DeclareExchange: _declare_exchange,
    Consume: _consume,
    Cancel: _cancel,
    DeleteQueue: _delete_queue,
    ReleaseExclusive: _release,
    Get: _get,
    EndBrowse: _end_browse,
    Peek: _peek,
    QueueExists: _queue_exists,
    IsStream: _is_stream,
    UpdateSecret: _update_secret,
    Settled: Session._settled,
    ResolveSecurity: Session._resolve_security,
    OpenAmqp: Session._open_amqp,
    OpenPublisher: Session._open_publisher,
    JoinFanout: Session._join_fanout,
    LeaveFanout: Session._leave_fanout,
    SetTimer: Session._set_timer,
    Sleep: Session._sleep,
    WaitWritable: Session._wait,
    Flush: Session._flush,
    ReceiptsSent: Session._receipts,
    Disconnect: Session._disconnect,
}
