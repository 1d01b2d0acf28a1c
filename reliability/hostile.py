"""Hostile clients against one bridge while a well-behaved client keeps measuring.

Each attack runs for a window (repeating itself where one round is quick) and
checks that every hostile connection got what it deserves: its ERROR and a
close, or TCP backpressure for a client that floods without reading. The
probe's round-trip p50/p99 during each attack sit beside the baseline in the
report. At the end the bridge must hold no leftover connection and must have
logged no unexpected exception.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from testkit.bridgeproc import BridgeProcess
from testkit.stomp import StompClient

from .probe import Probe, summary

# Settings of the bridge under attack: a short connect timeout keeps slowloris short.
BRIDGE_SETTINGS = {"connect_timeout": 3}


@dataclass
class Ctx:
    bridge: BridgeProcess
    vhost: str
    window: float
    subscriptions: int

    @property
    def port(self) -> int:
        return self.bridge.port


async def _expect_error(client: StompClient, message: str | tuple[str, ...], timeout: float = 15.0,
                        *, reset_ok: bool = False) -> None:
    """ERROR ``message`` then a close. With ``reset_ok`` (a client that was still writing) a close
    without the ERROR also counts: the bridge's close after ERROR meets the client's unread bytes
    in its socket buffer, so its kernel answers with a reset that can discard the ERROR in flight."""
    frames = await client.until_closed(timeout)
    wanted = (message,) if isinstance(message, str) else message
    errors = [f for f in frames if f.command == "ERROR"]
    if not errors and reset_ok:
        OUTCOMES["closed without ERROR (reset)"] = OUTCOMES.get("closed without ERROR (reset)", 0) + 1
        return
    if not errors or errors[0].headers.get("message") not in wanted:
        raise AssertionError(f"expected ERROR {wanted} then close, got "
                             f"{[(f.command, f.headers.get('message')) for f in frames]}")
    key = f"ERROR {errors[0].headers.get('message')}"
    OUTCOMES[key] = OUTCOMES.get(key, 0) + 1


OUTCOMES: dict[str, int] = {}


async def _repeat(ctx: Ctx, once: Callable[[], Awaitable[None]], parallel: int = 4) -> int:
    """Run ``once`` in ``parallel`` lanes until the window ends; returns how many ran."""
    deadline = time.monotonic() + ctx.window
    count = 0

    async def lane() -> None:
        nonlocal count
        while time.monotonic() < deadline:
            await once()
            count += 1

    await asyncio.gather(*(lane() for _ in range(parallel)))
    return count


async def slowloris(ctx: Ctx) -> int:
    """One byte a second of a CONNECT that never ends: 'Connect timeout' after connect_timeout."""
    wire = b"CONNECT\naccept-version:1.2\nhost:" + ctx.vhost.encode() + b"\n" + b"x-slow:" + b"z" * 1000

    async def one() -> None:
        client = await StompClient.open(ctx.port)
        reader = asyncio.create_task(_expect_error(client, "Connect timeout", 30))
        try:
            for byte in wire:
                if reader.done():
                    break
                try:
                    client.send_raw(bytes([byte]))
                except (ConnectionError, RuntimeError):
                    break
                await asyncio.sleep(1.0)
            await reader
        finally:
            reader.cancel()
            client.abort()

    n = 20
    await asyncio.gather(*(one() for _ in range(n)))
    return n


async def endless_headers(ctx: Ctx) -> int:
    """Header lines without end, before and after login: a limit's ERROR, never unbounded memory."""

    async def once() -> None:
        logged_in = bool(uuid.uuid4().int & 1)
        if logged_in:
            client = await StompClient.connect(ctx.port, ctx.vhost)
            client.send_raw(b"SEND\ndestination:/queue/never\n")
        else:
            client = await StompClient.open(ctx.port)
            client.send_raw(b"CONNECT\naccept-version:1.2\n")
        reader = asyncio.create_task(
            _expect_error(client, ("Too many headers", "Frame too large"), reset_ok=True))
        line = b"x-h:" + b"v" * 60 + b"\n"
        try:
            while not reader.done():
                client.send_raw(line * 50)
                try:
                    await asyncio.wait_for(client.drain(), 5)
                except (ConnectionError, RuntimeError):
                    break
                await asyncio.sleep(0)
            await reader
        finally:
            client.abort()

    return await _repeat(ctx, once, parallel=2)


