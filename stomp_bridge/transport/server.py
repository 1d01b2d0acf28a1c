"""The listeners, admission (limits, PROXY headers), the registry of live connections,
TLS reload, readiness, and shutdown.

Each admitted client runs as a :class:`~stomp_bridge.transport.connection.Connection`
(connection.py); WebSocket clients come in through websocket.py, which admits them
through this server as a :class:`~stomp_bridge.transport.connection.Gateway`.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

from stomp_bridge import memory
from stomp_bridge.amqp import probe
from stomp_bridge.amqp.connect import install as install_amqp
from stomp_bridge.amqp.connect import make_pool
from stomp_bridge.amqp.endpoints import Endpoints
from stomp_bridge.core.rules import Rules
from stomp_bridge.http import OpsServer
from stomp_bridge.metrics import Metrics
from stomp_bridge.protocol.errors import ProtocolError, StompError, error_headers
from stomp_bridge.protocol.frames import END, END_LF, encode_frame
from stomp_bridge.protocol.proxy import (
    ProxyHeaderParser, ProxyInfo, ProxyProtocolError, ProxyTrust, UntrustedProxy,
)
from stomp_bridge.session.fanout import FanoutHub
from stomp_bridge.session.throttle import LoginThrottle
from stomp_bridge.session.tracing import Tracing
from stomp_bridge.settings import Settings, mask_url
from stomp_bridge.swaptacular.certlogin import CertLogin, ConnectSecurity, amqp_client_context
from stomp_bridge.swaptacular.profile import SwaptacularProfile
from stomp_bridge.tls import PeerCertificate, ServerTLS, ServerTLSConfig, certificate_summary, peer_certificate
from stomp_bridge.transport.connection import (
    SHUTDOWN, Connection, Link, TcpLink, set_nodelay,
)

log = logging.getLogger(__name__)

TLS_SHUTDOWN_TIMEOUT = 2.0
TRACE_EXPORT_MIN = 0.5  # seconds the buffered spans get at shutdown when the grace is spent
BROKER_PROBE_TIMEOUT = 2.0  # seconds a RabbitMQ node has to answer the AMQP protocol header
BROKER_RETRY = 5.0  # seconds between checks that a RabbitMQ node answers (_watch_broker)
# Every TCP client's task's name: one string, not a "Task-<n>" of its own per connection
CLIENT_TASK = "stomp-bridge client"


class BridgeServer:
    """The STOMP listener, the operations endpoint, and the registry of live connections."""

    def __init__(self, settings: Settings, *, tracer_provider: Any = None) -> None:
        self.settings = settings  # whole, for each Connection (its session reads fields of many sections)
        # The sections the server reads for every client (frozen, fixed for the server's life).
        self.admission = settings.admission  # connection limits, the PROXY header
        self.flow = settings.flow  # write_buffer_high of each TCP link
        self.timeouts = settings.heartbeats  # connect_timeout, for a PROXY header as for CONNECT
        self.stomp = settings.stomp  # trailing_lf, on the server's own refusals
        self._server: asyncio.base_events.Server | None = None
        self._listeners: list[asyncio.base_events.Server] = []  # every listener, closed together
        self.ws: asyncio.base_events.Server | None = None
        self.wss: asyncio.base_events.Server | None = None
        self._connections: dict[asyncio.Task[Any], Connection] = {}
        self._per_ip: dict[str, int] = {}
        self._closing = False
        amqp = settings.amqp
        self.endpoints = Endpoints(amqp.amqp_url)
        self.throttle = LoginThrottle(settings.login.login_failures_per_minute)
        self.rules = Rules.of(settings)  # what every connection's STOMP core reads of the settings
        self.pool = make_pool(  # one per bridge, handed to every session (Connection -> Session)
            self.endpoints,
            heartbeat=amqp.amqp_heartbeat,
            timeout=amqp.amqp_connect_timeout,
            channels_per_connection=amqp.amqp_channels_per_connection,
            min_connections=amqp.amqp_min_connections_per_login,
            reuse_seconds=amqp.amqp_login_reuse_seconds,
            auto_ack_window=self.flow.auto_ack_window,
            login_cache_seconds=amqp.amqp_login_cache_seconds,
            separate_publishers=amqp.amqp_separate_publishers,
        )
        self.metrics = Metrics(self._live)
        self.counters = self.metrics.counters
        self.pool.on_broker_close = self._amqp_closed_by_rabbitmq
        # Fan-out at the edge (edge_fanout): the shared subscriptions of every session here
        self.fanout = FanoutHub(self.counters, self.flow.fanout_subscriber_buffer) if self.flow.edge_fanout else None
        # OpenTelemetry spans (tracing=true): OTLP from the settings, or the caller's provider
        # (a test's in-memory exporter); None when off. Without OpenTelemetry: TracingUnavailable.
        self.tracing = Tracing.start(settings.telemetry, tracer_provider)
        # Who may send a PROXY header (proxy_protocol): the load balancers, no one else.
        self.proxy_trust = ProxyTrust.from_cidrs(self.admission.proxy_protocol_trusted)
        self.ops: OpsServer | None = None
        # TLS: one reloadable context for the TLS and wss listeners, and what CONNECT
        # does with a client certificate there.
        amqp_context = amqp_client_context(amqp)
        self.security = ConnectSecurity(amqp_context=amqp_context)
        self.tls: ServerTLS | None = None
        self.tls_security = self.security
        self._tls_server: asyncio.base_events.Server | None = None
        self._tls_watch: asyncio.Task[None] | None = None
        self._broker_watch: asyncio.Task[None] | None = None
        self._memory_watch: asyncio.Task[None] | None = None
        self.release = memory.Release()  # memory given back once a load passed (memory.py)
        self._speaks_amqp: set[str] = set()  # nodes that answered the AMQP probe (_broker_problems)
        self._probing = asyncio.Lock()
        listeners = settings.listeners
        if listeners.tls_port is not None or listeners.wss_port is not None:
            self.tls = ServerTLS(ServerTLSConfig.from_settings(settings.tls))
            self.tls.on_handshake_failure = self._tls_handshake_failed
            cert_login, swaptacular = settings.cert_login, settings.swaptacular
            self.tls_security = ConnectSecurity(
                cert_login=CertLogin(cert_login, amqp) if cert_login.ssl_cert_login else None,
                profile=SwaptacularProfile(swaptacular) if swaptacular.profile == "swaptacular" else None,
                amqp_context=amqp_context,
            )

    def _tls_handshake_failed(self, reason: str, exc: ssl.SSLError) -> None:
        self.counters.tls_handshake_failures[reason] += 1
        # The SSL object does not know its peer; the metric and this line say why clients fail.
        log.info("TLS handshake failed", extra={"reason": reason, "detail": exc.reason or str(exc)})

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    @property
    def tls_port(self) -> int:
        assert self._tls_server is not None
        return self._tls_server.sockets[0].getsockname()[1]

    @property
    def ws_port(self) -> int | None:
        return self.ws.sockets[0].getsockname()[1] if self.ws is not None else None

    @property
    def wss_port(self) -> int | None:
        return self.wss.sockets[0].getsockname()[1] if self.wss is not None else None

    async def start(self) -> None:
        where, ops, tls = self.settings.listeners, self.settings.operations, self.settings.tls
        _raise_fd_limit()
        install_amqp()  # once per process, idempotent: see stomp_bridge.amqp.internals.install
        # workers > 1: every worker process listens on the same ports, the kernel spreads clients
        reuse_port = ops.workers > 1
        if where.port is not None:
            self._server = await asyncio.get_running_loop().create_server(
                self._links(None), where.host, where.port, reuse_port=reuse_port)
            self._listeners.append(self._server)
        if where.tls_port is not None:
            assert self.tls is not None
            self._tls_server = await asyncio.get_running_loop().create_server(
                self._links(self.tls_security),
                where.host,
                where.tls_port,
                reuse_port=reuse_port,
                ssl=self.tls.context,
                ssl_handshake_timeout=self.timeouts.connect_timeout,
                # After an ERROR the TLS close waits for the client's close_notify; a client that
                # never answers must not hold its socket (and AMQP connection) for long.
                ssl_shutdown_timeout=TLS_SHUTDOWN_TIMEOUT,
            )
            self._listeners.append(self._tls_server)
        if where.ws_port is not None or where.wss_port is not None:
            # Imported with a WebSocket listener only: websockets and its modules are ~1 MB of
            # every bridge process that serves none.
            from stomp_bridge.transport import websocket
        if where.ws_port is not None:
            self.ws = await websocket.listen(self, where.ws_host, where.ws_port, reuse_port=reuse_port)
            self._listeners.append(self.ws)
        if where.wss_port is not None:
            assert self.tls is not None
            self.wss = await websocket.listen(
                self, where.ws_host, where.wss_port, ssl=self.tls.context, reuse_port=reuse_port)
            self._listeners.append(self.wss)
        if self.tls is not None and tls.tls_reload_interval:
            self._tls_watch = asyncio.ensure_future(self._watch_tls(tls.tls_reload_interval))
        self._broker_watch = asyncio.ensure_future(self._watch_broker())
        self._memory_watch = asyncio.ensure_future(self._watch_memory())
        if ops.http_port is not None:
            self.ops = OpsServer(ops.http_host, ops.http_port, self.metrics.render, self.ready)
            await self.ops.start()
        log.info(
            "stomp-bridge listening",
            extra={
                "host": where.host,
                "port": self.port if self._server is not None else None,
                "tls_port": self.tls_port if self._tls_server is not None else None,
                "profile": self.settings.swaptacular.profile,
                **({"tls_" + k: v for k, v in certificate_summary(tls.tls_cert_file).items()}
                   if self.tls is not None and tls.tls_cert_file else {}),
                "ws_port": self.ws_port,
                "wss_port": self.wss_port,
                "http_port": self.ops.port if self.ops else None,
                "amqp": ",".join(mask_url(url) for url in self.endpoints.urls),
            },
        )

    def _amqp_closed_by_rabbitmq(self, code: int) -> None:
        self.counters.amqp_connections_closed_by_rabbitmq[str(code)] += 1
        log.warning("RabbitMQ closed a shared AMQP connection", extra={"reply_code": code})

    def _live(self) -> dict[str, float]:
        connections = list(self._connections.values())
        return {
            "connections": len(connections),
            "receipts_pending": sum(c.session.receipts_pending for c in connections),
            "amqp_connections": self.pool.connection_count,
            "login_checks": self.pool.login_checks,
        }

    async def ready(self) -> tuple[bool, str]:
        """Ready while accepting STOMP connections and a RabbitMQ node answers AMQP (an open
        port is not enough: the management port answers too, and every CONNECT would fail)."""
        if self._closing or not self._listeners or not all(srv.is_serving() for srv in self._listeners):
            return False, "not accepting connections"
        problems = await self._broker_problems()
        return (False, "; ".join(problems)) if problems else (True, "ready")

    async def _broker_problems(self) -> list[str]:
        """[] as soon as one node answers, else what is wrong with each, in words.

        What the bridge knows first: an open AMQP connection is RabbitMQ answering, and needs no
        probe. Else each node in turn: one that has answered AMQP before gets a connection closed
        before a byte (``probe.reachable``, which RabbitMQ logs at debug level only); one not
        heard yet the AMQP probe (``probe.check``), whose hang-up after connection.start RabbitMQ
        logs as a WARNING: so once per node, at start-up, not at every /readyz."""
        if self.pool.any_open:
            return []
        problems = []
        context = self.security.amqp_context
        for url in self.endpoints.urls:
            if url not in self._speaks_amqp:
                async with self._probing:  # the start-up check and a /readyz: one AMQP probe, not two
                    if url not in self._speaks_amqp:
                        problem = await probe.check(url, context, BROKER_PROBE_TIMEOUT)
                        if problem is None:
                            self._speaks_amqp.add(url)
                            return []
                        problems.append(problem)
                        continue
            problem = await probe.reachable(url, context, BROKER_PROBE_TIMEOUT)
            if problem is None:
                return []
            problems.append(problem)
        return problems

    async def _watch_broker(self) -> None:
        """At start-up, one WARNING if no RabbitMQ node answers AMQP (a wrong amqp_url is not
        silent until the first CONNECT fails), and one INFO line once one does. Afterwards, every
        BROKER_RETRY seconds: losing every node is one WARNING, and its return another (each
        client's lost connection is an INFO line of its own)."""
        problems = await self._broker_problems()
        if problems:
            log.warning(
                "RabbitMQ does not answer AMQP: every CONNECT fails until it does; check amqp_url",
                extra={"problems": "; ".join(problems), "retry_seconds": BROKER_RETRY},
            )
            while await self._broker_problems():
                await asyncio.sleep(BROKER_RETRY)
            log.info("RabbitMQ answers AMQP now")
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(BROKER_RETRY)
            problems = await self._broker_problems()
            if not problems:
                continue
            lost = loop.time()
            log.warning(
                "RabbitMQ unreachable: no node answers; every CONNECT fails until one does",
                extra={"problems": "; ".join(problems), "retry_seconds": BROKER_RETRY},
            )
            while await self._broker_problems():
                await asyncio.sleep(BROKER_RETRY)
            log.warning("RabbitMQ reachable again", extra={"unreachable_seconds": round(loop.time() - lost, 1)})

    async def _watch_memory(self) -> None:
        """Every memory.TICK seconds: forget the login throttle's cold pairs, collect what closed
        connections left, trim the C heap (memory.Release decides)."""
        while True:
            await asyncio.sleep(memory.TICK)
            self.throttle.sweep()
            self.release.tick(len(self._connections))

    def _refusal(self, peer: str | None) -> tuple[str, str] | None:
        s = self.admission
        if s.max_connections and len(self._connections) >= s.max_connections:
            return "total", f"The bridge holds its limit of {s.max_connections} connections; retry later."
        if peer is not None and s.max_connections_per_ip and self._per_ip.get(peer, 0) >= s.max_connections_per_ip:
            return "per_ip", (
                f"{peer} already holds {s.max_connections_per_ip} connections, the per-address limit."
            )
        return None

    def reload_tls(self) -> bool:
        """SIGHUP: the TLS files and the certificate-login credentials, again."""
        if self.tls is None:
            return False
        done = self.tls.reload()
        cert_login = self.tls_security.cert_login
        if cert_login is not None:
            try:
                cert_login.reload()
            except (OSError, ValueError) as exc:
                log.error("credentials reload failed; the previous ones stay", extra={"error": str(exc)})
                done = False
        return done

    async def _watch_tls(self, interval: float) -> None:
        assert self.tls is not None
        while True:
            await asyncio.sleep(interval)
            self.tls.reload_if_changed()

    def _links(self, security: ConnectSecurity | None) -> Callable[[], TcpLink]:
        """The protocol factory of one TCP (or TLS) listener: a TcpLink per accepted client,
        whose task starts once connected. The ``start`` callback is made once per listener, not
        per client (a closure per client was ~200 bytes of every idle connection)."""
        high = self.flow.write_buffer_high

        def start(link: TcpLink) -> None:
            work = self._handle(link, security)
            if work is None:  # refused at once: its ERROR is written, the link closing
                return
            loop = asyncio.get_running_loop()
            if isinstance(work, Connection):  # admitted: its task is its run(), registered here
                link.task = task = loop.create_task(work.run(), name=CLIENT_TASK)
                self._connections[task] = work
                task.add_done_callback(self._ended)
            else:
                link.task = loop.create_task(work, name=CLIENT_TASK)
                link.task.add_done_callback(_log_failure)

        return lambda: TcpLink(start, high)

    def _handle(
        self, link: TcpLink, security: ConnectSecurity | None = None,
    ) -> Connection | Coroutine[Any, Any, None] | None:
        """What the client's task runs: on a plain listener without PROXY headers, the admitted
        Connection (its task runs Connection.run itself, with no coroutine of this class waiting
        on it for the connection's life: two of them were ~700 bytes of every idle connection),
        or None if refused; otherwise the coroutine that reads the PROXY header or the client's
        certificate first (``_handle_first``)."""
        transport = link.transport
        assert transport is not None
        set_nodelay(transport.get_extra_info("socket"))
        peername = transport.get_extra_info("peername")
        peer = (peername[0], peername[1]) if isinstance(peername, tuple) else None
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is None and not self.admission.proxy_protocol:
            return self._admit(link, peer, security=security)
        return self._handle_first(link, peer, ssl_object, security)

    async def _handle_first(
        self, link: TcpLink, peer: tuple[str, int] | None, ssl_object: Any, security: ConnectSecurity | None,
    ) -> None:
        """A TLS client (its certificate read in the task, as before) or one behind a PROXY header."""
        initial = b""
        if self.admission.proxy_protocol and ssl_object is None:
            if not self.proxy_trusted(peer):
                untrusted = UntrustedProxy(peer[0] if peer is not None else None)
                self._refuse(link, untrusted)
                return
            try:
                info, initial = await asyncio.wait_for(_read_proxy_header(link), self.timeouts.connect_timeout)
            except (ProxyProtocolError, asyncio.TimeoutError, ConnectionError) as exc:
                self.counters.connections_refused["proxy_protocol"] += 1
                detail = exc.detail if isinstance(exc, ProxyProtocolError) else (
                    "No PROXY protocol header; proxy_protocol is on, so every connection must come "
                    "through a load balancer that sends one."
                )
                self._refuse(link, ProtocolError("Invalid PROXY protocol header", detail))
                return
            if info.source is not None:
                peer = info.source
        await self.run_connection(
            link, peer, initial=initial, peer_cert=peer_certificate(ssl_object), security=security,
        )

    async def run_connection(
        self,
        link: Link,
        peer: tuple[str, int] | None,
        initial: bytes = b"",
        credentials: tuple[str | None, str | None] | None = None,
        peer_cert: PeerCertificate | None = None,
        security: ConnectSecurity | None = None,
    ) -> None:
        """A client of any listener: limits, the registry, metrics, then its session."""
        connection = self._admit(link, peer, initial, credentials, peer_cert, security)
        if connection is None:
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = connection
        try:
            await connection.run()
        finally:
            self._release(task)

    def _admit(
        self,
        link: Link,
        peer: tuple[str, int] | None,
        initial: bytes = b"",
        credentials: tuple[str | None, str | None] | None = None,
        peer_cert: PeerCertificate | None = None,
        security: ConnectSecurity | None = None,
    ) -> Connection | None:
        """The limits, then the client's Connection, counted (the caller registers it under its
        task, and releases it with ``_release``); None: refused, its ERROR written."""
        if self._closing:  # accepted just before close() stopped the listeners
            self._refuse(link, SHUTDOWN)
            return None
        ip = peer[0] if peer is not None else None
        refusal = self._refusal(ip)
        if refusal is not None:
            limit, detail = refusal
            self.counters.connections_refused[limit] += 1
            self._refuse(link, ProtocolError("Too many connections", detail))
            return None
        connection = Connection(
            link, self.settings, self.rules, self.counters, self.pool, peer=peer, initial=initial,
            credentials=credentials, peer_cert=peer_cert, security=security or self.security,
            throttle=self.throttle, tracing=self.tracing, fanout=self.fanout,
        )
        self.counters.connections_opened += 1
        if ip is not None:
            self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        return connection

    def _release(self, task: asyncio.Task[Any]) -> None:
        """A registered connection ended: out of the registry and its address's count."""
        connection = self._connections.pop(task, None)
        if connection is not None:
            self.release.connection_closed()
        ip = connection.peer if connection is not None else None
        if ip is not None:
            left = self._per_ip.get(ip, 1) - 1
            if left:
                self._per_ip[ip] = left
            else:
                self._per_ip.pop(ip, None)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """The done callback of a task that ran Connection.run itself (``_links``)."""
        self._release(task)
        _log_failure(task)

    def proxy_trusted(self, peer: tuple[str, int] | None) -> bool:
        """Whether this real peer may send a PROXY header (TCP and WebSocket listeners). A
        refusal is counted and logged: a balancer left out of proxy_protocol_trusted shows there."""
        address = peer[0] if peer is not None else None
        if self.proxy_trust.trusts(address):
            return True
        self.counters.connections_refused["untrusted_proxy"] += 1
        log.info(
            "connection refused",
            extra={"peer": address, "reason": "untrusted_proxy",
                   "detail": "not in proxy_protocol_trusted, so it may not send a PROXY header"},
        )
        return False

    def _refuse(self, link: Link, error: StompError) -> None:
        """An ERROR for a connection refused before it has a session (its limits, a PROXY header,
        the shutdown): the headers a session's ERROR has, counted as a session's are."""
        end = END_LF if self.stomp.trailing_lf else END
        self.counters.errors[error.message] += 1
        self.counters.frames_out["ERROR"] += 1
        link.send([encode_frame("ERROR", error_headers(error), error.detail.encode(), "1.2", end)])
        link.close()

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def close(self, grace: float | None = None) -> None:
        """Stop accepting; let each client's held receipts go out (RabbitMQ confirms
        what is in flight) within ``grace`` seconds; then ERROR "Server shutdown" to
        every client and close its AMQP connection cleanly.

        Connections end through their own loop (EOF after the transport
        closes); whatever has not finished after a second grace is cancelled.
        """
        grace = self.settings.operations.shutdown_grace if grace is None else grace
        started = asyncio.get_running_loop().time()
        self._closing = True
        for listener in self._listeners:
            listener.close()
        for watch in (self._tls_watch, self._broker_watch, self._memory_watch):
            if watch is not None:
                await cancel_and_wait(watch)
        connections = list(self._connections.values())
        if connections:
            await asyncio.wait(
                [asyncio.ensure_future(c.shut_down()) for c in connections], timeout=grace
            )
        for connection in connections:  # whoever is still waiting for confirms after the grace
            connection.session.fail(SHUTDOWN)
        tasks = list(self._connections)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        await self.pool.close()
        for listener in self._listeners:
            await listener.wait_closed()
        if self.ops is not None:
            await self.ops.close()
        if self.tracing is not None:  # the spans still buffered, in what is left of the grace
            left = grace - (asyncio.get_running_loop().time() - started)
            await self.tracing.close(max(left, TRACE_EXPORT_MIN))

    async def serve_forever(self) -> None:
        await self.start()
        await asyncio.gather(*(srv.serve_forever() for srv in self._listeners))


def _raise_fd_limit() -> None:
    """One descriptor per client: take the hard limit, which is what it is for."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY:
            hard = max(soft, 1 << 20)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # not permitted: keep what we have
        pass


def _log_failure(task: asyncio.Task[None]) -> None:
    """A client's task ended by an exception its own handlers did not take (a bug)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("unhandled exception in a client's task", exc_info=task.exception())


async def _read_proxy_header(link: TcpLink) -> tuple[ProxyInfo, bytes]:
    """The PROXY protocol header a load balancer sends first, and the bytes after it."""
    parser = ProxyHeaderParser()
    while True:
        data = await link.read()
        if not data:
            raise ConnectionError("closed before a PROXY protocol header")
        result = parser.feed(data)
        if result is not None:
            return result


async def cancel_and_wait(task: asyncio.Task) -> None:
    """Cancel ``task`` and wait for its end, cancelling again while it goes on: Python 3.11's
    ``asyncio.wait_for`` returns the result and drops a cancel that meets it (the broker watch's
    probe), and the watch then sleeps on as though never cancelled (a close waited 40 s in CI)."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.5)
    if not task.cancelled():
        task.exception()  # retrieved: an error of the watch's own is not logged again at exit
