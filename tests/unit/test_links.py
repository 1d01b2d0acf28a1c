"""BridgeServer.run_connection through a Link: what a listener hands over before a session exists."""

from __future__ import annotations

from stomp_bridge.transport.server import BridgeServer
from stomp_bridge.settings import Settings


class RecordingLink:
    """A Link that keeps what is sent; no socket."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed = False

    async def read(self) -> bytes:
        return b""

    def send(self, frames: list[bytes]) -> int:
        self.sent.extend(frames)
        return sum(map(len, frames))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    async def drain(self) -> None:
        pass


async def test_a_client_accepted_while_shutting_down_gets_server_shutdown():
    server = BridgeServer(Settings(port=0, ws_port=None, http_port=None))
    server._closing = True
    link = RecordingLink()
    await server.run_connection(link, ("127.0.0.1", 40000))
    assert link.closed
    assert [frame.split(b"\n", 2)[:2] for frame in link.sent] == [[b"ERROR", b"message:Server shutdown"]]
    assert server.connection_count == 0
    assert server.counters.connections_opened == 0


async def test_refusal_by_limit_goes_through_the_link():
    server = BridgeServer(Settings(port=0, ws_port=None, http_port=None, max_connections_per_ip=1))
    server._per_ip["127.0.0.1"] = 1  # one client of that address is already connected
    link = RecordingLink()
    await server.run_connection(link, ("127.0.0.1", 40001))
    assert link.closed
    assert b"message:Too many connections" in link.sent[0]
    assert server.counters.connections_refused["per_ip"] == 1


# -- TcpLink: the protocol-callback link under every TCP and TLS client ------------------------

class FakeTransport:
    """What TcpLink uses of a transport, recording reads paused and bytes written."""

    def __init__(self) -> None:
        self.paused = False
        self.closing = False
        self.written: list[bytes] = []
        self.buffered = 0
        self.extra: dict = {}
        self.aborted = False

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        self.limits = (high, low)

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = self.aborted = True

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def writelines(self, parts) -> None:
        self.written.append(list(parts))

    def set_protocol(self, protocol) -> None:
        self.protocol = protocol

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def get_extra_info(self, name: str, default=None):
        return self.extra.get(name, default)



class ParserReceiver:
    """A TcpLink's receiver (transport.connection.Receiver) that is only a parser: what the
    session does with what the link reads itself, without the session."""

    def __init__(self, parser) -> None:
        self.parser = parser

    def feed(self, data) -> None:
        self.parser.feed(data)

    def receiving_body(self) -> bool:
        return self.parser.large_body is not None

    def body_window(self):
        return self.parser.body_window()

    def body_filled(self, nbytes: int) -> None:
        self.parser.body_filled(nbytes)

def _tcp_link():
    import asyncio

    from stomp_bridge.transport.connection import TcpLink

    started = []
    link = TcpLink(started.append, high=1000)
    transport = FakeTransport()
    link.connection_made(transport)
    assert started == [link] and transport.limits == (1000, 250)
    return link, transport, asyncio


async def test_tcp_link_hands_over_each_chunk_as_received_and_ends_with_empty_bytes():
    link, transport, asyncio = _tcp_link()
    link.data_received(b"CONNECT\n")
    link.data_received(b"\n\0")
    assert await link.read() == b"CONNECT\n\n\0"  # what arrived since the last read, joined
    pending = asyncio.ensure_future(link.read())
    await asyncio.sleep(0)
    assert not pending.done()  # waits for bytes
    link.data_received(b"SEND")
    assert await pending == b"SEND"
    link.eof_received()
    assert await link.read() == b""


async def test_tcp_link_pauses_reading_at_read_size_and_resumes_once_read():
    from stomp_bridge.transport.connection import READ_SIZE

    link, transport, _ = _tcp_link()
    link.data_received(b"x" * (READ_SIZE - 1))
    assert not transport.paused
    link.data_received(b"x")
    assert transport.paused  # the session is behind: the client waits
    assert len(await link.read()) == READ_SIZE
    assert not transport.paused


async def test_tcp_link_paused_for_shutdown_stays_paused():
    from stomp_bridge.transport.connection import READ_SIZE

    link, transport, _ = _tcp_link()
    link.data_received(b"x" * READ_SIZE)
    link.pause_reading()
    await link.read()
    assert transport.paused


async def test_tcp_link_drain_waits_while_writing_is_paused_and_not_after_the_end():
    link, transport, asyncio = _tcp_link()
    await link.drain()  # not paused: at once
    link.pause_writing()
    waiting = asyncio.ensure_future(link.drain())
    await asyncio.sleep(0)
    assert not waiting.done()
    link.resume_writing()
    await waiting
    link.pause_writing()
    waiting = asyncio.ensure_future(link.drain())
    await asyncio.sleep(0)
    link.connection_lost(ConnectionResetError())
    await waiting  # released by the end of the connection, never left hanging
    assert link.send([b"a", b"b"]) == 2 and transport.written == [b"ab"]


async def test_tcp_link_keeps_its_side_open_after_the_clients_eof_except_over_tls():
    """A client may half-close after DISCONNECT and still wait for its RECEIPT."""
    link, transport, _ = _tcp_link()
    assert link.eof_received() is True  # plain TCP: the loop closes once the last frames are handled
    assert await link.read() == b""
    tls_link, tls_transport, _ = _tcp_link()
    tls_transport.extra["sslcontext"] = object()
    assert tls_link.eof_received() is False


async def test_tcp_link_close_releases_a_loop_waiting_for_room_and_gone_waits_for_the_socket():
    """A connection closed while its client does not read (an ERROR after a junk flood) must not
    leave its loop waiting for room that never comes; ``gone`` is the socket's real end."""
    link, transport, asyncio = _tcp_link()
    link.pause_writing()
    waiting = asyncio.ensure_future(link.drain())
    gone = link.gone()
    await asyncio.sleep(0)
    assert not waiting.done()
    link.close()
    await waiting
    assert not gone.done()  # closing: what is queued may still go out
    link.abort()
    assert transport.aborted
    link.connection_lost(None)
    assert gone.done() and link.gone() is gone


