"""What a STOMP login costs, with RabbitMQ checking every login (the default) or a login cache.

    python -m bench.logins                                  # RabbitMQ 4.3 of the tests (port 5643)
    python -m bench.logins --amqp-url amqp://guest:guest@127.0.0.1:5672/ --logins 2000

Two bridges in turn on the same broker: ``amqp_login_cache_seconds=0`` (every login that
joins a shared AMQP connection is first checked by RabbitMQ on a connection of its own) and
``=300`` (a login RabbitMQ accepted in the last 5 minutes joins at once, as before the check
existed). Each holds ``--held`` sessions of the user open (so logins join shared connections),
then runs ``--logins`` CONNECT -> CONNECTED -> DISCONNECT cycles, ``--parallel`` at a time,
and reports logins per second, the CONNECTED latency (p50/p99) and the bridge's CPU time per
login. Run it by hand; numbers go into docs/performance.md, never into assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from bench.procstat import cpu_seconds, start_bridge
from testkit.stats import percentile
from testkit.stomp import StompClient


async def _login(port: int, hold: bool = False) -> tuple[float, StompClient | None]:
    started = time.perf_counter()
    client = await StompClient.connect(port, heartbeat=None)  # Closed with the ERROR if refused
    latency = time.perf_counter() - started
    if hold:
        return latency, client
    client.send("DISCONNECT", {"receipt": "bye"})
    await client.next()
    await client.close(wait=False)
    return latency, None


async def _run(port: int, logins: int, parallel: int, held: int) -> dict:
    keep = [w for _, w in [await _login(port, hold=True) for _ in range(held)]]
    latencies: list[float] = []
    queue = iter(range(logins))

    async def worker() -> None:
        for _ in queue:
            latency, _ = await _login(port)
            latencies.append(latency)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(parallel)))
    elapsed = time.perf_counter() - started
    for client in keep:
        await client.close(wait=False)
    return {
        "logins_per_s": logins / elapsed,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
    }


def measure(amqp_url: str, cache: float, args: argparse.Namespace, port: int) -> dict:
    proc = start_bridge(port, {"amqp_url": amqp_url, "amqp_login_cache_seconds": str(cache)})
    try:
        asyncio.run(_run(port, 50, args.parallel, 0))  # warm-up
        before = cpu_seconds(proc.pid)
        result = asyncio.run(_run(port, args.logins, args.parallel, args.held))
        result["cpu_us_per_login"] = (cpu_seconds(proc.pid) - before) / args.logins * 1e6
        return result
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.logins", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5643/")
    ap.add_argument("--logins", type=int, default=1000)
    ap.add_argument("--parallel", type=int, default=8, help="logins in flight at once")
    ap.add_argument("--held", type=int, default=20, help="sessions of the user held open meanwhile")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--port", type=int, default=61634)
    ap.add_argument("--native-port", type=int, default=61643, help="the broker's own STOMP plugin (0: skip)")
    args = ap.parse_args()
    print(f"{args.logins} logins, {args.parallel} at a time, {args.held} sessions held, {args.amqp_url}")
    if args.native_port:
        runs = [asyncio.run(_run(args.native_port, args.logins, args.parallel, args.held)) for _ in range(args.runs)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{'native plugin':32} {med['logins_per_s']:7.0f} logins/s   CONNECTED p50 {med['p50_ms']:5.2f} ms "
              f"p99 {med['p99_ms']:6.2f} ms")
    for cache, label in ((0.0, "checked by RabbitMQ (default)"), (300.0, "login cache 300 s")):
        runs = [measure(args.amqp_url, cache, args, args.port) for _ in range(args.runs)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{label:32} {med['logins_per_s']:7.0f} logins/s   CONNECTED p50 {med['p50_ms']:5.2f} ms "
              f"p99 {med['p99_ms']:6.2f} ms   bridge CPU {med['cpu_us_per_login']:5.0f} µs/login")
    return 0


if __name__ == "__main__":
    sys.exit(main())
