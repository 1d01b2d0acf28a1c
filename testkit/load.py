"""Load while failing on the three-node cluster (:mod:`testkit.cluster`): thousands of STOMP
connections of mixed traffic through two bridges while a node fails, in rounds, with each
bridge a child process (:mod:`testkit.bridgeproc`) whose RSS, file descriptors, asyncio tasks,
connections and log records at ERROR are read from outside before the traffic, at each
round's peak and once each round's clients have gone. ``tests/cluster`` runs it short and
asserts :meth:`LoadResult.problems`; ``python -m reliability --only cluster --long`` runs it
long and reports :meth:`LoadResult.resources`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from testkit.bridgeproc import BridgeProcess
from testkit.cluster import (
    BRIDGE_ORDERS, RETRYABLE, Cluster, ResendingPublisher, ResubscribingConsumer, Tally, connect_until, disconnect,
)
from testkit.scenarios import TrafficResult

# Each bridge's RSS after the last round may exceed its RSS after the first round by at most
# max(RSS_SLACK_MB, RSS_SLACK x that figure): why these, in LoadResult.problems.
RSS_SLACK_MB = 10.0
RSS_SLACK = 0.10


@contextlib.contextmanager
def bridge_processes(cluster: Cluster, orders: tuple[tuple[int, ...], ...] = BRIDGE_ORDERS,
                     ) -> Iterator[list[BridgeProcess]]:
    """A bridge per order of ``orders``, each a child process (so its RSS, descriptors and
    tasks are its own) with every node of the cluster in its ``amqp_url``, the order's first
    tried first; stopped (SIGTERM) on the way out."""
    bridges = [BridgeProcess(cluster.urls(order)) for order in orders]
    try:
        for bridge in bridges:
            bridge.start()
        yield bridges
    finally:
        for bridge in bridges:
            bridge.stop()


@dataclass
class LoadResult(TrafficResult):
    """What :func:`load_while_failing` saw. The bridges' figures are
    :meth:`BridgeProcess.usage` dicts (``rss_mb``, ``fds``, ``tasks``, ``connections``,
    ``log_errors``), one per bridge."""

    connections: int = 0  # STOMP connections opened, reconnections included
    faults: int = 0
    before: list[dict] = field(default_factory=list)  # before any traffic
    peak: list[list[dict]] = field(default_factory=list)  # per round, the highest of each (RSS: VmHWM)
    after: list[list[dict]] = field(default_factory=list)  # per round, once its clients had gone

    def problems(self, rss_slack_mb: float = RSS_SLACK_MB, rss_slack: float = RSS_SLACK) -> list[str]:
        """Everything wrong, a sentence each; none is the pass. Nothing receipted may be lost.
        After every round each bridge must hold no connection and be back to its file
        descriptors and asyncio tasks of before the traffic, and it may never have logged at
        ERROR. Its RSS after the last round may exceed its RSS after the first by at most
        max(``rss_slack_mb``, ``rss_slack`` x it).

        Why RSS is held to that and not to its start: CPython gives little memory back (its
        allocator keeps its arenas; measured, a bridge's RSS once its clients have gone equals
        its peak to 0.1 MB), so RSS after a round is the highest it has been, and what must
        hold is that it stops rising. Measured on RabbitMQ 4.3.6, 2026-11-24, on the 2-core
        development machine (a ``kill -9`` of node 1 per round at 300 connections; a kill and
        a graceful stop per round at 2,000): at 300 connections a bridge starts at 46-47 MB,
        ends round 1 at 48-49 MB and each later round 0-1.7 MB higher until it levels off
        (at 52.4-53.0 MB, from round 4 to 9; 12 and 14 rounds run: 3.8 and 4.9 MB above
        round 1 at most); at 2,000 (1,000 per bridge at once; runs of 4 and 3 rounds) round 1
        ends at 60-65 MB and later rounds at most 4.9 MB above it. The largest growth after
        round 1 in any number of rounds was 4.9 MB: 10 MB is twice that (10 % for a bridge
        above 100 MB).

        What it catches: 1,000 connections at once cost a bridge 17-18 MB (about 17 kB each,
        buffers and allocator pools included), so a bridge keeping all of it for each of its
        ~1,300 connections of a 2,000-connection round (reconnections included) would grow
        about 22 MB a round, 44 MB over the long version's three rounds. At the CI size
        (~200 connections per bridge and round) that is 3.3 MB a round, under the bound:
        there a kept connection shows as kept descriptors and tasks, and the bound catches
        larger growth (held message bodies, buffers that never shrink)."""
        out = [f"{self.lost} receipted messages never delivered"] if self.lost else []
        for b, before in enumerate(self.before):
            name = f"bridge {b + 1}"
            for r, after in enumerate(rnd[b] for rnd in self.after):
                kept = {k: f"{before[k]} -> {after[k]}" for k in ("fds", "tasks") if after[k] > before[k]}
                if kept or after["connections"]:
                    out.append(f"{name} after round {r + 1}: kept {kept or 'no descriptor or task'}; "
                               f"connections still open: {after['connections']}")
            errors = max(rnd[b]["log_errors"] for rnd in [*self.peak, *self.after])
            if errors:
                out.append(f"{name} logged {errors} records at ERROR")
            first, last = self.after[0][b]["rss_mb"], self.after[-1][b]["rss_mb"]
            bound = first + max(rss_slack_mb, rss_slack * first)
            if last > bound:
                out.append(f"{name}: RSS {last} MB after round {len(self.after)}, above {bound:.1f} MB "
                           f"({first} MB after round 1)")
        return out

    def resources(self) -> list[dict]:
        """Per bridge, what the reports print: RSS (MB), open descriptors and tasks as
        "before / peak of each round / after each round", the most connections it held at once
        and its records at ERROR."""
        rows = []
        for b, before in enumerate(self.before):
            peaks, afters = [rnd[b] for rnd in self.peak], [rnd[b] for rnd in self.after]

            def span(key: str) -> str:
                return " / ".join([str(before[key]), ", ".join(str(p[key]) for p in peaks),
                                   ", ".join(str(a[key]) for a in afters)])
            rows.append({"bridge": b + 1, "rss_mb": span("rss_mb"), "fds": span("fds"), "tasks": span("tasks"),
                         "connections": max(p["connections"] for p in peaks),
                         "log_errors": max(x["log_errors"] for x in [before, *peaks, *afters])})
        return rows


async def _holder(port: int, stop: asyncio.Event, tally: Tally, opened: list[int]) -> None:
    """An idle STOMP connection until ``stop``; logs in again when the bridge drops it."""
    while not stop.is_set():
        try:
            client = await connect_until(port)
            opened[0] += 1
            try:
                while not stop.is_set():
                    try:
                        await client.next(0.5, "nothing (an idle connection)")  # an ERROR raises
                    except asyncio.TimeoutError:
                        continue
            finally:
                await disconnect(client)
        except RETRYABLE as exc:
            tally.lost_connection(exc)


@dataclass
class _Clients:
    """Every client of every round so far."""

    publishers: list[ResendingPublisher] = field(default_factory=list)
    consumers: list[ResubscribingConsumer] = field(default_factory=list)
    idle: Tally = field(default_factory=Tally)
    opened: list[int] = field(default_factory=lambda: [0])  # logins of the idle connections

    def receipted(self) -> set[str]:
        return {body for p in self.publishers for body in p.receipted}

    def received(self) -> set[str]:
        return {body for c in self.consumers for body in c.received}

    def tally(self, result: LoadResult) -> None:
        """The counts of every round into ``result``."""
        every = [*self.publishers, *self.consumers]
        receipted, received = self.receipted(), self.received()
        result.sent = sum(p.sent for p in self.publishers)
        result.receipted = len(receipted)
        result.received = sum(sum(c.received.values()) for c in self.consumers)
        result.lost = len(receipted - received)
        result.duplicates = result.received - len(received)
        result.reconnects = sum(c.tally.reconnects for c in every) + self.idle.reconnects
        result.errors = [e for c in every for e in c.tally.errors] + self.idle.errors
        result.connections = len(every) + self.opened[0] + sum(c.tally.reconnects for c in every)


async def _round(cluster: Cluster, ports: list[int], queues: list[str], connections: int, messages: int,
                 faults: tuple[str, ...], node: int, name: str, clients: _Clients) -> int:
    """One round of :func:`load_while_failing` (message bodies start with ``name``); its clients
    join ``clients``. Returns the faults injected."""
    consumers = [ResubscribingConsumer(port, f"/amq/queue/{q}", prefetch=50) for port in ports for q in queues]
    rest = max(0, connections - len(consumers))
    publishers = [ResendingPublisher(ports[k % len(ports)], f"/amq/queue/{queues[k % len(queues)]}",
                                     prefix=f"{name}L{k}", receipt_timeout=20) for k in range(rest // 3)]
    clients.publishers += publishers
    clients.consumers += consumers
    stop, drained = asyncio.Event(), asyncio.Event()
    holders = [asyncio.create_task(_holder(ports[k % len(ports)], stop, clients.idle, clients.opened))
               for k in range(rest - len(publishers))]
    reading = [asyncio.create_task(c.run(drained.is_set, timeout=600)) for c in consumers]
    sending: list[asyncio.Task] = []
    injected = 0
    try:
        await asyncio.wait_for(asyncio.gather(*(c.first_subscription.wait() for c in consumers)), 60)
        sending = [asyncio.create_task(p.publish(messages)) for p in publishers]
        while sum(len(p.receipted) for p in publishers) < len(publishers) * messages // 2:
            if any(t.done() for t in sending + reading):
                break  # a failure: gather() below reports it
            await asyncio.sleep(0.05)  # polls what the client tasks receive
        for fault in faults:
            await asyncio.to_thread(getattr(cluster, fault), node)
            injected += 1
            await asyncio.to_thread(cluster.start_node, node)
        await asyncio.gather(*sending)
        deadline = time.monotonic() + 120
        while not clients.receipted() <= clients.received():  # earlier rounds' are in already
            assert time.monotonic() < deadline, \
                f"{len(clients.receipted() - clients.received())} receipted never delivered"
            assert not any(t.done() for t in reading), [t.exception() for t in reading if t.done()]
            await asyncio.sleep(0.1)
    finally:
        drained.set()
        stop.set()
        await asyncio.gather(*reading, *holders, return_exceptions=True)
        for task in sending:
            task.cancel()
    return injected


def _usage(bridges: list[BridgeProcess], fresh: bool = True) -> list[dict]:
    return [bridge.usage(fresh) for bridge in bridges]


async def _peak(bridges: list[BridgeProcess], stop: asyncio.Event) -> list[dict]:
    """Each bridge's highest figures until ``stop``: sampled twice a second (as often as a
    bridge writes its stats), RSS from VmHWM, reset at the start, so no peak of it is missed."""
    for bridge in bridges:
        bridge.reset_peak_rss()
    peak = await asyncio.to_thread(_usage, bridges, False)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except asyncio.TimeoutError:
            pass
        for high, now in zip(peak, await asyncio.to_thread(_usage, bridges, False)):
            high.update({k: max(v, high[k]) for k, v in now.items()})
    for high, bridge in zip(peak, bridges):
        high["rss_mb"] = round(bridge.rss_kb("VmHWM") / 1024, 1)
    return peak


async def _settled(bridges: list[BridgeProcess], before: list[dict], timeout: float = 30) -> list[dict]:
    """The bridges' figures once each holds no connection and is back to its descriptors and
    tasks of ``before`` (it closes its AMQP connections and ends its tasks once the clients
    have gone), or as they are after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        now = await asyncio.to_thread(_usage, bridges)  # each waits for its bridge's next stats
        back = all(u["connections"] == 0 and u["fds"] <= b["fds"] and u["tasks"] <= b["tasks"]
                   for u, b in zip(now, before))
        if back or time.monotonic() > deadline:
            return now


