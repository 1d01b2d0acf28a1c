"""A lean asyncio STOMP client on the project's own codec, for every part of the harness.

Unlike the benchmark's client it hands ERROR frames back instead of raising:
hostile and fuzzing clients expect them. Every read has a deadline.
"""

from __future__ import annotations

import asyncio
import socket
import struct

from stomp_bridge.protocol.frames import Frame, serialize
from stomp_bridge.protocol.parser import FrameParser, Limits

__all__ = ["Closed", "Frame", "StompClient", "serialize"]


class Closed(Exception):
    """The server closed the connection (``frames`` holds what came before, ERROR included)."""


class StompClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.parser = FrameParser(Limits(max_frame_size=64 * 1024 * 1024))
        self.pending: list[Frame] = []
        self.closed = False

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> "StompClient":
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=1 << 20), timeout)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    @classmethod
    async def connect(cls, port: int, vhost: str = "/", heartbeat: str = "0,0",
                      timeout: float = 10.0) -> "StompClient":
        """Open and log in; raises Closed with the ERROR frame if the bridge refuses."""
        client = await cls.open(port, timeout=timeout)
        try:
            client.send("CONNECT", {"accept-version": "1.2", "host": vhost, "login": "guest",
                                    "passcode": "guest", "heart-beat": heartbeat})
            frame = await client.next(timeout)
            if frame.command != "CONNECTED":
                raise Closed(f"expected CONNECTED, got {frame.command} {frame.headers}")
        except BaseException:
            client.abort()
            raise
        return client

    def send(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.writer.write(serialize(Frame(command, headers or {}, body)))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()

    async def next(self, timeout: float = 10.0) -> Frame:
        """The next frame; Closed at EOF or reset, TimeoutError when nothing comes."""
        while not self.pending:
            if self.closed:
                raise Closed("connection closed")
            try:
                data = await asyncio.wait_for(self.reader.read(1 << 20), timeout)
            except (ConnectionError, OSError) as exc:
                data = b""
                if isinstance(exc, TimeoutError):
                    raise
            if not data:
                self.closed = True
                raise Closed("connection closed")
            self.parser.feed(data)
            while (frame := self.parser.next_frame()) is not None:
                self.pending.append(frame)
        return self.pending.pop(0)

    async def until_closed(self, timeout: float = 10.0) -> list[Frame]:
        """Every frame until the server closes; TimeoutError if it does not within ``timeout``."""
        out: list[Frame] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
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

    async def close(self) -> None:
        self.closed = True
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 5)
        except Exception:  # noqa: BLE001 - best effort
            pass
