"""The three-node RabbitMQ 4.3 cluster of ``scripts/rabbitmq-cluster``, steered from Python, and
STOMP clients that live through its node failures, for ``tests/cluster`` and ``reliability``.

- :class:`Cluster`: start, ``kill -9``, graceful shutdown and restart of node N (1..3), the
  ``amqp_url`` of all three in any order, each node's management API, and the events a test
  waits for instead of sleeping: a node back in the cluster, a queue's members all online, a
  node no longer quorum-critical (safe to stop), an alarm raised or cleared.
- :class:`ResendingPublisher`: persistent SENDs, each with a receipt; one without a RECEIPT is
  sent again after reconnecting (what a careful STOMP client does), so a receipted message may
  be stored twice (a duplicate) but never lost. It counts reconnects, errors and each SEND's
  time to its RECEIPT.
- :class:`ResubscribingConsumer`: a client-ack subscriber that reconnects and subscribes again
  when its connection ends; it counts every body it gets (a count above 1 is a redelivery) and
  can resume a stream at the offset after the last one it saw.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from testkit.management import Management
from testkit.stomp import ClientError, Frame, StompClient

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "rabbitmq-cluster"
NODES = (1, 2, 3)
BRIDGE_ORDERS = ((1, 2, 3), (2, 3, 1))  # two bridges' amqp_url: every node, a different one first


class ClusterError(RuntimeError):
    """scripts/rabbitmq-cluster failed, or the cluster did not reach a state in time."""


def node_name(n: int) -> str:
    return f"rabbitc{n}@localhost"


def amqp_url(n: int) -> str:
    return f"amqp://guest:guest@127.0.0.1:569{n}/"


class Cluster:
    """Nodes rabbitc1..3@localhost: AMQP 5691-5693, management 15691-15693."""

    def run(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise ClusterError(f"scripts/rabbitmq-cluster {' '.join(args)} failed ({done.returncode}): "
                               f"{done.stderr[-2000:] or done.stdout[-2000:]}")
        return done.stdout.strip()

    def start(self) -> None:
        """Every node up (idempotent: about 7 s from nothing, a few for one node a test took down)."""
        self.run("start")

    def reset(self) -> None:
        """Stop every node, delete their data, start a new cluster (about 12 s)."""
        self.run("reset")

    def healthy(self, timeout: float = 15) -> bool:
        """Every node running and none quorum-critical. Not so after a ``kill -9`` that left a
        node unable to restart its Raft member (seen once on 4.3.6: node 1's stream coordinator
        member missing from its Ra directory after restart, so every node stays critical)."""
        try:
            self.wait_running(1, timeout=timeout)
            for n in NODES:
                self.wait_not_quorum_critical(n, timeout=timeout)
        except ClusterError:
            return False
        return True

    def kill(self, n: int) -> None:
        """``kill -9`` of node n, as a crash would."""
        self.run("kill", str(n))

    def shutdown(self, n: int) -> None:
        """A graceful stop of node n (``rabbitmqctl shutdown``, which returns once it is down)."""
        self.run("ctl", str(n), "-q", "shutdown")

    def start_node(self, n: int) -> None:
        """Start node n again; returns after its ``rabbitmqctl await_startup``."""
        self.run("start-node", str(n))

    def ctl(self, n: int, *args: str) -> str:
        return self.run("ctl", str(n), *args, timeout=120)

    def eval(self, n: int, expr: str) -> str:
        return self.ctl(n, "-q", "eval", expr)

    def urls(self, order: tuple[int, ...] = NODES) -> str:
        """An ``amqp_url`` for a bridge: the nodes in ``order``, the first one tried first."""
        return ",".join(amqp_url(n) for n in order)

    @staticmethod
    def api(n: int) -> Management:
        return Management(f"http://127.0.0.1:1569{n}/api", timeout=10)

    # -- events, polled on the management API of a node that is up ---------------------------

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 60, every: float = 0.2) -> float:
        """Poll ``check`` until it is true; the seconds it took; ClusterError after ``timeout``."""
        start = time.monotonic()
        while True:
            try:
                if check():
                    return time.monotonic() - start
            except OSError:  # a node's API refusing while it starts or stops (URLError is one)
                pass
            if time.monotonic() - start > timeout:
                raise ClusterError(f"the cluster did not reach '{what}' within {timeout:g} s")
            time.sleep(every)

    def running_nodes(self, via: int) -> set[str]:
        return {node["name"] for node in self.api(via).request("GET", "/nodes") or [] if node.get("running")}

    def wait_running(self, via: int, nodes: tuple[int, ...] = NODES, timeout: float = 60) -> float:
        """Until node ``via``'s management API lists every node of ``nodes`` as running."""
        want = {node_name(n) for n in nodes}
        return self.wait(f"{sorted(want)} running", lambda: want <= self.running_nodes(via), timeout)

    def wait_members_online(self, queue: str, via: int, nodes: tuple[int, ...] = NODES,
                            timeout: float = 60) -> float:
        """Until quorum queue (or stream) ``queue`` has a member online on every node of ``nodes``."""
        want = {node_name(n) for n in nodes}

        def online() -> bool:
            info = self.api(via).queue(queue) or {}
            return want <= set(info.get("online") or [])
        return self.wait(f"{queue} online on {sorted(want)}", online, timeout)

    def wait_not_quorum_critical(self, n: int, timeout: float = 60) -> float:
        """Until stopping node n leaves every quorum queue a majority (the health check answers
        200; 503 while a queue would lose its quorum)."""
        def safe() -> bool:
            try:
                self.api(n).request("GET", "/health/checks/node-is-quorum-critical")
                return True
            except OSError as exc:  # HTTPError 503 is an OSError too
                if getattr(exc, "code", None) == 503:
                    return False
                raise
        return self.wait(f"node {n} not quorum-critical", safe, timeout)

    def queue_messages(self, queue: str, via: int) -> int:
        """Messages in ``queue``, ready and unacknowledged (held by a consumer, or by one on a
        node that vanished until consumer-disconnected-timeout), as the queue itself counts
        them now (``rabbitmqctl list_queues``; the management API's figures lag by seconds)."""
        rows = json.loads(self.ctl(via, "-q", "list_queues", "name", "messages", "--formatter", "json"))
        return sum(int(row["messages"]) for row in rows if row["name"] == queue)

    def alarms(self, via: int) -> list[str]:
        """The resource alarms node ``via`` knows of, cluster-wide (the health check's list)."""
        try:
            self.api(via).request("GET", "/health/checks/alarms")
            return []
        except OSError as exc:
            if getattr(exc, "code", None) != 503:
                raise
            body = exc.read().decode() if hasattr(exc, "read") else ""  # type: ignore[attr-defined]
            return [body or "alarm"]

    # -- a memory alarm, raised and cleared on purpose -----------------------------------------

    def set_memory_alarm(self, n: int) -> None:
        """Node n raises its memory alarm (every node then blocks its publishers), as its
        memory monitor does above the high watermark; it stays until :meth:`clear_memory_alarm`."""
        self.eval(n, "rabbit_alarm:set_alarm({{resource_limit, memory, node()}, []}).")

    def clear_memory_alarm(self, n: int) -> None:
        self.eval(n, "rabbit_alarm:clear_alarm({resource_limit, memory, node()}).")