async def huge_content_length(ctx: Ctx) -> int:
    async def once() -> None:
        client = await StompClient.connect(ctx.port, ctx.vhost)
        client.send_raw(b"SEND\ndestination:/queue/huge\ncontent-length:99999999999999\n\n" + b"x" * 4096)
        await _expect_error(client, "Frame too large", reset_ok=True)
        client.abort()

    return await _repeat(ctx, once)


async def many_subscriptions(ctx: Ctx) -> int:
    """max_subscriptions SUBSCRIBEs on one connection succeed; the next one gets its ERROR."""
    n = ctx.subscriptions
    client = await StompClient.connect(ctx.port, ctx.vhost)
    queue = f"/queue/subs-{uuid.uuid4().hex[:8]}"
    frames = b"".join(f"SUBSCRIBE\ndestination:{queue}\nid:s{i}\n\n\0".encode() for i in range(n))
    client.send_raw(frames + f"SUBSCRIBE\ndestination:{queue}\nid:s{n}\nreceipt:last\n\n\0".encode())
    await _expect_error(client, "Too many subscriptions", timeout=max(60.0, n / 50))
    return 1


async def unknown_acks(ctx: Ctx) -> int:
    """Bursts of ACK/NACK frames with malformed or foreign ids on one connection. The plugin
    refuses each with an ERROR and keeps the connection (its error/3), and so does the bridge:
    every one must be answered, and the client then leaves."""
    kinds = ["ACK\nid:nonsense\n\n\0", "ACK\nid:T_s@@session-x@@5\n\n\0", "NACK\nid:\n\n\0", "ACK\n\n\0"]
    wanted = ("Invalid header", "Missing header", "Subscription not found")

    async def once() -> None:
        client = await StompClient.connect(ctx.port, ctx.vhost)
        burst = [kinds[uuid.uuid4().int % len(kinds)] for _ in range(50)]
        client.send_raw("".join(burst).encode())
        for _ in burst:
            frame = await client.next(15.0)
            if frame.command != "ERROR" or frame.headers.get("message") not in wanted:
                raise AssertionError(f"expected ERROR {wanted}, got {frame.command} {frame.headers}")
            key = f"ERROR {frame.headers.get('message')} (connection kept)"
            OUTCOMES[key] = OUTCOMES.get(key, 0) + 1
        client.abort()

    return await _repeat(ctx, once)


