"""A lean asyncio STOMP client on the project's own codec, and broker housekeeping.

Every read has a timeout and every ERROR frame raises :class:`BenchError`
carrying the frame, so a scenario either measures something or stops with a
message that says what it was waiting for.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from stomp_bridge.protocol.frames import Frame, serialize  # noqa: E402
from stomp_bridge.protocol.parser import FrameParser, Limits  # noqa: E402

__all__ = ["BenchError", "Client", "Frame", "serialize", "Rabbit"]

READ_TIMEOUT = 30.0  # no frame at all for this long: the scenario is stuck


class BenchError(Exception):
    """A scenario cannot go on: an ERROR frame, a wrong count, a stall."""


def describe(frame: Frame) -> str:
    headers = "".join(f"\n  {k}:{v}" for k, v in frame.headers.items())
    body = frame.body[:500].decode("utf-8", "replace")
    return f"{frame.command}{headers}\n  body: {body!r}"


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int) -> None:
        self.reader, self.writer, self.port = reader, writer, port
        self.parser = FrameParser(Limits(max_frame_size=64 * 1024 * 1024))
        self.pending: list[Frame] = []
        self.connected: Frame | None = None

    @classmethod
    async def connect(cls, port: int, heartbeat: str | None = None, timeout: float = 10.0) -> Client:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, limit=1 << 20), timeout
        )
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = cls(reader, writer, port)
        headers = {"accept-version": "1.2", "host": "/", "login": "guest", "passcode": "guest"}
        if heartbeat is not None:
            headers["heart-beat"] = heartbeat
        client.send(Frame("CONNECT", headers))
        try:
            frame = await client.next(timeout, "CONNECTED")
        except BaseException:
            await client.close()
            raise
        if frame.command != "CONNECTED":
            await client.close()
            raise BenchError(f"port {port}: expected CONNECTED, got {describe(frame)}")
        client.connected = frame
        return client

    def send(self, frame: Frame) -> None:
        self.writer.write(serialize(frame, "1.2"))

    async def _read(self, timeout: float, waiting_for: str) -> bytes:
        try:
            data = await asyncio.wait_for(self.reader.read(1 << 20), timeout)
        except asyncio.TimeoutError:
            raise BenchError(
                f"port {self.port}: nothing received for {timeout:g} s while waiting for {waiting_for}"
            ) from None
        if not data:
            raise BenchError(f"port {self.port}: connection closed while waiting for {waiting_for}")
        return data

    def _parse(self, data: bytes) -> list[Frame]:
        self.parser.feed(data)
        out = []
        while (f := self.parser.next_frame()) is not None:
            if f.command == "ERROR":
                raise BenchError(f"port {self.port}: ERROR frame received ({f.headers.get('message', '')}):\n"
                                 f"{describe(f)}")
            out.append(f)
        return out

    async def next(self, timeout: float = READ_TIMEOUT, waiting_for: str = "a frame") -> Frame:
        while not self.pending:
            self.pending = self._parse(await self._read(timeout, waiting_for))
            self.pending.reverse()
        return self.pending.pop()

    async def batch(self, timeout: float = READ_TIMEOUT, waiting_for: str = "frames") -> list[Frame]:
        """Every frame the next read completes (fewer wake-ups than next())."""
        if self.pending:
            out, self.pending = list(reversed(self.pending)), []
            return out
        out: list[Frame] = []
        while not out:
            out = self._parse(await self._read(timeout, waiting_for))
        return out

    async def expect_receipt(self, receipt: str, timeout: float = READ_TIMEOUT) -> None:
        frame = await self.next(timeout, f"RECEIPT {receipt}")
        if frame.command != "RECEIPT" or frame.headers.get("receipt-id") != receipt:
            raise BenchError(f"port {self.port}: expected RECEIPT {receipt}, got {describe(frame)}")

    async def close(self) -> None:
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 5)
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


class Rabbit:
    """The management API (queue deletion, leftovers, broker limits); rabbitmqctl as fallback."""

    def __init__(self, api: str = "http://127.0.0.1:15672/api", user: str = "guest", password: str = "guest"):
        self.api = api.rstrip("/")
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def _call(self, method: str, path: str) -> object:
        req = urllib.request.Request(self.api + path, method=method, headers={"Authorization": self.auth})
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def delete_queue(self, name: str) -> None:
        try:
            self._call("DELETE", f"/queues/%2F/{urllib.parse.quote(name, safe='')}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        except OSError:
            subprocess.run(["rabbitmqctl", "-q", "delete_queue", name], capture_output=True,
                           check=False, timeout=30)

    def topic_queues(self, key_prefix: str) -> list[str]:
        """Queues still bound to amq.topic with a routing key starting with ``key_prefix``."""
        try:
            bindings = self._call("GET", "/exchanges/%2F/amq.topic/bindings/source")
        except OSError:
            return []
        return sorted({b["destination"] for b in bindings  # type: ignore[union-attr]
                       if b["destination_type"] == "queue" and b["routing_key"].startswith(key_prefix)})

    def file_descriptors(self) -> tuple[int, int] | None:
        """(fd_used, fd_total) of the first node; None when the API does not say (yet)."""
        try:
            node = self._call("GET", "/nodes")[0]  # type: ignore[index]
            return int(node["fd_used"]), int(node["fd_total"])
        except (OSError, KeyError, IndexError, ValueError, TypeError):
            return None

    async def cleanup_topic(self, key_prefix: str, wait: float = 10.0) -> list[str]:
        """Wait for auto-delete subscription queues to go; delete the stragglers; return them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        left = await asyncio.to_thread(self.topic_queues, key_prefix)
        while left and loop.time() < deadline:
            await asyncio.sleep(0.5)
            left = await asyncio.to_thread(self.topic_queues, key_prefix)
        for name in left:
            await asyncio.to_thread(self.delete_queue, name)
        return left
