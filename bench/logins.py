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

``--guessing`` measures the login throttle instead (session/throttle.py): a user of its own
(created and deleted through ``--api-url``) is guessed at with a new wrong passcode per
CONNECT from this address for ``--seconds``, by 1 connection at a time and by ``--lanes`` at
once, against the native plugin and a fresh bridge each time. It reports guesses per second
RabbitMQ checked (what a guesser learns from) and answers per second, and meanwhile, every
0.5 s, the CONNECTED time of the rightful client (same user, same address, its right
password, which logged in once before the flood) and of another user; then, for the bridge,
how long a right password the bridge has not seen accepted takes to get in during the flood.
With ``--broker-pid`` (the broker's beam.smp), RabbitMQ's CPU time in each run (per checked
guess where guesses dominate it).

    python -m bench.logins --guessing --broker-pid PID   # PID: the "OS PID" of `rabbitmqctl status`
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections import Counter

from bench.procstat import cpu_seconds, start_bridge
from testkit.management import Management
from testkit.stats import percentile
from testkit.stomp import Closed, StompClient


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


# -- the login throttle: guessing, and the rightful user meanwhile ------------------------------


async def _guess(port: int, user: str) -> str:
    """One wrong passcode: who answered it (RabbitMQ, or the bridge's throttle at once)."""
    client = await StompClient.open(port)
    try:
        client.send("CONNECT", {"accept-version": "1.2", "host": "/", "login": user, "passcode": uuid.uuid4().hex})
        frame = await client.next(30, "the answer to a wrong passcode")
    finally:
        client.abort()
    if frame.command != "ERROR":
        raise RuntimeError(f"a wrong passcode got {frame.command}")
    return "throttled" if b"failed logins" in frame.body else "checked"


async def _timed_login(port: int, user: str, password: str) -> float | None:
    """Seconds to CONNECTED, or None when refused."""
    started = time.perf_counter()
    try:
        client = await StompClient.connect(port, login=user, passcode=password, heartbeat=None, timeout=30)
    except Closed:
        return None
    latency = time.perf_counter() - started
    client.abort()
    return latency


async def _flood(port: int, user: str, password: str, lanes: int, seconds: float, known: bool) -> dict:
    if known:
        await _timed_login(port, user, password)  # the rightful client, once before
    outcomes: Counter = Counter()
    rightful: list[float | None] = []
    other: list[float | None] = []
    first_in: list[float] = []
    started = time.monotonic()
    deadline = started + seconds

    async def lane() -> None:
        while time.monotonic() < deadline:
            outcomes[await _guess(port, user)] += 1

    async def meanwhile() -> None:
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            latency = await _timed_login(port, user, password)
            rightful.append(latency)
            if latency is not None and not first_in:
                first_in.append(time.monotonic() - started)
            other.append(await _timed_login(port, "guest", "guest"))

    await asyncio.gather(*(lane() for _ in range(lanes)), meanwhile())
    elapsed = time.monotonic() - started
    got_in = sorted(x for x in rightful if x is not None)
    return {
        "checked_per_s": outcomes["checked"] / elapsed, "answers_per_s": sum(outcomes.values()) / elapsed,
        "checked": outcomes["checked"],
        "rightful": f"{len(got_in)}/{len(rightful)} in" + (
            f", p50 {statistics.median(got_in) * 1000:.0f} ms, max {got_in[-1] * 1000:.0f} ms" if got_in else ""),
        "other": f"{sum(x is not None for x in other)}/{len(other)} in",
        "first_in_s": first_in[0] if first_in else None,
    }


def guessing(args: argparse.Namespace) -> None:
    api = Management(args.api_url, "guest", "guest")
    print(f"guessing for {args.seconds:g} s per run, 1 and {args.lanes} connections at once, {args.amqp_url}")
    runs = []
    if args.native_port:
        runs += [("native plugin", args.native_port, lanes, True) for lanes in (1, args.lanes)]
    runs += [("bridge", 0, lanes, True) for lanes in (1, args.lanes)] + [("bridge", 0, args.lanes, False)]
    for label, port, lanes, known in runs:
        user, password = f"bench-victim-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        api.create_user(user, password)
        api.set_permissions(user)
        proc = start_bridge(args.port, {"amqp_url": args.amqp_url}) if not port else None
        try:
            broker_cpu = cpu_seconds(args.broker_pid) if args.broker_pid else 0.0
            r = asyncio.run(_flood(port or args.port, user, password, lanes, args.seconds, known))
            broker_cpu = cpu_seconds(args.broker_pid) - broker_cpu if args.broker_pid else 0.0
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(10)
            api.delete_user(user)
        cost = ""
        if args.broker_pid:  # per guess only where guesses dominate what the broker did
            cost = f"   RabbitMQ CPU {broker_cpu:.1f} s" + (
                f" ({broker_cpu / r['checked'] * 1000:.2f} ms per checked guess)" if r["checked"] >= 1000 else "")
        if known:
            print(f"{label:14} {lanes:4} at once: {r['checked_per_s']:7.2f} guesses/s checked by RabbitMQ, "
                  f"{r['answers_per_s']:7.0f} answers/s; rightful client {r['rightful']}; "
                  f"another user {r['other']}{cost}")
        else:
            first = "never" if r["first_in_s"] is None else f"after {r['first_in_s']:.1f} s"
            print(f"{label:14} {lanes:4} at once, a right password not seen before: first in {first} "
                  f"({r['rightful']}); {r['checked_per_s']:.2f} guesses/s checked")


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
    ap.add_argument("--guessing", action="store_true", help="measure the login throttle (see above)")
    ap.add_argument("--lanes", type=int, default=100, help="--guessing: connections guessing at once")
    ap.add_argument("--seconds", type=float, default=20.0, help="--guessing: length of each run")
    ap.add_argument("--api-url", default="http://127.0.0.1:15643/api", help="--guessing: to create the user")
    ap.add_argument("--broker-pid", type=int, default=0, help="--guessing: RabbitMQ's beam.smp, for its CPU time")
    args = ap.parse_args()
    if args.guessing:
        guessing(args)
        return 0
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
