"""A memory alarm on the cluster while a client publishes persistent, receipted SENDs.

Node 2 raises its memory alarm (every node then blocks publishing connections). The bridge
puts every session of the login on one AMQP connection (``amqp_min_connections_per_login=1``),
so the consumer shares its connection with the publisher's session: it keeps going only because
publishes travel on a publishing connection of their own (``amqp_separate_publishers``). The publisher writes 16 MB of SENDs
without waiting: no RECEIPT may come while the alarm is on, the bridge stops reading the
publisher's socket (it reads at most a chunk or so after RabbitMQ blocked the connection, where
it used to read about 6.6 MB and hold 2.5 MB of it in its AMQP write buffers), a consumer on
another queue keeps receiving and acknowledging; once the alarm clears every SEND gets its
RECEIPT and every message is in its queue.
"""

from __future__ import annotations

import asyncio

import pytest

from testkit.bridge import BridgeThread
from testkit.cluster import connect_until, disconnect
from testkit.scenarios import memory_alarm
from testkit.stomp import Stalled

pytestmark = pytest.mark.rabbitmqctl

WAITING = 100  # messages in the consumer's queue before the alarm
SENDS = 1000
SIZE = 16384
READ_BOUND = 1536 * 1024  # what the bridge may read from the publisher once RabbitMQ blocks it


async def test_memory_alarm_holds_publishers_back_and_consumers_keep_going(cluster, unique):
    blocked, other = f"alarm-pub-{unique}", f"alarm-con-{unique}"
    for queue in (blocked, other):
        cluster.api(1).declare_queue(queue, arguments={"x-queue-type": "quorum"})
    bridge = BridgeThread(cluster.urls(), amqp_min_connections_per_login=1)
    bridge.start()
    try:
        r = await memory_alarm(cluster, bridge, blocked, other, sends=SENDS, size=SIZE, waiting=WAITING)
        print(f"\nmemory alarm: the bridge read {r.read_during_alarm / 1e6:.2f} MB of {r.written / 1e6:.1f} MB "
              f"sent; RECEIPTs during the alarm {r.receipts_during_alarm}; the consumer got "
              f"{r.consumed_during_alarm} of {WAITING}; then {r.line()}")
        assert r.receipts_during_alarm == 0, "a RECEIPT while RabbitMQ blocks publishing"
        assert r.consumed_during_alarm == WAITING
        assert r.read_during_alarm < READ_BOUND, f"the bridge read {r.read_during_alarm} bytes while blocked"
        assert r.lost == 0
    finally:
        bridge.stop()
        for queue in (blocked, other):
            cluster.api(1).delete_queue(queue)


async def test_publisher_held_by_an_alarm_longer_than_its_heartbeat_stays_connected(cluster, unique):
    """The client heart-beats every second (the bridge drops it after 2 s of silence); the alarm
    lasts 3.5 s, during which the bridge does not read it: that silence is the bridge's own,
    and the client must still be connected, and get its RECEIPTs, when the alarm clears."""
    queue = f"alarm-hb-{unique}"
    cluster.api(1).declare_queue(queue, arguments={"x-queue-type": "quorum"})
    bridge = BridgeThread(cluster.urls())
    bridge.start()
    alarm_on = False
    try:
        publisher = await connect_until(bridge.port, heartbeat="1000,0")

        async def beating(work):  # the client's heart-beats go on while rabbitmqctl works
            task = asyncio.ensure_future(asyncio.to_thread(work))
            while not task.done():
                publisher.send_raw(b"\n")
                await asyncio.wait({task}, timeout=0.5)
            return task.result()

        alarm_on = True
        await beating(lambda: cluster.set_memory_alarm(2))
        await beating(lambda: cluster.wait("the alarm known on node 1", lambda: bool(cluster.alarms(1))))
        for i in range(200):
            publisher.send("SEND", {"destination": f"/amq/queue/{queue}", "persistent": "true",
                                    "receipt": f"r-{i}"}, f"r-{i}|".encode().ljust(SIZE, b"p"))
        for _ in range(7):  # the client's heart-beats, every 0.5 s, queued behind its SENDs
            publisher.send_raw(b"\n")
            with pytest.raises(Stalled):
                frame = await publisher.next(0.5, "nothing during the alarm")
                pytest.fail(f"{frame.command} {frame.headers} during the alarm")
        cluster.clear_memory_alarm(2)
        alarm_on = False
        for i in range(200):
            await publisher.expect_receipt(f"r-{i}", 30)
        await disconnect(publisher)
        assert bridge.server.counters.heartbeat_timeouts == 0
    finally:
        if alarm_on:
            cluster.clear_memory_alarm(2)
        bridge.stop()
        cluster.api(1).delete_queue(queue)
