"""A RabbitMQ resource alarm blocks publishers: the bridge must stop, not buffer."""

from __future__ import annotations

import os

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
