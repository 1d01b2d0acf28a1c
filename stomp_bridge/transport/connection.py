"""One client's transport loop: bytes to frames to its session, writes, and heart-beats.

A Connection reads and writes through a :class:`Link`: a TCP stream (:class:`TcpLink`),
or a WebSocket (websocket.py); everything above the link is shared. The listeners
(server.py and websocket.py) admit a client through a :class:`Gateway`, which runs
its Connection.

The loop reads a chunk, lets the parser cut it into frames, hands each frame to
the session, then flushes the session's AMQP batch once per chunk. Not reading
while a frame is being handled is the backpressure towards the client: a slow
broker (or a blocked connection) stops the socket reads. So is not reading while
the client does not take what it was sent: past ``write_buffer_high`` bytes queued
for it (ERRORs, RECEIPTs, MESSAGEs, before login and after) the loop waits for the
link to drain, as the plugin's reader blocks on its socket, so a client that sends
and never reads costs a bounded number of bytes, not what its frames earned. A
closed connection gets ``close_timeout`` to take what is queued, then it is aborted.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Protocol

from stomp_bridge.amqp.pool import AmqpPool
from stomp_bridge.core.rules import Rules
from stomp_bridge.logs import log_frame
from stomp_bridge.metrics import Counters
from stomp_bridge.protocol.errors import ProtocolError, StompError
from stomp_bridge.protocol.frames import CLIENT_COMMANDS, flatten
from stomp_bridge.protocol.parser import FrameParser
from stomp_bridge.session.session import Session
from stomp_bridge.session.throttle import LoginThrottle
from stomp_bridge.session.tracing import Tracing
from stomp_bridge.settings import Settings
from stomp_bridge.swaptacular.certlogin import ConnectSecurity
from stomp_bridge.tls import PeerCertificate

log = logging.getLogger(__name__)

READ_SIZE = 256 * 1024
FAIR_SHARE = 64  # frames one client may have handled before the loop serves the others
SHUTDOWN = StompError("Server shutdown", "The bridge is shutting down; reconnect to another instance.")


LOGIN_COMMANDS = ("CONNECT", "STOMP")
FED = b"fed"  # what TcpLink.read returns when its on_data took the bytes into the parser itself
# Chunks from this size, and the rest of a frame begun in an earlier chunk, go through the loop:
# while it runs, the next chunks gather and are taken together (a large body arrives in
# dozens of reads; handled one by one they cost a pass and a parser step each).
SMALL_CHUNK = 16 * 1024


def set_nodelay(sock: socket.socket | None) -> None:
    """Frames go out as they are written: Nagle's delay would hold RECEIPTs and MESSAGEs."""
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # not TCP (a test's socketpair), or already closing


class Gateway(Protocol):
    """What a listener needs from the server to admit a client (server.BridgeServer).

    websocket.py runs its upgraded clients through it, so it knows this and not
    the server, which starts the WebSocket listeners.
    """

    settings: Settings
    counters: Counters
    tls_security: ConnectSecurity  # what CONNECT does on a TLS (or wss) listener

    def proxy_trusted(self, peer: tuple[str, int] | None) -> bool: ...

    async def run_connection(
        self,
        link: Link,
        peer: tuple[str, int] | None,
        initial: bytes = b"",
        credentials: tuple[str | None, str | None] | None = None,
        peer_cert: PeerCertificate | None = None,
        security: ConnectSecurity | None = None,
    ) -> None: ...


