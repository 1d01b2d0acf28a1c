"""Fault scenarios on the three-node cluster (:mod:`testkit.cluster`), each a function that runs
traffic through bridges while it injects its faults and returns what the clients saw, so that
``tests/cluster`` (short, asserted) and ``python -m reliability --only cluster`` (long, reported)
run the same code.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from testkit.cluster import NODES, Cluster, ResendingPublisher, ResubscribingConsumer, percentile


@dataclass
class Step:
    """One step of a rolling restart (or the steady traffic before it, ``node`` 0)."""

    node: int
    seconds: float = 0.0
    receipts: int = 0
    errors: int = 0  # connections that ended (ERROR frame, close, no RECEIPT in time)
    reconnects: int = 0
    p99_ms: float = 0.0
    max_ms: float = 0.0


@dataclass
class TrafficResult:
    sent: int = 0  # SEND frames written, resends included
    receipted: int = 0
    received: int = 0  # MESSAGE frames, redeliveries included
    lost: int = 0
    duplicates: int = 0  # deliveries beyond the first of a body
    reconnects: int = 0
    steps: list[Step] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"sent {self.sent}, receipted {self.receipted}, received {self.received}, lost {self.lost}, "
                f"duplicates {self.duplicates}, reconnects {self.reconnects}")


class Traffic:
    """Steady persistent publishing and client-individual consuming on one quorum queue through
    each bridge: ``publishers`` publishers and one consumer per bridge port."""

    def __init__(self, ports: list[int], queue: str, publishers: int = 2) -> None:
        destination = f"/amq/queue/{queue}"
        self.publishers = [ResendingPublisher(port, destination, prefix=f"b{b}p{k}", receipt_timeout=20)
                           for b, port in enumerate(ports) for k in range(publishers)]
        self.consumers = [ResubscribingConsumer(port, destination, prefetch=50) for port in ports]
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task] = []

    def receipted(self) -> set[str]:
        return {body for p in self.publishers for body in p.receipted}

    def received(self) -> set[str]:
        return {body for c in self.consumers for body in c.received}

    def _clients(self) -> list:
        return [*self.publishers, *self.consumers]

    def counts(self) -> tuple[int, int, int]:
        """(receipts, errors, reconnects) so far, every client."""
        return (sum(len(p.receipted) for p in self.publishers),
                sum(len(c.tally.errors) for c in self._clients()),
                sum(c.tally.reconnects for c in self._clients()))

    async def start(self) -> None:
        all_in = self.received
        self.tasks = [asyncio.create_task(c.run(lambda: self.stop.is_set() and self.receipted() <= all_in(),
                                                timeout=3600)) for c in self.consumers]
        await asyncio.wait_for(asyncio.gather(*(c.first_subscription.wait() for c in self.consumers)), 60)
        self.tasks += [asyncio.create_task(p.publish(10**9, stop=self.stop)) for p in self.publishers]

    async def until_receipts(self, more: int, timeout: float = 60) -> None:
        """Until the publishers have ``more`` receipts than now (steady traffic is flowing)."""
        want = self.counts()[0] + more
        deadline = time.monotonic() + timeout
        while self.counts()[0] < want:
            if time.monotonic() > deadline:
                raise AssertionError(f"publishers stuck below {want} receipts for {timeout:g} s")
            failed = [t for t in self.tasks if t.done() and t.exception() is not None]
            if failed:
                raise failed[0].exception()  # type: ignore[misc]
            await asyncio.sleep(0.05)  # polls counters other tasks advance

    def step(self, node: int, started: float, before: tuple[int, int, int]) -> Step:
        now = time.monotonic()
        receipts, errors, reconnects = (a - b for a, b in zip(self.counts(), before))
        latencies = [s for p in self.publishers for (at, s) in p.tally.latencies if started <= at < now]
        return Step(node, round(now - started, 2), receipts, errors, reconnects,
                    round(percentile(latencies, 99) * 1000, 1), round(max(latencies, default=0) * 1000, 1))

    async def finish(self, timeout: float = 120) -> TrafficResult:
        self.stop.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks), timeout)
        receipted, received = self.receipted(), self.received()
        return TrafficResult(
            sent=sum(p.sent for p in self.publishers), receipted=len(receipted),
            received=sum(sum(c.received.values()) for c in self.consumers), lost=len(receipted - received),
            duplicates=sum(sum(c.received.values()) for c in self.consumers) - len(received),
            reconnects=self.counts()[2], errors=[e for c in self._clients() for e in c.tally.errors])


async def rolling_restart(cluster: Cluster, ports: list[int], queue: str, publishers: int = 2,
                          rounds: int = 1, steady: int = 200) -> TrafficResult:
    """Restart nodes 1, 2, 3 one at a time (``rounds`` times) under :class:`Traffic`: before each
    stop, wait until the node is not quorum-critical; stop it gracefully; start it; wait until
    it runs in the cluster and ``queue`` has its member on it online again. ``steady`` receipts
    before the first step (the baseline) and between steps."""
    traffic = Traffic(ports, queue, publishers)
    await traffic.start()
    steps: list[Step] = []
    try:
        before, started = traffic.counts(), time.monotonic()
        await traffic.until_receipts(steady)
        steps.append(traffic.step(0, started, before))
        for _ in range(rounds):
            for n in NODES:
                other = NODES[n % len(NODES)]  # a node that stays up, for the management API
                before, started = traffic.counts(), time.monotonic()
                await asyncio.to_thread(cluster.wait_not_quorum_critical, n)
                await asyncio.to_thread(cluster.shutdown, n)
                await asyncio.to_thread(cluster.start_node, n)
                await asyncio.to_thread(cluster.wait_running, other)
                await asyncio.to_thread(cluster.wait_members_online, queue, other)
                await traffic.until_receipts(steady // 4)
                steps.append(traffic.step(n, started, before))
    finally:
        result = await traffic.finish()
    result.steps = steps
    return result
