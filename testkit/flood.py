"""Clients that write and never read: junk floods for the hostile harness and the tests.

A client that sends frames and does not read the answers must cost the server a
bounded amount of memory: the bridge stops reading it once ``write_buffer_high``
bytes wait for it, as RabbitMQ's plugin stops once its socket send blocks. These
clients write through a socket with a small receive buffer (so what the server
sends piles up on its side, not in ours) and say how much they got through before
the server stopped reading them. Plain TCP, TLS (a wrapped socket) and WebSocket
(:func:`ws_upgrade`, then :func:`ws_frame` around each message) alike.
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
import time

# Each earns an ERROR that keeps the connection ("Bad command" after login, "Illegal command"
# before, as from the plugin): about 18 times its size in ERROR frames.
JUNK = b"JUNK\n\n\0"
RCVBUF = 4096  # the client's receive buffer: the server's answers wait on the server's side


def unread_socket(port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> socket.socket:
    """A TCP connection whose receive buffer is small, set before the handshake (the window)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    sock.settimeout(timeout)
    sock.connect((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_frame(sock: socket.socket, timeout: float = 20.0) -> bytes:
    """Read up to the end of one frame (the login's CONNECTED or ERROR); the last read."""
    sock.settimeout(timeout)
    data = b""
    while b"\0" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    return data


def login(sock: socket.socket, vhost: str = "/", user: str = "guest", passcode: str = "guest",
          send=None) -> None:
    """CONNECT and read CONNECTED: the one read such a client makes. ``send`` frames it
    (a WebSocket message); reading a WebSocket reply works as its frame is small and unmasked."""
    frame = (f"CONNECT\naccept-version:1.2\nhost:{vhost}\nlogin:{user}\npasscode:{passcode}\n"
             "heart-beat:0,0\n\n\0").encode()
    sock.sendall(send(frame) if send is not None else frame)
    reply = read_frame(sock)
    if b"CONNECTED" not in reply.split(b"\0", 1)[0][:16]:
        raise ConnectionError(f"expected CONNECTED, got {reply[:300]!r}")


def write_until_stalled(sock: socket.socket, data: bytes, limit: int, stall: float = 2.0, offset: int = 0) -> int:
    """Write ``data`` over and over, from ``offset`` in it, until ``limit`` bytes went out or the
    socket took nothing for ``stall`` seconds (the server stopped reading); the bytes written (a
    next call goes on at ``(offset + written) % len(data)``, so frames are never cut). Never reads.
    A server that closed or reset the connection raises (``BrokenPipeError``, ``ConnectionResetError``)."""
    sock.setblocking(False)
    written = 0
    view = memoryview(data)
    offset %= len(data)
    while written < limit:
        try:
            n = sock.send(view[offset:])
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            _, ready, _ = select.select([], [sock], [], stall)
            if not ready:
                break
            if isinstance(sock, ssl.SSLSocket):
                time.sleep(0.001)  # writable at TCP, but TLS may still want more room: no busy loop
            continue
        written += n
        offset = (offset + n) % len(data)
    return written


# -- WebSocket, written by hand: the attacker controls every byte (RFC 6455) -------------------

TEXT, BINARY, PING = 0x1, 0x2, 0x9
FIN = 0x80


def ws_upgrade(sock: socket.socket, path: str = "/ws", subprotocol: str = "v12.stomp") -> None:
    """The HTTP upgrade; reads the 101 response (and nothing after it)."""
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: bridge\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Protocol: {subprotocol}\r\n\r\n".encode()
    )
    sock.settimeout(20)
    response = b""
    while b"\r\n\r\n" not in response:
        chunk = sock.recv(1)  # byte by byte: nothing after the response is taken
        if not chunk:
            raise ConnectionError(f"closed during the upgrade: {response!r}")
        response += chunk
    if not response.startswith(b"HTTP/1.1 101"):
        raise ConnectionError(f"upgrade refused: {response!r}")


def ws_frame(payload: bytes, opcode: int = TEXT) -> bytes:
    """One client frame (FIN set) with a zero mask key, which leaves the payload as it is."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", FIN | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", FIN | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", FIN | opcode, 0x80 | 127, n)
    return head + bytes(4) + payload
