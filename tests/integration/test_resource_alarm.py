"""A RabbitMQ resource alarm blocks publishers: the bridge must stop, not buffer."""

from __future__ import annotations

import os
import time

import pytest

from testkit.brokers import rabbitmqctl
from tests.integration.rawstomp import FrameTimeout

pytestmark = pytest.mark.rabbitmqctl  # raises a memory alarm on the local broker


def _watermark(value: str) -> None:
    rabbitmqctl("-q", "set_vm_memory_high_watermark", value)


@pytest.mark.xfail(
    condition=os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", strict=True,
    reason="the native plugin (3.10 to 4.3) receipts a publish during a memory alarm; the bridge's AMQP "
    "connection is blocked like any publisher's",
)
def test_blocked_publisher_gets_no_receipt_until_the_alarm_clears(connected, rabbit, queues, unique):
    name = f"alarm-{unique}"
    queues.append(name)
    conn = connected()
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, "before", receipt_id="r0")
    _watermark("0.0000001")  # every node is over it: RabbitMQ blocks publishing connections
    try:
        conn.send_frame("SEND", {"destination": f"/queue/{name}", "persistent": "true",
                                 "receipt": "r1"}, "during")
        with pytest.raises(FrameTimeout):
            conn.read_frame(timeout=2.0)  # no RECEIPT while the alarm holds
    finally:
        _watermark("0.4")
    assert conn.expect("RECEIPT", timeout=30)["receipt-id"] == "r1"
    assert [m["payload"] for m in rabbit.get(name, count=10)] == ["before", "during"]


def _until_a_connection_is_blocked(timeout: float = 30.0) -> None:
    """RabbitMQ has blocked a publishing connection (its state reads "blocked")."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "blocked" in rabbitmqctl("-q", "list_connections", "state").split():
            return
        time.sleep(0.2)
    raise AssertionError(f"RabbitMQ blocked no connection within {timeout} s of a publish during the alarm")


def test_a_consumer_sharing_the_login_of_a_blocked_publisher_keeps_going(
    stomp_target, raw, bridge, dial, rabbit, queues, unique
):
    """A resource alarm makes RabbitMQ stop reading every AMQP connection that publishes, ACKs
    included. Under the plugin a STOMP connection that only consumes is never blocked; through
    the bridge, sessions of one login share AMQP connections (here all of them: one connection
    per login), so a publisher's SEND must not stop another session's ACKs from reaching
    RabbitMQ: the consumer, prefetch 1, gets all its messages only if each ACK is read."""
    if stomp_target.native:
        consumer, publisher = raw(), raw()
    else:
        target = bridge(amqp_min_connections_per_login=1)
        consumer, publisher = dial(target), dial(target)
    source, sink = f"alarm-consume-{unique}", f"alarm-publish-{unique}"
    queues.extend([source, sink])
    count = 5
    rabbit.declare_queue(source)
    for i in range(count):
        assert rabbit.publish("", source, f"m{i}")
    consumer.connect()
    publisher.connect()
    publisher.receipt("SEND", {"destination": f"/queue/{sink}"}, "before", receipt_id="r0")
    consumer.subscribe(f"/queue/{source}", ack="client-individual", headers={"prefetch-count": "1"})
    first = consumer.expect("MESSAGE", timeout=10)
    _watermark("0.0000001")
    try:
        publisher.send_frame("SEND", {"destination": f"/queue/{sink}", "persistent": "true",
                                      "receipt": "r1"}, "during")
        if not stomp_target.native:  # the plugin publishes on a direct connection, never blocked
            _until_a_connection_is_blocked()
        got, message = [first.body], first
        for _ in range(count - 1):
            consumer.send_frame("ACK", {"id": message["ack"]})
            message = consumer.expect("MESSAGE", timeout=10)
            got.append(message.body)
        consumer.receipt("ACK", {"id": message["ack"]}, receipt_id="last-ack")
    finally:
        _watermark("0.4")
    assert got == [f"m{i}".encode() for i in range(count)]
    assert publisher.wait_receipt("r1", timeout=30)["receipt-id"] == "r1"
    assert [m["payload"] for m in rabbit.get(sink, count=10)] == ["before", "during"]
