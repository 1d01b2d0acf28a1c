"""Many idle STOMP connections held on the bridge: memory per connection and heart-beats.

Each connection CONNECTs with ``heart-beat:<cx>,<cy>`` (default 10000,10000:
the bridge sends an EOL every 10 s and expects one from us every 10 s, failing
the connection after 2 × 10 s of silence), optionally SUBSCRIBEs with a receipt
to its own ``/topic/<key>.<i>``, and then only heart-beats flow for ``hold``
seconds. Every connection must have seen CONNECTED (and RECEIPT), heart-beats
throughout, and no ERROR. Heart-beat lateness is the gap between two EOLs from
the bridge minus half the agreed interval, the pace at which the bridge sends them as the
plugin does (the first gap counts from CONNECTED); a bridge older than that pace shows half
the interval late.

The client is one asyncio Protocol per socket, no task or stream per
connection, so one process holds 10,000 of them; it raises its own
file-descriptor limit (``ulimit -n`` must allow it).

The bridge multiplexes sessions as channels over shared AMQP connections
(``amqp_channels_per_connection``, 64 by default), so N STOMP connections cost
RabbitMQ about N / 64 connections. N is still capped to what RabbitMQ's free
file descriptors allow for that, unless ``unsafe`` is set: RabbitMQ 3.10
running out of descriptors stopped Mnesia and took vhost "/" down for every
user of the broker (seen on the development machine).
"""

from __future__ import annotations

import asyncio
import collections
import math
import resource
import statistics
import time

from testkit.management import Management
from testkit.stats import percentile

from .procstat import cpu_seconds, memory_kb, reset_peak
from .scenarios import BenchError, unique


def raise_fd_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


class IdleConnection(asyncio.Protocol):
    """CONNECT, maybe SUBSCRIBE, then count the bridge's heart-beats and their gaps."""

    __slots__ = ("transport", "state", "buf", "ready", "error", "beats", "last", "gaps", "subscribe",
                 "server_ms", "_connect")

    def __init__(self, connect: bytes, subscribe: bytes | None, ready: asyncio.Future) -> None:
        self.transport: asyncio.Transport | None = None
        self.state = "connecting"
        self.buf = b""
        self.ready = ready
        self.error: str | None = None
        self.beats = 0
        self.last = 0.0
        self.gaps: list[float] = []
        self.subscribe = subscribe
        self.server_ms = 0
        self._connect = connect

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(self._connect)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        if self.state == "held":
            if data.strip(b"\r\n"):
                self._fail(f"unexpected data {data[:120]!r}")
                return
            now = time.monotonic()
            for _ in range(data.count(b"\n")):
                self.gaps.append(now - self.last)
                self.last = now
                self.beats += 1
            return
        self.buf += data
        while b"\x00" in self.buf:
            raw, self.buf = self.buf.split(b"\x00", 1)
            raw = raw.lstrip(b"\r\n")
            command = raw.split(b"\n", 1)[0]
            if command == b"ERROR":
                self._fail("ERROR " + raw[:300].decode("utf-8", "replace").replace("\n", " | "))
                return
            if self.state == "connecting" and command == b"CONNECTED":
                for line in raw.split(b"\n"):
                    if line.startswith(b"heart-beat:"):
                        self.server_ms = int(line.split(b":", 1)[1].split(b",")[0])
                self.last = time.monotonic()
                if self.subscribe is None:
                    self._held()
                else:
                    self.state = "subscribing"
                    self.transport.write(self.subscribe)  # type: ignore[union-attr]
            elif self.state == "subscribing" and command == b"RECEIPT":
                self._held()
            else:
                self._fail(f"unexpected {command!r} while {self.state}")
                return

    def _held(self) -> None:
        self.state = "held"
        if self.buf.strip(b"\r\n"):
            self._fail(f"unexpected data {self.buf[:120]!r}")
        self.buf = b""
        if not self.ready.done():
            self.ready.set_result(None)

    def _fail(self, why: str) -> None:
        if self.error is None:
            self.error = why
        self.state = "failed"
        if not self.ready.done():
            self.ready.set_exception(BenchError(why))
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state != "closing":
            self._fail("closed by the server" + (f" ({exc!r})" if exc else ""))


