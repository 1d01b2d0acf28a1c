"""FaultProxy against a small threaded echo server (no RabbitMQ)."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from typing import Self

import pytest

from testkit.faultproxy import FaultProxy

WAIT = 5.0  # upper bound on every wait that should succeed
QUIET = 0.3  # how long "nothing arrives" is watched for (a negative cannot wait on an event)


class EchoServer:
    """Echoes every byte back; counts bytes received and connections ended."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.received = 0
        self.ended = 0
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    while data := self.request.recv(65536):
                        with outer.cond:
                            outer.received += len(data)
                            outer.cond.notify_all()
                        self.request.sendall(data)
                except OSError:
                    pass
                finally:
                    with outer.cond:
                        outer.ended += 1
                        outer.cond.notify_all()

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.address = self.server.server_address[:2]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def wait(self, predicate, timeout: float = WAIT) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(WAIT)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    with EchoServer() as server:
        yield server


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy(echo.address) as p:
        yield p


def connect(proxy: FaultProxy) -> socket.socket:
    sock = socket.create_connection(proxy.address, timeout=WAIT)
    sock.settimeout(WAIT)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def assert_closed(sock: socket.socket) -> None:
    """The peer closed: a read sees a reset or EOF (never a timeout)."""
    try:
        data = sock.recv(1024)
    except ConnectionResetError:
        return
    assert data == b""


def assert_reset_at_once(proxy: FaultProxy) -> None:
    """A new connection is reset: at connect (the RST can beat connect's return) or first read."""
    try:
        sock = connect(proxy)
    except ConnectionResetError:
        return
    with sock:
        assert_closed(sock)


def roundtrip(sock: socket.socket, payload: bytes = b"ping") -> bytes:
    sock.sendall(payload)
    return recv_exactly(sock, len(payload))


def test_forwards_both_ways_and_counts_the_connection(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        assert roundtrip(sock, b"hello") == b"hello"
        assert proxy.connections == 1
        assert proxy.total_connections == 1


def test_forwards_a_large_payload_both_ways_with_backpressure(proxy: FaultProxy) -> None:
    payload = os.urandom(8 * 1024 * 1024)
    with connect(proxy) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,), daemon=True)
        sender.start()
        assert recv_exactly(sock, len(payload)) == payload
        sender.join(WAIT)
        assert not sender.is_alive()


def test_half_close_travels_through_and_the_connection_ends(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)
        assert recv_exactly(sock, 10) == b"last words"
        assert sock.recv(1) == b""  # the echo server saw EOF and closed: so do we
    proxy.wait_connections(0, WAIT, exact=True)
    assert echo.wait(lambda: echo.ended == 1)


