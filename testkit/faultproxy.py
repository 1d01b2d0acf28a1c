"""A TCP proxy that tests control, to simulate losing the broker (or the bridge).

Put it between the bridge and RabbitMQ (``amqp://guest:guest@127.0.0.1:{proxy.port}/``)
or between a client and the bridge, then break the path from a synchronous test::

    with FaultProxy(("127.0.0.1", 5672)) as proxy:
        bridge = BridgeThread(amqp_url=f"amqp://guest:guest@127.0.0.1:{proxy.port}/")
        bridge.start()
        proxy.wait_connections(1)      # the bridge is connected through the proxy
        proxy.refuse()                 # broker gone: connections reset, new ones too
        ...
        proxy.restore()
        proxy.wait_connections(1)      # the bridge came back

The proxy runs its own asyncio loop in its own thread. Every public method may be
called from any thread but the proxy's own; a method that changes state returns
once the loop has applied it (for ``cut`` and ``refuse``: once every connection it
closed is closed on both sides).

Each forwarded connection is four tasks: per direction a reader that puts
``(arrival time, bytes)`` on a small bounded queue and a writer that holds each
chunk until it is due (``delay``) and the proxy is not paused, then writes and
drains. A stalled side therefore fills at most the queue (``_QUEUE_CHUNKS`` chunks
of ``_CHUNK`` bytes) and the transport buffers, then TCP backpressure takes over.
An end of stream travels the same way (half-close with ``write_eof``); a reset or
error on either side resets both, as a path that breaks would.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Self, TypeVar

__all__ = ["FaultProxy"]

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
_CHUNK = 64 * 1024
_QUEUE_CHUNKS = 4
_CLOSE_TIMEOUT = 2.0  # a graceful close that has not finished by then is aborted
_T = TypeVar("_T")


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close at once with an RST (SO_LINGER 0), dropping anything unsent."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass  # already closed: nothing to reset
    writer.transport.abort()


class FaultProxy:
    """Forwards 127.0.0.1:``port`` to ``target`` and breaks the path on demand.

    Faults:

    - ``cut()``: reset every current connection on both sides; new ones still work.
    - ``refuse()``: reset every current connection and every new one until
      ``restore()``. By default the proxy keeps listening and resets each new
      connection as soon as it is accepted, so the port stays ours: a client sees
      its connect succeed, then a reset (or EOF) on first read or write.
      (On loopback the reset can even arrive before ``connect()`` returns, which
      then raises ECONNRESET.) ``refuse(close_listener=True)`` closes the listening socket instead, so a
      client sees ECONNREFUSED; ``restore()`` binds the same port again (and raises
      if something else took it meanwhile).
    - ``delay(seconds)``: every chunk is delivered ``seconds`` after it arrived,
      both directions (0 clears it). The delay in force when a chunk is due
      counts, so clearing it releases chunks already held.
    - ``pause()`` / ``resume()``: hold every byte (and end of stream) in both
      directions without closing anything, as a hung peer would.

    Faults are proxy-wide and persist across connections: a paused proxy holds
    the bytes of connections made after ``pause()`` too.

    If the target refuses, the client's connection is reset (as with ``refuse()``)
    and never counted.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._cond = threading.Condition()
        self._live = 0  # guarded by _cond
        self._total = 0  # guarded by _cond
        self._refused = 0  # guarded by _cond
        self._upstream_ports: list[int] = []  # guarded by _cond: each connection's local port to the target
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False
        # Loop-thread state below.
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._refusing = False
        self._delay = 0.0
        self._paused = False
        self._changed: asyncio.Event | None = None  # replaced (old one set) on every change

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> Self:
        """Start the loop thread; returns once listening on ``self.port``."""
        if self._thread is not None:
            raise RuntimeError("FaultProxy already started")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._run, args=(ready, failure), name="faultproxy", daemon=True
        )
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("FaultProxy did not start listening within 10 s")
        if failure:
            raise RuntimeError(f"FaultProxy failed to start: {failure[0]!r}") from failure[0]
        return self

    def stop(self) -> None:
        """Close the listener and every connection (reset), stop the loop, join the thread.

        Safe to call twice or before ``start()``.
        """
        if self._stopped:
            return
        self._stopped = True
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        if thread.is_alive():
            raise RuntimeError("FaultProxy thread did not end within 10 s")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    # -- faults ------------------------------------------------------------

    def cut(self) -> None:
        """Reset every current connection on both sides; keep accepting new ones."""
        self._call(self._cut_all)

    def refuse(self, *, close_listener: bool = False) -> None:
        """Reset current connections and refuse new ones until ``restore()`` (see class doc)."""
        self._call(lambda: self._refuse(close_listener))

    def restore(self) -> None:
        """Accept and forward again after ``refuse()``."""
        self._call(self._restore)

    def delay(self, seconds: float) -> None:
        """Deliver every chunk ``seconds`` after it arrived, both directions; 0 clears."""
        if seconds < 0:
            raise ValueError("delay must be >= 0")
        self._call(lambda: self._set(delay=float(seconds)))

    def pause(self) -> None:
        """Hold every byte in both directions, closing nothing."""
        self._call(lambda: self._set(paused=True))

    def resume(self) -> None:
        """Deliver held bytes and forward again."""
        self._call(lambda: self._set(paused=False))

    # -- observation -------------------------------------------------------

    @property
    def connections(self) -> int:
        """Forwarded connections live now (connected to the target, not yet closed)."""
        with self._cond:
            return self._live

    @property
    def total_connections(self) -> int:
        """Connections ever forwarded to the target (to wait for "a new one since")."""
        with self._cond:
            return self._total

    @property
    def refused(self) -> int:
        """Connections accepted and reset at once while refusing."""
        with self._cond:
            return self._refused

    @property
    def upstream_ports(self) -> list[int]:
        """The local port of each connection made to the target, in order: how the target (its
        log, its connection list) names the connections that came through the proxy."""
        with self._cond:
            return list(self._upstream_ports)

    def wait_connections(self, n: int, timeout: float = 10.0, *, exact: bool = False) -> int:
        """Block until at least ``n`` (``exact``: exactly ``n``) connections are live.

        Returns the live count; raises ``TimeoutError`` after ``timeout`` seconds.
        ``wait_connections(0, exact=True)`` waits for every connection to end.
        """
        what = f"{'exactly' if exact else 'at least'} {n} live connections"
        return self._wait(lambda: self._live == n if exact else self._live >= n, timeout, what)

    def wait_total_connections(self, n: int, timeout: float = 10.0) -> int:
        """Block until at least ``n`` connections have ever been forwarded."""
        return self._wait(lambda: self._total >= n, timeout, f"{n} forwarded connections in total")

    def _wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> int:
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise TimeoutError(
                    f"waited {timeout} s for {what}; live {self._live}, total {self._total}"
                )
            return self._live

    def _count(self, delta: int) -> None:
        with self._cond:
            self._live += delta
            if delta > 0:
                self._total += delta
            self._cond.notify_all()

    # -- the loop thread ---------------------------------------------------

    def _call(self, fn: Callable[[], Coroutine[Any, Any, _T]], timeout: float = 10.0) -> _T:
        loop = self._loop
        if self._stopped or loop is None or not loop.is_running():
            raise RuntimeError("FaultProxy is not running")
        if threading.current_thread() is self._thread:
            raise RuntimeError("FaultProxy methods block; do not call them from its own loop")
        return asyncio.run_coroutine_threadsafe(fn(), loop).result(timeout)

    def _run(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._changed = asyncio.Event()
            try:
                self._server = loop.run_until_complete(self._listen(0))
            except BaseException as exc:  # noqa: BLE001 - reported to start()
                failure.append(exc)
                return
            self.port = self._server.sockets[0].getsockname()[1]
            loop.call_soon(ready.set)
            loop.run_forever()
        finally:
            ready.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _listen(self, port: int) -> asyncio.Server:
        return await asyncio.start_server(self._on_accept, HOST, port, reuse_address=True)

    async def _shutdown(self) -> None:
        self._refusing = True
        await self._close_listener()
        await self._cut_all()

    async def _close_listener(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _cut_all(self) -> None:
        tasks = list(self._handlers)
        for task in tasks:
            task.cancel()  # each handler resets both its sockets as it ends
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _refuse(self, close_listener: bool) -> None:
        self._refusing = True
        if close_listener:
            await self._close_listener()
        await self._cut_all()

    async def _restore(self) -> None:
        if self._server is None:
            self._server = await self._listen(self.port)
        self._refusing = False

    async def _set(self, *, delay: float | None = None, paused: bool | None = None) -> None:
        if delay is not None:
            self._delay = delay
        if paused is not None:
            self._paused = paused
        changed, self._changed = self._changed, asyncio.Event()
        assert changed is not None
        changed.set()  # every writer holding a chunk looks again

    def _on_accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback, not a coroutine: the handler task is ours to own and
        # cancel (asyncio's own client_connected_cb task cannot end cancelled).
        if self._refusing:
            with self._cond:
                self._refused += 1
            _reset(writer)
            return
        assert self._loop is not None
        task = self._loop.create_task(self._handle(reader, writer))
        self._handlers.add(task)
        task.add_done_callback(self._handler_done)

    def _handler_done(self, task: asyncio.Task[None]) -> None:
        self._handlers.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("faultproxy connection handler failed", exc_info=task.exception())

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            upstream_r, upstream_w = await asyncio.open_connection(*self.target)
        except OSError as exc:
            log.debug("faultproxy: target %s unreachable: %r", self.target, exc)
            _reset(client_w)
            return
        except asyncio.CancelledError:
            _reset(client_w)  # cut while connecting
            raise
        writers = (client_w, upstream_w)
        with self._cond:
            self._upstream_ports.append(upstream_w.get_extra_info("sockname")[1])
        self._count(+1)
        clean = False
        try:
            try:
                async with asyncio.TaskGroup() as tg:
                    for reader, writer in ((client_r, upstream_w), (upstream_r, client_w)):
                        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(_QUEUE_CHUNKS)
                        tg.create_task(self._read(reader, queue))
                        tg.create_task(self._write(queue, writer))
                clean = True  # both directions ended with an end of stream
            except* OSError:
                pass  # one side reset or broke: reset the other too (finally)
        finally:
            try:
                for w in writers:
                    if clean:
                        w.close()
                    else:
                        _reset(w)
                for w in writers:
                    await self._closed(w)
            except asyncio.CancelledError:
                for w in writers:
                    _reset(w)  # cut while closing gracefully
                raise
            finally:
                self._count(-1)

    @staticmethod
    async def _closed(writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT):
                await writer.wait_closed()
        except TimeoutError:
            _reset(writer)
        except OSError:
            pass  # the close itself failed: the socket is gone either way

    async def _read(self, reader: asyncio.StreamReader, queue: asyncio.Queue[tuple[float, bytes]]) -> None:
        assert self._loop is not None
        while True:
            data = await reader.read(_CHUNK)
            await queue.put((self._loop.time(), data))  # bounded: waits while the writer is held
            if not data:
                return

    async def _write(self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter) -> None:
        while True:
            arrived, data = await queue.get()
            await self._hold(arrived)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    async def _hold(self, arrived: float) -> None:
        """Return once a chunk that arrived at ``arrived`` is due and the proxy is not paused."""
        assert self._loop is not None
        while True:
            changed = self._changed
            assert changed is not None
            remaining: float | None = None
            if not self._paused:
                remaining = arrived + self._delay - self._loop.time()
                if remaining <= 0:
                    return
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                pass  # due now, unless something changed: look again
