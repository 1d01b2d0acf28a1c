"""The bridge as an operating-system process: one, or ``workers`` of them on the same ports.

One bridge process runs on one core: its event loop does the framing, header mapping and
AMQP encoding of every message. ``workers = N`` starts N bridge processes (spawned, not
forked: each gets a fresh interpreter, its own event loop and its own AMQP connections),
each listening on the same STOMP, TLS and WebSocket ports with ``SO_REUSEPORT``, so the
kernel spreads new connections across them. A client stays on the worker that accepted it;
nothing is shared between workers but RabbitMQ, which is what makes them safe: the bridge
stores nothing.

The supervisor (the process ``stomp-bridge`` started) listens on ``http_port`` alone: its
``/metrics`` sums every worker's (each worker serves its own on a private loopback port; the
``process_*`` families add the supervisor's own, each combined as ``Spec.workers`` says),
``/readyz`` is ready when every worker is, and it forwards SIGTERM/SIGINT (graceful
shutdown of them all) and SIGHUP (TLS reload). A worker that dies is started again, with a
WARNING and ``stomp_bridge_worker_restarts``. Limits that count connections or failed
logins (``max_connections``, ``max_connections_per_ip``, ``login_failures_per_minute``)
apply per worker.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import os
import signal
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from stomp_bridge.http import OpsServer
from stomp_bridge.logs import configure
from stomp_bridge.metrics import (
    PROCESS_METRICS, SUPERVISOR_METRICS, family, process_families, process_values, render,
)
from stomp_bridge.settings import Settings
from stomp_bridge.transport.server import BridgeServer

if TYPE_CHECKING:  # multiprocessing and prometheus_client are imported by the supervisor alone
    import multiprocessing.connection
    import multiprocessing.process

    from prometheus_client.metrics_core import Metric

WORKERS, WORKER_RESTARTS = SUPERVISOR_METRICS
log = logging.getLogger("stomp_bridge")

WORKER_START_TIMEOUT = 60.0  # seconds a spawned worker may take to import and listen
SCRAPE_TIMEOUT = 5.0  # seconds the supervisor waits for one worker's /metrics or /readyz


def run(settings: Settings) -> None:
    """Serve until SIGTERM or SIGINT: one bridge, or a supervisor of ``settings.workers``."""
    _runner()(serve(settings) if settings.workers == 1 else Supervisor(settings).run())


def _runner() -> Callable[[Any], Any]:
    """uvloop's run where it is installed (the bridge's event loop), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


async def serve(settings: Settings, started: Callable[[BridgeServer], None] | None = None) -> None:
    """One bridge process: listen, then serve until SIGTERM or SIGINT, then close gracefully."""
    server = BridgeServer(settings)
    loop = asyncio.get_running_loop()
    try:  # SIGHUP: reload the TLS certificate and key (and certificate-login credentials)
        loop.add_signal_handler(signal.SIGHUP, server.reload_tls)
    except (NotImplementedError, AttributeError):  # pragma: no cover - non-Unix
        pass
    await server.start()
    if started is not None:
        started(server)
    tune_gc()
    await stop_signal().wait()
    log.info("shutting down", extra={"connections": server.connection_count})
    await server.close()