FD_MARGIN = 250  # descriptors left to RabbitMQ for everything else (other clients, files)


def safe_connections(rabbit: Management, wanted: int, per_amqp: int, unsafe: bool) -> tuple[int, str | None]:
    if unsafe:
        return wanted, None
    fds = rabbit.file_descriptors()
    if fds is None:
        raise BenchError("the management API does not report RabbitMQ's file descriptors; "
                         "cannot tell whether the broker survives this many connections (--unsafe-connections)")
    free = fds[1] - fds[0] - FD_MARGIN
    if math.ceil(wanted / per_amqp) <= free:
        return wanted, None
    fit = max(0, free * per_amqp)
    return fit, (f"RabbitMQ uses {fds[0]} of {fds[1]} file descriptors: {wanted} STOMP connections "
                 f"({per_amqp} per AMQP connection) would exhaust them; capped to {fit}")


def lateness_summary(values: list[float], points=(50, 90, 99, 99.9)) -> dict[str, float]:
    """Heart-beat lateness, seconds: p50 … p99.9 (testkit.stats) and the maximum; {} for none."""
    if not values:
        return {}
    out = {f"p{p:g}": percentile(values, p) for p in points}
    out["max"] = max(values)
    return out


async def run_idle(port: int, pid: int | None, rabbit: Management, connections: int, hold: float,
                   heartbeat: str = "10000,10000", concurrency: int = 100, unsafe: bool = False,
                   subscribe: bool = True, per_amqp: int = 64, settle: float | None = None,
                   send: bool = False) -> dict:
    requested = connections
    connections, capped = safe_connections(rabbit, connections, per_amqp, unsafe)
    fd_soft = raise_fd_limit(connections + 256)
    if fd_soft < connections + 64:
        raise BenchError(f"file-descriptor limit {fd_soft} is too low for {connections} connections "
                         "(raise ulimit -n)")
    cx, cy = (int(v) for v in heartbeat.split(","))
    key = unique("bench.idle").replace("-", ".")
    connect = (f"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n"
               f"heart-beat:{heartbeat}\n\n\x00").encode()
    loop = asyncio.get_running_loop()
    rss_before = memory_kb(pid)["VmRSS"] / 1024 if pid else None
    if pid:
        reset_peak(pid)
    errors: collections.Counter[str] = collections.Counter()
    held: list[IdleConnection] = []
    gate = asyncio.Semaphore(concurrency)

    async def open_one(i: int) -> None:
        if send:  # a publishing session (its publishing channel opens), then idle
            sub: bytes | None = f"SEND\ndestination:/topic/{key}.{i}\nreceipt:s\n\nx\x00".encode()
        elif subscribe:
            sub = f"SUBSCRIBE\ndestination:/topic/{key}.{i}\nid:0\nreceipt:s\n\n\x00".encode()
        else:
            sub = None
        async with gate:
            ready = loop.create_future()
            try:
                _, proto = await asyncio.wait_for(
                    loop.create_connection(lambda: IdleConnection(connect, sub, ready), "127.0.0.1", port), 30)
                await asyncio.wait_for(ready, 30)
            except (BenchError, OSError, asyncio.TimeoutError) as exc:
                errors[f"open: {first_line(exc)}"] += 1
                return
        if cy and proto.server_ms == 0:
            errors["CONNECTED heart-beat: the server will not send heart-beats"] += 1
        held.append(proto)

    async def beat_all() -> None:
        # Started before the connections open: opening N can take longer than
        # the bridge's patience (2 x the client's interval).
        while True:
            await asyncio.sleep(cx / 1000)
            for start in range(0, len(held), 500):  # in slices: the client's own loop stays responsive
                for conn in held[start : start + 500]:
                    if conn.state == "held" and conn.transport is not None:
                        conn.transport.write(b"\n")
                await asyncio.sleep(0)

    beater = asyncio.ensure_future(beat_all()) if cx else None
    t0 = time.perf_counter()
    cpu0 = cpu_seconds(pid) if pid else 0.0
    await asyncio.gather(*(open_one(i) for i in range(connections)))
    open_s = time.perf_counter() - t0
    cpu_open = cpu_seconds(pid) - cpu0 if pid else None
    rss_open = memory_kb(pid)["VmRSS"] / 1024 if pid else None

    # Only gaps after every connection is open and a settling time count: opening
    # the rest keeps both processes busy, and the bridge's full garbage
    # collections while its heap grows (each over all objects, seconds at
    # 10,000 connections on a shared machine) delay heart-beats then.
    settle = max(cx, cy) / 1000 * 2 if settle is None else settle
    ramp_late = lateness_summary([gap - cy / 2000 for conn in held for gap in conn.gaps])
    await asyncio.sleep(settle)
    for conn in held:
        conn.gaps.clear()
    beats_before = {id(conn): conn.beats for conn in held}
    cpu_hold0 = cpu_seconds(pid) if pid else 0.0
    rss_samples = []
    lag = []
    deadline = time.perf_counter() + hold
    try:
        while (left := deadline - time.perf_counter()) > 0:
            t = loop.time()
            await asyncio.sleep(min(1.0, left))
            lag.append(loop.time() - t - min(1.0, left))
            if pid:
                rss_samples.append(memory_kb(pid)["VmRSS"] / 1024)
    finally:
        cpu_hold = cpu_seconds(pid) - cpu_hold0 if pid else None
        mem = memory_kb(pid) if pid else None
        if beater is not None:
            beater.cancel()
            await asyncio.gather(beater, return_exceptions=True)
        for conn in held:
            if conn.state == "held":
                conn.state = "closing"
            if conn.transport is not None:
                conn.transport.close()
    interval = held[0].server_ms / 1000 if held and held[0].server_ms else cy / 1000
    expected_beats = max(1, int(hold / interval) - 1) if cy else 0
    lateness: list[float] = []
    for conn in held:
        if conn.error:
            errors[f"hold: {conn.error}"] += 1
        elif conn.beats - beats_before[id(conn)] < expected_beats:
            errors[f"hold: fewer than {expected_beats} heart-beats"] += 1
        lateness.extend(gap - interval / 2 for gap in conn.gaps)
    beats = sorted(conn.beats - beats_before[id(conn)] for conn in held) or [0]
    leftovers = await rabbit.cleanup_topic(key, wait=30) if subscribe else []
    broker_ok = await asyncio.to_thread(rabbit.file_descriptors) is not None
    if not broker_ok:
        print("  WARNING: RabbitMQ's management API stopped answering after the idle run; check the broker")
    late = lateness_summary(lateness)
    return {
        "connections_requested": requested,
        "capped": capped,
        "connections": connections,
        "subscribed": subscribe,
        "held": len(held),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors.most_common(10)),
        "open_s": open_s,
        "cpu_open_s": cpu_open,
        "cpu_hold_s": cpu_hold,
        "hold_s": hold,
        "heartbeat": heartbeat,
        "heartbeats_min": beats[0],
        "heartbeats_median": statistics.median(beats),
        "heartbeats_expected_min": expected_beats,
        "heartbeat_gaps": len(lateness),
        "heartbeat_late_ms": {k: v * 1000 for k, v in late.items()},
        "heartbeat_late_while_opening_ms": {k: v * 1000 for k, v in ramp_late.items()},
        "settle_s": settle,
        "client_loop_lag_ms_max": max(lag) * 1000 if lag else None,
        "rss_before_mb": rss_before,
        "rss_open_mb": rss_open,
        "rss_held_mb": max(rss_samples) if rss_samples else None,
        "rss_end_mb": mem["VmRSS"] / 1024 if mem else None,
        "peak_rss_mb": mem["VmHWM"] / 1024 if mem else None,
        "kb_per_connection": ((max(rss_samples) - rss_before) * 1024 / len(held))
        if rss_samples and rss_before is not None and held else None,
        "leftover_queues_deleted": len(leftovers),
        "broker_ok_after": broker_ok,
    }


def first_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.split("\n", 1)[0]
