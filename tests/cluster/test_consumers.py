"""Consumers through the bridge while the node under it dies (``kill -9``) or stops gracefully.

One bridge, all three nodes in ``amqp_url``, node 1 first (where its AMQP connection is, and
where the queue's leader is: declared through node 1). A client-individual subscriber on a
quorum queue ACKs what it gets while a publisher sends persistent, receipted messages; node 1
goes down when the subscriber has its ``KILL_AT``-th message, before it ACKs it. Both clients reconnect through the
same bridge (no restart), the subscriber subscribes again; at the end every receipted message
was received (lost 0) and acknowledged (nothing of it left in the queue), redeliveries counted.
After a ``kill -9`` RabbitMQ 4.x gives back what the dead node's consumer held unacknowledged
only after the queue's consumer-disconnected-timeout (60 s by default; 3 s here).

A stream read (a reader that logged in first, so on node 1, while a publisher appends) resumes
where it was: the reader subscribes again from the offset after the last one it saw, and gets
every message once.
"""

from __future__ import annotations

import asyncio

import pytest

from testkit.bridge import BridgeThread
from testkit.cluster import ResendingPublisher, ResubscribingConsumer

pytestmark = pytest.mark.rabbitmqctl

MESSAGES = 300
KILL_AT = 100
DISCONNECTED_MS = 3000
FAULTS = pytest.mark.parametrize("fault", ["kill", "shutdown"], ids=["kill-9", "graceful-stop"])


def fault_once(cluster, fault: str, at: int):
    """An ``on_message`` hook: node 1 goes down once the consumer has ``at`` distinct messages,
    before it ACKs the last one; ``hook.held`` is that message's body."""
    async def hook(consumer: ResubscribingConsumer, frame) -> None:
        if hook.held is None and len(consumer.received) >= at:
            hook.held = frame.body.decode()
            await asyncio.to_thread(getattr(cluster, fault), 1)
    hook.held = None
    return hook


@FAULTS
async def test_client_ack_consumer_resubscribes_and_gets_every_receipted_message(cluster, unique, fault):
    queue = f"ha-consume-{unique}"
    # Leader on node 1. What a consumer on a node that vanished (kill -9) had unacknowledged
    # comes back after consumer_disconnected_timeout, 60 s by default on 4.x (measured: the
    # test took 65 s when the consumer held messages at the kill): 3 s here, for CI's sake.
    cluster.api(1).declare_queue(queue, arguments={"x-queue-type": "quorum",
                                                   "x-consumer-disconnected-timeout": DISCONNECTED_MS})
    bridge = BridgeThread(cluster.urls())
    bridge.start()
    try:
        publisher = ResendingPublisher(bridge.port, f"/amq/queue/{queue}")
        hook = fault_once(cluster, fault, KILL_AT)
        consumer = ResubscribingConsumer(bridge.port, f"/amq/queue/{queue}", on_message=hook)

        drained = asyncio.Event()
        reading = asyncio.create_task(consumer.run(drained.is_set))
        await asyncio.wait_for(consumer.first_subscription.wait(), 30)
        await publisher.publish(MESSAGES)
        while not set(publisher.receipted) <= set(consumer.received):
            assert not reading.done(), reading.exception()
            await asyncio.sleep(0.1)  # polls what the consumer task receives
        # Then until RabbitMQ holds nothing more of the queue: every message ACKed, including
        # what the dead node's consumer held (back after the timeout, delivered again).
        await asyncio.to_thread(cluster.wait, "the queue empty", lambda: cluster.queue_messages(queue, 2) == 0,
                                DISCONNECTED_MS / 1000 + 30, 0.3)
        drained.set()
        await reading

        left = [m["payload"] for m in cluster.api(2).get(queue, count=MESSAGES * 2)]
        lost = set(publisher.receipted) - set(consumer.received)
        print(f"\n{fault} of node 1 under a client-individual consumer: {len(publisher.receipted)} receipted "
              f"({publisher.sent} SENDs), {sum(consumer.received.values())} received, lost {len(lost)}, "
              f"redelivered {consumer.duplicates}, left in the queue {len(left)}, reconnects: publisher "
              f"{publisher.tally.reconnects}, consumer {consumer.tally.reconnects} "
              f"({publisher.tally.errors + consumer.tally.errors})")
        assert consumer.tally.reconnects >= 1, "the consumer's connection should have ended with node 1"
        assert not lost, f"receipted, never delivered: {sorted(lost)[:20]}"
        assert consumer.duplicates >= 1, "the message held unacknowledged at the fault should have come again"
        assert not left, f"never acknowledged: {left[:20]}"
    finally:
        bridge.stop()
        cluster.api(2).delete_queue(queue)


@FAULTS
async def test_stream_read_resumes_after_the_last_offset_it_saw(cluster, unique, fault):
    stream = f"ha-stream-{unique}"
    cluster.api(1).declare_queue(stream, arguments={"x-queue-type": "stream"})  # leader on node 1
    cluster.wait_members_online(stream, via=2)
    bridge = BridgeThread(cluster.urls())
    bridge.start()
    try:
        publisher = ResendingPublisher(bridge.port, f"/amq/queue/{stream}", prefix="s")
        finished = asyncio.Event()
        # The reader logs in first: the bridge's first AMQP connection goes to node 1.
        reader = ResubscribingConsumer(bridge.port, f"/amq/queue/{stream}", ack="client", prefetch=10,
                                       stream_from="first", on_message=fault_once(cluster, fault, KILL_AT))
        reading = asyncio.create_task(
            reader.run(lambda: finished.is_set() and set(publisher.receipted) <= set(reader.received)))
        await asyncio.wait_for(reader.first_subscription.wait(), 30)
        await publisher.publish(MESSAGES)
        finished.set()
        await reading

        lost = set(publisher.receipted) - set(reader.received)
        print(f"\n{fault} of node 1 under a stream reader: {len(publisher.receipted)} in the stream, "
              f"{sum(reader.received.values())} read, lost {len(lost)}, read twice {reader.duplicates}, "
              f"subscriptions {reader.subscribed_at}")
        assert reader.tally.reconnects >= 1, "the reader's connection should have ended with node 1"
        assert len(reader.subscribed_at) >= 2 and reader.subscribed_at[1].startswith("offset="), reader.subscribed_at
        assert not lost, f"in the stream, never read: {sorted(lost)[:20]}"
        assert reader.duplicates == 0, f"resuming after the last offset read {reader.duplicates} messages again"
        assert reader.offsets == sorted(set(reader.offsets)), "offsets out of order or repeated"
    finally:
        bridge.stop()
        cluster.api(2).delete_queue(stream)
