"""One client's transport loop: bytes to frames to its session, writes, and heart-beats.

A Connection reads and writes through a :class:`Link`: a TCP stream (:class:`TcpLink`),
or a WebSocket (websocket.py); everything above the link is shared. The listeners
(server.py and websocket.py) admit a client through a :class:`Gateway`, which runs
its Connection.

The loop reads a chunk and hands it to the session, which cuts it into frames and handles them
(a fair share at a time), then flushes its AMQP batch once per chunk. Not reading
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

from stomp_bridge.amqp.errors import describe
from stomp_bridge.amqp.pool import AmqpPool
from stomp_bridge.core.rules import Rules
from stomp_bridge.metrics import Counters
from stomp_bridge.protocol.errors import ProtocolError, StompError
from stomp_bridge.protocol.frames import flatten
from stomp_bridge.session.session import Session
from stomp_bridge.session.fanout import FanoutHub
from stomp_bridge.session.throttle import LoginThrottle
from stomp_bridge.session.tracing import Tracing
from stomp_bridge.settings import Settings
from stomp_bridge.swaptacular.certlogin import ConnectSecurity
from stomp_bridge.tls import PeerCertificate

log = logging.getLogger(__name__)

READ_SIZE = 256 * 1024
SHUTDOWN = StompError("Server shutdown", "The bridge is shutting down; reconnect to another instance.")


FED = b"fed"  # what TcpLink.read returns when its on_data (or the receiver) took the bytes itself
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
    def write_buffer_size(self) -> int: ...  # bytes sent that the client has not taken yet


class Receiver(Protocol):
    """Where a TcpLink puts what it reads itself (the connection's session): a large chunk, and a
    large body read straight into its buffer."""

    def feed(self, data: bytes | memoryview) -> None: ...
    def receiving_body(self) -> bool: ...  # a large body is being received
    def body_window(self) -> memoryview | None: ...  # where its next bytes go
    def body_filled(self, nbytes: int) -> None: ...  # that many went there


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

    A large body (``receiver``, set by the Connection, receiving one): from the next ``read``
    until it is complete the transport reads through a buffered protocol (:class:`_BodyReader`,
    ``transport.set_protocol``) into a buffer the link gives (``get_buffer``): while the loop
    waits for bytes, the body's own buffer at the place its next bytes go (the kernel copies
    them there and nothing else does); otherwise the thread's one read buffer, copied out once.
    Small frames keep the plain protocol: a buffered read costs a call more per read. A chunk of
    SMALL_CHUNK bytes or more that arrives while the loop waits goes to the receiver at once
    (``read`` then says FED), not to a bytes of its own first.
    """

    __slots__ = (
        "transport", "task", "_on_connect", "_high", "_chunks", "_size", "_waiter", "_eof", "_error",
        "_flow_paused", "_held", "_write_paused", "_drain_waiters", "_lost", "on_data", "_fed",
        "receiver", "_window", "filled", "_buffered",
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
        # being with the receiver already.
        self.on_data: Callable[[bytes | memoryview], bool | None] | None = None
        self._fed = False
        # The connection's session: a large body's bytes are read straight into its buffer.
        self.receiver: Receiver | None = None
        self._window = False  # the last get_buffer gave the receiver's body window
        self.filled = 0  # bytes read into the receiver's body window, not yet counted by the loop
        self._buffered = False  # the transport reads through a _BodyReader (a large body)

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport, though they are one
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=self._high, low=self._high // 4)
        self._on_connect(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        receiver = self.receiver
        # Only while the loop waits for bytes (or has yet to take the window's last ones): a loop
        # busy with a frame (a publish RabbitMQ holds back) reads nothing into the window, so the
        # unread chunks, and the pause at READ_SIZE, are as before.
        if (
            receiver is not None and not self._chunks and (self._waiter is not None or self._fed)
            and receiver.receiving_body()
        ):
            window = receiver.body_window()
            if window is not None:
                self._window = True
                return window
        self._window = False
        return _read_buffer.view

    def buffer_updated(self, nbytes: int) -> None:
        if self._window:
            self._window = False
            self.receiver.body_filled(nbytes)  # type: ignore[union-attr]
            self.filled += nbytes
            self._fed = True
            self._wake()
            return
        self.data_received(_read_buffer.view[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        """A chunk: to ``on_data`` if the loop waits for bytes, else kept for ``read``. A view
        of the read buffer is copied before it is kept (the receiver copies what it takes)."""
        if self._waiter is not None and not self._chunks:
            on_data = self.on_data
            if on_data is not None:
                taken = on_data(data)
                if taken is not None:
                    if taken:
                        self._fed = True
                        self._wake()
                    return
            receiver = self.receiver
            if receiver is not None and len(data) >= SMALL_CHUNK:
                # A large chunk while the loop waits for one: to the receiver now (its one copy;
                # a large body's head is parsed there, the rest goes to the body's own buffer),
                # not kept as a chunk and copied again. The loop handles its frames (FED).
                receiver.feed(data)
                self.filled += len(data)
                self._fed = True
                self._wake()
                if receiver.receiving_body() and not self._buffered:
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
        receiver = self.receiver
        if receiver is not None and receiver.receiving_body() is not self._buffered:
            self._read_into_body(not self._buffered)
        if not self._chunks:
            if self._fed:  # read into the receiver while the loop was busy with the last bytes
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

    def write_buffer_size(self) -> int:
        transport = self.transport
        return 0 if transport is None else transport.get_write_buffer_size()

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
    """One client: its bytes to the session, the session's frames to the link, and heart-beats."""

    __slots__ = (
        "counters", "_initial", "link", "settings", "loop", "peer", "last_read", "last_write",
        "_timers", "_abort", "session", "reading_since",
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
        fanout: FanoutHub | None = None,
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
        # The live heart-beat timer: a rescheduled timer replaces its predecessor.
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._abort: asyncio.TimerHandle | None = None  # a closed link's deadline to drain
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
            write=self._write,
            close_transport=self._close,
            open_timeout=settings.amqp_connect_timeout,
            writable=link.writable,
            wait_writable=WriteGate(link),
            on_open=self._opened,
            peer=self.peer,
            peer_name=name,
            credentials=credentials,
            peer_cert=peer_cert,
            security=security,
            throttle=throttle,
            tracing=tracing,
            hub=fanout,
            backlog=link.write_buffer_size,
        )
        if isinstance(link, TcpLink):
            link.receiver = self.session  # a large body is read straight into its buffer

    def _write(self, frames: list[bytes]) -> None:
        """The session's frames to the client (coalesced by the session into one write per pass)."""
        link = self.link
        if not link.is_closing():
            self.counters.bytes_out += link.send(frames)
            self.last_write = self.loop.time()

    def _opened(self) -> None:
        """Logged in: heart-beats start, and a TCP link hands over what it reads at once."""
        self._start_heartbeats()
        if isinstance(self.link, TcpLink):
            self.link.on_data = self._on_data

    def _on_data(self, data: bytes | memoryview) -> bool | None:
        """A chunk that arrived while the loop waited for one (TcpLink.on_data, once logged in):
        its frames handled in the event loop's pass that read them (``Session.receive_now``).
        True: the loop must go on from here (a frame's job, a write that must wait, more frames
        than a fair share); None: not taken (a large chunk, a frame begun earlier, a client that
        does not read)."""
        session = self.session
        if len(data) >= SMALL_CHUNK or not self.link.writable():
            return None  # the loop reads it (after waiting for the client to take its frames)
        try:
            done = session.receive_now(data)
            if done is None:
                return None  # the loop reads it (the rest of a frame begun, or the session's end)
            self.last_read = self.loop.time()
            self.counters.bytes_in += len(data)
            return not done
        except StompError as exc:  # as the loop's own handling would (it ends the connection)
            session.fail(exc)
        except Exception as exc:  # noqa: BLE001 - a client's bytes must never kill the bridge
            log.exception("unexpected error handling a STOMP connection")
            session.fail(StompError("Processing error", "Processing error",
                                    private=f"{type(exc).__name__}: {describe(exc)}"))
        return True

    async def _until_taken(self) -> None:
        """The client has more than write_buffer_high bytes it has not taken: read none of its
        frames until it takes them (down to a quarter), as the plugin's reader blocks on its socket.

        Without this, an ERROR that keeps the connection (Bad command, Illegal command before
        login, ...) or a RECEIPT was written whatever the client read, and a client that sent junk
        and never read drove the bridge's memory up without bound (about 29 bytes of ERROR per
        byte of junk). The client's silence meanwhile is the bridge's (``reading_since`` None).
        """
        self.session.flush_out()
        link = self.link
        if link.writable() or link.is_closing():
            return
        self.counters.reads_held += 1
        await link.drain()

    def _close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self.session.flush_out()
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
        """Read the client's bytes and hand them to the session until the connection ends."""
        session = self.session
        counters = self.counters
        read = self.link.read
        link = self.link
        started = self.loop.time()
        session.start()
        try:
            while not session.closed:
                if not link.writable():
                    await self._until_taken()
                    if session.closed:
                        break
                if self._initial:
                    data, self._initial = self._initial, b""
                else:
                    self.reading_since = self.loop.time()
                    data = await read()
                    self.reading_since = None
                if data is FED:  # _on_data took the bytes (their first frames are handled), or
                    # they were read into a large body's buffer (link.filled of them)
                    filled = getattr(link, "filled", 0)
                    if filled:
                        link.filled = 0  # type: ignore[attr-defined]
                        counters.bytes_in += filled
                        self.last_read = self.loop.time()
                    await session.receive()
                elif not data:
                    break
                else:
                    self.last_read = self.loop.time()
                    counters.bytes_in += len(data)
                    await session.receive(data)
        except StompError as exc:
            session.fail(exc)
        except (ConnectionError, OSError):
            pass
        except Exception as exc:  # noqa: BLE001 - a client's bytes must never kill the bridge
            log.exception("unexpected error handling a STOMP connection")
            session.fail(StompError("Processing error", "Processing error",
                                    private=f"{type(exc).__name__}: {describe(exc)}"))
        finally:
            self._close()
            await session.close()
            await self._link_gone()
            reason, extra = session.ended()
            counters.connections_closed[reason] += 1
            log.info("connection closed", extra={**extra, "seconds": round(self.loop.time() - started, 3)})

    async def shut_down(self) -> None:
        """Stop reading the client, let held receipts go out, then ERROR and close."""
        if not self.link.is_closing():
            self.link.pause_reading()
        await self.session.receipts_sent()
        self.session.fail(SHUTDOWN)

    # -- heart-beats (STOMP 1.1 §Heart-beating) ------------------------------------

    def _start_heartbeats(self) -> None:
        send_ms, recv_ms = self.session.heartbeat
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
        if self.session.closed:
            return
        due = self._heartbeat_due
        beat_at = self._beat_at
        if beat_at is not None and beat_at <= due:
            self._beat()
        check_at = self._check_at
        if check_at is not None and check_at <= due and not self.session.closed:
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
            self.session.send_heartbeat()  # at once: last_write is then this beat's, not a frame's
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
                    f"(agreed heart-beat {self.session.heartbeat[1]} ms)",
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
