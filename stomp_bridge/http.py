"""The operations HTTP endpoint: ``/metrics``, ``/healthz``, ``/readyz``.

Three fixed GET routes do not justify a web framework; this answers each
request with one HTTP/1.1 response and closes, on the bridge's own loop.
"""

from __future__ import annotations

import asyncio
import logging
import inspect
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

MAX_REQUEST_HEAD = 8192
READ_TIMEOUT = 5.0

Readiness = Callable[[], Awaitable[tuple[bool, str]]]
# A bridge renders its registry at once; a supervisor of workers awaits theirs.
MetricsText = Callable[[], "bytes | Awaitable[bytes]"]


class OpsServer:
    def __init__(self, host: str, port: int, metrics: MetricsText, ready: Readiness) -> None:
        self.host, self.requested_port = host, port
        self.metrics = metrics
        self.ready = ready
        self._server: asyncio.base_events.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.requested_port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        try:
            method, path = head[:MAX_REQUEST_HEAD].split(b"\r\n", 1)[0].decode("latin-1").split(" ")[:2]
        except ValueError:
            method, path = "", ""
        path = path.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            status, ctype, body = "405 Method Not Allowed", "text/plain", b"only GET\n"
        elif path == "/metrics":
            text = self.metrics()
            if inspect.isawaitable(text):
                text = await text
            status, ctype, body = "200 OK", "text/plain; version=0.0.4; charset=utf-8", text
        elif path == "/healthz":
            status, ctype, body = "200 OK", "text/plain", b"ok\n"
        elif path == "/readyz":
            ok, reason = await self.ready()
            status = "200 OK" if ok else "503 Service Unavailable"
            ctype, body = "text/plain", (reason + "\n").encode()
        else:
            status, ctype, body = "404 Not Found", "text/plain", b"try /metrics, /healthz or /readyz\n"
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + (body if method == "GET" else b"")
        )
        try:
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()
