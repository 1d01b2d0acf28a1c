"""What RabbitMQ 4.x changed for STOMP clients, checked on the broker in use (differential).

Consumer priorities (4.0's plugin passes ``x-priority``), quorum queues' delivery limit (20 by
default since 4.0), consumer timeouts on quorum queues (4.3), RabbitMQ's pre-login frame limit
(4096 bytes, 8192 since 4.0.8/4.1) and the version-dependent queue properties. Each test says
what the plugin of each version does; the same test runs against the bridge.
"""

from __future__ import annotations

import os

import pytest

NATIVE = os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native"


def test_consumer_priority_sends_messages_to_the_higher_priority_subscriber(connected, broker, queues, unique):
    if NATIVE and broker.version_tuple < (4, 0):
        pytest.xfail("3.10's plugin does not pass x-priority on (4.0's does; the bridge always does)")
    name = f"prio-{unique}"
    queues.append(name)
    low, high = connected(), connected()
    low.subscribe(f"/queue/{name}", sub_id="low", headers={"x-priority": "1"})
    high.subscribe(f"/queue/{name}", sub_id="high", headers={"x-priority": "10"})
    producer = connected()
    for i in range(20):
        producer.send_frame("SEND", {"destination": f"/queue/{name}"}, f"m{i}")
    producer.receipt("SEND", {"destination": f"/queue/{name}"}, "last", receipt_id="sent")
    assert [high.expect("MESSAGE").body for _ in range(21)][-1] == b"last"
    low.no_frame(0.3)


def test_a_nack_requeue_loop_on_a_quorum_queue_ends_at_the_delivery_limit_on_4_0(connected, broker, queues, unique):
    """4.0 counts each requeue in x-delivery-count and drops the message after 20 (the default
    delivery-limit). 4.3 counts a requeue in x-acquired-count, not against the limit, and 3.10
    has no default limit: the loop goes on."""
    name = f"dlimit-{unique}"
    queues.append(name)
    conn = connected()
    conn.subscribe(f"/queue/{name}", ack="client-individual",
                   headers={"x-queue-type": "quorum", "prefetch-count": "1"})
    conn.receipt("SEND", {"destination": f"/queue/{name}", "x-queue-type": "quorum"}, "looping", receipt_id="s")
    deliveries = 0
    for _ in range(25):
        try:
            message = conn.expect("MESSAGE", timeout=2.0 if deliveries > 20 else None)
        except Exception:  # noqa: BLE001 - FrameTimeout: nothing more comes
            break
        deliveries += 1
        conn.send_frame("NACK", {"id": message["ack"]})  # requeue, the default
    limited = (4, 0) <= broker.version_tuple < (4, 3)
    assert deliveries == (21 if limited else 25)


def test_a_consumer_timeout_on_a_quorum_queue_cancels_the_subscription(connected, broker, rabbit, queues, unique):
    """4.3: a quorum queue's x-consumer-timeout cancels the consumer that sits on a delivery;
    the plugin's client gets "Server cancelled subscription" and keeps its connection."""
    if broker.version_tuple < (4, 3):
        pytest.skip(f"quorum queue consumer timeouts arrived in RabbitMQ 4.3 (broker {broker.version})")
    name = f"ctimeout-{unique}"
    queues.append(name)
    rabbit.declare_queue(name, arguments={"x-queue-type": "quorum", "x-consumer-timeout": 1000})
    conn = connected()
    conn.subscribe(f"/amq/queue/{name}", sub_id="slow", ack="client", headers={"prefetch-count": "10"})
    conn.receipt("SEND", {"destination": f"/amq/queue/{name}"}, "held", receipt_id="s")
    assert conn.expect("MESSAGE").body == b"held"  # ... and never acknowledged
    error = conn.expect("ERROR", timeout=15)
    assert (error["message"], error["subscription"]) == ("Server cancelled subscription", "slow")
    assert error.text == ("The server has canceled a subscription.\n"
                          "No more messages will be delivered for \"id='slow'\".\n")
    conn.receipt("SEND", {"destination": "/topic/still-usable"}, "x", receipt_id="alive")


@pytest.mark.parametrize("size", [6000, 20000])
def test_a_passcode_too_long_for_amqp_is_a_refused_login_not_a_broker_failure(raw, size):
    """The plugin checks any passcode (a JWT, say); the bridge's AMQP login frame may carry at
    most 8192 bytes before the login (4096 before RabbitMQ 4.0.8/4.1). Past that, Bad CONNECT,
    and the broker is not taken for down: the next login works at once."""
    conn = raw(timeout=15)
    conn.send_frame("CONNECT", {"accept-version": "1.2", "login": "guest", "passcode": "p" * size})
    error = conn.expect("ERROR")
    assert error["message"] == "Bad CONNECT"
    assert error.text.startswith("Access refused for user 'guest'")
    assert raw().connect()["version"] == "1.2"
