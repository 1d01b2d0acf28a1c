"""Run stomp-bridge inside your own tests.

- :func:`running_bridge`: a context manager that runs the bridge in a background thread of
  the test process, on free ports, against an AMQP URL you give (a local RabbitMQ, a
  testcontainers one). No Docker needed, starts in milliseconds. :class:`BackgroundBridge`
  is the same bridge started and stopped by hand.
- the ``stomp_bridge`` pytest fixture (``pytest_plugins = ["stomp_bridge.testing"]`` in your
  conftest.py): the same, against ``STOMP_BRIDGE_TEST_AMQP_URL`` or a local RabbitMQ;
  override the ``stomp_bridge_amqp_url`` fixture to point it elsewhere, and
  ``stomp_bridge_settings`` to give it settings (fixed ports: ``{"port": 61623}``).
- :class:`StompBridgeContainer` and :func:`bridge_with_rabbitmq` (``pip install
  'stomp-bridge[testing]'``, Docker): the bridge image next to a RabbitMQ container.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from stomp_bridge.transport.server import BridgeServer
from stomp_bridge.settings import Settings

LOCAL_RABBITMQ = "amqp://guest:guest@127.0.0.1:5672/"
START_TIMEOUT = 30.0

T = TypeVar("T")


@dataclass(frozen=True)
class RunningBridge:
    host: str
    port: int
    http_port: int | None
    ws_port: int | None
    settings: Settings

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` as stomp.py's ``stomp.Connection([address])`` wants it."""
        return (self.host, self.port)

    @property
    def ws_url(self) -> str | None:
        """``ws://host:port/ws`` for STOMP over WebSocket clients (@stomp/stompjs' brokerURL)."""
        return None if self.ws_port is None else f"ws://{self.host}:{self.ws_port}{self.settings.ws_path}"

    @property
    def http_url(self) -> str | None:
        return None if self.http_port is None else f"http://{self.host}:{self.http_port}"


class BackgroundBridge:
    """The bridge's server on an event loop of its own, in a daemon thread of this process.

    :func:`running_bridge` is the convenient form; this is for fixtures that start and stop the
    bridge themselves, or run code on its loop (:meth:`call`).
    """

    def __init__(self, settings: Settings, *, tracer_provider: Any = None) -> None:
        self.settings = settings
        # tracing=true: spans go to this OpenTelemetry TracerProvider (an in-memory exporter's,
        # in a test) instead of the OTLP exporter the settings would build
        self._tracer_provider = tracer_provider
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: BridgeServer | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="stomp-bridge", daemon=True)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:  # BridgeServer refuses tracing=true without OpenTelemetry, start() a port in use …
            self._server = BridgeServer(self.settings, tracer_provider=self._tracer_provider)
            loop.run_until_complete(self._server.start())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by start()
            self._failure = exc
            self._started.set()
            loop.close()
            return
        loop.call_soon(self._started.set)  # once the loop runs: stop() right after start() finds it running
        loop.run_forever()
        loop.close()

    def start(self, timeout: float = START_TIMEOUT) -> BridgeServer:
        """Start the thread and wait until the bridge listens; RuntimeError says why it did not."""
        self._thread.start()
        if not self._started.wait(timeout):
            raise RuntimeError(f"stomp-bridge did not start within {timeout:.0f} s")
        if self._failure is not None:
            raise RuntimeError(f"stomp-bridge could not start: {self._failure}") from self._failure
        return self.server

    @property
    def server(self) -> BridgeServer:
        assert self._server is not None, "start() first"
        return self._server

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the bridge's loop and return its result."""
        assert self._loop is not None, "start() first"

        async def run() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(START_TIMEOUT)

    def stop(self) -> None:
        """Close the bridge (drained, as on SIGTERM) and end its thread; safe if it never started."""
        loop, server = self._loop, self._server
        if loop is not None and server is not None and loop.is_running():
            timeout = START_TIMEOUT + self.settings.shutdown_grace
            closing = asyncio.run_coroutine_threadsafe(server.close(), loop)
            try:
                closing.result(timeout)
            except concurrent.futures.TimeoutError:
                raise TimeoutError(f"stomp-bridge did not close within {timeout:.0f} s; {_still_running(loop)}") from None
            loop.call_soon_threadsafe(loop.stop)
        if self._thread.is_alive():
            self._thread.join(START_TIMEOUT)


