"""Faults in the middle of persistent publishing, and a client that resends until receipted.

The client is what the bridge promises to make safe: it sends persistent SENDs
with a receipt each and, whenever its connection fails (ERROR, reset, silence),
reconnects and resends every SEND it holds no RECEIPT for. Afterwards the
queue is drained straight from RabbitMQ: every id must be there at least once
(lost = 0); duplicates (resent SENDs that had reached RabbitMQ) are counted.

Three scenarios:

- ``proxies``: TCP fault proxies between client and bridge and between bridge
  and RabbitMQ; cut (reset), delay, pause, pause-then-cut (a lost confirm) and
  refuse (RabbitMQ gone for a moment) on a schedule.
- ``kill``: ``kill -9`` of the bridge process mid-stream, restarted on the same port.
- ``rabbit-restart``: a private RabbitMQ node (never the shared one) restarted
  mid-stream, its application (stop_app/start_app) and the whole node.
"""

from __future__ import annotations

import asyncio
import random
import urllib.parse
import uuid
from collections import Counter
from dataclasses import dataclass, field

from testkit.bridgeproc import BridgeProcess
from testkit.faultproxy import FaultProxy
from testkit.management import Management
from testkit.stomp import Closed, StompClient

from .broker import PrivateRabbit, drain_ids, vhost_url