async def test_tcp_link_gone_after_the_end_is_done_at_once():
    link, _, _ = _tcp_link()
    link.connection_lost(ConnectionResetError())
    assert link.gone().done()


def _recv_into(link, data: bytes) -> bool:
    """What the event loop does for a buffered protocol: get_buffer, read into it,
    buffer_updated. True: the bytes went to the parser's body window."""
    buffer = link.get_buffer(-1)
    size = min(len(data), len(buffer))
    buffer[:size] = data[:size]
    window = link._window
    link.buffer_updated(size)
    return window


async def test_tcp_link_reads_a_large_body_into_the_parsers_buffer_while_the_loop_waits_for_bytes():
    from stomp_bridge.protocol.parser import FrameParser
    from stomp_bridge.transport.connection import FED

    link, transport, asyncio = _tcp_link()
    parser = FrameParser()
    link.receiver = ParserReceiver(parser)
    body = bytes(i % 241 for i in range(300_000))
    wire = b"SEND\ndestination:/queue/a\ncontent-length:%d\n\n" % len(body) + body + b"\0"
    # Not collecting a body: the shared read buffer, handed over as bytes of their own.
    assert not _recv_into(link, wire[:80_000])
    data = await link.read()
    assert type(data) is bytes and data == wire[:80_000]
    parser.feed(data)
    assert parser.next_frame() is None  # a large body begun: its buffer is allocated
    # The loop is busy (not waiting in read): bytes are kept for it, the window is not used.
    assert not _recv_into(link, wire[80_000:100_000])
    assert await link.read() == wire[80_000:100_000]
    # From this read on the transport reads through a buffered protocol (the link's buffers).
    assert isinstance(transport.protocol, asyncio.BufferedProtocol) and transport.protocol.link is link
    parser.feed(wire[80_000:100_000])
    # The loop waits for bytes: straight into the body's buffer, and read() says FED.
    reading = asyncio.ensure_future(link.read())
    await asyncio.sleep(0)
    assert _recv_into(link, wire[100_000:250_000])
    assert _recv_into(link, wire[250_000:])  # before the loop ran: still the window
    assert await reading is FED and link.filled == len(wire) - 100_000
    frame = parser.next_frame()
    assert frame is not None and frame.body == body
    # The body done, the link reads as a plain protocol again (a buffered read costs a call more).
    reading = asyncio.ensure_future(link.read())
    await asyncio.sleep(0)
    assert transport.protocol is link
    assert not _recv_into(link, b"ACK\nid:1\n\n\0")
    assert await reading == b"ACK\nid:1\n\n\0"


