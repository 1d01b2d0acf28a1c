"""STOMP over WebSocket: a listener whose clients run the same Connection as TCP.

websockets' sans-I/O ``ServerProtocol`` does the HTTP upgrade and the framing;
this module moves bytes between it and an asyncio transport, and presents the
result to :class:`~stomp_bridge.transport.connection.Connection` as a :class:`Link`: message
payloads in as one byte stream (a STOMP frame may span messages, a message may
hold several frames), one WebSocket message out per STOMP frame or heart-beat.
Limits, metrics, shutdown and the session are the server's, unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, cast

from websockets.exceptions import PayloadTooBig
from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import OPEN, SEND_EOF
from websockets.server import ServerProtocol

from stomp_bridge.protocol import websocket as rules
from stomp_bridge.protocol.errors import FrameTooLarge, ProtocolError, StompError
from stomp_bridge.protocol.proxy import ProxyHeaderParser, ProxyProtocolError
from stomp_bridge.tls import peer_certificate
from stomp_bridge.transport.connection import Gateway, set_nodelay

if TYPE_CHECKING:
    from stomp_bridge.settings import Settings

log = logging.getLogger(__name__)
# websockets logs every opened and closed connection at INFO; the bridge's own
# lines (server.py) already say that, so its wire log stays at WARNING.
_wire_log = logging.getLogger("stomp_bridge.transport.websocket.wire")
_wire_log.setLevel(logging.WARNING)

# websockets' defaults for permessage-deflate: 12-bit windows each way and memLevel 5, about
# 40 KB of zlib state per connection that negotiates it, against 256 KB at zlib's maximum;
# STOMP frames are small, so a larger window would buy little.
COMPRESSION = [
    ServerPerMessageDeflateFactory(
        server_max_window_bits=12, client_max_window_bits=12, compress_settings={"memLevel": 5}
    )
]
READ_BUFFER = 256 * 1024  # payload bytes queued for the Connection before reading pauses


async def listen(
    server: Gateway, host: str | None, port: int, ssl: ssl.SSLContext | None = None, *,
    reuse_port: bool = False,
) -> asyncio.base_events.Server:
    settings = server.settings
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: WebSocketLink(server, settings),
        settings.host if host is None else host,
        port,
        ssl=ssl,
        reuse_port=reuse_port,
    )


class WebSocketLink(asyncio.Protocol):
    """One WebSocket client: the HTTP upgrade, then the Link its Connection reads and writes."""

    def __init__(self, server: Gateway, settings: Settings) -> None:
        self.server = server
        self.settings = settings
        self.loop = asyncio.get_running_loop()
        # max_size bounds a message, across its fragments, from each frame's header: more is
        # refused unread (1009). permessage-deflate (ws_compression, on as in web-stomp) inflates
        # a compressed message at most max_size bytes far (zlib's max_length), so a deflate bomb
        # costs no more memory than a plain message; without it, a compressed message is a
        # protocol error (1002) and nothing is inflated.
        self.ws = ServerProtocol(
            select_subprotocol=lambda _, offered: rules.select_subprotocol(offered),
            extensions=COMPRESSION if settings.ws_compression else None,
            max_size=settings.ws_max_message_size or settings.max_frame_size,
            logger=_wire_log,
        )
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None  # the Connection's, once upgraded
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._eof = False
        self._error: StompError | None = None  # raised by read() once queued payloads are read
        self._held_close: list[bytes] | None = None  # websockets' close frame, sent after our ERROR
        self._reader: asyncio.Future[None] | None = None
        self._reading_paused = False  # by the buffer bound
        self._paused = False  # by shutdown; stays paused
        self._write_blocked = False  # by the write buffer: the client does not take what it is sent
        self._writable: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._lost: asyncio.Future[None] = self.loop.create_future()
        # proxy_protocol: a load balancer's PROXY header comes before the HTTP request.
        self._proxy = ProxyHeaderParser() if settings.proxy_protocol else None
        self._peer: tuple[str, int] | None = None
        self._refused = False  # an untrusted peer where a PROXY header is due: nothing is read

    # -- asyncio.Protocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, but have its methods.
        self.transport = transport = cast(asyncio.Transport, transport)
        high = self.settings.write_buffer_high
        transport.set_write_buffer_limits(high=high, low=high // 4)
        set_nodelay(transport.get_extra_info("socket"))
        # The upgrade request has the same deadline as CONNECT on TCP.
        self._timer = self.loop.call_later(self.settings.connect_timeout, transport.abort)
        if self._proxy is not None:
            peername = transport.get_extra_info("peername")
            if not self.server.proxy_trusted(peername if isinstance(peername, tuple) else None):
                self._refused = True  # closed as for a bad PROXY header: no HTTP spoken yet
                transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._proxy is not None:
            data = self._proxy_header(data)
            if not data:
                return
        ws = self.ws
        ws.receive_data(data)
        for event in ws.events_received():
            if isinstance(event, Request):
                self._on_request(event)
            elif event.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                if event.data:
                    self._push(event.data)
            elif event.opcode is Opcode.CLOSE:
                self._end()  # the client closed; websockets has answered it
        if ws.parser_exc is not None and self.task is not None and self._error is None:
            self._fail(ws.parser_exc)
            return
        self._write_pending()

    def eof_received(self) -> bool | None:
        self.ws.receive_eof()
        self._end()
        self._write_pending()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()
        if not self._lost.done():
            self._lost.set_result(None)
        if self._timer is not None:
            self._timer.cancel()
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self.loop.create_future()
        # Nothing more is read from a client that does not take what it is sent: websockets
        # answers pings (and the Connection answers frames) as they are read, so reading on
        # would queue its pongs without bound.
        transport = self.transport
        if not self._write_blocked and transport is not None and not transport.is_closing():
            self._write_blocked = True
            if not (self._paused or self._reading_paused):
                transport.pause_reading()

    def resume_writing(self) -> None:
        self._release_writable()
        transport = self.transport
        if self._write_blocked:
            self._write_blocked = False
            if transport is not None and not transport.is_closing() and not (self._paused or self._reading_paused):
                transport.resume_reading()

    def _release_writable(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    # -- the upgrade -----------------------------------------------------------------

    def _on_request(self, request: Request) -> None:
        ws = self.ws
        s = self.settings
        credentials = None
        try:
            path = request.path.partition("?")[0]
            if "websocket" not in request.headers.get("Upgrade", "").lower():
                raise rules.HandshakeRefused(426, rules.not_websocket_text(s.ws_path), "")
            if path != s.ws_path:
                raise rules.HandshakeRefused(404, rules.wrong_path_text(path, s.ws_path), "")
            origin = request.headers.get("Origin")
            if not rules.origin_allowed(origin, s.ws_allowed_origins):
                raise rules.HandshakeRefused(
                    403,
                    f"stomp-bridge: Origin {origin} may not connect; the bridge's ws_allowed_origins "
                    "lists the pages that may.\n",
                    "origin",
                )
            if s.ws_use_http_auth:
                credentials = rules.basic_credentials(request.headers.get("Authorization"))
                if credentials is None:
                    if s.default_user is None:
                        raise rules.HandshakeRefused(
                            401, "stomp-bridge: log in with HTTP Basic credentials.\n", "http_auth"
                        )
                    credentials = (s.default_user, s.default_pass)
        except rules.HandshakeRefused as refused:
            if refused.limit:
                self.server.counters.connections_refused[refused.limit] += 1
            response = ws.reject(refused.status, refused.text)
            if refused.status == 426:
                response.headers["Upgrade"] = "websocket"
            elif refused.status == 401:
                response.headers["WWW-Authenticate"] = 'Basic realm="stomp-bridge"'
            ws.send_response(response)
            return
        response = ws.accept(request)
        ws.send_response(response)
        if response.status_code != 101:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        assert self.transport is not None
        peer = self._peer
        if peer is None:
            peername = self.transport.get_extra_info("peername")
            peer = (peername[0], peername[1]) if isinstance(peername, tuple) else None
        self._write_pending()  # the 101 goes out before any STOMP frame
        self.server.counters.websocket_upgrades += 1
        self.task = self.loop.create_task(self._serve(peer, credentials))

    async def _serve(self, peer: tuple[str, int] | None, credentials: tuple[str | None, str | None] | None) -> None:
        # wss: the client certificate and the TLS listeners' certificate login and profile.
        ssl_object = self.transport.get_extra_info("ssl_object") if self.transport is not None else None
        await self.server.run_connection(
            self, peer, credentials=credentials, peer_cert=peer_certificate(ssl_object),
            security=self.server.tls_security if ssl_object is not None else None,
        )
        # The task ends with the closing handshake, so the server's shutdown waits for it too.
        try:
            await asyncio.wait_for(asyncio.shield(self._lost), self.settings.close_timeout)
        except asyncio.TimeoutError:
            if self.transport is not None:
                self.transport.abort()
        except asyncio.CancelledError:
            if self.transport is not None:
                self.transport.abort()
            raise

    def _proxy_header(self, data: bytes) -> bytes:
        """The bytes after the PROXY header once it is complete; b"" until then."""
        assert self._proxy is not None and self.transport is not None
        try:
            result = self._proxy.feed(data)
        except ProxyProtocolError as exc:
            self.server.counters.connections_refused["proxy_protocol"] += 1
            log.debug("websocket refused", extra={"reason": "Invalid PROXY protocol header", "detail": exc.detail})
            self._proxy = None
            self.transport.close()
            return b""
        if result is None:
            return b""
        info, rest = result
        self._proxy = None
        self._peer = info.source
        return rest

    # -- the Link a Connection uses -------------------------------------------------

    async def read(self) -> bytes:
        while not self._chunks:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if self._eof:
                return b""
            self._reader = self.loop.create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        if self._reading_paused:
            self._reading_paused = False
            if not (self._paused or self._write_blocked) and self.transport is not None:
                self.transport.resume_reading()
        return data

    def send(self, frames: list[bytes]) -> int:
        ws = self.ws
        sent = 0
        if ws.state is OPEN:
            for frame in frames:
                if type(frame) is tuple:  # a large body's (head, body, end): one message
                    frame = b"".join(frame)
                if rules.is_text(frame):
                    ws.send_text(frame)
                else:
                    ws.send_binary(frame)
                sent += len(frame)
            self._write_pending()
        elif self._held_close is not None and self.transport is not None:
            # websockets failed the connection (message too big, bad framing) and
            # holds its close frame; the session's ERROR still goes before it.
            for frame in frames:
                if type(frame) is tuple:
                    frame = b"".join(frame)
                opcode = Opcode.TEXT if rules.is_text(frame) else Opcode.BINARY
                self.transport.write(Frame(opcode, frame).serialize(mask=False, extensions=ws.extensions))
                sent += len(frame)
        return sent

    def is_closing(self) -> bool:
        transport = self.transport
        return (
            transport is None
            or transport.is_closing()
            or (self.ws.state is not OPEN and self._held_close is None)
        )

    def close(self) -> None:
        """Close frame after everything sent so far; the TCP close follows the client's answer."""
        ws = self.ws
        if self._held_close is not None:
            held, self._held_close = self._held_close, None
            self._write(held)
        elif ws.state is OPEN:
            ws.send_close(CloseCode.NORMAL_CLOSURE)
            self._write_pending()
        self._end()
        self._release_writable()  # a loop waiting for room carries on to its end
        self._chunks.clear()  # nothing is read after the close: up to READ_BUFFER freed now
        self._buffered = 0
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if self._paused or self._reading_paused:
                # The client's answering close frame must get in, whoever paused reading; once it
                # takes what it was sent, if writing holds reading (resume_writing).
                self._paused = self._reading_paused = False
                if not self._write_blocked:
                    transport.resume_reading()
            if self._timer is None:
                # close_timeout for the client's answering close frame, then the TCP close
                self._timer = self.loop.call_later(self.settings.close_timeout, transport.abort)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def gone(self) -> asyncio.Future[None]:
        return self._lost

    def pause_reading(self) -> None:
        self._paused = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    async def drain(self) -> None:
        if self._writable is not None and not self.is_closing():
            await asyncio.shield(self._writable)

    def writable(self) -> bool:
        return self._writable is None

    def write_buffer_size(self) -> int:
        transport = self.transport
        return 0 if transport is None else transport.get_write_buffer_size()

    # -- internals -----------------------------------------------------------------------

    def _push(self, payload: bytes) -> None:
        if self._eof:
            return  # after a close frame nobody reads
        self._chunks.append(payload)
        self._buffered += len(payload)
        self._wake()
        if self._buffered >= READ_BUFFER and not self._reading_paused and self.transport is not None:
            self._reading_paused = True  # the Connection reads again when it is ready: backpressure
            if not (self._paused or self._write_blocked):
                self.transport.pause_reading()

    def _end(self) -> None:
        self._eof = True
        self._wake()

    def _wake(self) -> None:
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)

    def _fail(self, exc: Exception) -> None:
        """websockets refused a message: its close frame waits until the session's ERROR is out."""
        self._held_close = self.ws.data_to_send()
        if isinstance(exc, PayloadTooBig):
            limit = self.settings.ws_max_message_size or self.settings.max_frame_size
            self._error = FrameTooLarge(
                "Frame too large", f"WebSocket message larger than {limit} bytes (ws_max_message_size)"
            )
        elif isinstance(exc, EOFError):
            self._held_close = None
            self._write([])
            self._end()
            return
        else:
            self._error = ProtocolError("Invalid WebSocket frame", f"{exc}")
        self._wake()

    def _write_pending(self) -> None:
        self._write(self.ws.data_to_send())

    def _write(self, data: list[bytes]) -> None:
        """One transport write for a batch of WebSocket frames (one syscall, as TCP's)."""
        transport = self.transport
        if transport is None or transport.is_closing() or not data:
            return
        eof = data[-1] == SEND_EOF  # websockets ends the stream only after its last frame
        if eof:
            data = data[:-1]
        if len(data) == 1:
            transport.write(data[0])
        elif data:
            transport.write(b"".join(data))
        if eof:  # the server closes TCP first (RFC 6455 §7.1.1)
            if transport.can_write_eof():
                transport.write_eof()
                if self._timer is None:
                    self._timer = self.loop.call_later(self.settings.close_timeout, transport.abort)
            else:
                transport.close()