@dataclass
class Tally:
    sent: int = 0  # distinct messages the clients sent
    sends: int = 0  # SEND frames written, resends included
    receipted: int = 0
    reconnects: int = 0
    faults: int = 0
    fault_kinds: Counter = field(default_factory=Counter)
    received: int = 0  # messages found in RabbitMQ, duplicates included
    lost: int = 0
    duplicated: int = 0

    def add(self, other: "Tally") -> None:
        for name in ("sent", "sends", "receipted", "reconnects", "faults", "received", "lost", "duplicated"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.fault_kinds.update(other.fault_kinds)


class ResendingProducer:
    """Sends persistent messages until ``stop`` is set; on any failure reconnects and resends
    every SEND it holds no RECEIPT for; returns once all it sent are receipted."""

    def __init__(self, port: int, vhost: str, queue: str, stop: asyncio.Event, tally: Tally, name: str,
                 window: int = 16, silence: float = 8.0, pace: float = 0.002) -> None:
        self.port, self.vhost, self.queue, self.stop = port, vhost, queue, stop
        self.pace = pace
        self.tally, self.name, self.window, self.silence = tally, name, window, silence
        self.inflight: dict[str, None] = {}  # ids sent and not receipted, in order
        self.next = 0

    def _send(self, client: StompClient, msg_id: str) -> None:
        client.send("SEND", {"destination": f"/queue/{self.queue}", "persistent": "true",
                             "receipt": msg_id, "msg-id": msg_id}, b"payload " + msg_id.encode())
        self.tally.sends += 1

    async def run(self, give_up: float) -> None:
        loop = asyncio.get_running_loop()
        while not self.stop.is_set() or self.inflight:
            if loop.time() > give_up:
                raise AssertionError(f"{self.name}: {len(self.inflight)} SENDs still without RECEIPT "
                                     "at the deadline")
            try:
                client = await StompClient.connect(self.port, self.vhost, timeout=5)
            except (Closed, OSError, asyncio.TimeoutError):
                self.tally.reconnects += 1
                await asyncio.sleep(0.2)
                continue
            try:
                await self._session(client)
            except (Closed, OSError, asyncio.TimeoutError):
                self.tally.reconnects += 1
            finally:
                client.abort()

    async def _session(self, client: StompClient) -> None:
        for msg_id in list(self.inflight):
            self._send(client, msg_id)
        while not self.stop.is_set() or self.inflight:
            while len(self.inflight) < self.window and not self.stop.is_set():
                msg_id = f"{self.name}-{self.next}"
                self.next += 1
                self.inflight[msg_id] = None
                self.tally.sent += 1
                self._send(client, msg_id)
                if self.pace:
                    await asyncio.sleep(self.pace)
            frame = await client.next(self.silence)
            if frame.command == "RECEIPT":
                if self.inflight.pop(frame.headers.get("receipt-id", ""), "missing") is None:
                    self.tally.receipted += 1
            elif frame.command == "ERROR":
                raise Closed(frame.headers.get("message", "ERROR"))
        await client.close()


async def _publish_under(faults, port: int, vhost: str, amqp_url: str, producers: int, seconds: float,
                         timeout: float, tally: Tally, *, finite: bool = False) -> None:
    """Producers publish for ``seconds`` while ``faults`` (a coroutine function taking a stop
    Event) runs, then finish their resends; the queue is then drained and every id checked.
    ``finite`` faults end by themselves, and publishing goes on until they have."""
    queue = f"faults-{uuid.uuid4().hex[:8]}"
    stop = asyncio.Event()
    injector = asyncio.create_task(faults(stop))
    loop = asyncio.get_running_loop()
    give_up = loop.time() + seconds + timeout

    async def stopper() -> None:
        await asyncio.sleep(seconds)
        if finite:
            await asyncio.wait([injector])
        stop.set()

    stopping = asyncio.create_task(stopper())
    workers = [ResendingProducer(port, vhost, queue, stop, tally, f"p{i}") for i in range(producers)]
    try:
        await asyncio.gather(*(w.run(give_up) for w in workers))
    finally:
        stop.set()
        stopping.cancel()
        await injector
    ids = await drain_ids(vhost_url(amqp_url, vhost), queue)
    counts = Counter(ids)
    expected = {f"{w.name}-{n}" for w in workers for n in range(w.next)}
    tally.received += len(ids)
    tally.lost += len(expected - counts.keys())
    tally.duplicated += sum(c - 1 for c in counts.values())


async def _every(done: asyncio.Event, low: float, high: float) -> bool:
    """Wait a random interval; False once ``done``."""
    try:
        await asyncio.wait_for(done.wait(), random.uniform(low, high))
        return False
    except asyncio.TimeoutError:
        return True


async def proxies(amqp_url: str, mgmt: Management, seconds: float, timeout: float = 120) -> Tally:
    tally = Tally()
    parts = urllib.parse.urlsplit(amqp_url)
    vhost = mgmt.temporary_vhost()
    to_rabbit = FaultProxy((parts.hostname or "127.0.0.1", parts.port or 5672)).start()
    bridge = BridgeProcess(parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{to_rabbit.port}").geturl(),
                           {"amqp_connect_timeout": 3}).start()
    to_bridge = FaultProxy(("127.0.0.1", bridge.port)).start()

    async def faults(done: asyncio.Event) -> None:
        kinds = ["cut client-bridge", "cut bridge-rabbit", "delay client-bridge", "delay bridge-rabbit",
                 "pause bridge-rabbit", "pause+cut bridge-rabbit (confirms lost)", "pause client-bridge",
                 "refuse bridge-rabbit (RabbitMQ gone)"]
        while await _every(done, 0.3, 1.2):
            kind = random.choice(kinds)
            proxy = to_rabbit if kind.endswith("bridge-rabbit") or "bridge-rabbit " in kind else to_bridge
            tally.faults += 1
            tally.fault_kinds[kind.split(" (")[0]] += 1
            if kind.startswith("cut"):
                await asyncio.to_thread(proxy.cut)
            elif kind.startswith("delay"):
                await asyncio.to_thread(proxy.delay, 0.15)
                await asyncio.sleep(1.0)
                await asyncio.to_thread(proxy.delay, 0)
            elif kind.startswith("pause+cut"):
                await asyncio.to_thread(proxy.pause)
                await asyncio.sleep(0.3)
                await asyncio.to_thread(proxy.cut)
                await asyncio.to_thread(proxy.resume)
            elif kind.startswith("pause"):
                await asyncio.to_thread(proxy.pause)
                await asyncio.sleep(0.5)
                await asyncio.to_thread(proxy.resume)
            elif kind.startswith("refuse"):
                await asyncio.to_thread(proxy.refuse)
                await asyncio.sleep(1.0)
                await asyncio.to_thread(proxy.restore)

    try:
        await _publish_under(faults, to_bridge.port, vhost, amqp_url, 4, seconds, timeout, tally)
        _bridge_healthy(bridge)
    finally:
        to_bridge.stop()
        bridge.stop()
        to_rabbit.stop()
        mgmt.delete_vhost(vhost)
    return tally


async def kill9(amqp_url: str, mgmt: Management, seconds: float, interval: tuple[float, float] = (1.0, 3.0),
                timeout: float = 120) -> Tally:
    tally = Tally()
    vhost = mgmt.temporary_vhost()
    bridge = BridgeProcess(amqp_url).start()

    async def faults(done: asyncio.Event) -> None:
        while await _every(done, *interval):
            bridge.kill9()
            tally.faults += 1
            tally.fault_kinds["kill -9 bridge"] += 1
            await asyncio.to_thread(bridge.start)

    try:
        await _publish_under(faults, bridge.port, vhost, amqp_url, 4, seconds, timeout, tally)
    finally:
        bridge.stop()
        mgmt.delete_vhost(vhost)
    return tally


async def rabbit_restart(seconds: float, restarts: int = 2, timeout: float = 180) -> Tally:
    tally = Tally()
    rabbit = await asyncio.to_thread(PrivateRabbit().start)
    bridge = BridgeProcess(rabbit.amqp_url, {"amqp_connect_timeout": 3}).start()

    async def faults(done: asyncio.Event) -> None:
        n = 0
        while n < restarts and await _every(asyncio.Event(), 1.0, 2.0):
            full = n % 2 == 1
            await asyncio.to_thread(rabbit.restart, full)
            n += 1
            tally.faults += 1
            tally.fault_kinds["RabbitMQ node restart" if full else "RabbitMQ app restart"] += 1

    try:
        await _publish_under(faults, bridge.port, "/", rabbit.amqp_url, 4, seconds, timeout, tally, finite=True)
        _bridge_healthy(bridge)
    finally:
        bridge.stop()
        await asyncio.to_thread(rabbit.stop)
    return tally


def _bridge_healthy(bridge: BridgeProcess) -> None:
    if not bridge.alive():
        raise AssertionError(f"bridge died:\n{bridge.log_tail()}")
    stats = bridge.fresh_stats()
    if stats["log_errors"]:
        raise AssertionError(f"bridge logged unexpected errors: {stats}\n{bridge.log_tail()}")
