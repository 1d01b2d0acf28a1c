"""Listeners, the per-connection transport loop, heart-beats, and shutdown.

A Connection reads and writes through a :class:`Link`: a TCP stream here, a
WebSocket in websocket.py; everything above the link is shared.

The transport reads a chunk, lets the parser cut it into frames, hands each
frame to the session, then flushes the session's AMQP batch once per chunk.
Not reading while a frame is being handled is the backpressure towards the
client: a slow broker (or a blocked connection) stops the socket reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import resource
import socket
import ssl
from collections.abc import Awaitable
from typing import Any, Protocol

from stomp_bridge.transport import websocket
from stomp_bridge.amqp.channel import pool_for
from stomp_bridge.protocol.errors import ProtocolError, StompError
from stomp_bridge.amqp.endpoints import Endpoints
from stomp_bridge.http import OpsServer
from stomp_bridge.logs import log_frame
from stomp_bridge.metrics import Counters, Metrics
from stomp_bridge.protocol.frames import CLIENT_COMMANDS, END, END_LF, Frame, serialize
from stomp_bridge.protocol.proxy import (
    ProxyHeaderParser, ProxyInfo, ProxyProtocolError, ProxyTrust, UntrustedProxy,
)
from stomp_bridge.swaptacular.certlogin import CertLogin, ConnectSecurity, amqp_client_context
from stomp_bridge.session.session import Session
from stomp_bridge.settings import Settings, mask_url
from stomp_bridge.swaptacular.profile import SwaptacularProfile
from stomp_bridge.session.throttle import LoginThrottle
from stomp_bridge.tls import PeerCertificate, ServerTLS, certificate_summary, peer_certificate

log = logging.getLogger(__name__)

READ_SIZE = 256 * 1024
TLS_SHUTDOWN_TIMEOUT = 2.0
FAIR_SHARE = 64  # frames one client may have handled before the loop serves the others
SHUTDOWN = StompError("Server shutdown", "The bridge is shutting down; reconnect to another instance.")


LOGIN_COMMANDS = ("CONNECT", "STOMP")


class Link(Protocol):
    """The byte stream under a Connection: TCP here, WebSocket in websocket.py.

    ``send`` gets complete STOMP frames (and heart-beat EOLs), one list element
    each, so a WebSocket link can send one message per frame as web-stomp
    does, while TCP joins them into one write.
    """

    def read(self) -> Awaitable[bytes]: ...  # next chunk of client bytes; b"" at the end
    def send(self, frames: list[bytes]) -> int: ...  # returns the bytes accepted
    def is_closing(self) -> bool: ...
    def close(self) -> None: ...  # after what was sent has gone out
    def pause_reading(self) -> None: ...
    async def drain(self) -> None: ...  # until below the high-water mark
    def writable(self) -> bool: ...  # below the high-water mark now (no waiting)


class TcpLink:
    """A STOMP client on a plain TCP (or TLS) stream."""

    __slots__ = ("read", "is_closing", "close", "pause_reading", "_transport", "_writer", "_high")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, high: int) -> None:
        transport = writer.transport
        transport.set_write_buffer_limits(high=high, low=high // 4)
        self.read = functools.partial(reader.read, READ_SIZE)
        self.is_closing = transport.is_closing
        self.close = transport.close
        self.pause_reading = transport.pause_reading
        self._transport = transport
        self._writer = writer
        self._high = high

    def writable(self) -> bool:
        return self._transport.get_write_buffer_size() <= self._high

    def send(self, frames: list[bytes]) -> int:
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        self._transport.write(data)
        return len(data)

    async def drain(self) -> None:
        await self._writer.drain()


class WriteGate:
    """The client's backpressure as the AMQP side sees it.

    Awaiting it returns once the link is below its high-water mark;
    ``is_open()`` says whether it is, without waiting (checked once per batch
    of deliveries, to decide whether to acknowledge them to RabbitMQ now).
    """

    __slots__ = ("link",)

    def __init__(self, link: Link) -> None:
        self.link = link

    def is_open(self) -> bool:
        link = self.link
        return link.is_closing() or link.writable()

    async def __call__(self) -> None:
        if self.link.is_closing():
            return
        try:
            await self.link.drain()
        except (ConnectionError, RuntimeError):
            pass  # the connection is ending; its own loop cleans up


class Connection:
    """One client: bytes to frames to the session, and heart-beats."""

    __slots__ = (
        "counters", "_initial", "link", "settings", "loop", "peer", "last_read", "last_write",
        "_timers", "_out", "session", "_logging_in",
    )

    def __init__(
        self,
        link: Link,
        settings: Settings,
        counters: Counters,
        endpoints: Endpoints,
        peer: tuple[str, int] | None = None,
        initial: bytes = b"",
        credentials: tuple[str | None, str | None] | None = None,
        peer_cert: PeerCertificate | None = None,
        security: ConnectSecurity | None = None,
        throttle: LoginThrottle | None = None,
    ) -> None:
        self.counters = counters
        self._initial = initial  # client bytes that arrived with a PROXY protocol header
        self.link = link
        self.settings = settings
        self.loop = asyncio.get_running_loop()
        self.peer = peer[0] if peer is not None else None
        name = f"{peer[0]}:{peer[1]}" if peer is not None else "unknown"
        self.last_read = self.last_write = self.loop.time()
        # The live timer of each kind ("connect", "send", "check"): a rescheduled
        # timer replaces its predecessor, so a long-lived connection holds three at most.
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._out: list[bytes] = []
        self._logging_in = False  # a CONNECT arrived: connect_timeout no longer applies
        self.session = Session(
            settings,
            self._write,
            self._close,
            peer=self.peer,
            peer_name=name,
            flush_writes=self._flush_out,
            wait_writable=WriteGate(link),
            counters=counters,
            endpoints=endpoints,
            credentials=credentials,
            peer_cert=peer_cert,
            security=security,
            throttle=throttle,
        )

    def _write(self, data: bytes) -> None:
        """Coalesce frames into one socket write.

        Deliveries and receipts arrive one at a time from the AMQP side; a
        syscall each would dominate the delivery path. The transport loop and
        the AMQP reader flush at the end of each batch they handle; the
        ``call_soon`` covers writes from anywhere else (timers, callbacks).
        """
        out = self._out
        if not out:
            self.loop.call_soon(self._flush_out)
        out.append(data)

    def _flush_out(self) -> None:
        out = self._out
        if not out:
            return
        if not self.link.is_closing():
            self.counters.bytes_out += self.link.send(out)
            self.last_write = self.loop.time()
        out.clear()

    def _close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._flush_out()
        if not self.link.is_closing():
            self.link.close()

    async def run(self) -> None:
        session = self.session
        parser = session.parser
        counters = self.counters
        frames_in = counters.frames_in
        read = self.link.read
        debug = log.isEnabledFor(logging.DEBUG)
        started = self.loop.time()
        self._timers["connect"] = self.loop.call_later(self.settings.connect_timeout, self._connect_timeout)
        handled = 0
        try:
            while not session.closed:
                data, self._initial = self._initial or await read(), b""
                if not data:
                    break
                self.last_read = self.loop.time()
                counters.bytes_in += len(data)
                parser.feed(data)
                while not session.closed:
                    frame = parser.next_frame()
                    if frame is None:
                        break
                    handled += 1
                    if handled % FAIR_SHARE == 0:
                        # A chunk can hold thousands of frames: let other clients in meanwhile.
                        await session.flush()
                        self._flush_out()
                        await asyncio.sleep(0)
                    # The client names the command: anything but STOMP's own is "other" (a label
                    # per invented command would grow /metrics without bound).
                    frames_in[frame.command if frame.command in CLIENT_COMMANDS else "other"] += 1
                    if debug:
                        log_frame(log, "in", session.peer_name, frame.command, frame.headers, frame.body)
                    connected_before = session.amqp is not None
                    if not connected_before and (
                        frame.command in LOGIN_COMMANDS or self.settings.implicit_connect
                    ):
                        # From here amqp_connect_timeout bounds the wait; other frames before
                        # login get "Illegal command" and leave connect_timeout running.
                        self._logging_in = True
                    await session.handle(frame)
                    if not connected_before and session.amqp is not None:
                        self._start_heartbeats()
                await session.flush()
                self._flush_out()
        except StompError as exc:
            session.fail(exc)
        except (ConnectionError, OSError):
            pass
        except Exception as exc:  # noqa: BLE001 - a client's bytes must never kill the bridge
            log.exception("unexpected error handling a STOMP connection")
            session.fail(StompError("Processing error", "Processing error", private=repr(exc)))
        finally:
            self._close()
            await session.close()
            reason = session.close_reason or "client closed"
            counters.connections_closed[reason] += 1
            log.info(
                "connection closed",
                extra={
                    "peer": session.peer_name,
                    "user": session.user,
                    "vhost": session.vhost,
                    "seconds": round(self.loop.time() - started, 3),
                    "reason": reason,
                    "detail": session.close_detail,
                },
            )

    async def shut_down(self) -> None:
        """Stop reading the client, let held receipts go out, then ERROR and close."""
        if not self.link.is_closing():
            self.link.pause_reading()
        await self.session.receipts_sent()
        self.session.fail(SHUTDOWN)

    def _connect_timeout(self) -> None:
        if self.session.amqp is None and not self.session.closed and not self._logging_in:
            self.session.fail(
                ProtocolError(
                    "Connect timeout",
                    f"No CONNECT frame within {self.settings.connect_timeout:g} seconds",
                )
            )

    # -- heart-beats (STOMP 1.1 §Heart-beating) ------------------------------------

    def _start_heartbeats(self) -> None:
        send_ms, recv_ms = self.session.heartbeat
        if send_ms:
            self._schedule_send(send_ms / 1000)
        if recv_ms:
            self._schedule_check(recv_ms / 1000 * self.settings.heartbeat_tolerance, heartbeat=True)
        elif self.settings.idle_timeout:
            self._schedule_check(self.settings.idle_timeout, heartbeat=False)

    def _schedule_send(self, interval: float) -> None:
        def beat() -> None:
            if self.session.closed:
                return
            idle = self.loop.time() - self.last_write
            if idle >= interval * 0.9:
                self._write(b"\n")
                idle = 0.0
            self._timers["send"] = self.loop.call_later(interval - idle, beat)

        self._timers["send"] = self.loop.call_later(interval, beat)

    def _schedule_check(self, limit: float, *, heartbeat: bool) -> None:
        def check() -> None:
            if self.session.closed:
                return
            silent = self.loop.time() - self.last_read
            if silent >= limit:
                if heartbeat:
                    self.counters.heartbeat_timeouts += 1
                    error = ProtocolError(
                        "Heart-beat timeout",
                        f"Nothing received from the client for {silent:.1f} s "
                        f"(agreed heart-beat {self.session.heartbeat[1]} ms)",
                    )
                else:
                    error = ProtocolError(
                        "Idle timeout",
                        f"Nothing received for {silent:.1f} s; send heart-beats to keep an idle "
                        "connection (the bridge's idle_timeout)",
                    )
                self.session.fail(error)
                return
            self._timers["check"] = self.loop.call_later(limit - silent, check)

        self._timers["check"] = self.loop.call_later(limit, check)


class BridgeServer:
    """The STOMP listener, the operations endpoint, and the registry of live connections."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._server: asyncio.base_events.Server | None = None
        self._listeners: list[asyncio.base_events.Server] = []  # every listener, closed together
        self.ws: asyncio.base_events.Server | None = None
        self.wss: asyncio.base_events.Server | None = None
        self._connections: dict[asyncio.Task[Any], Connection] = {}
        self._per_ip: dict[str, int] = {}
        self._closing = False
        self.endpoints = Endpoints(settings.amqp_url)
        self.throttle = LoginThrottle(settings.login_failures_per_minute)
        self.pool = pool_for(
            self.endpoints,
            settings.amqp_heartbeat,
            settings.amqp_connect_timeout,
            channels_per_connection=settings.amqp_channels_per_connection,
            min_connections=settings.amqp_min_connections_per_login,
            reuse_seconds=settings.amqp_login_reuse_seconds,
            auto_ack_window=settings.auto_ack_window,
            login_cache_seconds=settings.amqp_login_cache_seconds,
        )
        self.metrics = Metrics(self._live)
        self.counters = self.metrics.counters
        # Who may send a PROXY header (proxy_protocol): the load balancers, no one else.
        self.proxy_trust = ProxyTrust.from_cidrs(settings.proxy_protocol_trusted)
        self.ops: OpsServer | None = None
        # TLS: one reloadable context for the TLS and wss listeners, and what CONNECT
        # does with a client certificate there.
        amqp_context = amqp_client_context(settings)
        self.security = ConnectSecurity(amqp_context=amqp_context)
        self.tls: ServerTLS | None = None
        self.tls_security = self.security
        self._tls_server: asyncio.base_events.Server | None = None
        self._tls_watch: asyncio.Task[None] | None = None
        if settings.tls_port is not None or settings.wss_port is not None:
            self.tls = ServerTLS.from_settings(settings)
            self.tls.on_handshake_failure = self._tls_handshake_failed
            self.tls_security = ConnectSecurity(
                cert_login=CertLogin(settings) if settings.ssl_cert_login else None,
                profile=SwaptacularProfile(settings) if settings.profile == "swaptacular" else None,
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
        s = self.settings
        _raise_fd_limit()
        if s.port is not None:
            self._server = await asyncio.start_server(self._handle, s.host, s.port, limit=READ_SIZE)
            self._listeners.append(self._server)
        if s.tls_port is not None:
            assert self.tls is not None
            self._tls_server = await asyncio.start_server(
                functools.partial(self._handle, security=self.tls_security),
                s.host,
                s.tls_port,
                limit=READ_SIZE,
                ssl=self.tls.context,
                ssl_handshake_timeout=s.connect_timeout,
                # After an ERROR the TLS close waits for the client's close_notify; a client that
                # never answers must not hold its socket (and AMQP connection) for long.
                ssl_shutdown_timeout=TLS_SHUTDOWN_TIMEOUT,
            )
            self._listeners.append(self._tls_server)
        if s.ws_port is not None:
            self.ws = await websocket.listen(self, s.ws_host, s.ws_port)
            self._listeners.append(self.ws)
        if s.wss_port is not None:
            assert self.tls is not None
            self.wss = await websocket.listen(self, s.ws_host, s.wss_port, ssl=self.tls.context)
            self._listeners.append(self.wss)
        if self.tls is not None and s.tls_reload_interval:
            self._tls_watch = asyncio.ensure_future(self._watch_tls(s.tls_reload_interval))
        if s.http_port is not None:
            self.ops = OpsServer(s.http_host, s.http_port, self.metrics.render, self.ready)
            await self.ops.start()
        log.info(
            "stomp-bridge listening",
            extra={
                "host": s.host,
                "port": self.port if self._server is not None else None,
                "tls_port": self.tls_port if self._tls_server is not None else None,
                "profile": s.profile,
                **({"tls_" + k: v for k, v in certificate_summary(s.tls_cert_file).items()}
                   if self.tls is not None and s.tls_cert_file else {}),
                "ws_port": self.ws_port,
                "wss_port": self.wss_port,
                "http_port": self.ops.port if self.ops else None,
                "amqp": ",".join(mask_url(url) for url in self.endpoints.urls),
            },
        )

    def _live(self) -> dict[str, float]:
        connections = list(self._connections.values())
        return {
            "connections": len(connections),
            "receipts_pending": sum(c.session.receipts_pending for c in connections),
            "amqp_connections": self.pool.connection_count,
            "login_checks": self.pool.login_checks,
        }

    async def ready(self) -> tuple[bool, str]:
        """Ready while accepting STOMP connections and a RabbitMQ node answers on its AMQP port."""
        if self._closing or not self._listeners or not all(srv.is_serving() for srv in self._listeners):
            return False, "not accepting connections"
        problems = []
        for index in range(len(self.endpoints.urls)):
            host, port = self.endpoints.address(index)
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2.0)
            except (OSError, asyncio.TimeoutError) as exc:
                problems.append(f"RabbitMQ at {host}:{port} is not reachable ({exc.__class__.__name__})")
                continue
            writer.close()
            return True, "ready"
        return False, "; ".join(problems)

    def _refusal(self, peer: str | None) -> tuple[str, str] | None:
        s = self.settings
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

    async def _handle(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        security: ConnectSecurity | None = None,
    ) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        link = TcpLink(reader, writer, self.settings.write_buffer_high)
        peername = writer.get_extra_info("peername")
        peer = (peername[0], peername[1]) if isinstance(peername, tuple) else None
        initial = b""
        ssl_object = writer.get_extra_info("ssl_object")
        if self.settings.proxy_protocol and ssl_object is None:
            if not self.proxy_trusted(peer):
                untrusted = UntrustedProxy(peer[0] if peer is not None else None)
                self._refuse(link, untrusted.message, untrusted.detail)
                return
            try:
                info, initial = await asyncio.wait_for(_read_proxy_header(reader), self.settings.connect_timeout)
            except (ProxyProtocolError, asyncio.TimeoutError, ConnectionError) as exc:
                self.counters.connections_refused["proxy_protocol"] += 1
                detail = exc.detail if isinstance(exc, ProxyProtocolError) else (
                    "No PROXY protocol header; proxy_protocol is on, so every connection must come "
                    "through a load balancer that sends one."
                )
                self._refuse(link, "Invalid PROXY protocol header", detail)
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
        if self._closing:  # accepted just before close() stopped the listeners
            self._refuse(link, SHUTDOWN.message, SHUTDOWN.detail)
            return
        ip = peer[0] if peer is not None else None
        refusal = self._refusal(ip)
        if refusal is not None:
            limit, detail = refusal
            self.counters.connections_refused[limit] += 1
            self._refuse(link, "Too many connections", detail)
            return
        task = asyncio.current_task()
        assert task is not None
        connection = Connection(
            link, self.settings, self.counters, self.endpoints, peer=peer, initial=initial,
            credentials=credentials, peer_cert=peer_cert, security=security or self.security,
            throttle=self.throttle,
        )
        self._connections[task] = connection
        self.counters.connections_opened += 1
        if ip is not None:
            self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        try:
            await connection.run()
        finally:
            self._connections.pop(task, None)
            if ip is not None:
                left = self._per_ip.get(ip, 1) - 1
                if left:
                    self._per_ip[ip] = left
                else:
                    self._per_ip.pop(ip, None)

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

    def _refuse(self, link: Link, message: str, detail: str) -> None:
        headers = {"message": message, "content-type": "text/plain"}
        end = END_LF if self.settings.trailing_lf else END
        link.send([serialize(Frame("ERROR", headers, detail.encode()), "1.2", end)])
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
        grace = self.settings.shutdown_grace if grace is None else grace
        self._closing = True
        for listener in self._listeners:
            listener.close()
        if self._tls_watch is not None:
            self._tls_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tls_watch
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


async def _read_proxy_header(reader: asyncio.StreamReader) -> tuple[ProxyInfo, bytes]:
    """The PROXY protocol header a load balancer sends first, and the bytes after it."""
    parser = ProxyHeaderParser()
    while True:
        data = await reader.read(4096)
        if not data:
            raise ConnectionError("closed before a PROXY protocol header")
        result = parser.feed(data)
        if result is not None:
            return result