def stop_signal() -> asyncio.Event:
    """Set by SIGINT or SIGTERM: the bridge, its workers and the forwarder stop the same way."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except NotImplementedError:  # pragma: no cover - non-Unix
            pass
    return stop


def tune_gc() -> None:
    """Fewer full garbage collections: each one walks every object of every connection.

    At 10,000 connections (~1.5 M objects) a full collection stops the event loop
    for a second or more, delaying heart-beats; CPython's default starts one every
    10 young-generation passes once the old generation grew by a quarter, which
    idle connections reach every half minute (each waiting read and timer is a new
    long-lived object). 100 passes keep garbage cycles bounded and the pauses rare.
    What exists once the listener runs (modules, settings) is never collected.
    """
    gen0, gen1, _ = gc.get_threshold()
    gc.set_threshold(gen0, gen1, 100)
    gc.freeze()


def worker_settings(settings: Settings) -> Settings:
    """A worker's settings: the supervisor's, with /metrics and /readyz on a private port."""
    return settings.model_copy(update={"http_host": "127.0.0.1", "http_port": 0})


def _worker_main(settings: Settings, index: int, report: multiprocessing.connection.Connection) -> None:
    """A spawned worker: tagged logs, one bridge, its private HTTP port sent to the supervisor."""
    configure(settings.log_level, settings.log_format, worker=index)

    def started(server: BridgeServer) -> None:
        report.send(server.ops.port if server.ops is not None else None)
        report.close()

    try:
        _runner()(serve(settings, started))
    except OSError as exc:  # the supervisor says it cannot start; this line says why
        log.error("worker cannot listen", extra={"worker": index, "error": exc.strerror or str(exc)})
        raise SystemExit(1) from None
    except KeyboardInterrupt:  # pragma: no cover - a terminal's Ctrl-C reaches the whole group
        pass


class Worker:
    """One spawned bridge process as the supervisor sees it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: multiprocessing.process.BaseProcess | None = None
        self.http_port: int | None = None