class Link(Protocol):
    """The byte stream under a Connection: TCP here, WebSocket in websocket.py.

    ``send`` gets complete STOMP frames (and heart-beat EOLs), one list element
    each, so a WebSocket link can send one message per frame as web-stomp
    does, while TCP joins them into one write. A frame with a large body may be the
    tuple (head, body, end) (``frames.VECTORED_BODY``): TCP writes its pieces with one
    vectored write, WebSocket joins them into its message.
    """

    def read(self) -> Awaitable[bytes]: ...  # next chunk of client bytes; b"" at the end
    def send(self, frames: list[bytes]) -> int: ...  # returns the bytes accepted
    def is_closing(self) -> bool: ...
    def close(self) -> None: ...  # after what was sent has gone out
    def abort(self) -> None: ...  # now, dropping whatever is still queued
    def gone(self) -> Awaitable[None]: ...  # until the socket is closed (connection_lost)
    def pause_reading(self) -> None: ...
    async def drain(self) -> None: ...  # until below the low-water mark; at once once closing
    def writable(self) -> bool: ...  # below the high-water mark now (no waiting)


class _ReadBuffer(threading.local):
    """The buffer every TcpLink of a thread's event loop reads into (get_buffer): a read and
    its buffer_updated run in one callback, so one buffer serves them all."""

    def __init__(self) -> None:
        self.view = memoryview(bytearray(READ_SIZE))


_read_buffer = _ReadBuffer()


