"""Runs the bridge in a background thread for tests that use synchronous clients."""

from __future__ import annotations

import asyncio
import threading

from stomp_bridge.transport.server import BridgeServer
from stomp_bridge.settings import Settings


class BridgeThread:
    def __init__(self, amqp_url: str, host: str = "127.0.0.1", **settings: object) -> None:
        settings.setdefault("http_port", None)  # tests that want the endpoint ask for port 0
        settings.setdefault("ws_port", None)  # likewise the WebSocket listener
        if settings.get("profile") != "swaptacular":
            settings.setdefault("port", 0)
        self.settings = Settings(host=host, amqp_url=amqp_url, **settings)
        self.port = 0
        self.tls_port = 0
        self.ws_port: int | None = None
        self.wss_port: int | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: BridgeServer | None = None
        self._thread = threading.Thread(target=self._run, name="stomp-bridge", daemon=True)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._server = BridgeServer(self.settings)
        try:
            loop.run_until_complete(self._server.start())
            if self.settings.port is not None:
                self.port = self._server.port
            if self.settings.tls_port is not None:
                self.tls_port = self._server.tls_port
            self.ws_port, self.wss_port = self._server.ws_port, self._server.wss_port
        except BaseException as exc:  # noqa: BLE001
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        loop.run_forever()
        loop.close()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("bridge did not start within 30 s")
        if self._error is not None:
            raise RuntimeError(f"bridge failed to start: {self._error!r}") from self._error

    @property
    def server(self) -> BridgeServer:
        assert self._server is not None
        return self._server

    def call(self, fn, *args):  # noqa: ANN001, ANN201
        """Run ``fn(*args)`` on the bridge's loop and return its result."""
        assert self._loop is not None

        async def run():  # noqa: ANN202
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is not None and server is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(server.close(), loop).result(30)
            loop.call_soon_threadsafe(loop.stop)
        self._thread.join(30)
