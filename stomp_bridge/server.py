"""Listeners, the per-connection transport loop, heart-beats, and shutdown.

The transport reads a chunk, lets the parser cut it into frames, hands each
frame to the session, then flushes the session's AMQP batch once per chunk.
Not reading while a frame is being handled is the backpressure towards the
client: a slow broker (or a blocked connection) stops the socket reads.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from .protocol.errors import ProtocolError, StompError
from .endpoints import Endpoints
from .http import OpsServer
from .logs import log_frame
from .metrics import Counters, Metrics
from .protocol.frames import Frame, serialize
from .protocol.proxy import ProxyHeaderParser, ProxyInfo, ProxyProtocolError
from .session import Session
from .settings import Settings, mask_url

log = logging.getLogger(__name__)

READ_SIZE = 256 * 1024
SHUTDOWN = StompError("Server shutdown", "The bridge is shutting down; reconnect to another instance.")


class Connection:
    """One client socket: bytes to frames to the session, and heart-beats."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        settings: Settings,
        counters: Counters,
        endpoints: Endpoints,
        peer: tuple[str, int] | None = None,
        initial: bytes = b"",
    ) -> None:
        self.counters = counters
        self._initial = initial  # client bytes that arrived with a PROXY protocol header
        self.reader = reader
        self.writer = writer
        self.settings = settings
        self.loop = asyncio.get_running_loop()
        self.transport = writer.transport
        if peer is None:
            peername = writer.get_extra_info("peername")
            peer = (peername[0], peername[1]) if isinstance(peername, tuple) else None
        self.peer = peer[0] if peer is not None else None
        name = f"{peer[0]}:{peer[1]}" if peer is not None else "unknown"
        self.last_read = self.last_write = self.loop.time()
        self._timers: list[asyncio.TimerHandle] = []
        self._out: list[bytes] = []
        self.transport.set_write_buffer_limits(
            high=settings.write_buffer_high, low=settings.write_buffer_high // 4
        )
        self.session = Session(
            settings,
            self._write,
            self._close,
            peer=self.peer,
            peer_name=name,
            flush_writes=self._flush_out,
            wait_writable=self._wait_writable,
            counters=counters,
            endpoints=endpoints,
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
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        if not self.transport.is_closing():
            self.transport.write(data)
            self.last_write = self.loop.time()
            self.counters.bytes_out += len(data)

    async def _wait_writable(self) -> None:
        """Returns once the client's socket buffer is below its high-water mark."""
        if self.transport.is_closing():
            return
        try:
            await self.writer.drain()
        except (ConnectionError, RuntimeError):
            pass  # the connection is ending; its own loop cleans up

    def _close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        self._flush_out()
        if not self.transport.is_closing():
            self.transport.close()

    async def run(self) -> None:
        session = self.session
        parser = session.parser
        counters = self.counters
        frames_in = counters.frames_in
        debug = log.isEnabledFor(logging.DEBUG)
        started = self.loop.time()
        self._timers.append(self.loop.call_later(self.settings.connect_timeout, self._connect_timeout))
        try:
            while not session.closed:
                data, self._initial = self._initial or await self.reader.read(READ_SIZE), b""
                if not data:
                    break
                self.last_read = self.loop.time()
                counters.bytes_in += len(data)
                parser.feed(data)
                while not session.closed:
                    frame = parser.next_frame()
                    if frame is None:
                        break
                    frames_in[frame.command] += 1
                    if debug:
                        log_frame(log, "in", session.peer_name, frame.command, frame.headers, frame.body)
                    connected_before = session.amqp is not None
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
        if not self.transport.is_closing():
            self.transport.pause_reading()
        await self.session.receipts_sent()
        self.session.fail(SHUTDOWN)

    def _connect_timeout(self) -> None:
        if self.session.amqp is None and not self.session.closed:
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
            self._timers.append(self.loop.call_later(interval - idle, beat))

        self._timers.append(self.loop.call_later(interval, beat))

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
            self._timers.append(self.loop.call_later(limit - silent, check))

        self._timers.append(self.loop.call_later(limit, check))


class BridgeServer:
    """The STOMP listener, the operations endpoint, and the registry of live connections."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[asyncio.Task[Any], Connection] = {}
        self._per_ip: dict[str, int] = {}
        self._closing = False
        self.endpoints = Endpoints(settings.amqp_url)
        self.metrics = Metrics(self._live)
        self.counters = self.metrics.counters
        self.ops: OpsServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        s = self.settings
        self._server = await asyncio.start_server(self._handle, s.host, s.port, limit=READ_SIZE)
        if s.http_port is not None:
            self.ops = OpsServer(s.http_host, s.http_port, self.metrics.render, self.ready)
            await self.ops.start()
        log.info(
            "stomp-bridge listening",
            extra={
                "host": s.host,
                "port": self.port,
                "http_port": self.ops.port if self.ops else None,
                "amqp": ",".join(mask_url(url) for url in self.endpoints.urls),
            },
        )

    def _live(self) -> dict[str, float]:
        connections = list(self._connections.values())
        return {
            "connections": len(connections),
            "receipts_pending": sum(c.session.receipts_pending for c in connections),
        }

    async def ready(self) -> tuple[bool, str]:
        """Ready while accepting STOMP connections and a RabbitMQ node answers on its AMQP port."""
        if self._closing or self._server is None or not self._server.is_serving():
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

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peername = writer.get_extra_info("peername")
        peer = (peername[0], peername[1]) if isinstance(peername, tuple) else None
        initial = b""
        if self.settings.proxy_protocol:
            try:
                info, initial = await asyncio.wait_for(_read_proxy_header(reader), self.settings.connect_timeout)
            except (ProxyProtocolError, asyncio.TimeoutError, ConnectionError) as exc:
                self.counters.connections_refused["proxy_protocol"] += 1
                detail = exc.detail if isinstance(exc, ProxyProtocolError) else (
                    "No PROXY protocol header; proxy_protocol is on, so every connection must come "
                    "through a load balancer that sends one."
                )
                self._refuse(writer, "Invalid PROXY protocol header", detail)
                return
            if info.source is not None:
                peer = info.source
        ip = peer[0] if peer is not None else None
        refusal = self._refusal(ip)
        if refusal is not None:
            limit, detail = refusal
            self.counters.connections_refused[limit] += 1
            self._refuse(writer, "Too many connections", detail)
            return
        task = asyncio.current_task()
        assert task is not None
        connection = Connection(
            reader, writer, self.settings, self.counters, self.endpoints, peer=peer, initial=initial
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

    @staticmethod
    def _refuse(writer: asyncio.StreamWriter, message: str, detail: str) -> None:
        headers = {"message": message, "content-type": "text/plain"}
        writer.write(serialize(Frame("ERROR", headers, detail.encode()), "1.2"))
        writer.close()

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
        if self._server is not None:
            self._server.close()
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
        if self._server is not None:
            await self._server.wait_closed()
        if self.ops is not None:
            await self.ops.close()

    async def serve_forever(self) -> None:
        await self.start()
        assert self._server is not None
        await self._server.serve_forever()


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

