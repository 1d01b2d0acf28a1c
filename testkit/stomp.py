"""A lean asyncio STOMP client on the project's own codec (``stomp_bridge.protocol``'s frames
and parser), for the reliability harness and the benchmarks.

Every read has a deadline. ERROR frames come back like any other frame by default (hostile and
fuzzing clients expect them); ``raise_errors=True`` turns them into :class:`ErrorFrame`, so a
benchmark either measures something or stops with a message that says what it was waiting for.
"""

from __future__ import annotations

import asyncio
import socket
import struct

from stomp_bridge.protocol.frames import Frame, serialize
from stomp_bridge.protocol.parser import FrameParser, Limits

__all__ = ["ClientError", "Closed", "ErrorFrame", "Frame", "Stalled", "StompClient", "describe", "serialize"]

READ_TIMEOUT = 10.0
MAX_FRAME = 64 * 1024 * 1024
READ_SIZE = 1 << 20


class ClientError(Exception):
    """The client cannot go on: the server closed, sent ERROR (``raise_errors``) or went quiet."""


class Closed(ClientError):
    """The server closed the connection (``frames`` holds what came before, ERROR included)."""


class ErrorFrame(ClientError):
    """An ERROR frame, with ``raise_errors=True``."""

    def __init__(self, message: str, frame: Frame) -> None:
        super().__init__(message)
        self.frame = frame


class Stalled(ClientError, TimeoutError):
    """Nothing arrived before the deadline."""


def describe(frame: Frame) -> str:
    headers = "".join(f"\n  {k}:{v}" for k, v in frame.headers.items())
    body = frame.body[:500].decode("utf-8", "replace")
    return f"{frame.command}{headers}\n  body: {body!r}"


class StompClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int = 0,
                 raise_errors: bool = False, read_timeout: float = READ_TIMEOUT) -> None:
        self.reader, self.writer, self.port = reader, writer, port
        self.raise_errors = raise_errors
        self.read_timeout = read_timeout  # a read's deadline unless the call gives one
        self.parser = FrameParser(Limits(max_frame_size=MAX_FRAME))
        self.pending: list[Frame] = []  # oldest last: pop() takes the next frame
        self.connected: Frame | None = None
        self.closed = False

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1", timeout: float = READ_TIMEOUT,
                   raise_errors: bool = False, read_timeout: float = READ_TIMEOUT) -> StompClient:
        """A TCP connection (TCP_NODELAY), nothing sent yet."""
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=READ_SIZE), timeout)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer, port, raise_errors, read_timeout)

    @classmethod
    async def connect(cls, port: int, vhost: str = "/", heartbeat: str | None = "0,0",
                      timeout: float = READ_TIMEOUT, host: str = "127.0.0.1", login: str = "guest",
                      passcode: str = "guest", raise_errors: bool = False,
                      read_timeout: float = READ_TIMEOUT) -> StompClient:
        """Open and log in (``heartbeat=None``: no heart-beat header); raises :class:`Closed`
        (or :class:`ErrorFrame`) with the ERROR frame if the server refuses."""
        client = await cls.open(port, host, timeout, raise_errors, read_timeout)
        headers = {"accept-version": "1.2", "host": vhost, "login": login, "passcode": passcode}
        if heartbeat is not None:
            headers["heart-beat"] = heartbeat
        try:
            client.send("CONNECT", headers)
            frame = await client.next(timeout, "CONNECTED")
            if frame.command != "CONNECTED":
                raise Closed(f"port {port}: expected CONNECTED, got {describe(frame)}")
        except BaseException:
            client.abort()
            raise
        client.connected = frame
        return client

    def send(self, command: str | Frame, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        frame = command if isinstance(command, Frame) else Frame(command, headers or {}, body)
        self.writer.write(serialize(frame, "1.2"))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()

    async def _read(self, timeout: float | None, waiting_for: str, deadline: float | None = None) -> list[Frame]:
        """The frames the next read completes (possibly none: heart-beats); Closed at EOF or
        reset; Stalled when no frame came within ``timeout`` (by ``deadline``, the loop's time,
        when the caller reads more than once)."""
        if timeout is None:
            timeout = self.read_timeout
        if self.closed:
            raise Closed(f"port {self.port}: connection closed while waiting for {waiting_for}")
        left = timeout if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
        try:
            data = await asyncio.wait_for(self.reader.read(READ_SIZE), left)
        except TimeoutError:
            raise Stalled(f"port {self.port}: no frame for {timeout:g} s while waiting for "
                          f"{waiting_for}") from None
        except (ConnectionError, OSError):
            data = b""
        if not data:
            self.closed = True
            raise Closed(f"port {self.port}: connection closed while waiting for {waiting_for}")
        self.parser.feed(data)
        out = []
        while (frame := self.parser.next_frame()) is not None:
            out.append(frame)
        return out

    def _check(self, frame: Frame) -> Frame:
        if self.raise_errors and frame.command == "ERROR":
            raise ErrorFrame(f"port {self.port}: ERROR frame received "
                             f"({frame.headers.get('message', '')}):\n{describe(frame)}", frame)
        return frame

    async def next(self, timeout: float | None = None, waiting_for: str = "a frame") -> Frame:
        """The next frame; :class:`Closed` at EOF or reset, :class:`Stalled` when none comes
        within ``timeout`` (heart-beats meanwhile do not extend it: the server's come every
        half interval, as the plugin's do, so they would keep a short wait from ever ending)."""
        if timeout is None:
            timeout = self.read_timeout
        deadline = asyncio.get_running_loop().time() + timeout
        while not self.pending:
            self.pending = await self._read(timeout, waiting_for, deadline)
            self.pending.reverse()
        return self._check(self.pending.pop())

    async def batch(self, timeout: float | None = None, waiting_for: str = "frames") -> list[Frame]:
        """Every frame the next read completes (fewer wake-ups than next())."""
        if self.pending:
            out, self.pending = list(reversed(self.pending)), []
        else:
            out = []
            deadline = asyncio.get_running_loop().time() + (self.read_timeout if timeout is None else timeout)
            while not out:
                out = await self._read(timeout, waiting_for, deadline)
        for frame in out:
            self._check(frame)
        return out

    async def expect_receipt(self, receipt: str, timeout: float | None = None) -> None:
        frame = await self.next(timeout, f"RECEIPT {receipt}")
        if frame.command != "RECEIPT" or frame.headers.get("receipt-id") != receipt:
            raise ClientError(f"port {self.port}: expected RECEIPT {receipt}, got {describe(frame)}")

    async def until_closed(self, timeout: float | None = None) -> list[Frame]:
        """Every frame until the server closes; TimeoutError if it does not within ``timeout``."""
        out: list[Frame] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.read_timeout if timeout is None else timeout)
        while True:
            try:
                out.append(await self.next(max(0.01, deadline - loop.time())))
            except Closed:
                return out

    def abort(self) -> None:
        """Close with an RST: the abrupt end of a crashed client."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        self.writer.transport.abort()
        self.closed = True

    async def close(self, wait: bool = True) -> None:
        """Close (FIN); ``wait``: until the transport is closed, at most 5 s."""
        self.closed = True
        self.writer.close()
        if not wait:
            return
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 5)
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
