"""One STOMP connection's driver: it runs what the STOMP core decides, and decides nothing.

The core (``stomp_bridge.core``) takes frames and RabbitMQ's answers and gives frames and
plans; this module runs each kind of plan in one place (:data:`RUNNERS`) against the
session's AMQP channel (``amqp/abc.py``'s ``SessionChannel``), its timer and its tasks, and
feeds each outcome back. RabbitMQ's events (deliveries, confirms, returns, cancels, a closed
channel) go straight to the core; at the end of each AMQP read the acks and jobs they made are
run here. The transport (``transport/connection.py``) reads the client's bytes, writes the
core's frames and ends the connection when the core says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from stomp_bridge.amqp.abc import SessionChannel
from stomp_bridge.amqp.channel import AmqpSession
from stomp_bridge.amqp.errors import broker_error
from stomp_bridge.amqp.pool import AmqpPool
from stomp_bridge.core import login
from stomp_bridge.core.context import CLOSED, Job
from stomp_bridge.core.machine import StompCore
from stomp_bridge.core.plans import (
    Ack, Bind, Cancel, Consume, Declare, DeclareExchange, DeleteQueue, Disconnect, EndBrowse, Flush, Get, IsStream,
    OpenAmqp, Opened,
    Peek, Publish, QueueExists, ReceiptsSent, ReleaseExclusive, ResolveSecurity, SetTimer, Settled, Sleep,
    UpdateSecret, WaitWritable,
)
from stomp_bridge.core.rules import Rules
from stomp_bridge.logs import log_frame
from stomp_bridge.metrics import Counters
from stomp_bridge.protocol.errors import AccessRefused, BrokerError, StompError
from stomp_bridge.protocol.frames import Frame
from stomp_bridge.session.login_turn import login_turn

if TYPE_CHECKING:
    from stomp_bridge.session.throttle import LoginThrottle
    from stomp_bridge.session.tracing import Tracing
    from stomp_bridge.swaptacular.certlogin import AmqpLogin, ConnectSecurity
    from stomp_bridge.tls import PeerCertificate

log = logging.getLogger(__name__)


class Session:
    """Runs one connection's :class:`~stomp_bridge.core.machine.StompCore`."""

    __slots__ = (
        "core", "amqp", "pool", "counters", "_open_timeout", "_close_transport", "_flush_writes", "_wait_writable",
        "_security", "_peer_cert", "_throttle", "_tasks", "_timers", "_tracer",
    )

    def __init__(
        self,
        rules: Rules,
        pool: AmqpPool,
        counters: Counters,
        close_transport: Callable[[], None],
        *,
        open_timeout: float,
        peer: str | None = None,
        peer_name: str = "",
        flush_writes: Callable[[], None] | None = None,
        wait_writable: Callable[[], Awaitable[None]] | None = None,
        credentials: tuple[str | None, str | None] | None = None,
        peer_cert: PeerCertificate | None = None,
        security: ConnectSecurity | None = None,
        throttle: LoginThrottle | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        trace = None
        if log.isEnabledFor(logging.DEBUG):
            def trace(direction: str, frame: Frame) -> None:
                log_frame(log, direction, self.core.peer_name, frame.command, frame.headers, frame.body)
        self.core = StompCore(rules, counters, peer=peer, peer_name=peer_name, credentials=credentials, trace=trace)
        self.core.on_close = close_transport
        self.amqp: SessionChannel | None = None
        self.pool = pool
        self.counters = counters
        self._open_timeout = open_timeout
        self._close_transport = close_transport
        self._flush_writes = flush_writes
        self._wait_writable = wait_writable
        self._security = security
        self._peer_cert = peer_cert
        self._throttle = throttle  # failed logins per (client address, user): password guessing
        # the core's own jobs, cancelled by close(); made with the first (an empty set is 216 bytes)
        self._tasks: set[asyncio.Task[None]] | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}  # the core's timers by name (a token's expiry …)
        # OpenTelemetry spans (the tracing setting): the core tells the tracer what happens
        self._tracer = None if tracing is None else tracing.connection(self.core.peer_name)
        self.core.observer = self._tracer

    @property
    def closed(self) -> bool:
        return self.core.closed

    def channel(self) -> SessionChannel:
        if self.amqp is None:
            raise BrokerError("Not connected", "The AMQP connection is gone; reconnect.")
        return self.amqp

    # -- the client's frames ---------------------------------------------------------------

    def handle(self, frame: Frame) -> Job | None:
        """One client frame: None once it is done, else what the caller must ``run`` before the
        next frame (the frame's job, or the opening of the publishing channel)."""
        core = self.core
        job = core.frame_received(frame)
        if core.to_amqp and not self._to_amqp() and job is None:
            return OPEN_PUBLISHER
        return job

    async def run(self, job: Job) -> None:
        """Run ``job``'s plans in order, each outcome back to it, until it is done."""
        core = self.core
        if core.to_amqp:
            await self._to_amqp_opening()
        if job is OPEN_PUBLISHER:
            return
        plan = job.first
        while plan is not None:
            try:
                result = await RUNNERS[type(plan)](self, plan)
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
        events = _Events()
        core = self.core
        events.delivered, events.confirmed, events.returned = core.delivered, core.confirmed, core.returned
        events.cancelled, events.closed, events.batch_ended = self._cancelled, core.amqp_closed, self._batch_ended
        amqp.listen(events, self._wait_writable)

    def _cancelled(self, consumer_tag: str) -> None:
        self.core.cancelled(consumer_tag)
        self._after_event()

    def _batch_ended(self) -> None:
        core = self.core
        if core.to_amqp or core.jobs:
            self._after_event()
        if self._flush_writes is not None:
            self._flush_writes()

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
                self._start(self._publish_later())
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

    async def _publish_later(self) -> None:
        await self._to_amqp_opening()
        await self.flush()

    async def _background(self, job: Job) -> None:
        try:
            await self.run(job)
        finally:
            job.cancel()

    def _timer_fired(self, name: str) -> None:
        self._timers.pop(name, None)
        self.core.timer_fired(name)
        self._after_event()

    # -- the end -----------------------------------------------------------------------------

    async def close(self) -> None:
        """Release everything the connection holds; idempotent."""
        self.core.close()
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
                    amqp = await self._open_channel(user, passcode, vhost, cert_login)
                except AccessRefused as exc:
                    if plan.fallback_vhost is None or not login.vhost_refused(exc):
                        raise
                    vhost = plan.fallback_vhost  # opt-in: an unknown host goes to the default vhost
                    amqp = await self._open_channel(user, passcode, vhost, cert_login)
        except BrokerError:
            self.counters.amqp_connection_failures += 1
            raise
        self.amqp = amqp
        self._listen(amqp)
        return Opened(vhost, amqp.broker_version_text, amqp.dialect, amqp.frame_max)

    async def _open_channel(self, user: str, passcode: str, vhost: str, cert_login: AmqpLogin | None) -> SessionChannel:
        security = self._security
        return await AmqpSession.open(
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
            self._timers[plan.name] = asyncio.get_running_loop().call_later(plan.delay, self._timer_fired, plan.name)

    async def _settled(self, plan: Settled) -> bool:
        await self.channel().flush()  # the publish must reach RabbitMQ to be confirmed
        verdict: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.core.when_settled(plan.seq, lambda ok: verdict.done() or verdict.set_result(ok))
        return await verdict

    async def _wait(self, plan: WaitWritable) -> None:
        if self._wait_writable is not None:
            await self._wait_writable()

    async def _disconnect(self, plan: Disconnect) -> None:
        await self._close_amqp()


OPEN_PUBLISHER: Any = object()  # handle()'s answer when a publish waits for its channel to open


class _Events:
    """Where the AMQP channel sends its events (``amqp.abc.ChannelEvents``): straight to the core,
    with no call in between, or to the driver where it has work of its own."""

    __slots__ = ("delivered", "confirmed", "returned", "cancelled", "closed", "batch_ended")


def _channel(method: str) -> Callable[..., Any]:
    """A runner that hands the plan's fields to the AMQP channel's ``method``."""
    async def run(session: Session, plan: Any) -> Any:
        return await getattr(session.channel(), method)(*plan)
    return run


async def _declare(session: Session, plan: Declare) -> str:
    d = plan.declare
    return await session.channel().declare_queue(
        d.queue, durable=d.durable, exclusive=d.exclusive, auto_delete=d.auto_delete, arguments=d.arguments,
    )


async def _consume(session: Session, plan: Consume) -> None:
    await session.channel().consume(
        plan.queue, plan.consumer_tag, no_ack=plan.no_ack, prefetch=plan.prefetch, arguments=plan.arguments,
        stream_auto=plan.stream_auto,
    )


async def _release(session: Session, plan: ReleaseExclusive) -> None:
    session.channel().release_exclusive(plan.queue)


async def _sleep(session: Session, plan: Sleep) -> None:
    await asyncio.sleep(plan.seconds)


async def _flush(session: Session, plan: Any) -> None:
    await session.flush()


async def _receipts(session: Session, plan: ReceiptsSent) -> None:
    await session.receipts_sent()


RUNNERS: dict[type, Callable[[Session, Any], Awaitable[Any]]] = {
    Declare: _declare,
    Bind: _channel("bind"),
    DeclareExchange: _channel("declare_exchange"),
    Consume: _consume,
    Cancel: _channel("cancel"),
    DeleteQueue: _channel("delete_queue"),
    ReleaseExclusive: _release,
    Get: _channel("get"),
    EndBrowse: _channel("end_browse"),
    Peek: _channel("peek"),
    QueueExists: _channel("queue_exists"),
    IsStream: _channel("is_stream"),
    UpdateSecret: _channel("update_secret"),
    Settled: Session._settled,
    ResolveSecurity: Session._resolve_security,
    OpenAmqp: Session._open_amqp,
    SetTimer: Session._set_timer,
    Sleep: _sleep,
    WaitWritable: Session._wait,
    Flush: _flush,
    ReceiptsSent: _receipts,
    Disconnect: Session._disconnect,
}
