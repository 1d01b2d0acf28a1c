"""A small synchronous STOMP 1.2 client on plain sockets (and ssl), for Spark tasks.

Every Spark task opens its own connection, does one bounded job (publish its
rows, read one offset range, drain N messages) and closes it. A blocking
socket with explicit deadlines is the simplest thing to reason about inside a
task: no threads, no event loop, nothing left running when the task ends.
Frames are the bridge's own (``stomp_bridge.protocol``: pure, standard library only), so
executors need none of the bridge's server dependencies.
"""

from __future__ import annotations

import select
import socket
import ssl
import sys
import time
from typing import Iterator

from stomp_bridge.protocol.frames import Frame, serialize
from stomp_bridge.protocol.parser import FrameParser, Limits
from stomp_bridge.spark.options import ConnectionOptions

__all__ = ["Frame", "StompClient", "StompClientError", "check", "describe", "encode_frame", "parse_frame"]

# The server's frames are read without the bridge's own bounds: a task reads what RabbitMQ holds.
_UNBOUNDED = Limits(max_frame_size=sys.maxsize, max_headers=sys.maxsize, max_header_length=sys.maxsize)


_UNESCAPE = {"\\n": "\n", "\\r": "\r", "\\c": ":", "\\\\": "\\"}


def _unescape(text: str) -> str:
    out, i = [], 0
    while True:
        j = text.find("\\", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        out.append(_UNESCAPE.get(text[j:j + 2], text[j:j + 2]))
        i = j + 2


class ServerFrames:
    """Frames from the server, parsed for speed: a task reads hundreds of thousands of MESSAGEs.

    The bridge's ``FrameParser`` checks everything a server must refuse from a client (limits,
    header grammar, one call per state); a frame from the server needs only to be cut out: the
    header block up to the blank line, ``content-length`` bytes of body (else up to the NUL).
    STOMP 1.2 rules kept: the first of repeated headers wins, escapes are undone, CRLF is an EOL."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.pos = 0

    @property
    def buffered(self) -> int:
        return len(self.buf) - self.pos

    def feed(self, data: bytes) -> None:
        if self.pos:
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += data

    def next_frame(self) -> Frame | None:
        buf, pos, n = self.buf, self.pos, len(self.buf)
        while pos < n and buf[pos] in (10, 13):  # heart-beats
            pos += 1
        self.pos = pos
        end = buf.find(b"\n\n", pos)
        crlf = buf.find(b"\n\r\n", pos, n if end < 0 else end + 1)  # only before the LF LF
        if crlf >= 0 and (end < 0 or crlf < end):
            end, skip = crlf, 3
        else:
            skip = 2
        if end < 0:
            return None
        head = bytes(buf[pos:end])
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedFrame(f"frame headers are not UTF-8: {exc}") from None
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        lines = text.split("\n")
        command = lines[0]
        headers: dict[str, str] = {}
        escaped = "\\" in text
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if escaped and command != "CONNECTED":
                name, value = _unescape(name), _unescape(value)
            if name not in headers:
                headers[name] = value
        start = end + skip
        length = headers.get("content-length")
        if length is not None:
            try:
                stop = start + int(length)
            except ValueError:
                raise MalformedFrame(f"content-length {length!r} is not a number") from None
            if n <= stop:
                return None
            if buf[stop] != 0:
                raise MalformedFrame("the body is not followed by NUL where content-length says it ends")
        else:
            stop = buf.find(b"\0", start)
            if stop < 0:
                return None
        self.pos = stop + 1
        return Frame(command, headers, bytes(buf[start:stop]))


class MalformedFrame(ValueError):
    """A frame from the server this client cannot read (the poll turns it into a StompClientError);
    not the bridge's StompError, which is an ERROR frame for a client."""


class StompClientError(RuntimeError):
    """The server sent ERROR, closed the connection, or did not answer in time."""


def encode_frame(command: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    """A STOMP 1.2 frame (``protocol.frames.serialize``): CONNECT headers are not escaped
    (STOMP 1.2), ``content-length`` always set for bodies; header values may be any ``str()``-able."""
    return serialize(Frame(command, {name: str(value) for name, value in headers.items()}, body), "1.2")


def parse_frame(buffer: bytearray) -> Frame | None:
    """Take one frame off the front of ``buffer`` (heart-beat EOLs skipped), or None if incomplete."""
    parser = FrameParser(_UNBOUNDED)
    parser.feed(bytes(buffer))
    frame = parser.next_frame()
    del buffer[: len(buffer) - parser.buffered]
    return frame


class StompClient:
    """One STOMP connection. Use as a context manager; ``close()`` is always safe."""

    def __init__(self, options: ConnectionOptions) -> None:
        self.options = options
        self._sock: socket.socket | None = None
        self._parser = ServerFrames()
        self.server: str | None = None

    def __enter__(self) -> "StompClient":
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        o = self.options
        try:
            sock = socket.create_connection((o.host, o.port), timeout=o.connect_timeout)
        except OSError as exc:
            raise StompClientError(f"cannot connect to the STOMP server at {o.host}:{o.port}: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if o.tls:
            context = ssl.create_default_context(cafile=o.tls_ca_file)
            if not o.tls_verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            try:
                sock = context.wrap_socket(sock, server_hostname=o.tls_server_name or o.host)
            except (OSError, ssl.SSLError) as exc:
                sock.close()
                raise StompClientError(f"TLS handshake with {o.host}:{o.port} failed: {exc}") from exc
        self._sock = sock
        headers = {"accept-version": "1.2", "host": o.vhost, "heart-beat": "0,0"}
        if o.login is not None:
            headers["login"] = o.login
            headers["passcode"] = o.passcode or ""
        self.send("CONNECT", headers)
        frame = self.expect(o.connect_timeout)
        if frame.command != "CONNECTED":
            self.close()
            raise StompClientError(f"the STOMP server refused CONNECT: {describe(frame)}")
        self.server = frame.headers.get("server")

    def send(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        if self._sock is None:
            raise StompClientError("not connected")
        try:
            data = encode_frame(command, headers, body)
        except ValueError as exc:  # a header STOMP cannot carry (an EOL in a CONNECT header)
            raise StompClientError(f"cannot send {command}: {exc}") from exc
        try:
            self._sock.sendall(data)
        except OSError as exc:
            # An ERROR may already be waiting: it explains the close better than EPIPE.
            frame = self.poll(1.0, raise_on_close=False)
            if frame is not None and frame.command == "ERROR":
                raise StompClientError(f"the STOMP server sent ERROR: {describe(frame)}") from exc
            raise StompClientError(f"connection to {self.options.host}:{self.options.port} lost: {exc}") from exc

    def poll(self, timeout: float, raise_on_close: bool = True) -> Frame | None:
        """The next frame within ``timeout`` seconds (0: only what is already here), else None."""
        deadline = time.monotonic() + timeout
        sock = self._sock
        while True:
            try:
                frame = self._parser.next_frame()
            except MalformedFrame as exc:
                raise StompClientError(
                    f"the STOMP server at {self.options.host}:{self.options.port} sent a malformed frame: {exc}"
                ) from exc
            if frame is not None:
                return frame
            if sock is None:
                raise StompClientError("not connected")
            remaining = deadline - time.monotonic()
            pending = isinstance(sock, ssl.SSLSocket) and sock.pending()
            if not pending:
                if remaining < 0:
                    return None
                readable, _, _ = select.select([sock], [], [], max(remaining, 0))
                if not readable:
                    return None
            try:
                data = sock.recv(262144)
            except (OSError, ssl.SSLError) as exc:
                if not raise_on_close:
                    return None
                raise StompClientError(f"connection to {self.options.host}:{self.options.port} lost: {exc}") from exc
            if not data:
                if not raise_on_close:
                    return None
                raise StompClientError(
                    f"the STOMP server at {self.options.host}:{self.options.port} closed the connection")
            self._parser.feed(data)

    def expect(self, timeout: float | None = None) -> Frame:
        """The next frame, or StompClientError after ``timeout`` (default: the read timeout)."""
        wait = self.options.read_timeout if timeout is None else timeout
        frame = self.poll(wait)
        if frame is None:
            raise StompClientError(
                f"no frame from the STOMP server at {self.options.host}:{self.options.port} within {wait:g} s "
                "(raise readTimeoutMs if the broker is slow)")
        return frame

    def frames(self, idle: float) -> Iterator[Frame]:
        """Frames until ``idle`` seconds pass without one."""
        while True:
            frame = self.poll(idle)
            if frame is None:
                return
            yield frame

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        try:
            sock.sendall(encode_frame("DISCONNECT", {}))
        except OSError:
            pass
        sock.close()


def describe(frame: Frame) -> str:
    """An ERROR's ``message`` header and body, as the broker worded them."""
    if frame.command != "ERROR":
        return f"unexpected {frame.command} frame"
    message = frame.headers.get("message", "")
    detail = frame.body.decode("utf-8", "replace").strip()
    return f"{message}: {detail}" if detail and detail != message else message or detail or "ERROR"


def check(frame: Frame) -> Frame:
    """Raise on ERROR with the broker's reason; otherwise return the frame."""
    if frame.command == "ERROR":
        raise StompClientError(f"the STOMP server sent ERROR: {describe(frame)}")
    return frame
