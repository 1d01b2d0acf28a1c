"""What one AMQP connection costs the bridge's CPU: aiormq's, or the bridge's own handshake.

    python -m bench.amqp_connection                       # RabbitMQ 4.3 of scripts/rabbitmq4
    python -m bench.amqp_connection --amqp-url amqp://guest:guest@127.0.0.1:5672/ --count 500

Three ways to open a connection as guest and close it again, ``--count`` times each, in turn,
in this process (its CPU time per connection, from ``time.process_time``; the broker's is not
counted):

* ``aiormq``: what a session's shared connection costs (``connect.connect_any``: aiormq with
  the bulk reader, then ``close``);
* ``handshake``: the bridge's own handshake on pamqp's codec up to open-ok, then close
  (``connect.check_login``, what a login check costs; the least an own connection would cost);
* ``probe``: the handshake up to connection.start (the /readyz probe).

The numbers back the choice written in docs/development.md (keep aiormq's connection, or
write the bridge's own). Run by hand; numbers go in notes, never into assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from stomp_bridge.amqp import connect, probe
from stomp_bridge.amqp.endpoints import Endpoints


async def _aiormq(url: str) -> None:
    connection, _ = await connect.connect_any(Endpoints(url), "guest", "guest", "/", "bench", 60, 10.0)
    await connection.close()


async def _handshake(url: str) -> None:
    await connect.check_login(Endpoints(url), "guest", "guest", "/", "bench", 10.0)


async def _probe(url: str) -> None:
    problem = await probe.check(url)
    assert problem is None, problem


async def _measure(fn: Callable[[str], Awaitable[None]], url: str, count: int) -> tuple[float, float]:
    """(CPU ms per connection, wall ms per connection)."""
    await fn(url)  # warm up
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(count):
        await fn(url)
    return (time.process_time() - cpu) * 1000 / count, (time.perf_counter() - wall) * 1000 / count


async def _main(url: str, count: int, runs: int) -> None:
    connect.install()
    ways = {"aiormq": _aiormq, "handshake": _handshake, "probe": _probe}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for _ in range(runs):  # interleaved, so machine noise hits each alike
        for name, fn in ways.items():
            results[name].append(await _measure(fn, url, count))
    print(f"{count} connections per run, {runs} runs, median; CPU of this process only")
    print(f"{'way':<10} {'CPU ms/conn':>12} {'wall ms/conn':>13}")
    for name, rows in results.items():
        print(f"{name:<10} {statistics.median(r[0] for r in rows):>12.3f} {statistics.median(r[1] for r in rows):>13.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5643/")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    asyncio.run(_main(args.amqp_url, args.count, args.runs))


if __name__ == "__main__":
    main()