def test_cut_resets_both_sides_and_new_connections_still_work(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as a, connect(proxy) as b:
        assert roundtrip(a) == roundtrip(b) == b"ping"
        proxy.wait_connections(2, WAIT)
        proxy.cut()
        assert proxy.connections == 0  # cut returns once they are closed
        assert_closed(a)
        assert_closed(b)
        assert echo.wait(lambda: echo.ended == 2)  # the upstream side was closed too
    with connect(proxy) as c:
        assert roundtrip(c) == b"ping"
        assert proxy.total_connections == 3


def test_cut_sends_a_reset(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        assert roundtrip(sock) == b"ping"
        proxy.cut()
        with pytest.raises(ConnectionResetError):
            sock.recv(1024)


def test_refuse_resets_current_and_new_connections_until_restore(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as old:
        assert roundtrip(old) == b"ping"
        proxy.refuse()
        assert proxy.connections == 0
        assert_closed(old)
    assert_reset_at_once(proxy)  # the port still listens: accepted, then reset at once
    assert proxy.refused == 1
    assert proxy.connections == 0
    assert proxy.total_connections == 1
    proxy.restore()
    with connect(proxy) as back:
        assert roundtrip(back) == b"ping"
    assert proxy.total_connections == 2


def test_refuse_with_closed_listener_gives_connection_refused_and_restore_rebinds(proxy: FaultProxy) -> None:
    port = proxy.port
    with connect(proxy) as old:
        assert roundtrip(old) == b"ping"
        proxy.refuse(close_listener=True)
        assert_closed(old)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(proxy.address, timeout=WAIT).close()
    proxy.restore()
    assert proxy.port == port
    with connect(proxy) as back:
        assert roundtrip(back) == b"ping"


def test_target_down_resets_the_client_and_counts_nothing() -> None:
    with socket.socket() as unused:  # a port with nothing listening
        unused.bind(("127.0.0.1", 0))
        dead = unused.getsockname()
    with FaultProxy(dead) as p:
        assert_reset_at_once(p)
        assert p.connections == 0
        assert p.total_connections == 0


def test_delay_adds_latency_in_each_direction(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        assert roundtrip(sock) == b"ping"
        proxy.delay(0.2)
        start = time.monotonic()
        assert roundtrip(sock) == b"ping"
        elapsed = time.monotonic() - start
        assert 0.4 <= elapsed < 0.4 + 2.0  # client -> echo and echo -> client
        proxy.delay(0)
        start = time.monotonic()
        assert roundtrip(sock) == b"ping"
        assert time.monotonic() - start < 0.2


def test_clearing_the_delay_releases_bytes_already_held(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        proxy.delay(60)
        start = time.monotonic()
        sock.sendall(b"held")
        assert not echo.wait(lambda: echo.received > 0, QUIET)
        proxy.delay(0)
        assert recv_exactly(sock, 4) == b"held"
        assert time.monotonic() - start < WAIT


def test_pause_holds_bytes_without_closing_and_resume_delivers_them(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    with connect(proxy) as sock:
        assert roundtrip(sock) == b"ping"
        proxy.pause()
        sock.sendall(b"held")
        assert not echo.wait(lambda: echo.received > 4, QUIET)
        assert proxy.connections == 1
        assert echo.ended == 0
        proxy.resume()
        assert recv_exactly(sock, 4) == b"held"


def test_pause_holds_bytes_the_target_sends_unasked() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(WAIT)
        with FaultProxy(listener.getsockname()[:2]) as p, connect(p) as client:
            upstream, _ = listener.accept()
            with upstream:
                p.pause()
                upstream.sendall(b"greeting")
                client.settimeout(QUIET)
                with pytest.raises(TimeoutError):
                    client.recv(1024)
                client.settimeout(WAIT)
                p.resume()
                assert recv_exactly(client, 8) == b"greeting"


def test_wait_connections_blocks_until_enough_are_live(proxy: FaultProxy) -> None:
    opened: list[socket.socket] = []
    opener = threading.Thread(target=lambda: opened.extend(connect(proxy) for _ in range(3)), daemon=True)
    opener.start()
    assert proxy.wait_connections(3, WAIT) == 3
    opener.join(WAIT)
    opened.pop().close()
    assert proxy.wait_connections(2, WAIT, exact=True) == 2
    for sock in opened:
        sock.close()
    assert proxy.wait_connections(0, WAIT, exact=True) == 0
    assert proxy.total_connections == 3


def test_wait_connections_times_out(proxy: FaultProxy) -> None:
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="at least 1 live"):
        proxy.wait_connections(1, 0.1)
    assert time.monotonic() - start < WAIT


def test_stop_closes_everything_and_the_port(echo: EchoServer) -> None:
    p = FaultProxy(echo.address).start()
    sock = connect(p)
    assert roundtrip(sock) == b"ping"
    thread = p._thread
    p.stop()
    assert thread is not None and not thread.is_alive()
    assert_closed(sock)
    sock.close()
    assert echo.wait(lambda: echo.ended == 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(p.address, timeout=WAIT).close()
    p.stop()  # twice is fine
    with pytest.raises(RuntimeError, match="not running"):
        p.cut()


def test_stop_before_start_is_a_no_op() -> None:
    FaultProxy(("127.0.0.1", 1)).stop()
