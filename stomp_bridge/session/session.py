"""One STOMP connection's logic: frames in, AMQP operations and frames out.

Every client command has one handler (``_on_<command>``); a reader finds where
a SUBSCRIBE becomes a queue declare in :meth:`Session._on_subscribe`.
Handlers raise :class:`StompError`; :meth:`Session.fail` is the one place that
turns an error into an ERROR frame and ends the connection.

Receipts: the AMQP channel is in confirm mode, so every publish gets a broker
confirm. A RECEIPT (for any frame) is held until every publish made before its
frame is confirmed, and receipts leave in frame order. One RECEIPT therefore
confirms everything the client sent before it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from stomp_bridge import __version__
from stomp_bridge.session import extensions as ext
from stomp_bridge.amqp.channel import AmqpSession, broker_error
from stomp_bridge.amqp.errors import token_expired
from stomp_bridge.amqp.delivery import Delivery
from stomp_bridge.amqp.connect import make_pool
from stomp_bridge.amqp.endpoints import Endpoints
from stomp_bridge.amqp.pool import AmqpPool
from stomp_bridge.logs import log_frame
from stomp_bridge.metrics import Counters
from stomp_bridge.session import login
from stomp_bridge.session.acks import Unacked, ack_target
from stomp_bridge.session.login_turn import login_turn
from stomp_bridge.session.receipts import NOTHING_HELD, ReceiptLedger
from stomp_bridge.session.subscriptions import Subscription, part_tag, window_tag
from stomp_bridge.session.transactions import Transactions, transaction_id
from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol.connect import SUPPORTED_VERSIONS, negotiate_version
from stomp_bridge.protocol import features
from stomp_bridge.protocol import headers as hdr
from stomp_bridge.protocol.errors import (
    AccessRefused, BrokerError, FrameRejected, InvalidDestination, ProtocolError, StompError, tp,
)
from stomp_bridge.protocol.frames import END, END_LF, Frame, receipt_frame, serialize
from stomp_bridge.protocol.parser import FrameParser, Limits

if TYPE_CHECKING:
    from stomp_bridge.swaptacular.certlogin import AmqpLogin, ConnectSecurity
    from stomp_bridge.settings import Settings
    from stomp_bridge.swaptacular.profile import PeerPolicy
    from stomp_bridge.session.throttle import LoginThrottle
    from stomp_bridge.tls import PeerCertificate

log = logging.getLogger(__name__)

RESUBSCRIBE_FIRST_DELAY = 0.5  # seconds before asking again for a cancelled subscription's queue
RESUBSCRIBE_MAX_DELAY = 30.0  # the backoff doubles up to this


class Session:
    """State of one STOMP connection; the transport feeds it frames.

    Its public methods and attributes (:class:`~.view.SessionView`) are what the
    extensions use; the underscore ones are its own.
    """

    # Slots, not an instance dictionary: about 1.4 kB less per connection (tracemalloc).
    __slots__ = (
        "_close_transport", "_credentials", "_debug", "_eol", "_flush_writes", "_tasks",
        "_token_subject", "_token_timer", "_wait_writable", "_write", "amqp", "client_id",
        "close_detail", "close_reason", "closed", "counters", "declared_queues", "exclusive_queues",
        "heartbeat", "ledger", "mandatory_sent", "parser", "peer", "peer_cert", "peer_name",
        "policy", "pool", "reply_queues", "rules", "security", "session_id", "settings",
        "subscriptions", "throttle", "transactions", "unacked", "user", "version", "vhost",
    )

    def __init__(
        self,
        settings: Settings,
        write: Callable[[bytes], None],
        close_transport: Callable[[], None],
        peer: str | None = None,
        peer_name: str = "",
        flush_writes: Callable[[], None] | None = None,
        wait_writable: Callable[[], Awaitable[None]] | None = None,
        counters: Counters | None = None,
        pool: AmqpPool | None = None,
        credentials: tuple[str | None, str | None] | None = None,
        peer_cert: PeerCertificate | None = None,
        security: ConnectSecurity | None = None,
        throttle: LoginThrottle | None = None,
    ) -> None:
        self.settings = settings
        self.throttle = throttle  # failed logins per (client address, user): password guessing
        # The bridge's pool of shared AMQP connections; a session made without a server
        # (tests) gets a pool of its own.
        self.pool = pool if pool is not None else make_pool(
            Endpoints(settings.amqp_url), heartbeat=settings.amqp_heartbeat, timeout=settings.amqp_connect_timeout,
            separate_publishers=settings.amqp_separate_publishers,
        )
        self.counters = counters if counters is not None else Counters()
        # The transport's side: where frames go, and how it closes, flushes and waits.
        self._write = write
        self._close_transport = close_transport
        self._flush_writes = flush_writes
        self._wait_writable = wait_writable
        self.peer = peer  # the client's IP address (loopback_users)
        self.peer_name = peer_name or peer or ""  # "ip:port", for logs and the AMQP connection name
        # Login and passcode the transport already established (web-stomp's use_http_auth):
        # CONNECT's login and passcode headers are then ignored, as the plugin's force_default_creds.
        self._credentials = credentials
        self._debug = log.isEnabledFor(logging.DEBUG)
        self._eol = END_LF if settings.trailing_lf else END  # what ends every frame we send
        # TLS: the verified client certificate, what the listener does with it, and the
        # Swaptacular per-peer rules once CONNECT has bound them (None: no checks).
        self.peer_cert = peer_cert
        self.security = security
        self.policy: PeerPolicy | None = None
        # Who logged in, and why the connection ended: for the log lines and metrics.
        self.user = ""
        self.vhost = ""
        self.close_reason = ""
        self.close_detail = ""
        self.version = "1.2"  # escaping for frames before negotiation
        self.session_id = ""
        self.parser = FrameParser(
            Limits(
                max_frame_size=settings.max_frame_size_before_login,
                max_headers=settings.max_headers,
                max_header_length=settings.max_header_length,
            )
        )
        self.amqp: AmqpSession | None = None
        self.closed = False
        self.heartbeat: tuple[int, int] = (0, 0)  # (server sends every, server expects every) ms
        self.subscriptions: dict[str, Subscription] = {}  # by consumer tag
        self.unacked = Unacked()  # what the client has to ACK, by delivery tag, in order
        # SEND and SUBSCRIBE rules; the broker version is known once logged in (_start)
        self.rules = dest.DestinationRules(settings.default_topic_exchange)
        self.declared_queues: set[str] = set()
        self.reply_queues: dict[str, str] = {}  # /temp-queue/<id> -> queue name
        self.transactions = Transactions(settings.max_transactions, settings.max_transaction_actions)
        self.client_id: str | None = None  # Artemis durable subscriptions
        # Exclusive queues belong to the AMQP connection, which other sessions may share:
        # close() deletes them, so they end with this STOMP connection as under the plugin.
        self.exclusive_queues: dict[str, bool] = {}  # name -> auto-delete
        self.ledger = ReceiptLedger(write, self.counters.confirm_latency.observe)
        # mandatory publishes not yet confirmed, in order: (seq, exchange, routing key, destination)
        # (created with the first one: an empty deque is ~600 bytes per idle connection)
        self.mandatory_sent: deque[tuple[int, str, str, str]] = NOTHING_HELD  # type: ignore[assignment]
        self._tasks: set[asyncio.Task[None]] = set()  # started here, cancelled by close()
        self._token_timer: asyncio.TimerHandle | None = None  # a JWT passcode's expiry
        self._token_subject: str | None = None  # a JWT passcode's sub: a new token must be its

    # -- entry points used by the transport --------------------------------------

    async def handle(self, frame: Frame) -> None:
        """Run one client frame. A fatal :class:`StompError` propagates (the transport ends the
        connection through :meth:`fail`); a non-fatal one is answered with its ERROR here and the
        connection carries on, as under the plugin (unless ``close_on_error``)."""
        if self.closed:
            return
        try:
            await self._dispatch(frame)
        except StompError as exc:
            self._answer(exc, frame)

    def _answer(self, exc: StompError, frame: Frame) -> None:
        """``frame`` failed: re-raise what ends the connection, else send its ERROR now."""
        if exc.receipt_id is None:
            exc.receipt_id = frame.headers.get("receipt")
        if exc.fatal or self.settings.close_on_error:
            raise exc
        self.fail(exc, close=False)

    async def _dispatch(self, frame: Frame) -> None:
        command = frame.command
        if self.amqp is None:
            if command in ("CONNECT", "STOMP"):
                await self._on_connect(frame, implicit=False)
                return
            if not self.settings.implicit_connect:
                raise FrameRejected("Illegal command", "You must log in using CONNECT first")
            await self._on_connect(Frame("CONNECT", {}), implicit=True)
        if self.version == "1.0":
            # rabbit_stomp_util:trim_headers: 1.0 header values lose leading blanks.
            frame.headers = {k: v.lstrip() for k, v in frame.headers.items()}
        handler = _HANDLERS.get(command)
        if handler is None:
            raise FrameRejected("Bad command", f"Could not interpret command {tp(command)}\n")
        await handler(self, frame)

    async def flush(self) -> None:
        """Called by the transport after each chunk of client bytes is handled."""
        if self.amqp is not None and not self.closed:
            try:
                await self.amqp.flush()
            except Exception as exc:  # noqa: BLE001
                raise broker_error(exc) from exc

    def fail(self, error: StompError, *, close: bool = True) -> None:
        """The one place an error becomes an ERROR frame; the connection then ends unless
        ``close=False`` (the plugin's non-fatal errors, see :mod:`.protocol.errors`)."""
        if self.closed:
            return
        headers = {
            "message": error.message,
            "content-type": "text/plain",
            "version": ",".join(SUPPORTED_VERSIONS),
        }
        if error.receipt_id is not None:
            headers["receipt-id"] = error.receipt_id
        if error.headers:
            headers.update(error.headers)
        body = error.detail.encode("utf-8")
        counters = self.counters
        counters.errors[error.message] += 1
        counters.frames_out["ERROR"] += 1
        if isinstance(error, AccessRefused):
            counters.auth_failures += 1
        if close:
            self.close_reason = error.message
            self.close_detail = error.private or error.detail
        log.debug(
            "stomp error sent",
            extra={"peer": self.peer_name, "error": error.message, "detail": error.detail,
                   "private": error.private},
        )
        try:
            self._write(self._encode(Frame("ERROR", headers, body)))
        except Exception:  # noqa: BLE001 - the socket may already be gone
            pass
        if not close:
            return
        self.closed = True
        self.ledger.release_waiters()  # a DISCONNECT waiting for confirms ends, unreceipted
        self._close_transport()

    async def close(self) -> None:
        """Release everything the connection holds; idempotent."""
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._token_timer is not None:
            self._token_timer.cancel()
        self.transactions.clear()
        self.ledger.release_waiters()
        amqp, self.amqp = self.amqp, None
        if amqp is not None:
            # Deleted here even on a connection of its own: RabbitMQ deletes a closed connection's
            # exclusive queues after its close-ok, so the client, already gone, could reconnect
            # and find the name still taken (RESOURCE_LOCKED).
            if self.exclusive_queues:
                for queue in self.exclusive_queues:
                    try:
                        await amqp.delete_queue(queue)
                    except Exception:  # noqa: BLE001 - a dead channel: the queue goes with its connection
                        break
            await amqp.close()

    @property
    def receipts_pending(self) -> int:
        return self.ledger.held

    async def receipts_sent(self) -> None:
        """Returns once every held RECEIPT went out, or the session ended without them."""
        if self.closed:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ledger.when_empty(lambda: done.done() or done.set_result(None))
        await done

    # -- CONNECT ------------------------------------------------------------------

    async def _on_connect(self, frame: Frame, *, implicit: bool) -> None:
        """Log in (the decisions are login.py's), open the AMQP session, answer CONNECTED."""
        if self.amqp is not None:
            raise ProtocolError("Bad CONNECT", "Already connected: CONNECT may be sent once")
        version = negotiate_version(frame.headers.get("accept-version"))
        headers = login.connect_headers(frame.headers, version)
        cert_login, self.policy = (
            await self.security.resolve(self.peer_cert, headers, version)
            if self.security is not None else (None, None)
        )
        request = login.login_request(
            self.settings, headers, peer=self.peer, cert_login=cert_login, transport=self._credentials,
            policy=self.policy,
        )
        amqp, vhost = await self._open_amqp(request, cert_login)
        self._start(amqp, request.user, vhost, version, request.heartbeat)
        claims = features.token_claims(request.passcode)
        self._token_subject = claims.get("sub") if claims is not None else None
        self._expire_token_at(features.token_expiry(claims))
        self.client_id = headers.get("client-id")
        heart_beat = f"{request.heartbeat[0]},{request.heartbeat[1]}"
        log.info(
            "client connected",
            extra={"peer": self.peer_name, "user": request.user, "vhost": vhost, "version": version,
                   "heart_beat": heart_beat, "implicit": implicit},
        )
        if implicit:
            return  # the plugin sends no CONNECTED for an implicit connect
        server = None if self.settings.hide_server_info else login.server_header(amqp.broker_version_text, __version__)
        out = login.connected_headers(self.session_id, self.heartbeat, version, server)
        self.counters.frames_out["CONNECTED"] += 1
        connected = Frame("CONNECTED", out)
        if self._debug:
            log_frame(log, "out", self.peer_name, "CONNECTED", out, b"")
        self._write(serialize(connected, version, self._eol))

    async def _open_amqp(self, request: login.LoginRequest, cert_login: AmqpLogin | None) -> tuple[AmqpSession, str]:
        """The AMQP session for ``request`` and the vhost it got, in the login's turn with the
        throttle (login_turn.py: it may wait, or refuse at once)."""
        s = self.settings
        user, passcode, vhost = request.user, request.passcode, request.vhost
        try:
            async with login_turn(self.throttle, self.peer, user, passcode, self.counters):
                # amqps://: verify RabbitMQ; EXTERNAL: also the certificate signed for this user
                tls_login = {
                    "context": cert_login.context if cert_login is not None else (
                        self.security.amqp_context if self.security is not None else None
                    ),
                    "external": cert_login is not None and cert_login.external,
                }
                try:
                    amqp = await AmqpSession.open(
                        self.pool,
                        user,
                        passcode,
                        vhost,
                        client_name=f"stomp-bridge {self.peer_name} ({user})",
                        timeout=s.amqp_connect_timeout,
                        **tls_login,
                    )
                except AccessRefused as exc:
                    if not login.falls_back(s, vhost, exc):
                        raise
                    vhost = s.default_vhost  # opt-in: an unknown host goes to the default vhost
                    amqp = await AmqpSession.open(
                        self.pool, user, passcode, vhost,
                        client_name=f"stomp-bridge {self.peer_name} ({user})",
                        timeout=s.amqp_connect_timeout, **tls_login,
                    )
        except BrokerError:
            self.counters.amqp_connection_failures += 1
            raise
        return amqp, vhost

    def _start(self, amqp: AmqpSession, user: str, vhost: str, version: str, heartbeat: tuple[int, int]) -> None:
        """Logged in: wire the AMQP session's callbacks, lift the frame size limit."""
        s = self.settings
        self.amqp = amqp
        self.user, self.vhost = user, vhost
        self.rules = dest.DestinationRules(s.default_topic_exchange, amqp.dialect, s.headers_bindings)
        self.amqp.on_delivery = self._on_delivery
        self.amqp.on_confirm = self._on_confirm
        self.amqp.on_returned = self._on_returned
        self.amqp.on_closed = self._on_amqp_closed
        self.amqp.on_cancelled = self._on_server_cancel
        self.amqp.on_batch_end = self._flush_writes
        if self._wait_writable is not None:
            self.amqp.set_backpressure(self._wait_writable)
        self.version = version
        # The plugin's codec unescapes every frame with 1.2 rules whatever the
        # version, and escapes what it sends the same way; both sides match it.
        self.parser.version = "1.2"
        self.parser.limits = Limits(
            max_frame_size=s.max_frame_size,
            max_headers=s.max_headers,
            max_header_length=s.max_header_length,
        )
        self.session_id = hdr.new_session_id()
        self.heartbeat = heartbeat

    def _on_amqp_closed(self, error: StompError) -> None:
        if not self.closed:
            self.counters.amqp_connection_failures += 1
        self.fail(error)

    # -- DISCONNECT ---------------------------------------------------------------

    async def _on_disconnect(self, frame: Frame) -> None:
        receipt = frame.headers.get("receipt")
        if receipt is not None:
            await self.flush()
            self._queue_receipt(receipt)
            await self.receipts_sent()
        # AMQP first: once the client sees the socket close, RabbitMQ has already
        # requeued its unacknowledged messages and the session's exclusive queues are gone.
        await self.close()
        self._close_transport()

    # -- SEND ---------------------------------------------------------------------

    def _expire_token_at(self, expires: float | None) -> None:
        """The ERROR a client is owed when its OAuth 2 token runs out (RabbitMQ 4.3 closes the
        connection then, older brokers keep it open); a new token moves it."""
        if self._token_timer is not None:
            self._token_timer.cancel()
            self._token_timer = None
        if expires is None:
            return
        loop = asyncio.get_running_loop()
        self._token_timer = loop.call_later(max(0.0, expires - time.time()), self._token_expired)

    def _token_expired(self) -> None:
        self._token_timer = None
        self.fail(token_expired())

    async def _update_token(self, frame: Frame) -> None:
        """SEND to /bridge/token: the body is the client's new OAuth 2 token, handed to RabbitMQ
        as its connection's new secret; the SEND's RECEIPT (if asked for) once RabbitMQ took it."""
        token = frame.body.decode("utf-8", "replace").strip()
        if not token:
            raise FrameRejected("Invalid header", f"SEND to {features.TOKEN_DESTINATION} needs the new token as its body")
        claims = features.token_claims(token)
        subject = claims.get("sub") if claims is not None else None
        if self._token_subject is not None and subject != self._token_subject:
            # RabbitMQ 4.x refuses another user's token as a new secret; 3.10 would take it
            raise BrokerError(
                "Token refused",
                f"The new token is for {subject!r}, and this connection logged in as {self._token_subject!r}. "
                "Log in again with it.",
            )
        try:
            await self.channel().update_secret(token)
        except BrokerError as exc:
            raise BrokerError(
                "Token refused",
                f"RabbitMQ refused the new token ({exc.detail}) and closed the connection. Log in again.",
                private=exc.private or exc.detail,
            ) from None
        self._expire_token_at(features.token_expiry(claims))
        self.counters.token_updates += 1
        log.info("token refreshed", extra={"peer": self.peer_name, "user": self.user})

    async def _on_send(self, frame: Frame) -> None:
        if not self.transactions.hold(frame):
            await self._send(frame)
            self._maybe_receipt(frame)

    async def _send(self, frame: Frame) -> None:
        hdr.check_send_headers(frame.headers)
        if self.policy is not None:
            self.policy.check_send(frame.headers)
        try:
            destination = self._destination(frame)
        except InvalidDestination:
            if frame.headers.get("destination") == features.TOKEN_DESTINATION:
                await self._update_token(frame)  # not a plugin destination: no cost to other SENDs
                return
            for part in ext.destinations(self, frame):  # composite, /dsub/ (or the plugin's error)
                await self._send_to(frame, part)
            return
        await self._send_to(frame, destination)

    async def _send_to(self, frame: Frame, destination: dest.Destination) -> None:
        headers = frame.headers
        amqp = self.channel()
        target = self.rules.send_target(destination, headers, declare=destination.name not in self.declared_queues)
        if target.declare is not None:
            await self._declare(target.declare)
        reply_to = None
        reply_header = headers.get("reply-to")
        if reply_header is not None:
            if reply_header.startswith("/temp-topic/"):
                reply_to = ext.temp_topic_reply_to(self, reply_header)
            else:
                temp_id = dest.reply_to_temp_queue(reply_header)
                if temp_id is not None:
                    reply_to = await self._reply_queue(temp_id)
        props = hdr.properties_from_send(headers, reply_to)
        if ("expires" in headers or "ttl" in headers) and not ext.set_expiration(props, headers):
            return  # already expired: never delivered, and the RECEIPT still comes
        mandatory = self.settings.mandatory
        if "mandatory" in headers:
            mandatory = hdr.parse_bool(headers["mandatory"]) or False
        if not amqp.publisher_ready:
            await amqp.open_publisher()
        try:
            seq = amqp.publish(target.exchange, target.routing_key, props, frame.body, mandatory)
        except ValueError as exc:  # a value AMQP cannot carry, e.g. a 300-byte routing key
            raise FrameRejected("Invalid header", f"{exc}\n") from None
        self.ledger.published(seq)
        if mandatory:
            if self.mandatory_sent is NOTHING_HELD:
                self.mandatory_sent = deque()
            self.mandatory_sent.append((seq, target.exchange, target.routing_key, destination.header))
        self.counters.messages_published += 1
        if "retain" in headers and self.settings.retained_messages and destination.kind == dest.TOPIC:
            action = features.retain_action(headers)
            if action is not None:
                await ext.retain(self, target, props, frame.body, action)

    async def _declare(self, plan: dest.QueueDeclare) -> str:
        name = await self.channel().declare_queue(
            plan.queue,
            durable=plan.durable,
            exclusive=plan.exclusive,
            auto_delete=plan.auto_delete,
            arguments=plan.arguments,
        )
        if plan.once_per_session:
            self.declared_queues.add(plan.queue)
        if plan.exclusive:
            self.exclusive_queues[name] = plan.auto_delete
        return name

    async def _reply_queue(self, temp_id: str) -> str:
        """/temp-queue/<id>: one server-named queue per id, auto-subscribed (plugin semantics)."""
        existing = self.reply_queues.get(temp_id)
        if existing is None:
            amqp = self.channel()
            existing = await self._declare(
                dest.temp_queue_declare(self.settings.temp_queue_prefix, self.session_id, temp_id)
            )
            tag = hdr.reply_queue_consumer_tag(temp_id)
            self.subscriptions[tag] = Subscription(tag, None, existing, ack=False, multiple=False)
            await amqp.consume(existing, tag, no_ack=True)
            self.reply_queues[temp_id] = existing
        return existing

    # -- SUBSCRIBE / UNSUBSCRIBE ----------------------------------------------------

    async def _on_subscribe(self, frame: Frame) -> None:
        headers = frame.headers = ext.subscribe_headers(frame.headers)
        dest.require_durable_id(headers)
        try:
            destination = self._destination(frame)
            composite = None
        except InvalidDestination:
            composite = ext.destinations(self, frame)
            destination = composite[0]
        tag = hdr.subscribe_consumer_tag(headers)
        if tag in self.subscriptions:
            raise ProtocolError(
                "Duplicated subscription identifier",
                f"A subscription identified by '{tag}' already exists.",
            )
        if len(self.subscriptions) >= self.settings.max_subscriptions:
            raise ProtocolError(
                "Too many subscriptions",
                f"A connection may hold at most {self.settings.max_subscriptions} subscriptions",
            )
        mode, multiple = hdr.ack_mode(headers)
        # basic.qos carries 16 bits; the plugin's direct connection takes more, so the nearest.
        prefetch = min(hdr.prefetch_count(headers), 65535)
        self.channel()  # "Not connected" before a bad argument, as ever
        arguments = hdr.consume_arguments(headers)
        window = 0
        if mode != "auto" and prefetch == 0 and not any(k.startswith("x-stream-") for k in arguments):
            window = prefetch = self.settings.client_ack_window
        if headers.get("browser") == "true":
            await ext.browse(self, frame, tag, destination)
            self._maybe_receipt(frame)
            return
        hook = ext.delivery_filter(self, headers, composite or [destination])
        targets = composite or [destination]
        plans = [self._subscribe_plan(target, headers) for target in targets]  # refusals before I/O
        sub = Subscription(tag, destination, "", ack=mode != "auto", multiple=multiple, filter=hook,
                           window=window if composite is None else 0, arguments=arguments)
        if self.settings.resubscribe_on_cancel:
            sub.again = (targets, headers, prefetch)
        await self._subscribe(sub, list(zip(targets, plans)), prefetch, headers.get("receipt"))

    async def _subscribe(
        self, sub: Subscription, parts: list[tuple[dest.Destination, dest.SubscribePlan]], prefetch: int,
        receipt: str | None,
    ) -> None:
        """SUBSCRIBE's one AMQP sequence, for a plain destination (one part) and for each part of
        a composite one: declare the queue, copy a retained message, register the consumer tag,
        consume, bind; on a failure every tag registered goes again. The parts after the first
        get their own consumer tags mapped to the same subscription.

        With a ``receipt``, MESSAGEs are held until the RECEIPT has gone out, as the plugin
        answers SUBSCRIBE before it handles any delivery.
        """
        amqp = self.channel()
        if receipt is not None:
            sub.held = []
        registered: list[str] = []
        try:
            for index, (target, plan) in enumerate(parts):
                queue = plan.queue
                if plan.declare is not None:
                    queue = await self._declare(plan.declare)
                if self.settings.retained_messages and target.kind == dest.TOPIC and plan.binding is not None:
                    await ext.copy_retained(self, queue, plan.binding)
                tag = part_tag(sub.consumer_tag, index)
                if index == 0:
                    sub.queue = queue
                else:
                    sub.extra_tags = (*sub.extra_tags, tag)
                self.subscriptions[tag] = sub
                registered.append(tag)
                await amqp.consume(queue, tag, no_ack=not sub.ack, prefetch=prefetch, arguments=sub.arguments)
                if plan.binding is not None:
                    await amqp.bind(queue, *plan.binding, plan.binding_arguments)
        except BrokerError as exc:
            for tag in registered:
                self.subscriptions.pop(tag, None)
            if exc.message == "access_refused" and target.kind == dest.TOPIC:
                # The plugin checks topic read permission itself and quotes the refusal
                # without the reply code RabbitMQ's bind refusal starts with.
                exc.detail = exc.detail.removeprefix("ACCESS_REFUSED - ")
            raise
        except BaseException:
            for tag in registered:
                self.subscriptions.pop(tag, None)
            raise
        if receipt is not None:
            self._queue_receipt(receipt, then=lambda: self._release_held(sub))

    def _release_held(self, sub: Subscription) -> None:
        held, sub.held = sub.held, None
        if held and not self.closed:
            self._write(b"".join(held))

    def _subscribe_plan(
        self, destination: dest.Destination, headers: dict[str, str], *, declare: bool | None = None
    ) -> dest.SubscribePlan:
        if declare is None:  # a /queue/ this session declared already is not declared again
            declare = destination.name not in self.declared_queues
        plan = self.rules.subscribe_plan(destination, headers, declare=declare)
        return ext.adjust_plan(self, plan, destination, headers)

    async def _on_unsubscribe(self, frame: Frame) -> None:
        headers = frame.headers
        dest.require_durable_id(headers)
        tag = hdr.unsubscribe_consumer_tag(headers)
        sub = self.subscriptions.get(tag)
        if sub is None or sub.destination is None:
            if sub is None and await ext.delete_durable_subscription(self, headers):
                self._maybe_receipt(frame)  # Artemis: a durable subscription is deleted by name
                return
            raise FrameRejected(
                "No subscription found",
                "UNSUBSCRIBE must refer to an existing subscription.\n"
                f"Subscription to {tp(hdr.describe_subscription(tag))} not found.\n",
            )
        amqp = self.channel()
        if sub.consuming:
            await amqp.cancel(tag)
        del self.subscriptions[tag]
        for extra in sub.extra_tags:
            await amqp.cancel(extra)
            self.subscriptions.pop(extra, None)
        if self.exclusive_queues.get(sub.queue) and all(s.queue != sub.queue for s in self.subscriptions.values()):
            # an auto-delete queue went with its last consumer: its name is free again
            del self.exclusive_queues[sub.queue]
            amqp.release_exclusive(sub.queue)
        doomed = dest.durable_queue_to_delete(sub.destination, headers) or ext.queue_to_delete(self, headers)
        if doomed is not None:
            await amqp.delete_queue(doomed)
        self._maybe_receipt(frame)

    def _on_server_cancel(self, consumer_tag: str) -> None:
        """RabbitMQ cancelled a consumer (its queue was deleted, a quorum queue's consumer
        timeout, a node went down): the plugin's ERROR, the connection and its other
        subscriptions carry on; or, with resubscribe_on_cancel, the bridge subscribes again
        once the queue is there, and the ERROR comes only if it is not within
        resubscribe_timeout."""
        sub = self.subscriptions.get(consumer_tag)
        if sub is None:
            return
        consumer_tag = sub.consumer_tag  # one ERROR per subscription, whichever consumer went
        for tag in (consumer_tag, *sub.extra_tags):
            self.subscriptions.pop(tag, None)
        if sub.again is not None and not self.closed:
            task = asyncio.ensure_future(self._resubscribe(sub))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        self._cancelled(consumer_tag)

    async def _resubscribe(self, sub: Subscription) -> None:
        """Subscribe ``sub`` again as its SUBSCRIBE did (a /queue/ is declared again), once every
        queue it reads from exists; retried after 0.5 s, doubling up to 30 s, until
        resubscribe_timeout, then the plugin's ERROR."""
        assert sub.again is not None
        targets, headers, prefetch = sub.again
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.resubscribe_timeout
        delay = RESUBSCRIBE_FIRST_DELAY
        while not self.closed:
            try:
                # declared again: a /queue/ RabbitMQ deleted is gone, whatever this session did before
                plans = [self._subscribe_plan(target, headers, declare=True) for target in targets]
                amqp = self.channel()
                missing = [plan.queue for plan in plans
                           if plan.declare is None and not await amqp.queue_exists(plan.queue)]
                if not missing:
                    sub.extra_tags, sub.unacked, sub.growing = (), 0, False
                    await self._subscribe(sub, list(zip(targets, plans)), prefetch, None)
                    self.counters.resubscriptions += 1
                    log.info("subscribed again after RabbitMQ cancelled the consumer",
                             extra={"peer": self.peer_name, "subscription": hdr.subscription_id(sub.consumer_tag),
                                    "queue": sub.queue})
                    return
            except StompError as exc:
                self.fail(exc)
                return
            if loop.time() + delay > deadline:
                self._cancelled(sub.consumer_tag)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, RESUBSCRIBE_MAX_DELAY)

    def _cancelled(self, consumer_tag: str) -> None:
        """The plugin's ERROR for a subscription RabbitMQ cancelled."""
        self.fail(
            BrokerError(
                "Server cancelled subscription",
                "The server has canceled a subscription.\n"
                f"No more messages will be delivered for {tp(hdr.describe_subscription(consumer_tag))}.\n",
                headers={"subscription": hdr.subscription_id(consumer_tag)},
            ),
            close=self.settings.close_on_error,
        )

    # -- deliveries ---------------------------------------------------------------

    def _on_delivery(self, delivery: Delivery) -> None:
        tag, delivery_tag, redelivered, exchange, routing_key, properties, body = delivery
        sub = self.subscriptions.get(tag)
        if sub is None or self.closed:
            return
        headers = hdr.message_headers(
            sub.consumer_tag,
            self.session_id,
            delivery_tag,
            exchange,
            routing_key,
            redelivered,
            properties,
            ack=sub.ack and self.version == "1.2",
        )
        if sub.filter is not None and not sub.filter(headers):
            ext.drop(self, sub, delivery_tag)
            return
        if sub.ack:
            self.unacked.delivered(delivery_tag, sub)
            if sub.window and not sub.growing and sub.window_full():
                self._add_window(sub)
        self.counters.messages_delivered += 1
        self.counters.frames_out["MESSAGE"] += 1
        data = self._encode(Frame("MESSAGE", headers, body))
        if sub.held is not None:
            sub.held.append(data)
        else:
            self._write(data)

    def _add_window(self, sub: Subscription) -> None:
        """The client holds a whole window of a windowed subscription: one consumer more."""
        sub.growing = True
        task = asyncio.ensure_future(self._grow(sub))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _grow(self, sub: Subscription) -> None:
        """Add a consumer with its own window once the client's socket has room.

        The plugin consumes without a prefetch limit: a client may hold any number of
        deliveries unacknowledged while it reads on. RabbitMQ 4.3 denies the channel-wide
        (global) QoS that could pause such a consumer for a client that stops reading, so
        the bridge consumes in windows instead: RabbitMQ stops at a full window; a client
        that keeps reading gets another consumer on the same queue (same tag prefix,
        arguments and priority, deliveries in queue order on the one channel); one that
        stops reading gets none, and what it costs the bridge stays bounded.
        """
        try:
            await self.writable()
            if self.closed or self.subscriptions.get(sub.consumer_tag) is not sub:
                return
            if not sub.window_full():
                return  # ACKs made room meanwhile
            amqp = self.channel()
            tag = window_tag(sub.consumer_tag, len(sub.extra_tags) + 1)
            self.subscriptions[tag] = sub
            sub.extra_tags = (*sub.extra_tags, tag)
            await amqp.consume(sub.queue, tag, no_ack=False, prefetch=sub.window, arguments=sub.arguments)
        except StompError as exc:
            self.fail(exc)
        finally:
            sub.growing = False

    # -- ACK / NACK ---------------------------------------------------------------

    async def _on_ack(self, frame: Frame) -> None:
        if not self.transactions.hold(frame):
            self._settle(frame, "ACK")
        self._maybe_receipt(frame)

    async def _on_nack(self, frame: Frame) -> None:
        if not self.transactions.hold(frame):
            self._settle(frame, "NACK")
        self._maybe_receipt(frame)

    def _settle(self, frame: Frame, command: str) -> None:
        consumer_tag, delivery_tag = ack_target(frame.headers, command, self.version, self.session_id)
        if consumer_tag not in self.subscriptions:
            value = frame.headers[hdr.ack_header_name(self.version)]
            raise FrameRejected("Subscription not found", f"Message with id {tp(value)} has no subscription")
        multiple = self.unacked.settle(consumer_tag, delivery_tag)
        amqp = self.channel()
        if command == "ACK":
            amqp.ack(delivery_tag, multiple)
        else:
            requeue = hdr.parse_bool(frame.headers.get("requeue"))
            if requeue is None:
                requeue = self.settings.default_nack_requeue
            amqp.nack(delivery_tag, multiple, requeue)

    # -- transactions -------------------------------------------------------------
    # As in the plugin, a transactional SEND/ACK/NACK is held until COMMIT
    # (transactions.py); a held ACK/NACK is receipted at once, a held SEND when,
    # after COMMIT, RabbitMQ has confirmed it.

    async def _on_begin(self, frame: Frame) -> None:
        self.transactions.begin(transaction_id(frame.headers, "BEGIN"))
        self._maybe_receipt(frame)

    async def _on_commit(self, frame: Frame) -> None:
        """Run the held frames in order. As in the plugin, one that fails (a bad destination,
        say) gets its ERROR and the others still run; a fatal error ends it all."""
        for action in self.transactions.commit(transaction_id(frame.headers, "COMMIT")):
            try:
                if action.command == "SEND":
                    await self._send(action)
                    self._maybe_receipt(action)
                else:
                    self._settle(action, action.command)
            except StompError as exc:
                self._answer(exc, action)
        self._maybe_receipt(frame)

    async def _on_abort(self, frame: Frame) -> None:
        self.transactions.abort(transaction_id(frame.headers, "ABORT"))
        self._maybe_receipt(frame)

    # -- receipts and confirms ----------------------------------------------------

    def _maybe_receipt(self, frame: Frame) -> None:
        receipt = frame.headers.get("receipt")
        if receipt is not None:
            self._queue_receipt(receipt)

    def _queue_receipt(self, receipt: str, then: Callable[[], None] | None = None) -> None:
        data = None if self._debug else receipt_frame(receipt, self._eol)
        if data is None:
            data = self._encode(Frame("RECEIPT", {"receipt-id": receipt}))
        self.counters.frames_out["RECEIPT"] += 1
        self.ledger.receipt(receipt, data, self.amqp.publish_seq if self.amqp is not None else 0, then)

    def _on_returned(self, reply_code: int, reply_text: str, exchange: str, routing_key: str) -> None:
        """RabbitMQ returned a mandatory publish no queue took (before its confirm): an ERROR
        naming that SEND's RECEIPT, and the connection ends, so no RECEIPT goes out for it or
        for anything sent after it. Returns come in publish order: the message is the first
        unconfirmed mandatory one to that exchange and key (or, should none match, the first
        unconfirmed one: naming an earlier SEND only withholds more RECEIPTs, never one too many)."""
        sent = self.mandatory_sent
        match = next((entry for entry in sent if entry[1] == exchange and entry[2] == routing_key), None)
        if match is None and sent:
            match = sent[0]
        if match is not None:
            seq, destination = match[0], match[3]
        else:  # cannot happen: only mandatory publishes come back
            seq, destination = (self.amqp.publish_seq if self.amqp is not None else 0), "?"
        self.counters.messages_returned += 1
        self.fail(
            BrokerError(
                "Unroutable message",
                f"RabbitMQ returned the message sent to '{destination}': {reply_text} (no queue is bound "
                f"to exchange '{exchange}' with routing key '{routing_key}'). It was not stored, and no "
                "RECEIPT follows for it or anything sent after it: bind a queue (or send elsewhere), "
                "then reconnect and resend.",
                private=f"basic.return {reply_code} {reply_text}",
                receipt_id=self.ledger.receipt_covering(seq),
            )
        )

    def _on_confirm(self, tag: int, multiple: bool, nack: bool) -> None:
        if self.closed:  # after a returned message's ERROR its confirm must release no RECEIPT
            return
        if not nack:
            self.ledger.confirmed(tag, multiple)
            sent = self.mandatory_sent
            while sent and not self.ledger.is_unconfirmed(sent[0][0]):
                sent.popleft()
            return
        self.fail(
            BrokerError(
                "Message rejected",
                "RabbitMQ refused (nacked) a published message; no RECEIPT will be sent "
                "for it or anything after it. Reconnect and resend unreceipted messages.",
                private=f"nack delivery_tag={tag} multiple={multiple}",
                receipt_id=self.ledger.receipt_covering(tag),
            )
        )

    # -- helpers ------------------------------------------------------------------

    def channel(self) -> AmqpSession:
        if self.amqp is None:
            raise BrokerError("Not connected", "The AMQP connection is gone; reconnect.")
        return self.amqp

    async def writable(self) -> None:
        if self._wait_writable is not None:
            await self._wait_writable()

    def deliver(self, headers: dict[str, str], body: bytes) -> None:
        self.counters.messages_delivered += 1
        self.counters.frames_out["MESSAGE"] += 1
        self._write(self._encode(Frame("MESSAGE", headers, body)))

    def _destination(self, frame: Frame) -> dest.Destination:
        value = frame.headers.get("destination")
        if value is None:
            raise FrameRejected(
                "Missing destination", f"\"{frame.command}\" must include a 'destination' header\n"
            )
        return dest.parse_destination(value)

    def _encode(self, frame: Frame) -> bytes:
        """Server frames; 1.0 clients get the plugin's (1.2) escaping, the only safe choice."""
        if self._debug:
            log_frame(log, "out", self.peer_name, frame.command, frame.headers, frame.body)
        version = self.version
        try:
            return serialize(frame, "1.2" if version == "1.0" else version, self._eol)
        except ValueError:  # a raw CR that 1.1 cannot escape
            return serialize(frame, "1.2", self._eol)


_HANDLERS: dict[str, Callable[[Session, Frame], Any]] = {
    "SEND": Session._on_send,
    "SUBSCRIBE": Session._on_subscribe,
    "UNSUBSCRIBE": Session._on_unsubscribe,
    "ACK": Session._on_ack,
    "NACK": Session._on_nack,
    "BEGIN": Session._on_begin,
    "COMMIT": Session._on_commit,
    "ABORT": Session._on_abort,
    "DISCONNECT": Session._on_disconnect,
    "CONNECT": lambda self, frame: self._on_connect(frame, implicit=False),
    "STOMP": lambda self, frame: self._on_connect(frame, implicit=False),
}
