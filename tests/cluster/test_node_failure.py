"""A RabbitMQ 4.3 cluster of three nodes (scripts/rabbitmq-cluster) under the bridge.

The bridge gets all three nodes in ``amqp_url``. The node its AMQP connection is on dies
(``kill -9``, or a graceful shutdown) in the middle of persistent publishing to a quorum queue; the client does what a
careful STOMP client does: it resends every SEND it has no RECEIPT for, after reconnecting.
Every receipted message must be in the queue afterwards (lost = 0); duplicates are counted.
"""

from __future__ import annotations

import time

import pytest

from testkit.bridge import BridgeThread
from testkit.management import Management
from tests.integration.rawstomp import ConnectionClosed, FrameTimeout, RawStomp

# It starts and kills local RabbitMQ nodes: deselected with the other broker-steering tests
# (-m 'not rabbitmqctl') when the tests run against a remote broker.
pytestmark = pytest.mark.rabbitmqctl

MESSAGES = 400
KILL_AT = 150


def connect(port: int) -> RawStomp:
    conn = RawStomp(("127.0.0.1", port), timeout=30)
    conn.connect()
    return conn


@pytest.mark.parametrize("fault", ["kill", "stop"], ids=["kill-9", "graceful-stop"])
def test_losing_the_node_under_the_bridge_loses_no_receipted_message(cluster, unique, fault):
    bridge = BridgeThread(cluster.urls())
    bridge.start()
    queue = f"ha-{unique}"
    api = Management("http://127.0.0.1:15692/api")  # node 2, which stays up
    try:
        conn = connect(bridge.port)
        conn.receipt("SEND", {"destination": f"/queue/{queue}", "x-queue-type": "quorum", "persistent": "true"},
                     "declare", receipt_id="declare")
        receipted: set[int] = set()
        reconnects = 0
        i = 0
        while i < MESSAGES:
            if i == KILL_AT and reconnects == 0:
                # the first node of amqp_url: where the bridge's connection is
                cluster.kill(1) if fault == "kill" else cluster.shutdown(1)
            try:
                conn.receipt("SEND", {"destination": f"/amq/queue/{queue}", "persistent": "true"}, f"m-{i}",
                             receipt_id=f"r-{i}")
                receipted.add(i)
                i += 1
            except (ConnectionClosed, FrameTimeout, AssertionError, OSError):
                # an ERROR (broker connection lost), a close, or no RECEIPT: reconnect and resend i
                reconnects += 1
                assert reconnects <= 20, "the bridge did not fail over to the surviving nodes"
                conn.close()
                deadline = time.monotonic() + 60
                while True:
                    try:
                        conn = connect(bridge.port)
                        break
                    except (ConnectionClosed, FrameTimeout, AssertionError, OSError):
                        assert time.monotonic() < deadline, "no login through the bridge within 60 s"
                        time.sleep(0.5)
        assert reconnects >= 1, "killing the node under the bridge should have cost the client its connection"
        bodies = [m["payload"] for m in api.get(queue, count=MESSAGES * 2)]
        stored = [int(body.removeprefix("m-")) for body in bodies if body.startswith("m-")]
        lost = receipted - set(stored)
        duplicates = len(stored) - len(set(stored))
        print(f"\n{fault} of node 1 after {KILL_AT}: {len(receipted)} receipted, {len(stored)} stored, "
              f"lost {len(lost)}, duplicates {duplicates}, reconnects {reconnects}")
        assert not lost, f"receipted but not in the quorum queue: {sorted(lost)[:20]}"
    finally:
        bridge.stop()
        try:
            api.delete_queue(queue)
        except Exception:  # noqa: BLE001 - the cluster may be restarting
            pass