async def receipt_flood(ctx: Ctx) -> int:
    """SENDs with receipts as fast as TCP takes them, never reading a RECEIPT. Legal STOMP, so
    no ERROR: the bridge must keep its memory bounded (RabbitMQ, the shared bottleneck, pushes
    back through the bridge to the client's socket)."""
    client = await StompClient.connect(ctx.port, ctx.vhost)
    rss0 = ctx.bridge.rss_kb()
    topic = f"/topic/flood-{uuid.uuid4().hex[:8]}"
    batch = b"".join(f"SEND\ndestination:{topic}\nreceipt:r{i}\n\nx\0".encode() for i in range(1000))
    deadline = time.monotonic() + ctx.window
    sent = 0
    peak = 0
    while time.monotonic() < deadline:
        client.send_raw(batch)
        sent += 1000
        try:
            await asyncio.wait_for(client.drain(), max(0.1, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            break  # the bridge stopped reading: backpressure
        peak = max(peak, ctx.bridge.rss_kb())
    grown_mb = (max(peak, ctx.bridge.rss_kb()) - rss0) / 1024
    client.abort()
    OUTCOMES["receipt flood frames written"] = OUTCOMES.get("receipt flood frames written", 0) + sent
    OUTCOMES["receipt flood bridge RSS growth MB"] = round(grown_mb, 1)
    if grown_mb > 200:
        raise AssertionError(f"bridge RSS grew {grown_mb:.0f} MB under a receipt flood")
    return 1


async def resets_mid_frame(ctx: Ctx) -> int:
    async def once() -> None:
        if uuid.uuid4().int & 1:
            client = await StompClient.connect(ctx.port, ctx.vhost)
            client.send_raw(b"SEND\ndestination:/queue/reset\ncontent-length:1000\n\n" + b"y" * 300)
        else:
            client = await StompClient.open(ctx.port)
            client.send_raw(b"CONNECT\naccept-version:1.2\nlog")
        await client.drain()
        client.abort()

    return await _repeat(ctx, once)


async def connect_flood(ctx: Ctx) -> int:
    """Hundreds of connections that start a CONNECT and never finish it, all at once: each gets
    'Connect timeout' after connect_timeout; the bridge holds at most their unfinished bytes."""
    n = 500
    wire = b"CONNECT\naccept-version:1.2\nhost:" + ctx.vhost.encode() + b"\nlogin:guest\n"
    rss0 = ctx.bridge.rss_kb()

    async def one() -> None:
        client = await StompClient.open(ctx.port)
        try:
            client.send_raw(wire)
            await _expect_error(client, "Connect timeout", 30)
        finally:
            client.abort()

    await asyncio.gather(*(one() for _ in range(n)))
    OUTCOMES["connect flood: bridge RSS growth kB"] = max(0, ctx.bridge.rss_kb() - rss0)
    return n


async def password_guessing(ctx: Ctx) -> int:
    """Wrong passcodes for one user from one address, as fast as the answers come: RabbitMQ
    answers the first login_failures_per_minute of them, the bridge the rest, at once."""
    user = f"victim-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + ctx.window
    count = 0

    async def lane() -> None:
        nonlocal count
        while time.monotonic() < deadline:
            client = await StompClient.open(ctx.port)
            try:
                client.send("CONNECT", {"accept-version": "1.2", "host": ctx.vhost, "login": user,
                                        "passcode": uuid.uuid4().hex})
                frames = await client.until_closed(30)
            finally:
                client.abort()
            if not frames or frames[0].headers.get("message") != "Bad CONNECT":
                raise AssertionError(f"expected Bad CONNECT, got {[(f.command, f.headers) for f in frames]}")
            key = "guess refused by the bridge (throttled)" if "failed logins" in frames[0].body.decode() \
                else "guess refused by RabbitMQ"
            OUTCOMES[key] = OUTCOMES.get(key, 0) + 1
            count += 1

    await asyncio.gather(*(lane() for _ in range(4)))
    return count


ATTACKS: dict[str, Callable[[Ctx], Awaitable[int]]] = {
    "slowloris (1 byte/s CONNECT)": slowloris,
    "CONNECT flood, never finished (500 at once)": connect_flood,
    "password guessing, one user": password_guessing,
    "never-ending headers": endless_headers,
    "huge content-length": huge_content_length,
    "subscriptions past the limit": many_subscriptions,
    "ACK/NACK for unknown ids": unknown_acks,
    "receipt flood, never reading": receipt_flood,
    "reset mid-frame": resets_mid_frame,
}


async def run(amqp_url: str, vhost: str, window: float, subscriptions: int, baseline: float) -> dict:
    settings = {**BRIDGE_SETTINGS, "max_subscriptions": subscriptions}
    bridge = BridgeProcess(amqp_url, settings).start()  # the vhost comes from each CONNECT
    ctx = Ctx(bridge, vhost, window, subscriptions)
    probe = await Probe(bridge.port, vhost).start()
    rows = []
    tried = 0
    try:
        await asyncio.sleep(baseline)
        rows.append({"attack": "baseline (no attack)", "connections": 0, **summary(probe.window())})
        for name, attack in ATTACKS.items():
            await asyncio.to_thread(_settled, bridge, 60.0)  # the last attack's backlog is gone
            await asyncio.sleep(1.0)
            probe.window()
            started = time.monotonic()
            n = await attack(ctx)
            probe.check()
            tried += n
            rows.append({"attack": name, "connections": n, "seconds": round(time.monotonic() - started, 1),
                         **summary(probe.window())})
        stats = await asyncio.to_thread(_settled, bridge)
        if stats["log_errors"]:
            raise AssertionError(f"bridge logged unexpected errors: {stats}")
        if stats["connections"] != 1:
            raise AssertionError(f"bridge holds {stats['connections']} connections after the attacks, want 1")
    finally:
        await probe.stop()
        bridge.stop()
    return {"attacks": tried, "kinds": len(ATTACKS), "rows": rows, "probe_round_trips": probe.round_trips,
            "outcomes": dict(OUTCOMES)}


def _settled(bridge: BridgeProcess, timeout: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        stats = bridge.fresh_stats()
        if stats["connections"] <= 1 or time.monotonic() > deadline:
            return stats