async def test_tcp_link_writes_a_large_bodys_frame_with_one_vectored_write():
    link, transport, _ = _tcp_link()
    body = bytearray(b"b" * 100_000)
    frames = [b"RECEIPT\nreceipt-id:1\n\n\0", (b"MESSAGE\ncontent-length:100000\n\n", body, b"\0"), b"\n"]
    assert link.send(frames) == sum(map(len, (frames[0], *frames[1], frames[2])))
    (parts,) = transport.written
    assert parts[0] == frames[0] + frames[1][0] and parts[1] is body and parts[2:] == [b"\0\n"]
    assert link.send([frames[1]]) == 100_000 + len(frames[1][0]) + 1
    assert transport.written[1][1] is body
    assert link.send([b"a", b"b"]) == 2 and transport.written[2] == b"ab"


# -- WebSocketLink: reading stops while writing is paused (pings are answered as they are read) --

class FakeGateway:
    def __init__(self, settings) -> None:
        self.settings = settings


async def test_websocket_link_stops_reading_while_its_client_does_not_take_what_it_is_sent():
    from stomp_bridge.transport.websocket import WebSocketLink

    link = WebSocketLink(FakeGateway(Settings(ws_port=0, port=None, http_port=None)), Settings(port=None))
    transport = FakeTransport()
    link.connection_made(transport)
    link.pause_writing()
    assert transport.paused and not link.writable()
    link.resume_writing()
    assert not transport.paused and link.writable()
    link.pause_reading()  # shutdown holds reading for good: resuming writes does not undo it
    link.pause_writing()
    link.resume_writing()
    assert transport.paused


async def test_tcp_link_close_drops_what_was_received_and_not_read():
    """Nothing is read after the close; READ_SIZE bytes need not wait for the garbage collector."""
    link, transport, asyncio = _tcp_link()
    link.data_received(b"x" * 1000)
    link.close()
    assert transport.closing and await asyncio.wait_for(link.read(), 1) == b""


async def test_tcp_link_feeds_a_large_chunk_to_the_parser_while_the_loop_waits_for_bytes():
    """One copy (read buffer to parser), not a bytes of the chunk first; small chunks and chunks
    while the loop is busy take the usual way."""
    from stomp_bridge.protocol.parser import FrameParser
    from stomp_bridge.transport.connection import FED, SMALL_CHUNK

    link, transport, asyncio = _tcp_link()
    parser = FrameParser()
    link.receiver = ParserReceiver(parser)
    frames = b"".join(b"SEND\ndestination:/queue/a\n\n%d\0" % i for i in range(2000))
    assert len(frames) >= SMALL_CHUNK
    reading = asyncio.ensure_future(link.read())
    await asyncio.sleep(0)
    assert not _recv_into(link, frames)
    assert await reading is FED and link.filled == len(frames)
    assert [f.body for f in iter(parser.next_frame, None)] == [b"%d" % i for i in range(2000)]
    reading = asyncio.ensure_future(link.read())
    await asyncio.sleep(0)
    assert not _recv_into(link, b"SEND\n\nsmall\0")  # small: read() returns it
    assert await reading == b"SEND\n\nsmall\0"


async def test_tcp_link_reads_through_a_buffered_protocol_from_the_chunk_that_begins_a_large_body():
    """The switch happens in the read callback itself, so the reads that follow in the same pass
    of the event loop already go into the body's buffer; back to the plain protocol once done."""
    from stomp_bridge.protocol.parser import FrameParser
    from stomp_bridge.transport.connection import FED

    link, transport, asyncio = _tcp_link()
    parser = FrameParser()
    link.receiver = ParserReceiver(parser)
    body = b"B" * 500_000
    wire = b"SEND\ndestination:/queue/a\ncontent-length:%d\n\n" % len(body) + body + b"\0"
    reading = asyncio.ensure_future(link.read())
    await asyncio.sleep(0)
    link.data_received(wire[:100_000])  # a plain protocol's read
    assert isinstance(transport.protocol, asyncio.BufferedProtocol)
    assert _recv_into(link, wire[100_000:])  # the next read, before the loop ran: into the body
    assert await reading is FED
    assert parser.next_frame().body == body
    reading = asyncio.ensure_future(link.read())
    await asyncio.sleep(0)
    assert transport.protocol is link
    reading.cancel()
