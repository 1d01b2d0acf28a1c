"""Many idle STOMP connections held on the bridge: memory per connection and heart-beats.

Each connection CONNECTs with ``heart-beat:<cx>,<cy>`` (default 5000,5000: the
bridge sends an EOL every 5 s and expects one from us every 5 s, failing the
connection after 2 × 5 s of silence), SUBSCRIBEs with a receipt to its own
``/topic/<key>.<i>``, and then only heart-beats flow for ``hold`` seconds.
Every connection must have seen CONNECTED, RECEIPT and at least
``hold // interval - 1`` heart-beats, and no ERROR.

Each STOMP connection is one AMQP connection to RabbitMQ, so N also costs N
file descriptors there. RabbitMQ 3.10 with the default 1024 descriptors does
not just refuse the surplus: running out of descriptors stopped Mnesia and took
vhost "/" down for every user of the broker (seen on the development machine).
So N is capped to the broker's free descriptors minus a margin unless
``unsafe`` is set, and the cap is reported.
"""

from __future__ import annotations

import asyncio
import collections
import resource
import statistics
import time

from .client import BenchError, Client, Frame, Rabbit
from .procstat import cpu_seconds, memory_kb, reset_peak
from .scenarios import unique


def raise_fd_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


class Held:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.beats = 0
        self.error: str | None = None


FD_MARGIN = 250  # descriptors left to RabbitMQ for everything else (other clients, files)


def safe_connections(rabbit: Rabbit, wanted: int, unsafe: bool) -> tuple[int, str | None]:
    fds = rabbit.file_descriptors()
    if unsafe:
        return wanted, None
    if fds is None:
        raise BenchError("the management API does not report RabbitMQ's file descriptors; "
                         "cannot tell whether the broker survives this many connections (--unsafe-connections)")
    free = fds[1] - fds[0] - FD_MARGIN
    if wanted <= free:
        return wanted, None
    return max(0, free), (f"RabbitMQ uses {fds[0]} of {fds[1]} file descriptors: {wanted} connections would "
                          f"exhaust them (that stops Mnesia on 3.10); capped to {max(0, free)}")


async def run_idle(port: int, pid: int | None, rabbit: Rabbit, connections: int, hold: float,
                   heartbeat: str = "5000,5000", concurrency: int = 50, unsafe: bool = False) -> dict:
    requested = connections
    connections, capped = safe_connections(rabbit, connections, unsafe)
    fd_soft = raise_fd_limit(connections + 256)
    if fd_soft < connections + 64:
        raise BenchError(f"file-descriptor limit {fd_soft} is too low for {connections} connections")
    cx, cy = (int(v) for v in heartbeat.split(","))
    key = unique("bench.idle").replace("-", ".")
    rss_before = memory_kb(pid)["VmRSS"] / 1024 if pid else None
    if pid:
        reset_peak(pid)
    errors: collections.Counter[str] = collections.Counter()
    held: list[Held] = []
    gate = asyncio.Semaphore(concurrency)

    async def open_one(i: int) -> None:
        async with gate:
            try:
                client = await Client.connect(port, heartbeat=heartbeat, timeout=30)
            except (BenchError, OSError, asyncio.TimeoutError) as exc:
                errors[f"connect: {first_line(exc)}"] += 1
                return
            try:
                agreed = client.connected.headers.get("heart-beat", "0,0") if client.connected else "0,0"
                if int(agreed.split(",")[0]) == 0 and cy:
                    raise BenchError(f"CONNECTED heart-beat {agreed}: server will not send heart-beats")
                client.send(Frame("SUBSCRIBE", {"destination": f"/topic/{key}.{i}", "id": "0", "receipt": "s"}))
                await client.expect_receipt("s", timeout=30)
            except (BenchError, OSError) as exc:
                errors[f"subscribe: {first_line(exc)}"] += 1
                await client.close()
                return
            held.append(Held(client))

    async def beat_all() -> None:
        # Started before the connections open: opening N can take longer than
        # the bridge's patience (2 x the client's interval).
        while True:
            await asyncio.sleep(cx / 1000)
            for h in held:
                if h.error is None and not h.client.writer.is_closing():
                    h.client.writer.write(b"\n")

    beater = asyncio.ensure_future(beat_all()) if cx else None
    t0 = time.perf_counter()
    cpu0 = cpu_seconds(pid) if pid else 0.0
    await asyncio.gather(*(open_one(i) for i in range(connections)))
    open_s = time.perf_counter() - t0
    cpu_open = cpu_seconds(pid) - cpu0 if pid else None

    async def listen(h: Held) -> None:
        reader = h.client.reader
        while True:
            data = await reader.read(65536)
            if not data:
                h.error = "closed by the server"
                return
            if data.strip(b"\r\n"):
                try:
                    h.client._parse(data)
                except BenchError as exc:
                    h.error = first_line(exc)
                    return
                h.error = f"unexpected data {data[:80]!r}"
                return
            h.beats += data.count(b"\n")

    listeners = [asyncio.ensure_future(listen(h)) for h in held]
    cpu_hold0 = cpu_seconds(pid) if pid else 0.0
    rss_samples = []
    deadline = time.perf_counter() + hold
    try:
        while (left := deadline - time.perf_counter()) > 0:
            await asyncio.sleep(min(1.0, left))
            if pid:
                rss_samples.append(memory_kb(pid)["VmRSS"] / 1024)
    finally:
        cpu_hold = cpu_seconds(pid) - cpu_hold0 if pid else None
        mem = memory_kb(pid) if pid else None
        for task in [*listeners, *([beater] if beater else [])]:
            task.cancel()
        await asyncio.gather(*listeners, *([beater] if beater else []), return_exceptions=True)
        await asyncio.gather(*(h.client.close() for h in held))
    expected_beats = max(1, int(hold * 1000 // cy) - 1) if cy else 0
    for h in held:
        if h.error:
            errors[f"hold: {h.error}"] += 1
        elif h.beats < expected_beats:
            errors[f"hold: fewer than {expected_beats} heart-beats"] += 1
    beats = sorted(h.beats for h in held) or [0]
    leftovers = await rabbit.cleanup_topic(key, wait=30)
    broker_ok = await asyncio.to_thread(rabbit.file_descriptors) is not None
    if not broker_ok:
        print("  WARNING: RabbitMQ's management API stopped answering after the idle run; check the broker")
    return {
        "connections_requested": requested,
        "capped": capped,
        "connections": connections,
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
        "rss_before_mb": rss_before,
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
