"""Soak: mixed traffic with connects and disconnects for a set time, then leak checks.

Traffic: producers that connect, send a burst of persistent SENDs with receipts
and disconnect (politely or with a reset, once receipted); consumers that
subscribe with client-individual acks, ack what they get and now and then drop
the connection with messages unacknowledged (RabbitMQ redelivers them: counted
as duplicates); a topic subscriber that stays while a publisher sends to it;
churn clients (login and leave, heart-beats, transactions aborted, temp-queue
request/reply). Every receipted message must be acked by a consumer or still be
in its queue at the end (lost = 0).

Leak checks once every client has gone and the bridge holds no AMQP connection
(it says so in its stats): the bridge's asyncio tasks and open file descriptors
are back at their values after the warm-up, measured the same way, and RabbitMQ
lists no AMQP connection or channel in the run's vhost; RSS is sampled through
the run and reported (after-warm-up vs end). A publishing AMQP connection
outlives its last session by the pool's linger (10 s, for the next login), with
its tasks and socket: counted then, it would pass for a leak (or hide one), so
both measurements wait for the pool to be empty, and a pool that stays
non-empty is reported as the leak it is.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter

from testkit.bridgeproc import BridgeProcess
from testkit.management import Management
from testkit.stomp import StompClient

from .broker import drain_ids, vhost_url


class Soak:
    def __init__(self, port: int, vhost: str, seconds: float) -> None:
        self.port, self.vhost, self.seconds = port, vhost, seconds
        self.queues = [f"soak-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
        self.topic = f"soak.{uuid.uuid4().hex[:6]}"
        self.receipted: set[str] = set()
        self.acked: Counter = Counter()
        self.topic_sent: set[str] = set()
        self.topic_got: Counter = Counter()
        self.connections = 0
        self.failures: list[str] = []
        self.stop = asyncio.Event()
        self.topic_ready = asyncio.Event()
        self.sent_frames = 0

    async def _connect(self, heartbeat: str = "0,0") -> StompClient:
        client = await StompClient.connect(self.port, self.vhost, heartbeat)
        self.connections += 1
        return client

    async def producer(self, k: int) -> None:
        rng = random.Random(k)
        n = 0
        while not self.stop.is_set():
            client = await self._connect()
            pending: set[str] = set()
            for _ in range(rng.randrange(20, 200)):
                msg_id = f"p{k}-{n}"
                n += 1
                client.send("SEND", {"destination": f"/queue/{rng.choice(self.queues)}", "persistent": "true",
                                     "receipt": msg_id, "msg-id": msg_id}, rng.randbytes(rng.choice([10, 200, 3000])))
                pending.add(msg_id)
                self.sent_frames += 1
                if len(pending) >= 20:
                    await self._receipts(client, pending, 10)
            await self._receipts(client, pending, 0)
            if rng.random() < 0.3:
                client.abort()
            else:
                client.send("DISCONNECT", {"receipt": "bye"})
                await client.until_closed(10)
            await asyncio.sleep(rng.uniform(0, 0.2))

    async def _receipts(self, client: StompClient, pending: set[str], down_to: int) -> None:
        while len(pending) > down_to:
            frame = await client.next(30)
            if frame.command != "RECEIPT":
                raise AssertionError(f"producer got {frame.command} {frame.headers}")
            rid = frame.headers["receipt-id"]
            pending.discard(rid)
            self.receipted.add(rid)

    async def consumer(self, k: int) -> None:
        rng = random.Random(100 + k)
        while not self.stop.is_set():
            client = await self._connect()
            queue = self.queues[k % 2]
            client.send("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "c", "ack": "client-individual",
                                      "prefetch-count": "50"})
            until = time.monotonic() + rng.uniform(1, 5)
            drop = rng.random() < 0.3
            while time.monotonic() < until and not self.stop.is_set():
                try:
                    frame = await client.next(0.5)
                except (asyncio.TimeoutError, TimeoutError):
                    continue
                if frame.command != "MESSAGE":
                    raise AssertionError(f"consumer got {frame.command} {frame.headers}")
                if drop and rng.random() < 0.05:
                    break  # leave with this one (and any prefetched) unacknowledged
                client.send("ACK", {"id": frame.headers["ack"]})
                self.acked[frame.headers["msg-id"]] += 1
            if drop:
                client.abort()
            else:
                client.send("UNSUBSCRIBE", {"id": "c"})
                client.send("DISCONNECT", {"receipt": "bye"})
                for frame in await client.until_closed(10):
                    if frame.command == "MESSAGE":  # delivered after we stopped reading: not acked
                        continue

    async def topic_subscriber(self) -> None:
        client = await self._connect("0,1000")
        client.send("SUBSCRIBE", {"destination": f"/topic/{self.topic}", "id": "t", "receipt": "sub"})
        frame = await client.next(10)
        assert frame.command == "RECEIPT"
        self.topic_ready.set()
        while True:
            try:
                frame = await client.next(1.0)
            except (asyncio.TimeoutError, TimeoutError):
                if self.stop.is_set() and self.topic_got.keys() >= self.topic_sent:
                    break
                continue
            if frame.command != "MESSAGE":
                raise AssertionError(f"topic subscriber got {frame.command} {frame.headers} {frame.body[:300]!r}")
            self.topic_got[frame.headers["msg-id"]] += 1
        await client.close()

    async def topic_publisher(self) -> None:
        await self.topic_ready.wait()
        client = await self._connect("0,1000")
        n = 0
        while not self.stop.is_set():
            msg_id = f"t-{n}"
            n += 1
            client.send("SEND", {"destination": f"/topic/{self.topic}", "receipt": msg_id, "msg-id": msg_id}, b"t")
            frame = await client.next(30)
            if frame.command != "RECEIPT":
                raise AssertionError(f"topic publisher got {frame.command} {frame.headers}")
            self.topic_sent.add(msg_id)
            await asyncio.sleep(0.01)
        await client.close()

    async def churn(self, k: int) -> None:
        rng = random.Random(200 + k)
        while not self.stop.is_set():
            kind = rng.randrange(4)
            client = await self._connect(rng.choice(["0,0", "0,500"]))  # never promise beats it won't send
            if kind == 1:
                client.send("BEGIN", {"transaction": "t"})
                client.send("SEND", {"destination": f"/queue/{self.queues[0]}", "transaction": "t"}, b"aborted")
                client.send("ABORT", {"transaction": "t", "receipt": "a"})
                await client.next(10)
            elif kind == 2:
                reply = f"/queue/soak-echo-{uuid.uuid4().hex[:6]}"
                client.send("SUBSCRIBE", {"destination": reply, "id": "e", "receipt": "s"})
                await client.next(10)
                client.send("SEND", {"destination": reply, "reply-to": "/temp-queue/r"}, b"ping")
                request = await client.next(10)
                if request.command != "MESSAGE":
                    raise AssertionError(f"churn got {request.command} {request.headers} {request.body[:300]!r}")
                client.send("SEND", {"destination": request.headers["reply-to"]}, b"pong")
                answer = await client.next(10)
                assert answer.body == b"pong", answer
                client.send("UNSUBSCRIBE", {"id": "e", "receipt": "u"})
                await client.next(10)
                client.send("SEND", {"destination": "/amq/queue/none", "receipt": "x"})  # no such queue
            if kind == 3 or rng.random() < 0.5:
                client.abort()
            else:
                client.send("DISCONNECT", {"receipt": "bye"})
                await client.until_closed(10)
            await asyncio.sleep(rng.uniform(0, 0.3))

    async def run(self) -> None:
        tasks = [asyncio.create_task(c) for c in (
            *(self.producer(k) for k in range(3)), *(self.consumer(k) for k in range(2)),
            self.topic_subscriber(), self.topic_publisher(), *(self.churn(k) for k in range(2)))]
        asyncio.get_running_loop().call_later(self.seconds, self.stop.set)
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise


async def run(amqp_url: str, mgmt: Management, seconds: float, warmup: float = 5.0) -> dict:
    vhost = mgmt.temporary_vhost()
    bridge = BridgeProcess(amqp_url).start()
    try:
        idle = await asyncio.to_thread(bridge.usage)
        await Soak(bridge.port, vhost, warmup).run()  # warm-up: allocations, imports, first queues
        warm = await asyncio.to_thread(_idle, bridge)
        soak = Soak(bridge.port, vhost, seconds)
        samples = []

        async def sampler() -> None:
            while not soak.stop.is_set():
                samples.append(await asyncio.to_thread(bridge.usage))
                try:
                    await asyncio.wait_for(soak.stop.wait(), max(5.0, seconds / 20))
                except asyncio.TimeoutError:
                    pass

        sampling = asyncio.create_task(sampler())
        started = time.monotonic()
        await soak.run()
        await sampling
        end = await asyncio.to_thread(_idle, bridge)
        amqp_conns, amqp_chans = await asyncio.to_thread(mgmt.wait_vhost_connections, vhost, 0, 30)
        url = vhost_url(amqp_url, vhost)
        left: Counter = Counter()
        for queue in soak.queues:
            left.update(await drain_ids(url, queue))
        seen = soak.acked.keys() | left.keys()
        lost = len(soak.receipted - seen)
        delivered = sum(soak.acked.values()) + sum(left.values())
        duplicated = delivered - len(seen)
        topic_lost = len(soak.topic_sent - soak.topic_got.keys())
        topic_dup = sum(soak.topic_got.values()) - len(soak.topic_got)
        if not bridge.alive():
            raise AssertionError("bridge died")
        log_errors = bridge.fresh_stats()["log_errors"]
    finally:
        bridge.stop()
        await asyncio.to_thread(mgmt.delete_vhost, vhost)
    result = {
        "seconds": round(time.monotonic() - started, 1),
        "connections": soak.connections,
        "sent": len(soak.receipted) + len(soak.topic_sent),
        "received": delivered + sum(soak.topic_got.values()),
        "left_in_queue": sum(left.values()),
        "lost": lost + topic_lost,
        "duplicated": duplicated + topic_dup,
        "idle": idle, "warm": warm, "end": end, "samples": samples,
        "amqp_connections_end": amqp_conns, "amqp_channels_end": amqp_chans,
        "log_errors": log_errors,
    }
    problems = []
    for when, usage in (("after warm-up", warm), ("at the end", end)):
        if usage["connections"] or usage["amqp_connections"]:
            problems.append(f"{when} the bridge still held {usage['connections']} STOMP and "
                            f"{usage['amqp_connections']} AMQP connections {IDLE_TIMEOUT:g} s after the last "
                            "client left (a publishing connection lingers 10 s)")
    if result["lost"]:
        problems.append(f"{result['lost']} messages lost")
    if end["tasks"] != warm["tasks"]:
        problems.append(f"asyncio tasks {warm['tasks']} after warm-up, {end['tasks']} at the end")
    if end["fds"] != warm["fds"]:
        problems.append(f"file descriptors {warm['fds']} after warm-up, {end['fds']} at the end")
    if amqp_conns or amqp_chans:
        problems.append(f"RabbitMQ still lists {amqp_conns} connections / {amqp_chans} channels")
    if log_errors:
        problems.append(f"{log_errors} unexpected errors logged")
    result["problems"] = problems
    return result


IDLE_TIMEOUT = 30.0  # the pool's linger (10 s) and a close that may take 5 s, with room


def _idle(bridge: BridgeProcess, timeout: float = IDLE_TIMEOUT) -> dict:
    """The bridge's usage once it holds no STOMP and no AMQP connection (its stats file, rewritten
    every 0.5 s, says so), or after ``timeout`` (the caller reports what it still held)."""
    deadline = time.monotonic() + timeout
    while True:
        usage = bridge.usage()
        if not (usage["connections"] or usage["amqp_connections"]) or time.monotonic() > deadline:
            return usage
