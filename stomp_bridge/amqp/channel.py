"""The AMQP 0-9-1 side of one STOMP connection: a lean channel on a shared connection.

:class:`AmqpSession` is the one implementation of ``abc.SessionChannel``. aiormq owns the
sockets, the handshake, heart-beats and the writer task (``connect.py`` logs in, ``pool.py``
shares connections between STOMP sessions with the same credentials, one channel per
session); everything on the session's channel is the bridge's own, with no lock, future or
task per message:

* RPCs (declare, bind, consume, qos …) go through a lean channel (``lean.py``);
* publishes and acks are encoded by ``codec.py`` into a batch that ``writer.py`` writes once
  per chunk of client bytes; publisher confirms are numbered here and settled by range in
  the session, not by futures;
* deliveries, confirms and returns are cut out of the socket's bytes by ``reader.py`` and
  handed synchronously to the session's :class:`~stomp_bridge.amqp.abc.ChannelEvents`.

A resource alarm makes RabbitMQ stop reading every connection that publishes, ACKs included,
so a session publishes on a channel of its own on a publishing connection (``pool.py``,
``open_publisher``, at its first SEND), and the connection that carries its consumers and
ACKs, and other sessions', is never blocked: consumers keep going through an alarm, as under
the plugin. ``amqp_separate_publishers = false`` puts publishes back on the session's one
channel (fewer connections; a blocked publisher then holds back the sessions that share its
connection).

Backpressure without pausing a shared socket: every consumer acknowledges. A client-ack
subscription is bounded by its prefetch-count or its window (see the session); an
``ack:auto`` one by the bridge's own acks, given while the client keeps up (``autoacker.py``).

A closed channel is never reopened. RabbitMQ closes a channel on a channel error (404, 403,
406 …), and that ends the STOMP session with the reason, as the plugin's session ends with its
channel; the ERRORs after which the plugin keeps a connection open (an unknown destination, a
bad header …) are refused by the bridge before any AMQP command, so the channel stays usable.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import aiormq.exceptions as amqp_exc
from pamqp import commands as spec

from stomp_bridge.amqp import sidechannel
from stomp_bridge.amqp.abc import ChannelEvents
from stomp_bridge.amqp.autoack import AutoAck
from stomp_bridge.amqp.autoacker import AutoAcker
from stomp_bridge.amqp.codec import encode_ack, encode_nack, publish_frames
from stomp_bridge.amqp.delivery import Delivery
from stomp_bridge.amqp.errors import broker_error, describe
from stomp_bridge.amqp.handshake import Handshake
from stomp_bridge.amqp.lean import GetResult, LeanChannel
from stomp_bridge.amqp.pool import AmqpPool, SharedConnection, closing_reason
from stomp_bridge.amqp.writer import ChannelWriter
from stomp_bridge.protocol.dialect import Dialect, version_tuple
from stomp_bridge.protocol.errors import AccessRefused, BrokerError, ProtocolError, StompError

log = logging.getLogger(__name__)

__all__ = ["AmqpSession"]


class AmqpSession:
    """The channel that serves one STOMP connection, on a shared AMQP connection."""

    __slots__ = (
        "pool", "shared", "channel", "broker_version_text", "dialect", "frame_max",
        "_main", "_out", "_number", "_credentials", "_separate", "_opening_publisher", "_events", "_closing",
        "_prefetch", "_auto", "_acker", "_rpcs", "_lost", "_consuming", "_browser", "_browsed",
    )

    def __init__(
        self, pool: AmqpPool, shared: SharedConnection, channel: LeanChannel,
        credentials: tuple[Any, ...] | None = None,
    ) -> None:
        self.pool = pool
        self.shared = shared
        self.channel = channel
        version = shared.connection.server_properties.get("version", "0")
        self.broker_version_text = version.decode() if isinstance(version, bytes) else str(version)
        self.dialect = Dialect(version_tuple(self.broker_version_text))  # the plugin rules of this version
        self._number = channel.number
        # Where publishes go: this channel's writer, or (separate publishers, see the module
        # docstring) a channel on a publishing connection, opened by ``open_publisher``.
        self._credentials = credentials  # for the connections it opens later (a publishing one, a declare's)
        self._separate = pool.separate_publishers and credentials is not None
        self._opening_publisher: asyncio.Lock | None = None
        self._events: ChannelEvents | None = None  # until listen(): events are dropped
        self._closing = False
        self._rpcs = 0  # RPCs awaiting RabbitMQ's answer: a channel error reaches their caller
        self._lost: BaseException | None = None  # a close that an RPC in flight will report
        self._prefetch = 0  # the per-consumer prefetch the channel applies to new consumers
        self._consuming: asyncio.Lock | None = None  # a qos and its consume, one pair at a time (made with the first)
        self._browser: Handshake | None = None  # a browse's connection of its own (``get``)
        self._browsed: list[int] = []  # the delivery tags a browse got (on the browser, or on this channel)
        self._main = self._out = ChannelWriter(shared, channel)
        self.frame_max = self._main.frame_max
        self._auto = AutoAck(pool.auto_ack_window)  # the ack:auto consumers, acked by the bridge
        self._acker = AutoAcker(self._auto, self._main)
        hooks = channel.hooks  # every frame of the channel's number comes through them
        hooks.on_delivery, hooks.on_confirm = self._deliver, self._confirm
        hooks.on_batch_end, hooks.on_return = self._batch_end, self._returned
        channel.on_cancel = self._cancelled
        shared.sessions[channel.number] = self
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
        try:
            channel = await asyncio.wait_for(LeanChannel.open_on(shared), timeout)
        except BaseException as exc:
            await pool.release(shared)
            if isinstance(exc, (amqp_exc.AMQPError, ConnectionError, RuntimeError, asyncio.TimeoutError)):
                raise broker_error(exc) from exc
            raise
        return cls(pool, shared, channel, (login, passcode, vhost, client_name, context, external, timeout))

    async def open_sibling(self, client_name: str) -> AmqpSession:
        """Another channel of this session's login, through the pool as a session's own (a shared
        subscription's consumer: ``session/fanout.py``)."""
        if self._credentials is None:
            raise BrokerError("Not connected", "The AMQP connection is gone; reconnect.")
        login, passcode, vhost, _, context, external, timeout = self._credentials
        return await AmqpSession.open(self.pool, login, passcode, vhost, client_name=client_name, timeout=timeout,
                                      context=context, external=external)

    @property
    def login_key(self) -> tuple[Any, ...]:
        """Who this session logged in as (user, passcode digest, vhost, how): sessions with the
        same may share what RabbitMQ decided for one of them alike."""
        return self.shared.key[:-1]

    def listen(self, events: ChannelEvents, writable: Callable[[], Awaitable[None]] | None = None) -> None:
        """Send every event to ``events`` from now on; ``writable`` gates the ack:auto acks
        (``abc.SessionChannel.listen``)."""
        self._events = events
        self._acker.gate(writable)

    # -- the per-message paths ------------------------------------------------------------

    @property
    def publisher_ready(self) -> bool:
        """``publish`` may be called: this channel publishes, or its publishing channel is open."""
        return not self._separate or self._out is not self._main

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
                channel = await asyncio.wait_for(LeanChannel.open_on(shared), timeout)
            except BaseException as exc:
                await pool.release(shared)
                if not isinstance(exc, Exception):
                    raise  # cancelled
                self._publish_here(exc)
                return
            hooks = channel.hooks
            hooks.on_confirm, hooks.on_batch_end, hooks.on_return = self._confirm, self._batch_end, self._returned
            self._out = ChannelWriter(shared, channel)
            channel.closing.add_done_callback(self._on_publisher_closing)
            if self._closing:  # the session ended while the channel opened
                await self._close_publisher()

    def _publish_here(self, exc: BaseException) -> None:
        """No publishing connection: this session publishes on its own channel from now on."""
        self._separate = False
        log.info("publishing on the session's channel: RabbitMQ opened no publishing connection",
                 extra={"reason": describe(exc)})

    def publish(
        self, exchange: str, routing_key: str, properties: dict[str, Any], body: bytes, mandatory: bool = False
    ) -> None:
        """Queue a publish in the current batch. RabbitMQ numbers the confirms 1, 2, 3 … on the
        publishing channel, as the core numbers its publishes (``Context.publish``).

        ``properties`` are pamqp-named basic properties (see ``codec.py``). ``mandatory``: a
        message no queue takes comes back as ``events.returned``, before its confirm. With
        separate publishers, ``open_publisher`` first (``publisher_ready``).
        """
        out = self._out
        if publish_frames(out.batch, out.number, exchange, routing_key, properties, body, out.frame_max, mandatory):
            out.vectored = True
        out.publishes = True

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        if multiple:  # RabbitMQ counts our pending ack:auto deliveries in this multiple ack
            self._auto.client_acked(delivery_tag, multiple)
        self._main.batch.append(encode_ack(self._number, delivery_tag, multiple))

    def nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        batch = self._main.batch
        if multiple:  # it would requeue ack:auto deliveries the client already has: ack them first
            for tag in self._auto.client_nacked(delivery_tag, multiple):
                batch.append(encode_ack(self._number, tag, False))
        batch.append(encode_nack(self._number, delivery_tag, multiple, requeue))

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

    def try_flush(self) -> bool:
        main = self._main
        if main.batch and not main.try_flush():
            return False
        out = self._out
        return out is main or not out.batch or out.try_flush()

    def flush_nowait(self) -> None:
        """Hand this channel's batch to the writer from a synchronous callback (the ack of a
        delivery a selector dropped); if aiormq's write queue is full, it goes with the next flush."""
        self._main.flush_nowait()

    # -- what RabbitMQ tells the session (from the bulk reader, synchronously) -------------

    def _deliver(self, delivery: Delivery) -> None:
        events = self._events
        if events is not None:
            events.delivered(delivery)
        auto = self._auto
        if delivery[0] in auto.consumers:  # AutoAck.delivered, inlined (per delivery; held to it: test_amqp_channel)
            auto.pending.append(delivery[1])

    def _returned(self, reply_code: int, reply_text: str, exchange: str, routing_key: str) -> None:
        if self._events is not None:
            self._events.returned(reply_code, reply_text, exchange, routing_key)

    def _confirm(self, delivery_tag: int, multiple: bool, nack: bool) -> None:
        if self._events is not None:
            self._events.confirmed(delivery_tag, multiple, nack)

    def _cancelled(self, consumer_tag: str) -> None:
        if self._events is not None:
            self._events.cancelled(consumer_tag)

    def _batch_end(self) -> None:
        if self._events is not None:
            self._events.batch_ended()
        self._acker.settle(False)

    def _on_channel_closing(self, future: asyncio.Future) -> None:
        self.connection_lost(closing_reason(future, "channel closed"))

    def connection_lost(self, exc: BaseException) -> None:
        """The channel or the whole connection closed: the session ends with the reason. While
        an RPC waits, the reason reaches the session through that RPC instead, where the
        command that caused it is known (the plugin words some refusals differently)."""
        self.channel.connection_lost(exc)  # what waits on the channel fails with the reason
        self._end(exc)

    def _on_publisher_closing(self, future: asyncio.Future) -> None:
        """RabbitMQ closed the publishing channel (a publish it refused: 404, 403 …) or its
        connection: the session ends with the reason, as if its one channel had closed."""
        self._end(closing_reason(future, "channel closed"))

    def _end(self, exc: BaseException) -> None:
        events = self._events
        if self._closing or events is None:
            return
        self._closing = self._acker.stopped = True
        if self._rpcs:
            self._lost = exc
        else:
            events.closed(broker_error(exc))

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
        if lost is not None and self._events is not None:
            self._events.closed(broker_error(lost))  # the channel closed after this RPC's answer
        return result

    # -- exclusive queues belong to the session, not to the shared connection ------------

    def _check_exclusive(self, queue: str) -> None:
        """Another session's exclusive queue on this connection: RabbitMQ's own answer to another
        connection, which is what the plugin's client gets (a channel error: the session ends)."""
        owner = self.shared.exclusive.get(queue)
        if owner is not None and owner != self._number:
            raise BrokerError(
                "resource_locked",
                f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}' in vhost "
                f"'{self.shared.key[2]}'. It could be originally declared on another connection or the "
                "exclusive property value does not match that of the original declaration.",
            )

    def release_exclusive(self, queue: str) -> None:
        """``queue`` is gone (deleted, or an auto-delete queue lost its last consumer)."""
        if self.shared.exclusive.get(queue) == self._number:
            del self.shared.exclusive[queue]

    async def declare_queue(
        self, name: str, *, durable: bool = False, exclusive: bool = False, auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> str:
        if name:
            self._check_exclusive(name)
        if not (durable or exclusive or self.shared.transient_queues):
            queue = await self._declare_apart(name, auto_delete, arguments)
            if queue is not None:
                return queue
        ok = await self._rpc(
            self.channel.queue_declare, name, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
            arguments=arguments or None,
        )
        if exclusive:
            self.shared.exclusive[ok.queue] = self._number
        return ok.queue

    async def _declare_apart(self, name: str, auto_delete: bool, arguments: dict[str, Any] | None) -> str | None:
        """A transient non-exclusive queue, declared on a connection of its own: where RabbitMQ
        denies them it closes the connection the declare came on (``pool.py``, Isolation). None:
        declare it on this channel after all (no declarer, in tests; or RabbitMQ would not open
        another connection for this user, e.g. at its connection limit: as before, and as the
        plugin, which needs none, where RabbitMQ permits such queues)."""
        declarer = self.pool.declarer
        if declarer is None or self._credentials is None:
            return None
        await self.flush()  # what the session sent before this declare reaches RabbitMQ first
        login, passcode, vhost, client_name, context, external, _ = self._credentials
        try:
            method = spec.Queue.Declare(queue=name, durable=False, exclusive=False, auto_delete=auto_delete,
                                        arguments=arguments or None)
            ok = await declarer(login, passcode, vhost, f"{client_name} declare", method,
                                context=context, external=external, near=self.shared.node)
        except ValueError as exc:  # pamqp refuses a name or value it cannot encode
            raise ProtocolError("Invalid header", f"RabbitMQ cannot be sent this value: {exc}") from exc
        except AccessRefused as exc:
            log.info("declaring a transient non-exclusive queue on the session's channel: RabbitMQ opened "
                     "no connection for it", extra={"reason": exc.private or exc.detail})
            return None
        self.shared.transient_queues = True
        return ok.queue

    async def bind(
        self, queue: str, exchange: str, routing_key: str, arguments: dict[str, Any] | None = None
    ) -> None:
        self._check_exclusive(queue)
        await self._rpc(self.channel.queue_bind, queue, exchange, routing_key=routing_key, arguments=arguments)

    async def declare_exchange(self, exchange: str, kind: str, arguments: dict[str, Any] | None = None) -> None:
        await self._rpc(self.channel.exchange_declare, exchange, exchange_type=kind, durable=True,
                        arguments=arguments or None)

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
        stream_auto: bool = False,
        auto_ack: bool = False,
    ) -> None:
        """Consume with ``prefetch`` (0: unlimited); an ack:auto (``no_ack``) consumer is acked
        by the bridge within ``auto_ack_window`` instead, unless ``auto_ack``: RabbitMQ
        acknowledges itself (a shared subscription's queue, whose subscribers keep up or are
        closed: ``session/fanout.py``).

        Except for a consume meant for a stream (``x-stream-…`` arguments) with no prefetch:
        RabbitMQ refuses that on a stream with a channel error, which the client must get as
        from the plugin (unless ``stream_auto``: a named stream subscription, acked by the bridge
        all the same). With a prefetch, a stream refuses an auto-ack consume with a connection
        error, which would end every session on the shared connection: the core refuses that
        one before (``core/streams.py``), and the consume takes manual acks. RabbitMQ's
        per-consumer qos applies to the consumers created after it, so qos and consume go
        together, one pair at a time (a session may add a consumer while it handles a frame).
        """
        self._check_exclusive(queue)
        bridge_acks = no_ack and not auto_ack and (stream_auto or prefetch > 0 or not (
            arguments and any(k.startswith("x-stream-") for k in arguments)))
        consuming = self._consuming
        if consuming is None:
            consuming = self._consuming = asyncio.Lock()
        async with consuming:
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
                    self.channel.basic_consume, queue, no_ack=no_ack and not bridge_acks, consumer_tag=consumer_tag,
                    arguments=arguments or None,
                )
            except BaseException:
                self._auto.discard_consumer(consumer_tag)
                raise

    async def cancel(self, consumer_tag: str) -> None:
        await self._rpc(self.channel.basic_cancel, consumer_tag)

    async def get(self, queue: str) -> Delivery | None:
        """basic.get without auto-ack (browsing), or None when the queue is empty; the
        delivery's consumer tag is empty. Until :meth:`end_browse` hands them all back.

        A stream refuses basic.get with a connection error, so the gets go on a connection of
        the login's own, opened at the first (``connect.open_apart``): RabbitMQ's refusal
        reaches only this session. On this channel only where that cannot be (no such
        connection in tests, or RabbitMQ refused to open one, at the user's connection limit:
        then a queue that is a stream is refused without a basic.get, ``sidechannel.is_stream``);
        or for a queue exclusive to this session, which no stream is and no other connection
        may read."""
        self._check_exclusive(queue)
        if self._browser is None and self.shared.exclusive.get(queue) != self._number:
            self._browser = await self._open_browser()
        browser = self._browser
        if browser is None:
            if self.shared.exclusive.get(queue) != self._number and await self.is_stream(queue):
                raise BrokerError("not_implemented", "NOT_IMPLEMENTED - basic.get not supported by stream queue")
            self._auto.individual = True  # a multiple ack of our own would take the browsed messages
            message = await self._rpc(self.channel.basic_get, queue, no_ack=False)
            if not isinstance(message, GetResult):
                return None
            got = _got(message)
        else:
            try:
                found = await asyncio.wait_for(browser.get(queue), self._credentials[6])  # type: ignore[index]
            except StompError:
                raise
            except (OSError, EOFError, asyncio.TimeoutError) as exc:
                raise broker_error(exc) from exc
            if found is None:
                return None
            got = Delivery("", *found)
        self._browsed.append(got.delivery_tag)
        return got

    async def _open_browser(self) -> Handshake | None:
        apart = self.pool.apart
        if apart is None or self._credentials is None:
            return None
        await self.flush()  # what the session sent before (a SEND to the queue …) reaches RabbitMQ first
        login, passcode, vhost, client_name, context, external, _ = self._credentials
        try:
            return await apart(login, passcode, vhost, f"{client_name} browse", context=context, external=external,
                               near=self.shared.node)
        except AccessRefused as exc:
            log.info("browsing on the session's channel: RabbitMQ opened no connection for it",
                     extra={"reason": exc.private or exc.detail})
            return None

    async def end_browse(self) -> None:
        """Hand back every message the browse got, in order (requeued: flagged redelivered)."""
        browser, self._browser = self._browser, None
        got, self._browsed = self._browsed, []
        if browser is not None:
            if got:
                browser.nack_all(got[-1])
            await browser.finish("browsed")
        elif got:
            for tag in got:  # one by one: the channel may hold the client's own deliveries too
                self.nack(tag, False, True)
            await self.flush()

    async def peek(self, queue: str) -> tuple[dict[str, Any], bytes] | None:
        """The first message of ``queue`` left in place, or None if it is empty or missing (on a
        side channel: a 404 must not close the session's)."""
        self._check_exclusive(queue)
        await self.flush()
        return await sidechannel.peek(self.shared, queue)

    async def discard_queue(self, queue: str) -> None:
        """Delete ``queue`` on a channel of its own, whatever becomes of it: after a failed
        SUBSCRIBE, whose error closed the session's channel (the plugin's maybe_clean_up_queue)."""
        await sidechannel.discard(self.shared, queue)
        self.release_exclusive(queue)

    async def queue_exists(self, queue: str) -> bool:
        """Whether ``queue`` exists now (a passive declare, on a side channel)."""
        return await sidechannel.queue_exists(self.shared, queue)

    async def is_stream(self, queue: str, exact: bool = False) -> bool:
        """``sidechannel.is_stream``; a queue that holds messages is no stream, unless ``exact``:
        then a basic.get on a connection of the login's own tells (a stream refuses it there
        with a connection error that ends only that connection; another queue's message taken
        goes back, flagged redelivered)."""
        self._check_exclusive(queue)
        await self.flush()  # in the session's order: a declare it sent before comes first
        answer = await sidechannel.is_stream(self.shared, queue)
        if answer is not None:
            return answer
        if not exact or self.pool.apart is None or self._credentials is None:
            return False
        login, passcode, vhost, client_name, context, external, timeout = self._credentials
        probe = await self.pool.apart(login, passcode, vhost, f"{client_name} is-stream", context=context,
                                      external=external, near=self.shared.node)
        try:
            await asyncio.wait_for(probe.get(queue), timeout)
        except BrokerError as exc:
            if "not supported by stream queue" in exc.detail:
                return True
            raise
        finally:
            await probe.finish("probed")
        return False

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

    # -- the end ----------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the channel (RabbitMQ requeues its unacked messages) and give back the slot."""
        if self._closing and self.shared.sessions.get(self._number) is not self:
            return
        self._closing = self._acker.stopped = True
        shared = self.shared
        browser, self._browser = self._browser, None
        if browser is not None:  # what a browse got goes back with its connection
            await browser.finish("session closed")
        try:
            await self.flush()
            await self._acker.close()
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        try:
            await asyncio.wait_for(self.channel.close(), timeout=5)
        except Exception as exc:  # noqa: BLE001 - the broker may already be gone
            log.debug("amqp channel close failed: %r", exc)
        finally:
            shared.hooks.channels.pop(self._number, None)
            mine = [queue for queue, owner in shared.exclusive.items() if owner == self._number]
            for queue in mine:  # deleted by the session, or gone with the channel's consumers
                del shared.exclusive[queue]
            if shared.sessions.get(self._number) is self:
                del shared.sessions[self._number]
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
            await asyncio.wait_for(channel.close(), timeout=5)
        except Exception as exc:  # noqa: BLE001 - the broker may already be gone
            log.debug("amqp publishing channel close failed: %r", exc)
        finally:
            shared = out.shared
            shared.hooks.channels.pop(out.number, None)
            if shared.sessions.get(out.number) is channel:
                del shared.sessions[out.number]
                await self.pool.release(shared)


def _got(message: GetResult) -> Delivery:
    frame: spec.Basic.GetOk = message.delivery
    return Delivery(
        "", frame.delivery_tag or 0, bool(frame.redelivered), frame.exchange or "", frame.routing_key or "",
        message.properties, message.body,
    )
