"""How late scheduled messages (AMQ_SCHEDULED_DELAY) arrive, and what they cost RabbitMQ.

    python -m bench.scheduled                                  # RabbitMQ 4.3 of scripts/rabbitmq4
    python -m bench.scheduled --broker system --delays 1000,10000 --messages 2000
    python -m bench.scheduled --rate 200                       # paced SENDs instead of a burst

Starts a bridge, then for each delay: one client subscribes to a fresh queue, another sends
``--messages`` persistent SENDs with that ``AMQ_SCHEDULED_DELAY`` (a receipt every 100, so the
sender keeps pace with RabbitMQ's confirms), and each MESSAGE's lateness is its arrival (this
machine's clock) minus its ``_AMQ_SCHED_DELIVERY`` (the due time the bridge computed from the
same clock). Prints p50/p99/max lateness, how long the SENDs took, RabbitMQ's CPU seconds per
1,000 messages over the run (the beam process, from /proc), and the levels a message passes
through. Run by hand: the numbers go in docs/features.md, never into test assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid

from bench.procstat import cpu_seconds, start_bridge
from testkit.bridgeproc import find_listener
from stomp_bridge.protocol import scheduled
from testkit.brokers import local
from testkit.ports import free_port
from testkit.stats import percentile
from testkit.stomp import StompClient

RECEIPT_EVERY = 100


async def run_delay(port: int, delay: int, messages: int, body: bytes, rate: float) -> dict[str, float]:
    queue = f"bench-sched-{uuid.uuid4().hex[:10]}"
    reader = await StompClient.connect(port, heartbeat=None, raise_errors=True, read_timeout=delay / 1000 + 120)
    reader.send("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "1", "ack": "auto",
                              "prefetch-count": "1000", "receipt": "sub"})
    while (await reader.next()).command != "RECEIPT":
        pass
    writer = await StompClient.connect(port, heartbeat=None, raise_errors=True, read_timeout=120)
    late: list[float] = []

    async def read() -> None:
        while len(late) < messages:
            for frame in await reader.batch():
                if frame.command == "MESSAGE":
                    late.append(time.time() * 1000 - int(frame.headers["_AMQ_SCHED_DELIVERY"]))

    reading = asyncio.ensure_future(read())
    started = time.monotonic()
    for i in range(messages):
        if rate:  # paced: message i leaves at i / rate seconds
            ahead = started + i / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
        headers = {"destination": f"/queue/{queue}", "AMQ_SCHEDULED_DELAY": str(delay), "persistent": "true"}
        if i % RECEIPT_EVERY == RECEIPT_EVERY - 1 or i == messages - 1:
            headers["receipt"] = str(i)
            writer.send("SEND", headers, body)
            while (await writer.next()).command != "RECEIPT":
                pass
        else:
            writer.send("SEND", headers, body)
    sending = time.monotonic() - started
    await reading
    reader.send("UNSUBSCRIBE", {"id": "1"})
    for client in (reader, writer):
        client.abort()
    return {"p50": percentile(late, 50), "p99": percentile(late, 99), "max": max(late), "min": min(late),
            "send_s": sending, "levels": bin(delay).count("1")}


async def main_async(args: argparse.Namespace, broker_pid: int | None) -> None:
    body = b"x" * args.size
    pace = f"{args.rate:g}/s" if args.rate else "as fast as RabbitMQ confirms"
    print(f"{args.messages} persistent messages of {args.size} bytes per delay, sent {pace}; lateness in ms "
          "(arrival - due); RabbitMQ CPU s per 1,000 messages")
    print(f"{'delay ms':>9} {'levels':>6} {'p50':>8} {'p99':>8} {'max':>8} {'min':>7} {'send s':>7} {'rmq cpu':>8}")
    for delay in args.delays:
        before = cpu_seconds(broker_pid) if broker_pid else None
        row = await run_delay(args.port, delay, args.messages, body, args.rate)
        cpu = (cpu_seconds(broker_pid) - before) * 1000 / args.messages if before is not None else float("nan")
        print(f"{delay:>9} {row['levels']:>6} {row['p50']:>8.1f} {row['p99']:>8.1f} {row['max']:>8.1f} "
              f"{row['min']:>7.1f} {row['send_s']:>7.1f} {cpu:>8.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", choices=["4.4", "4.3", "4.0", "system"], default="4.3")
    ap.add_argument("--delays", default="1000,10000,300000", help="comma-separated delays in ms")
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument("--rate", type=float, default=0.0, help="SENDs per second (0: as fast as confirmed)")
    args = ap.parse_args()
    args.delays = [int(d) for d in args.delays.split(",")]
    broker = local(args.broker)
    os.environ["STOMP_BRIDGE_AMQP_URL"] = broker.amqp_url
    args.port = free_port()
    broker_pid = find_listener(broker.amqp_port)
    proc = start_bridge(args.port)
    try:
        print(f"RabbitMQ {args.broker}; the levels: {scheduled.LEVELS} quorum queues and headers exchanges, "
              "and two exit queues per destination exchange")
        asyncio.run(main_async(args, broker_pid))
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