# -- STOMP clients that outlive a node ------------------------------------------------------

RETRYABLE = (ClientError, OSError, asyncio.TimeoutError)


async def connect_until(port: int, timeout: float = 60, **kwargs) -> StompClient:
    """Log in through the bridge on ``port``, trying again (every 0.2 s) while it refuses
    (no node reachable yet) for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    kwargs.setdefault("raise_errors", True)
    while True:
        try:
            return await StompClient.connect(port, **kwargs)
        except RETRYABLE as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"no login through the bridge on port {port} within {timeout:g} s: {exc}")
            await asyncio.sleep(0.2)  # a retry's back-off: there is no event for "a node is back"


@dataclass
class Tally:
    """What one client saw: connections lost (reconnects), the reason of each, latencies."""

    reconnects: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (sent at, seconds to RECEIPT)

    def lost_connection(self, exc: BaseException) -> None:
        self.reconnects += 1
        self.errors.append(f"{time.strftime('%H:%M:%S')} {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


class ResendingPublisher:
    """Persistent SENDs to ``destination``, each with a receipt, one at a time; a SEND whose
    RECEIPT did not come (ERROR, close, nothing within ``receipt_timeout``) is sent again on a
    new connection. ``receipted`` holds every body the bridge confirmed."""

    def __init__(self, port: int, destination: str, prefix: str = "m", headers: dict[str, str] | None = None,
                 receipt_timeout: float = 15, max_reconnects: int = 30) -> None:
        self.port, self.destination, self.prefix = port, destination, prefix
        self.headers = {"persistent": "true", **(headers or {})}
        self.receipt_timeout = receipt_timeout
        self.max_reconnects = max_reconnects
        self.receipted: list[str] = []
        self.sent = 0  # SEND frames written, resends included
        self.tally = Tally()
        self.client: StompClient | None = None

    async def publish(self, count: int, before: Callable[[int], Awaitable[None]] | None = None,
                      stop: asyncio.Event | None = None) -> None:
        """``count`` messages (or until ``stop`` is set); ``before(i)`` runs before message i."""
        for i in range(count):
            if stop is not None and stop.is_set():
                break
            if before is not None:
                await before(i)
            await self.send_one(f"{self.prefix}-{i}")
        await self.close()

    async def send_one(self, body: str) -> None:
        while True:
            if self.client is None:
                self.client = await connect_until(self.port)
            started = time.monotonic()
            try:
                self.client.send("SEND", {"destination": self.destination, **self.headers, "receipt": body},
                                 body.encode())
                self.sent += 1
                await self.client.expect_receipt(body, self.receipt_timeout)
            except RETRYABLE as exc:
                self.tally.lost_connection(exc)
                assert self.tally.reconnects <= self.max_reconnects, \
                    f"{self.tally.reconnects} reconnects: the bridge does not fail over ({self.tally.errors[-3:]})"
                self.client.abort()
                self.client = None
                continue
            self.tally.latencies.append((started, time.monotonic() - started))
            self.receipted.append(body)
            return

    async def close(self) -> None:
        if self.client is not None:
            await disconnect(self.client)
            self.client = None


async def disconnect(client: StompClient) -> None:
    """DISCONNECT with a receipt (what was sent before it, ACKs included, has reached the
    bridge's channel), then the close; best effort on a connection that is already gone."""
    try:
        client.send("DISCONNECT", {"receipt": "bye"})
        await client.until_closed(10)
    except RETRYABLE:
        client.abort()
        return
    # The bridge closed its side; asyncio keeps ours half-open (CLOSE_WAIT) until closed, or
    # until the garbage collector gets to it: an open file descriptor in the meantime.
    await client.close()


class ResubscribingConsumer:
    """A subscriber with ``ack`` (client-individual by default) on ``destination`` that ACKs
    every MESSAGE; when its connection ends it logs in again and subscribes again. On a stream
    it subscribes from ``x-stream-offset: offset=<last seen + 1>`` after the first time.

    ``received`` counts each body (above 1: delivered again); ``offsets`` is every stream
    offset seen, in order. ``on_message(consumer, frame)`` runs before each ACK (a test injects
    its fault there, while the consumer holds that message unacknowledged). ``run`` returns once ``done()`` is true."""

    def __init__(self, port: int, destination: str, ack: str = "client-individual", prefetch: int = 20,
                 headers: dict[str, str] | None = None, stream_from: str | None = None,
                 on_message: Callable[[ResubscribingConsumer, Frame], Awaitable[None]] | None = None,
                 max_reconnects: int = 30) -> None:
        self.port, self.destination, self.ack = port, destination, ack
        self.headers = {"prefetch-count": str(prefetch), **(headers or {})}
        self.stream_from = stream_from  # "first", "next", ...: a stream subscription
        self.on_message = on_message
        self.max_reconnects = max_reconnects
        self.received: Counter[str] = Counter()
        self.offsets: list[int] = []
        self.subscribed_at: list[str] = []  # the x-stream-offset of each SUBSCRIBE
        self.tally = Tally()
        self.client: StompClient | None = None
        self.first_subscription = asyncio.Event()

    @property
    def duplicates(self) -> int:
        return sum(self.received.values()) - len(self.received)

    def _subscribe_headers(self) -> dict[str, str]:
        headers = {"destination": self.destination, "id": "s", "ack": self.ack, "receipt": "sub", **self.headers}
        if self.stream_from is not None:
            headers["x-stream-offset"] = f"offset={self.offsets[-1] + 1}" if self.offsets else self.stream_from
            self.subscribed_at.append(headers["x-stream-offset"])
        return headers

    async def run(self, done: Callable[[], bool], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        failures = 0  # connections in a row that ended before a message came
        while not done():
            assert time.monotonic() < deadline, (
                f"consumer on {self.destination}: {len(self.received)} distinct messages after {timeout:g} s "
                f"({self.tally.reconnects} reconnects: {self.tally.errors[-3:]})")
            count = sum(self.received.values())
            try:
                if self.client is None:
                    self.client = await connect_until(self.port)
                    self.client.send("SUBSCRIBE", self._subscribe_headers())
                    await self.client.expect_receipt("sub")
                    self.first_subscription.set()
                await self._consume(done, deadline)
            except RETRYABLE as exc:
                self.tally.lost_connection(exc)
                assert self.tally.reconnects <= self.max_reconnects, \
                    f"{self.tally.reconnects} reconnects: the bridge does not fail over ({self.tally.errors[-3:]})"
                if self.client is not None:
                    self.client.abort()
                self.client = None
                # A refused SUBSCRIBE comes back at once: a stream with no replica running on the
                # node the bridge reached yet ("does not have a running replica on the local
                # node", seen right after a graceful stop of its leader's node). Back off.
                failures = failures + 1 if sum(self.received.values()) == count else 0
                if failures:
                    await asyncio.sleep(min(2.0, 0.05 * 2 ** failures))
        if self.client is not None:
            await disconnect(self.client)
            self.client = None

    async def _consume(self, done: Callable[[], bool], deadline: float) -> None:
        assert self.client is not None
        while not done() and time.monotonic() < deadline:
            try:
                frame = await self.client.next(1.0, f"a MESSAGE from {self.destination}")
            except asyncio.TimeoutError:  # Stalled: idle (nothing to deliver), look at done() again
                continue
            if frame.command != "MESSAGE":
                continue  # a late RECEIPT
            body = frame.body.decode()
            self.received[body] += 1
            offset = frame.headers.get("x-stream-offset")
            if offset is not None:
                self.offsets.append(int(offset))
            if self.on_message is not None:
                await self.on_message(self, frame)
            if self.ack != "auto":
                self.client.send("ACK", {"id": frame.headers["ack"]})
