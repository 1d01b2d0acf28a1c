"""The A/B scenarios: each runs once against one port and returns its measurements.

A scenario returns a dict with ``value`` (the number compared bridge/native),
``messages`` (what the CPU per message is divided by: SENDs, deliveries, round trips)
and whatever it checked along the way (``receipts_out_of_order`` …). It calls
``mark()`` where its timed part begins, so set-up (declaring, filling a queue,
subscribing) is not counted in the CPU per message. A wrong
message count raises :class:`BenchError`, an ERROR frame ``testkit.stomp.ErrorFrame``.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import time
import urllib.error
import uuid

from collections.abc import Callable

from testkit.management import Management
from testkit.stats import percentile
from testkit.stomp import Frame, StompClient, serialize

READ_TIMEOUT = 30.0  # no frame at all for this long: the scenario is stuck
Mark = Callable[[], None]


def _no_mark() -> None:
    pass


class BenchError(Exception):
    """A scenario cannot go on: a wrong count, a stall, the bridge gone."""


async def connect(port: int) -> StompClient:
    """A logged-in client whose every ERROR frame raises, every read waiting up to READ_TIMEOUT."""
    return await StompClient.connect(port, heartbeat=None, raise_errors=True, read_timeout=READ_TIMEOUT)


def delete_queue(rabbit: Management, name: str) -> None:
    """Through the management API, or rabbitmqctl when the API does not answer."""
    try:
        rabbit.delete_queue(name)
    except urllib.error.HTTPError:
        raise
    except OSError:
        subprocess.run(["rabbitmqctl", "-q", "delete_queue", name], capture_output=True, check=False, timeout=30)


def unique(prefix: str = "bench") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def seq_body(i: int, size: int) -> bytes:
    head = b"%010d" % i
    return head + b"x" * max(0, size - len(head))


async def publish(
    port: int, dest: str, count: int, window: int, persistent: bool, size: int, receipt_every: int = 1,
    extra: dict[str, str] | None = None,
) -> dict[str, int]:
    """Send ``count`` messages with a receipt on every ``receipt_every``-th (and the last);
    at most ``window`` receipts outstanding. Receipts should come back in frame order:
    a receipt whose id is below one already seen counts as out of order. ``extra``: more
    headers on every SEND (bench.tracing's traceparent)."""
    client = await connect(port)
    headers = {"destination": dest, **(extra or {})}
    if persistent:
        headers["persistent"] = "true"
    outstanding: set[int] = set()
    sent = received = out_of_order = 0
    highest = -1
    try:
        while sent < count or outstanding:
            chunk = []
            while sent < count and len(outstanding) < window:
                h = headers
                if (sent + 1) % receipt_every == 0 or sent == count - 1:
                    h = dict(headers, receipt=str(sent))
                    outstanding.add(sent)
                chunk.append(serialize(Frame("SEND", h, seq_body(sent, size)), "1.2"))
                sent += 1
            if chunk:
                client.writer.write(b"".join(chunk))
            if not outstanding:
                continue
            for frame in await client.batch(waiting_for=f"receipts ({len(outstanding)} outstanding)"):
                rid = frame.headers.get("receipt-id", "")
                if frame.command != "RECEIPT" or not rid.isdigit() or int(rid) not in outstanding:
                    raise BenchError(f"port {port}: unexpected frame on a publisher: {frame.command} {frame.headers}")
                n = int(rid)
                outstanding.discard(n)
                received += 1
                if n < highest:
                    out_of_order += 1
                highest = max(highest, n)
    finally:
        await client.close()
    return {"receipts": received, "receipts_out_of_order": out_of_order}


async def declare_queue(port: int, dest: str) -> None:
    setup = await connect(port)
    setup.send(Frame("SUBSCRIBE", {"destination": dest, "id": "declare", "receipt": "declared"}))
    setup.send(Frame("UNSUBSCRIBE", {"id": "declare"}))
    await setup.expect_receipt("declared")
    await setup.close()


async def scenario_send(port: int, rabbit: Management, messages: int, persistent: bool, mark: Mark = _no_mark,
                        size: int = 256, conns: int = 4, window: int = 100,
                        extra: dict[str, str] | None = None) -> dict:
    queue = unique()
    dest = f"/queue/{queue}"
    try:
        await declare_queue(port, dest)
        per = messages // conns
        mark()
        start = time.perf_counter()
        stats = await asyncio.gather(*(publish(port, dest, per, window, persistent, size, extra=extra)
                                       for _ in range(conns)))
        elapsed = time.perf_counter() - start
    finally:
        await asyncio.to_thread(delete_queue, rabbit, queue)
    receipts = sum(s["receipts"] for s in stats)
    if receipts != per * conns:
        raise BenchError(f"port {port}: {receipts} receipts for {per * conns} SENDs")
    return {"value": per * conns / elapsed, "elapsed_s": elapsed, "messages": per * conns,
            "receipts_out_of_order": sum(s["receipts_out_of_order"] for s in stats)}


async def scenario_consume(port: int, rabbit: Management, messages: int, mark: Mark = _no_mark,
                           extra: dict[str, str] | None = None, size: int = 256, prefetch: int = 500,
                           window: int = 500) -> dict:
    queue = unique()
    dest = f"/queue/{queue}"
    received = 0
    done = asyncio.Event()
    done_at = 0.0

    async def consumer() -> None:
        nonlocal received, done_at
        client = await connect(port)
        client.send(Frame("SUBSCRIBE", {"destination": dest, "id": "0", "ack": "client-individual",
                                        "prefetch-count": str(prefetch)}))
        try:
            while not done.is_set():
                try:
                    frames = await asyncio.wait_for(client.batch(), 0.5)
                except asyncio.TimeoutError:
                    continue
                out = []
                for frame in frames:
                    if frame.command != "MESSAGE":
                        raise BenchError(f"port {port}: consumer got {frame.command} {frame.headers}")
                    out.append(serialize(Frame("ACK", {"id": frame.headers["ack"]}), "1.2"))
                    received += 1
                client.writer.write(b"".join(out))
                if received >= messages and not done.is_set():
                    done_at = time.perf_counter()
                    done.set()
        finally:
            await client.close()

    try:
        await publish(port, dest, messages, window, False, size, extra=extra)
        mark()
        start = time.perf_counter()
        await asyncio.gather(consumer(), consumer())
        # Until the last message arrived, not until the idle consumer noticed (up to 0.5 s later).
        elapsed = done_at - start
    finally:
        await asyncio.to_thread(delete_queue, rabbit, queue)
    if received != messages:
        raise BenchError(f"port {port}: consumed {received} messages, {messages} were sent")
    return {"value": messages / elapsed, "elapsed_s": elapsed, "messages": messages}


async def scenario_fanout(port: int, rabbit: Management, messages: int, subscribers: int = 10,
                          mark: Mark = _no_mark) -> dict:
    """1 publisher → ``subscribers`` topic subscribers; deliveries/s counted at the subscribers."""
    key = unique("bench.fanout").replace("-", ".")
    dest = f"/topic/{key}"
    subs = [await connect(port) for _ in range(subscribers)]
    counts = [0] * subscribers
    finished = [0.0] * subscribers

    async def receive(i: int, client: StompClient) -> None:
        while counts[i] < messages:
            for frame in await client.batch(waiting_for=f"MESSAGE {counts[i]} of {messages} on subscriber {i}"):
                if frame.command != "MESSAGE":
                    raise BenchError(f"port {port}: subscriber {i} got {frame.command} {frame.headers}")
                seq = int(frame.body[:10])
                if seq != counts[i]:
                    raise BenchError(f"port {port}: subscriber {i} expected message {counts[i]}, got {seq}")
                counts[i] += 1
        finished[i] = time.perf_counter()

    try:
        for i, client in enumerate(subs):
            client.send(Frame("SUBSCRIBE", {"destination": dest, "id": "0", "ack": "auto", "receipt": f"sub{i}"}))
        for i, client in enumerate(subs):
            await client.expect_receipt(f"sub{i}")
        receivers = [asyncio.ensure_future(receive(i, c)) for i, c in enumerate(subs)]
        mark()
        start = time.perf_counter()
        try:
            stats = await publish(port, dest, messages, 10, False, 256, receipt_every=100)
            await asyncio.gather(*receivers)
        finally:
            for task in receivers:
                task.cancel()
            await asyncio.gather(*receivers, return_exceptions=True)
        elapsed = max(finished) - start
    finally:
        await asyncio.gather(*(c.close() for c in subs))
        await rabbit.cleanup_topic(key)
    return {"value": messages * subscribers / elapsed, "elapsed_s": elapsed, "messages": messages * subscribers,
            "receipts_out_of_order": stats["receipts_out_of_order"]}


async def scenario_pingpong(port: int, rabbit: Management, rounds: int, warmup: int = 100,
                            mark: Mark = _no_mark) -> dict:
    """One connection: SEND to its own queue, wait for the MESSAGE, repeat. Round trip in ms."""
    queue = unique()
    dest = f"/queue/{queue}"
    client = await connect(port)
    rtts = []
    try:
        client.send(Frame("SUBSCRIBE", {"destination": dest, "id": "0", "ack": "auto", "receipt": "sub"}))
        await client.expect_receipt("sub")
        for i in range(warmup + rounds):
            if i == warmup:
                mark()
            t0 = time.perf_counter()
            client.send(Frame("SEND", {"destination": dest}, seq_body(i, 64)))
            frame = await client.next(10, f"ping-pong MESSAGE {i}")
            t1 = time.perf_counter()
            if frame.command != "MESSAGE" or int(frame.body[:10]) != i:
                raise BenchError(f"port {port}: ping {i} answered by {frame.command} {frame.body[:10]!r}")
            if i >= warmup:
                rtts.append((t1 - t0) * 1000)
    finally:
        await client.close()
        await asyncio.to_thread(delete_queue, rabbit, queue)
    rtts.sort()
    return {"value": percentile(rtts, 50), "p50_ms": percentile(rtts, 50), "p90_ms": percentile(rtts, 90),
            "p99_ms": percentile(rtts, 99), "messages": rounds, "elapsed_s": sum(rtts) / 1000, "mean_ms": statistics.fmean(rtts), "max_ms": rtts[-1]}