class Supervisor:
    """Starts ``settings.workers`` bridge processes, watches them, serves their sum."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.workers = [Worker(i) for i in range(settings.workers)]
        self.restarts = 0
        import multiprocessing  # here: a bridge of one process needs none of it (pickle, tempfile …)

        self._context = multiprocessing.get_context("spawn")
        self._stopping = False
        self._ops: OpsServer | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        stop = stop_signal()
        try:
            loop.add_signal_handler(signal.SIGHUP, self._signal_all, signal.SIGHUP)
        except (NotImplementedError, AttributeError):  # pragma: no cover - non-Unix
            pass
        try:
            await asyncio.gather(*(self._start(worker) for worker in self.workers))
        except Exception:
            self._stopping = True
            await self._stop_all()
            raise
        s = self.settings
        if s.http_port is not None:
            self._ops = OpsServer(s.http_host, s.http_port, self.metrics, self.ready)
            await self._ops.start()
        log.info("stomp-bridge workers listening", extra={
            "workers": len(self.workers), "port": s.port, "tls_port": s.tls_port, "ws_port": s.ws_port,
            "wss_port": s.wss_port, "http_port": self._ops.port if self._ops else None,
        })
        await stop.wait()
        self._stopping = True
        log.info("shutting down", extra={"workers": len(self.workers)})
        if self._ops is not None:
            await self._ops.close()
        await self._stop_all()

    async def _start(self, worker: Worker) -> None:
        receive, send = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_worker_main, args=(worker_settings(self.settings), worker.index, send),
            name=f"stomp-bridge-worker-{worker.index}", daemon=False,
        )
        process.start()
        send.close()
        worker.process, worker.http_port = process, None
        loop = asyncio.get_running_loop()
        ready = loop.create_future()

        def readable() -> None:
            loop.remove_reader(receive.fileno())
            try:
                port = receive.recv()
            except (EOFError, OSError):  # the worker died before it listened
                port = None
                process.join(5.0)
                if not ready.done():
                    ready.set_exception(RuntimeError(
                        f"worker {worker.index} exited with code {process.exitcode} before it listened; "
                        "its log lines above say why"))
            receive.close()
            if not ready.done():
                ready.set_result(port)

        loop.add_reader(receive.fileno(), readable)
        try:
            worker.http_port = await asyncio.wait_for(ready, WORKER_START_TIMEOUT)
        except asyncio.TimeoutError:
            process.kill()
            raise RuntimeError(f"worker {worker.index} did not listen within {WORKER_START_TIMEOUT:.0f} s") from None
        loop.add_reader(process.sentinel, self._exited, worker, process)

    def _exited(self, worker: Worker, process: multiprocessing.process.BaseProcess) -> None:
        """A worker's process ended: expected while stopping, else start it again."""
        asyncio.get_running_loop().remove_reader(process.sentinel)
        process.join(0)
        if self._stopping or worker.process is not process:
            return
        self.restarts += 1
        log.warning("worker exited; starting it again",
                    extra={"worker": worker.index, "exitcode": process.exitcode, "restarts": self.restarts})
        worker.process, worker.http_port = None, None
        task = asyncio.ensure_future(self._start(worker))
        task.add_done_callback(functools.partial(self._restart_done, worker))

    def _restart_done(self, worker: Worker, task: asyncio.Future) -> None:
        """Logged once the new worker listens and its /metrics counts in the sum again."""
        if task.cancelled():
            return
        if task.exception() is not None:
            log.error("worker restart failed", extra={"worker": worker.index, "error": str(task.exception())})
        else:
            log.info("worker started again", extra={"worker": worker.index, "restarts": self.restarts})

    def _signal_all(self, sig: int) -> None:
        for worker in self.workers:
            if worker.process is not None and worker.process.pid is not None and worker.process.is_alive():
                os.kill(worker.process.pid, sig)

    async def _stop_all(self) -> None:
        """SIGTERM to every worker, each then closes gracefully (shutdown_grace); wait for them all."""
        self._signal_all(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = self.settings.shutdown_grace + 30.0
        for worker in self.workers:
            if worker.process is None:
                continue
            process = worker.process
            await loop.run_in_executor(None, process.join, deadline)
            if process.is_alive():
                log.warning("worker did not stop in time; killing it", extra={"worker": worker.index})
                process.kill()
                await loop.run_in_executor(None, process.join, 5.0)

    async def metrics(self) -> bytes:
        """Every worker's /metrics, summed sample by sample, and the supervisor's own."""
        from prometheus_client import CollectorRegistry, generate_latest

        texts = await asyncio.gather(*(self._get(worker, "/metrics") for worker in self.workers))
        up = sum(1 for status, _ in texts if status == 200)
        own = render(process_families(process_values())).decode()  # the supervisor's process_*
        families = sum_families([*(body.decode() for status, body in texts if status == 200), own],
                                combine=COMBINE)
        registry = CollectorRegistry()
        registry.register(_Families([
            *families,
            family(WORKERS, up),
            family(WORKER_RESTARTS, self.restarts),
        ]))
        return generate_latest(registry)

    async def ready(self) -> tuple[bool, str]:
        """Ready when every worker is: a client may land on any of them."""
        answers = await asyncio.gather(*(self._get(worker, "/readyz") for worker in self.workers))
        problems = [f"worker {worker.index}: {body.decode().strip() or 'not answering'}"
                    for worker, (status, body) in zip(self.workers, answers) if status != 200]
        return (False, "; ".join(problems)) if problems else (True, "ready")

    async def _get(self, worker: Worker, path: str) -> tuple[int, bytes]:
        """One GET to a worker's private HTTP port: (status, body), (0, b"") if it does not answer."""
        if worker.http_port is None:
            return 0, b""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", worker.http_port), SCRAPE_TIMEOUT)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
            response = await asyncio.wait_for(reader.read(), SCRAPE_TIMEOUT)
            writer.close()
        except (OSError, asyncio.TimeoutError):
            return 0, b""
        head, _, body = response.partition(b"\r\n\r\n")
        try:
            status = int(head.split(b" ", 2)[1])
        except (IndexError, ValueError):
            return 0, b""
        return status, body


COMBINE = {spec.name: spec.workers for spec in PROCESS_METRICS if spec.workers != "sum"}
_COMBINERS: dict[str, Callable[[float, float], float]] = {"sum": float.__add__, "max": max, "min": min}


def sum_families(texts: Iterable[str], combine: dict[str, str] | None = None) -> list[Metric]:
    """Sum Prometheus text expositions sample by sample (same name and labels), keeping each
    family's type and help; a family or sample that only some workers have is kept as it is.
    ``combine`` names the families whose samples are combined otherwise ("max", "min")."""
    from prometheus_client.metrics_core import Metric
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type)
                values[family.name] = {}
            sums = values[family.name]
            add = _COMBINERS[(combine or {}).get(family.name, "sum")]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                sums[key] = add(sums[key], float(sample.value)) if key in sums else float(sample.value)
    out = []
    for name, family in families.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
        out.append(family)
    return out


class _Families:
    """A collector of ready-made families (the registry wants an object with collect())."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families