async def load_while_failing(cluster: Cluster, bridges: list[BridgeProcess], queues: list[str],
                             connections: int = 300, messages: int = 10, faults: tuple[str, ...] = ("kill",),
                             node: int = 1, rounds: int = 2) -> LoadResult:
    """``rounds`` rounds of ``connections`` STOMP connections through ``bridges`` (from
    :func:`bridge_processes`), spread evenly: a client-individual consumer per queue per
    bridge, publishers (a third of the rest, each ``messages`` persistent receipted SENDs,
    resent until receipted) and idle connections that log in again when dropped. Once half a
    round's messages are receipted, each fault of ``faults`` (``kill`` or ``shutdown``) hits
    ``node``, which is started again while the traffic goes on; every receipted message must
    reach a consumer before the round's clients leave. The bridges' figures are read before
    the traffic, at each round's peak and once each round's clients have gone; check them
    with :meth:`LoadResult.problems`."""
    result = LoadResult(before=await asyncio.to_thread(_usage, bridges))
    ports = [bridge.port for bridge in bridges]
    clients = _Clients()
    for r in range(rounds):
        stop = asyncio.Event()
        sampling = asyncio.create_task(_peak(bridges, stop))
        try:
            result.faults += await _round(cluster, ports, queues, connections, messages, faults, node,
                                          f"R{r + 1}", clients)
        finally:
            stop.set()
            result.peak.append(await sampling)
        result.after.append(await _settled(bridges, result.before))
    clients.tally(result)
    return result
