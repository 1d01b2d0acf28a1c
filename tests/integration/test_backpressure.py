"""A client that does not read its socket must not make the server buffer its queue.

RabbitMQ's plugin blocks on the socket and credit flow stops the queue; the
bridge stops reading that client's AMQP connection once its write buffer is
full, so TCP pushes back on RabbitMQ. Either way the messages wait in the
queue, not in the server's memory, and none is lost.
"""

from __future__ import annotations

import asyncio
import time

import aiormq
import pytest

COUNT = 4000
SIZE = 16 * 1024  # 64 MiB in all: far more than socket buffers and the bridge's 1 MiB


def _ready(amqp_url: str, queue: str) -> int:
    """Messages waiting in ``queue`` now (a passive declare is live; the HTTP API lags)."""

    async def count() -> int:
        connection = await aiormq.connect(amqp_url)
        try:
            channel = await connection.channel()
            ok = await channel.queue_declare(queue, passive=True)
            return ok.message_count
        finally:
            await connection.close()

    return asyncio.run(count())


@pytest.mark.parametrize("ack", ["auto", "client"])
def test_slow_consumer_leaves_messages_in_the_queue_and_loses_none(connected, broker, queues, unique, ack):
    """With ``ack:client`` and no prefetch-count the client may hold all 4,000 unacknowledged
    while it reads (the plugin's unlimited prefetch); the bridge consumes in windows
    (client_ack_window) and adds one each time the client has read a whole one, never while it
    stops reading (RabbitMQ 4.3 denies the global QoS that used to pause it)."""
    name = f"slow-{unique}"
    queues.append(name)
    producer = connected()
    body = b"m" * SIZE
    producer.send_raw(
        b"".join(
            f"SEND\ndestination:/queue/{name}\ncontent-length:{SIZE}\n\n".encode() + body + b"\x00"
            for _ in range(COUNT - 1)
        )
    )
    producer.receipt("SEND", {"destination": f"/queue/{name}"}, body, receipt_id="all-sent")

    consumer = connected()
    consumer.send_frame("SUBSCRIBE", {"destination": f"/queue/{name}", "id": "slow", "ack": ack})
    # No event says "the server stopped pulling": wait until the queue depth holds still.
    deadline = time.monotonic() + 20
    last = _ready(broker.amqp_url, name)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _ready(broker.amqp_url, name)
        if now == last:
            break
        last = now
    # At most ~40 MiB in flight (kernel socket buffers on both hops plus the server's own).
    assert last >= COUNT - 2500, f"only {last} of {COUNT} messages still queued: the server buffered the rest"

    received = 0
    consumer.sock.settimeout(30)
    while received < COUNT:
        frame = consumer.read_frame(timeout=30)
        assert frame.command == "MESSAGE", frame.headers
        assert len(frame.body) == SIZE
        received += 1
    if ack == "client":
        consumer.receipt("ACK", {"id": frame["ack"]}, receipt_id="all-acked")  # cumulative
    consumer.no_frame(0.5)
    assert _ready(broker.amqp_url, name) == 0