def _still_running(loop: asyncio.AbstractEventLoop) -> str:
    """What a bridge that does not close is doing: each task's coroutine and where it waits."""
    async def describe() -> str:
        here = asyncio.current_task()
        lines = []
        for task in asyncio.all_tasks():
            if task is here:
                continue
            coro, where = task.get_coro(), []
            while coro is not None and getattr(coro, "cr_frame", None) is not None:  # down the awaits
                where.append(f"{coro.cr_code.co_name} ({coro.cr_frame.f_code.co_filename}:{coro.cr_frame.f_lineno})")
                coro = getattr(coro, "cr_await", None)
            lines.append(" > ".join(where) or repr(task))
        return "still running: " + "; ".join(sorted(lines))

    try:
        return asyncio.run_coroutine_threadsafe(describe(), loop).result(5)
    except concurrent.futures.TimeoutError:
        return "its event loop is blocked (it ran nothing for 5 s)"


@contextmanager
def running_bridge(amqp_url: str = LOCAL_RABBITMQ, **settings: Any) -> Iterator[RunningBridge]:
    """A bridge on 127.0.0.1 with free STOMP and HTTP ports, closed (drained) on exit.

    ``settings`` are the bridge's settings by name (``default_user=None``,
    ``max_frame_size=...``); pass ``http_port=None`` to run without /metrics, ``ws_port=None``
    without the WebSocket listener.
    """
    settings.setdefault("host", "127.0.0.1")
    settings.setdefault("port", 0)
    settings.setdefault("http_host", settings["host"])
    settings.setdefault("http_port", 0)
    settings.setdefault("ws_port", 0)
    config = Settings(amqp_url=amqp_url, **settings)
    bridge = BackgroundBridge(config)
    try:
        server = bridge.start()
        yield RunningBridge(
            host=config.host,
            port=server.port,
            http_port=server.ops.port if server.ops else None,
            ws_port=server.ws_port,
            settings=config,
        )
    finally:
        bridge.stop()


def __getattr__(name: str) -> Any:
    # The container helpers need testcontainers (the `testing` extra); import it only when asked.
    if name in ("StompBridgeContainer", "bridge_with_rabbitmq", "container_pair"):
        from stomp_bridge import containers

        return getattr(containers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


try:  # the fixtures, for `pytest_plugins = ["stomp_bridge.testing"]`
    import pytest
except ImportError:  # pragma: no cover - pytest is only needed for the fixtures
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def stomp_bridge_amqp_url() -> str:
        """Where the ``stomp_bridge`` fixture's bridge finds RabbitMQ; override to change it."""
        return os.environ.get("STOMP_BRIDGE_TEST_AMQP_URL", LOCAL_RABBITMQ)

    @pytest.fixture
    def stomp_bridge_settings() -> dict[str, Any]:
        """The ``stomp_bridge`` fixture's settings by name, as :func:`running_bridge` takes them
        (none: free ports); override it to pin ports (``{"port": 61623, "http_port": 9411}``)
        or set anything else."""
        return {}

    @pytest.fixture
    def stomp_bridge(stomp_bridge_amqp_url: str, stomp_bridge_settings: dict[str, Any]) -> Iterator[RunningBridge]:
        """A bridge for one test: ``stomp.Connection([stomp_bridge.address])``."""
        with running_bridge(stomp_bridge_amqp_url, **stomp_bridge_settings) as bridge:
            yield bridge