class TcpLink(asyncio.Protocol):
    """A STOMP client on a plain TCP (or TLS) socket, read through protocol callbacks.

    Each chunk the event loop receives is handed to the parser as it came: asyncio's
    StreamReader copied every byte twice more (into its buffer, then out of it) and made a
    future per read. Reading pauses once READ_SIZE bytes wait unread, which is the
    backpressure towards a client whose frames the session is still handling.
    ``on_connect`` runs when the socket is accepted (the listener starts the client's task).

    A large body (``parser``, set by the Connection, receiving one): from the next ``read``
    until it is complete the transport reads through a buffered protocol (:class:`_BodyReader`,
    ``transport.set_protocol``) into a buffer the link gives (``get_buffer``): while the loop
    waits for bytes, the body's own buffer at the place its next bytes go (the kernel copies
    them there and nothing else does); otherwise the thread's one read buffer, copied out once.
    Small frames keep the plain protocol: a buffered read costs a call more per read. A chunk of
    SMALL_CHUNK bytes or more that arrives while the loop waits goes into the parser at once
    (``read`` then says FED), not to a bytes of its own first.
    """

    __slots__ = (
        "transport", "task", "_on_connect", "_high", "_chunks", "_size", "_waiter", "_eof", "_error",
        "_flow_paused", "_held", "_write_paused", "_drain_waiters", "_lost", "on_data", "_fed",
        "parser", "_window", "filled", "_buffered",
    )

    def __init__(self, on_connect: Callable[[TcpLink], None], high: int) -> None:
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None  # the client's task: held here, asyncio only keeps weak ones
        self._on_connect = on_connect
        self._high = high
        self._chunks: list[bytes] = []
        self._size = 0
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._error: BaseException | None = None
        self._flow_paused = False  # paused because READ_SIZE bytes wait unread
        self._held = False  # paused for good (shutdown)
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._lost: asyncio.Future[None] | None = None  # made by gone(), done by connection_lost
        # The connection's handler of a chunk that arrives while its loop waits in read(): the
        # frames handled in this callback, with no pass of the event loop before the publish
        # is written. It returns None if it did not take the bytes (the loop reads them), else
        # whether the loop must go on (a frame's job, a wait): read() then returns FED, the bytes
        # being in the parser already.
        self.on_data: Callable[[bytes | memoryview], bool | None] | None = None
        self._fed = False
        # The connection's parser: a large body's bytes are read straight into its buffer.
        self.parser: FrameParser | None = None
        self._window = False  # the last get_buffer gave the parser's body window
        self.filled = 0  # bytes read into the parser's body window, not yet counted by the loop
        self._buffered = False  # the transport reads through a _BodyReader (a large body)

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport, though they are one
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=self._high, low=self._high // 4)
        self._on_connect(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        parser = self.parser
        # Only while the loop waits for bytes (or has yet to take the window's last ones): a loop
        # busy with a frame (a publish RabbitMQ holds back) reads nothing into the window, so the
        # unread chunks, and the pause at READ_SIZE, are as before.
        if (
            parser is not None and parser.large_body is not None and not self._chunks
            and (self._waiter is not None or self._fed)
        ):
            window = parser.body_window()
            if window is not None:
                self._window = True
                return window
        self._window = False
        return _read_buffer.view

    def buffer_updated(self, nbytes: int) -> None:
        if self._window:
            self._window = False
            self.parser.body_filled(nbytes)  # type: ignore[union-attr]
            self.filled += nbytes
            self._fed = True
            self._wake()
            return
        self.data_received(_read_buffer.view[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        """A chunk: to ``on_data`` if the loop waits for bytes, else kept for ``read``. A view
        of the read buffer is copied before it is kept (the parser copies what it takes)."""
        if self._waiter is not None and not self._chunks:
            on_data = self.on_data
            if on_data is not None:
                taken = on_data(data)
                if taken is not None:
                    if taken:
                        self._fed = True
                        self._wake()
                    return
            parser = self.parser
            if parser is not None and len(data) >= SMALL_CHUNK:
                # A large chunk while the loop waits for one: into the parser now (its one copy;
                # a large body's head is parsed there, the rest goes to the body's own buffer),
                # not kept as a chunk and copied again. The loop handles its frames (FED).
                parser.feed(data)
                self.filled += len(data)
                self._fed = True
                self._wake()
                if parser.large_body is not None and not self._buffered:
                    # It began a large body: the reads that follow, in this pass of the event
                    # loop already, go into the body's buffer
                    self._read_into_body(True)
                return
        if type(data) is memoryview:
            data = data.tobytes()
        self._chunks.append(data)
        self._size += len(data)
        if self._size >= READ_SIZE and not self._flow_paused:
            self._flow_paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # Plain TCP: keep our side open, so what the client's last frames earned (a DISCONNECT's
        # RECEIPT) still goes out; the connection loop closes it once they are handled. TLS has
        # no half-close (asyncio's SSL transport closes either way), as with StreamReader.
        return self.transport is not None and self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: BaseException | None) -> None:
        self._eof = True
        self._error = exc
        self._wake()
        self._release_drain_waiters()
        lost = self._lost
        if lost is None:
            self._lost = lost = asyncio.get_running_loop().create_future()
        if not lost.done():
            lost.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._release_drain_waiters()

    def _release_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # -- Link ----------------------------------------------------------------------------

    async def read(self) -> bytes:
        """Everything received since the last call (one chunk, as a rule); b"" at the end."""
        parser = self.parser
        if parser is not None and (parser.large_body is not None) is not self._buffered:
            self._read_into_body(not self._buffered)
        if not self._chunks:
            if self._fed:  # read into the parser while the loop was busy with the last bytes
                self._fed = False
                return FED
            if self._eof:
                return b""
            while True:
                waiter = self._waiter = asyncio.get_running_loop().create_future()
                await waiter
                if self._fed:
                    self._fed = False
                    return FED
                if self._chunks or self._eof:
                    break
            if not self._chunks:
                return b""
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._size = 0
        if self._flow_paused and not self._held:
            self._flow_paused = False
            transport = self.transport
            if transport is not None and not transport.is_closing():
                transport.resume_reading()
        return data

    def _read_into_body(self, buffered: bool) -> None:
        """Read through a _BodyReader (a large body being received) or this link again."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self._buffered = buffered
        transport.set_protocol(_BodyReader(self) if buffered else self)

    def send(self, frames: list[bytes]) -> int:
        if len(frames) == 1:
            data = frames[0]
            vectored = type(data) is tuple
        else:
            try:
                data = b"".join(frames)
                vectored = False
            except TypeError:
                vectored = True
        if vectored:  # a large body's (head, body, end): one vectored write, no join
            parts = flatten(frames)
            self.transport.writelines(parts)  # type: ignore[union-attr]
            return sum(map(len, parts))
        self.transport.write(data)  # type: ignore[union-attr]
        return len(data)

    def is_closing(self) -> bool:
        transport = self.transport
        return transport is None or transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self._release_drain_waiters()  # a loop waiting for room carries on to its end
        self._chunks.clear()  # nothing is read after the close: up to READ_SIZE freed now
        self._size = 0
        self._eof = True
        self._wake()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def gone(self) -> asyncio.Future[None]:
        if self._lost is None:
            self._lost = asyncio.get_running_loop().create_future()
        return self._lost

    def pause_reading(self) -> None:
        self._held = True
        if not self._flow_paused and self.transport is not None and not self.transport.is_closing():
            self._flow_paused = True
            self.transport.pause_reading()

    def writable(self) -> bool:
        return self.transport is not None and self.transport.get_write_buffer_size() <= self._high

    async def drain(self) -> None:
        if self.is_closing():
            if self._error is not None:
                raise ConnectionResetError("Connection lost")
            return
        if not self._write_paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter


class _BodyReader(asyncio.BufferedProtocol):
    """A TcpLink's transport's protocol while a large body is received: reads into the buffer
    the link gives (TcpLink.get_buffer); everything else is the link's."""

    __slots__ = ("link",)

    def __init__(self, link: TcpLink) -> None:
        self.link = link

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.link.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.link.buffer_updated(nbytes)

    def eof_received(self) -> bool:
        return self.link.eof_received()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.link.connection_lost(exc)

    def pause_writing(self) -> None:
        self.link.pause_writing()

    def resume_writing(self) -> None:
        self.link.resume_writing()


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
        "_timers", "_abort", "session", "core", "_logging_in", "reading_since", "_held_job",
        "_beat_every", "_beat_at", "_beat_since", "_check_limit", "_check_heartbeat", "_check_at", "_heartbeat_due",
    )

    def __init__(
        self,
        link: Link,
        settings: Settings,
        rules: Rules,
        counters: Counters,
        pool: AmqpPool,
        peer: tuple[str, int] | None = None,
        initial: bytes = b"",
        credentials: tuple[str | None, str | None] | None = None,
        peer_cert: PeerCertificate | None = None,
        security: ConnectSecurity | None = None,
        throttle: LoginThrottle | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.counters = counters
        self._initial = initial  # client bytes that arrived with a PROXY protocol header
        self.link = link
        self.settings = settings
        self.loop = asyncio.get_running_loop()
        self.peer = peer[0] if peer is not None else None
        name = f"{peer[0]}:{peer[1]}" if peer is not None else "unknown"
        self.last_read = self.last_write = self.loop.time()
        # When the loop last began to wait for client bytes; None while it handles frames
        # (a SEND held by a blocked RabbitMQ connection, a full write queue): the client's
        # silence counts only while the bridge reads (STOMP 1.1 heart-beats are the client's
        # duty only towards a server that reads them; the plugin pauses its check likewise).
        self.reading_since: float | None = self.last_read
        # The live timer of each kind ("connect", "send", "check"): a rescheduled
        # timer replaces its predecessor, so a long-lived connection holds three at most.
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._abort: asyncio.TimerHandle | None = None  # a closed link's deadline to drain
        self._logging_in = False  # a CONNECT arrived: connect_timeout no longer applies
        self._held_job: object = None  # the job of a frame _on_data handled, for the loop to run
        # Heart-beats (_start_heartbeats): the send tick's period (half the interval), next
        # deadline and the last write it saw; the check's limit, kind and next deadline; the
        # deadline the one heart-beat timer is armed for.
        self._beat_every = 0.0
        self._beat_at: float | None = None
        self._beat_since: float | None = None
        self._check_limit = 0.0
        self._check_heartbeat = False
        self._check_at: float | None = None
        self._heartbeat_due = 0.0
        self.session = Session(
            rules,
            pool,
            counters,
            self._close,
            open_timeout=settings.amqp_connect_timeout,
            peer=self.peer,
            peer_name=name,
            flush_writes=self._flush_out,
            wait_writable=WriteGate(link),
            credentials=credentials,
            peer_cert=peer_cert,
            security=security,
            throttle=throttle,
            tracing=tracing,
        )
        # Frames the core writes are coalesced into one socket write. Deliveries and receipts
        # arrive one at a time from the AMQP side; a syscall each would dominate the delivery
        # path. The transport loop and the AMQP reader flush at the end of each batch they
        # handle; the ``call_soon`` covers writes from anywhere else (timers, callbacks).
        self.core = self.session.core
        self.core.wakeup = self._wakeup
        if isinstance(link, TcpLink):
            link.parser = self.core.parser  # a large body is read straight into its buffer

    def _wakeup(self) -> None:  # a bound method: a closure here was ~190 bytes of every connection
        self.loop.call_soon(self._flush_out)

    def _on_data(self, data: bytes) -> bool | None:
        """A chunk that arrived while the loop waited for one (TcpLink.on_data, once logged in):
        its frames handled here, and their publishes and answers written, in the event loop's
        pass that read them. True: the loop must go on from here (a frame's job to run, a write
        that must wait, more frames than a fair share), the rest of the bytes in the parser;
        None: not taken (a large chunk, a frame begun earlier, a client that does not read)."""
        core = self.core
        parser = core.parser
        if core.closed or len(data) >= SMALL_CHUNK or parser.buffered or not self.link.writable():
            return None  # the loop reads it (after waiting for the client to take its frames)
        self.last_read = self.loop.time()
        counters = self.counters
        counters.bytes_in += len(data)
        parser.feed(data)
        frames_in = counters.frames_in
        handle = self.session.handle
        try:
            for _ in range(FAIR_SHARE):
                frame = parser.next_frame()
                if frame is None:
                    break
                command = frame.command
                frames_in[command if command in CLIENT_COMMANDS else "other"] += 1
                job = handle(frame)
                if job is not None:
                    self._held_job = job
                    return True
                if core.closed or len(core.out) >= FAIR_SHARE:
                    return True
            else:
                return True  # a fair share handled: the loop goes on with the rest
            if not self.session.try_flush():
                return True
        except StompError as exc:  # as the loop's own handling would (it ends the connection)
            self.session.fail(exc)
            return True
        except Exception as exc:  # noqa: BLE001 - a client's bytes must never kill the bridge
            log.exception("unexpected error handling a STOMP connection")
            self.session.fail(StompError("Processing error", "Processing error", private=repr(exc)))
            return True
        self._flush_out()
        return False

    def _flush_out(self) -> None:
        out = self.core.out
        if not out:
            return
        if not self.link.is_closing():
            self.counters.bytes_out += self.link.send(out)
            self.last_write = self.loop.time()
        out.clear()

    async def _until_taken(self) -> None:
        """The client has more than write_buffer_high bytes it has not taken: read none of its
        frames until it takes them (down to a quarter), as the plugin's reader blocks on its socket.

        Without this, an ERROR that keeps the connection (Bad command, Illegal command before
        login, ...) or a RECEIPT was written whatever the client read, and a client that sent junk
        and never read drove the bridge's memory up without bound (about 29 bytes of ERROR per
        byte of junk). The client's silence meanwhile is the bridge's (``reading_since`` None).
        """
        self._flush_out()
        link = self.link
        if link.writable() or link.is_closing():
            return
        self.counters.reads_held += 1
        await link.drain()

    def _close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._flush_out()
        link = self.link
        if not link.is_closing():
            link.close()
        if self._abort is None:
            # What is queued for the client goes out first (an ERROR, a DISCONNECT's RECEIPT), but
            # a client that does not read must not keep the socket and its buffer for ever.
            self._abort = self.loop.call_later(self.settings.close_timeout, self._abort_link)

    def _abort_link(self) -> None:
        if not self.link.gone().done():
            self.counters.connections_aborted += 1
            self.link.abort()

    async def _link_gone(self) -> None:
        """Returns once the socket is closed: at once, or after close_timeout (then aborted).
        Until then the connection counts against max_connections and max_connections_per_ip."""
        try:
            await self.link.gone()
        except asyncio.CancelledError:
            self.link.abort()
            raise
        finally:
            if self._abort is not None:
                self._abort.cancel()

    async def run(self) -> None:
        session = self.session
        core = self.core
        parser = core.parser
        counters = self.counters
        frames_in = counters.frames_in
        read = self.link.read
        debug = log.isEnabledFor(logging.DEBUG)
        link = self.link
        started = self.loop.time()
        self._timers["connect"] = self.loop.call_later(self.settings.connect_timeout, self._connect_timeout)
        handled = 0
        try:
            while not core.closed:
                if not link.writable():
                    await self._until_taken()
                    if core.closed:
                        break
                if self._initial:
                    data, self._initial = self._initial, b""
                else:
                    self.reading_since = self.loop.time()
                    # Not held while the client is idle: the last frame, its finished job (~1 kB)
                    frame = job = None  # type: ignore[assignment]
                    data = await read()
                    self.reading_since = None
                if data is FED:  # _on_data took the bytes (their first frames are handled), or
                    # they were read into a large body's buffer (link.filled of them)
                    filled = getattr(link, "filled", 0)
                    if filled:
                        link.filled = 0  # type: ignore[attr-defined]
                        counters.bytes_in += filled
                        self.last_read = self.loop.time()
                    job, self._held_job = self._held_job, None
                    if job is not None:
                        await session.run(job)
                elif not data:
                    break
                else:
                    self.last_read = self.loop.time()
                    counters.bytes_in += len(data)
                    parser.feed(data)
                while not core.closed:
                    frame = parser.next_frame()
                    if frame is None:
                        break
                    handled += 1
                    if handled % FAIR_SHARE == 0:
                        # A chunk can hold thousands of frames: let other clients in meanwhile.
                        await session.flush()
                        self._flush_out()
                        if link.writable():
                            await asyncio.sleep(0)
                        else:
                            await self._until_taken()
                    # The client names the command: anything but STOMP's own is "other" (a label
                    # per invented command would grow /metrics without bound).
                    frames_in[frame.command if frame.command in CLIENT_COMMANDS else "other"] += 1
                    if debug:
                        log_frame(log, "in", self.core.peer_name, frame.command, frame.headers, frame.body)
                    connected_before = session.amqp is not None
                    if not connected_before and (
                        frame.command in LOGIN_COMMANDS or self.settings.implicit_connect
                    ):
                        # From here amqp_connect_timeout bounds the wait; other frames before
                        # login get "Illegal command" and leave connect_timeout running.
                        self._logging_in = True
                    job = session.handle(frame)
                    if job is not None:
                        await session.run(job)
                    if not connected_before and session.amqp is not None:
                        self._start_heartbeats()
                        if not debug and isinstance(link, TcpLink):
                            link.on_data = self._on_data
                    if len(core.out) >= FAIR_SHARE:  # one frame's answers (a COMMIT's): as many
                        await self._until_taken()
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
            parser.clear()  # a frame in progress, freed now rather than by the garbage collector
            await session.close()
            await self._link_gone()
            reason = self.core.close_reason or "client closed"
            counters.connections_closed[reason] += 1
            log.info(
                "connection closed",
                extra={
                    "peer": self.core.peer_name,
                    "user": self.core.user,
                    "vhost": self.core.vhost,
                    "seconds": round(self.loop.time() - started, 3),
                    "reason": reason,
                    "detail": self.core.close_detail,
                },
            )

    async def shut_down(self) -> None:
        """Stop reading the client, let held receipts go out, then ERROR and close."""
        if not self.link.is_closing():
            self.link.pause_reading()
        await self.session.receipts_sent()
        self.session.fail(SHUTDOWN)

    def _connect_timeout(self) -> None:
        if self.session.amqp is None and not self.core.closed and not self._logging_in:
            self.session.fail(
                ProtocolError(
                    "Connect timeout",
                    f"No CONNECT frame within {self.settings.connect_timeout:g} seconds",
                )
            )

    # -- heart-beats (STOMP 1.1 §Heart-beating) ------------------------------------

    def _start_heartbeats(self) -> None:
        connect = self._timers.pop("connect", None)
        if connect is not None:  # logged in: _connect_timeout has nothing left to do (~400 bytes)
            connect.cancel()
        send_ms, recv_ms = self.core.heartbeat
        now = self.loop.time()
        if send_ms:
            self._beat_every = send_ms / 1000 / 2
            self._beat_at = now + self._beat_every
        if recv_ms:
            self._check_limit, self._check_heartbeat = recv_ms / 1000 * self.settings.heartbeat_tolerance, True
        elif self.settings.idle_timeout:
            self._check_limit, self._check_heartbeat = self.settings.idle_timeout, False
        if self._check_limit:
            self._check_at = now + self._check_limit
        self._arm_heartbeat()

    def _arm_heartbeat(self) -> None:
        """One timer for both duties, armed for the earlier deadline (two timers were ~450 bytes
        each on every idle connection); each duty keeps its own pace, as with a timer of its own."""
        beat_at, check_at = self._beat_at, self._check_at
        if beat_at is None:
            if check_at is None:
                return
            due = check_at
        else:
            due = beat_at if check_at is None or beat_at <= check_at else check_at
        self._heartbeat_due = due
        self._timers["heartbeat"] = self.loop.call_at(due, self._heartbeat)

    def _heartbeat(self) -> None:
        if self.core.closed:
            return
        due = self._heartbeat_due
        beat_at = self._beat_at
        if beat_at is not None and beat_at <= due:
            self._beat()
        check_at = self._check_at
        if check_at is not None and check_at <= due and not self.core.closed:
            if not self._check():
                return  # the connection failed: no more heart-beats
        self._arm_heartbeat()

    def _beat(self) -> None:
        """The plugin's pace (rabbit_heartbeat:start_heartbeat_sender/4): a tick every half
        interval, and an EOL at a tick when nothing went out since the previous one (always at
        the first). Half, so that a frame sent just after a tick cannot stretch the silence to
        nearly twice the interval: a client that checks strictly keeps the connection."""
        since = self._beat_since
        if since is None or self.last_write <= since:
            self.core.emit(b"\n")
            self._flush_out()  # at once: last_write is then this beat's, not a frame's
        self._beat_since = self.last_write
        self._beat_at = self.loop.time() + self._beat_every

    def _check(self) -> bool:
        """The client's silence against the limit; False once it failed the connection."""
        limit = self._check_limit
        since = self.reading_since
        now = self.loop.time()
        if since is None:  # not reading: the silence is the bridge's, not the client's
            self._check_at = now + limit
            return True
        silent = now - max(self.last_read, since)
        if silent >= limit:
            self._check_at = None
            if self._check_heartbeat:
                self.counters.heartbeat_timeouts += 1
                error = ProtocolError(
                    "Heart-beat timeout",
                    f"Nothing received from the client for {silent:.1f} s "
                    f"(agreed heart-beat {self.core.heartbeat[1]} ms)",
                )
            else:
                error = ProtocolError(
                    "Idle timeout",
                    f"Nothing received for {silent:.1f} s; send heart-beats to keep an idle "
                    "connection (the bridge's idle_timeout)",
                )
            self.session.fail(error)
            return False
        self._check_at = now + (limit - silent)
        return True
