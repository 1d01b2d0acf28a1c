"""Fault scenarios on the three-node cluster (:mod:`testkit.cluster`), each a function that runs
traffic through bridges while it injects its faults and returns what the clients saw, so that
``tests/cluster`` (short, asserted) and ``python -m reliability --only cluster`` (long, reported)
run the same code. Load while failing, with its bridges as child processes measured from
outside, is in :mod:`testkit.load`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from testkit.cluster import (
    NODES, Cluster, ResendingPublisher, ResubscribingConsumer, connect_until, disconnect,
)
from testkit.stats import percentile


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
        self.stop = asyncio.Event()  # the publishers stop
        self.published = asyncio.Event()  # ... and have stopped: the consumers finish what is left
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
        self.tasks = [asyncio.create_task(c.run(lambda: self.published.is_set() and self.receipted() <= all_in(),
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
                    round(percentile(latencies, 99, default=0.0) * 1000, 1), round(max(latencies, default=0) * 1000, 1))

    async def finish(self, timeout: float = 120) -> TrafficResult:
        self.stop.set()
        consumers, publishers = self.tasks[:len(self.consumers)], self.tasks[len(self.consumers):]
        # The consumers' end depends on the last receipts: only once no publisher can add one.
        await asyncio.wait_for(asyncio.gather(*publishers), timeout)
        self.published.set()
        await asyncio.wait_for(asyncio.gather(*consumers), timeout)
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


# -- one consumer (queue or stream) through a fault of the node under it ----------------------

@dataclass
class ConsumerResult(TrafficResult):
    fault: str = ""
    left: list[str] = field(default_factory=list)  # in the queue after the consumer left
    subscriptions: list[str] = field(default_factory=list)  # a stream reader's x-stream-offset each time
    offsets_in_order: bool = True
    consumer_reconnects: int = 0


def fault_once(cluster: Cluster, fault: str, at: int, node: int = 1):
    """An ``on_message`` hook: ``node`` goes down (``fault``: ``kill`` or ``shutdown``) once
    the consumer has ``at`` distinct messages, before it ACKs the last one (``hook.held``)."""
    async def hook(consumer: ResubscribingConsumer, frame) -> None:
        if hook.held is None and len(consumer.received) >= at:
            hook.held = frame.body.decode()
            await asyncio.to_thread(getattr(cluster, fault), node)
    hook.held = None  # type: ignore[attr-defined]
    return hook


def _consumer_result(fault: str, publisher: ResendingPublisher, consumer: ResubscribingConsumer) -> ConsumerResult:
    receipted, received = set(publisher.receipted), set(consumer.received)
    return ConsumerResult(
        sent=publisher.sent, receipted=len(receipted), received=sum(consumer.received.values()),
        lost=len(receipted - received), duplicates=consumer.duplicates,
        reconnects=publisher.tally.reconnects + consumer.tally.reconnects,
        errors=publisher.tally.errors + consumer.tally.errors, fault=fault,
        consumer_reconnects=consumer.tally.reconnects)


async def consume_through_fault(cluster: Cluster, port: int, queue: str, fault: str, messages: int = 300,
                                at: int = 100, prefetch: int = 20) -> ConsumerResult:
    """A client-individual consumer on quorum queue ``queue`` (logged in first, so on node 1)
    while a resending publisher sends ``messages``; node 1 goes down at the consumer's ``at``-th
    message. Ends once the consumer has every receipted message and RabbitMQ holds nothing of
    the queue (every message ACKed, including what a vanished node's consumer held, back after
    the queue's consumer-disconnected-timeout); ``left`` is what the queue holds after the
    consumer's DISCONNECT (never acknowledged)."""
    publisher = ResendingPublisher(port, f"/amq/queue/{queue}")
    hook = fault_once(cluster, fault, at)
    consumer = ResubscribingConsumer(port, f"/amq/queue/{queue}", prefetch=prefetch, on_message=hook)
    drained = asyncio.Event()
    reading = asyncio.create_task(consumer.run(drained.is_set, timeout=600))
    try:
        await asyncio.wait_for(consumer.first_subscription.wait(), 30)
        await publisher.publish(messages)
        while not set(publisher.receipted) <= set(consumer.received):
            assert not reading.done(), reading.exception()
            await asyncio.sleep(0.1)  # polls what the consumer task receives
        await asyncio.to_thread(cluster.wait, "the queue empty", lambda: cluster.queue_messages(queue, 2) == 0,
                                120, 0.3)
    finally:
        drained.set()
        await reading
    result = _consumer_result(fault, publisher, consumer)
    result.left = [m["payload"] for m in await asyncio.to_thread(cluster.api(2).get, queue, messages * 2)]
    return result


async def read_stream_through_fault(cluster: Cluster, port: int, stream: str, fault: str, messages: int = 300,
                                    at: int = 100) -> ConsumerResult:
    """A stream reader (logged in first, so on node 1) from ``first`` while a publisher appends
    ``messages``; node 1 goes down at its ``at``-th message; it subscribes again from the
    offset after the last one it saw."""
    publisher = ResendingPublisher(port, f"/amq/queue/{stream}", prefix="s")
    finished = asyncio.Event()
    reader = ResubscribingConsumer(port, f"/amq/queue/{stream}", ack="client", prefetch=10, stream_from="first",
                                   on_message=fault_once(cluster, fault, at))
    reading = asyncio.create_task(
        reader.run(lambda: finished.is_set() and set(publisher.receipted) <= set(reader.received), timeout=600))
    try:
        await asyncio.wait_for(reader.first_subscription.wait(), 30)
        await publisher.publish(messages)
    finally:
        finished.set()
        await reading
    result = _consumer_result(fault, publisher, reader)
    result.subscriptions = reader.subscribed_at
    result.offsets_in_order = reader.offsets == sorted(set(reader.offsets))
    return result


# -- a memory alarm ---------------------------------------------------------------------------

@dataclass
class AlarmResult(TrafficResult):
    receipts_during_alarm: int = 0  # must be 0: publishers are held back
    read_during_alarm: int = 0  # bytes the bridge read from the publisher while blocked
    written: int = 0  # bytes the publisher wrote
    consumed_during_alarm: int = 0  # by a consumer of another queue


async def memory_alarm(cluster: Cluster, bridge, blocked: str, other: str, sends: int = 1000,
                       size: int = 16384, waiting: int = 100, node: int = 2) -> AlarmResult:
    """``node`` raises a memory alarm (cleared in all cases before this returns); a publisher
    then writes ``sends`` persistent receipted SENDs of ``size`` bytes to ``blocked`` without
    waiting, while a consumer takes the ``waiting`` messages of ``other``. Then the alarm
    clears, every SEND must get its RECEIPT, and a reader counts what ``blocked`` holds.
    ``bridge``: a testkit.bridge.BridgeThread (its byte counter is read)."""
    counters = bridge.server.counters
    await ResendingPublisher(bridge.port, f"/amq/queue/{other}", prefix="w").publish(waiting)
    publisher = await connect_until(bridge.port)
    result = AlarmResult(sent=sends, written=sends * size)
    cluster.set_memory_alarm(node)
    try:
        await asyncio.to_thread(cluster.wait, "the alarm known on node 1", lambda: bool(cluster.alarms(1)))
        read_before = counters.bytes_in
        for i in range(sends):
            publisher.send("SEND", {"destination": f"/amq/queue/{blocked}", "persistent": "true",
                                    "receipt": f"r-{i}"}, f"r-{i}|".encode().ljust(size, b"p"))
        consumer = ResubscribingConsumer(bridge.port, f"/amq/queue/{other}", prefetch=10, max_reconnects=0)
        await consumer.run(lambda: len(consumer.received) == waiting, timeout=30)
        result.consumed_during_alarm = len(consumer.received)
        try:  # still no RECEIPT: the publisher is held back
            await publisher.next(0.5, "no RECEIPT during the alarm")
            result.receipts_during_alarm += 1
        except asyncio.TimeoutError:
            pass
        result.read_during_alarm = counters.bytes_in - read_before
    finally:
        cluster.clear_memory_alarm(node)
    for i in range(result.receipts_during_alarm, sends):  # every SEND gets its RECEIPT, in order
        await publisher.expect_receipt(f"r-{i}", 30)
    result.receipted = sends
    await disconnect(publisher)
    reader = ResubscribingConsumer(bridge.port, f"/amq/queue/{blocked}", prefetch=100)
    await reader.run(lambda: len(reader.received) >= sends, timeout=120)
    stored = {body.split("|", 1)[0] for body in reader.received}
    result.received = sum(reader.received.values())
    result.lost = len({f"r-{i}" for i in range(sends)} - stored)
    result.duplicates = reader.duplicates
    return result
