"""A rolling restart of the three nodes (graceful stop, start, rejoin, one at a time) under
steady persistent publishing and client-individual consuming through two bridges, each with
all three nodes in ``amqp_url``: what the clients see per step (errors, reconnects, publish
latency p99), and nothing lost. The long version: ``python -m reliability --only cluster``.
"""

from __future__ import annotations

import pytest

from testkit.bridge import BridgeThread
from testkit.scenarios import rolling_restart

pytestmark = pytest.mark.rabbitmqctl


async def test_rolling_restart_under_traffic_through_two_bridges_loses_nothing(cluster, unique):
    queue = f"ha-rolling-{unique}"
    cluster.api(1).declare_queue(queue, arguments={"x-queue-type": "quorum"})
    cluster.wait_members_online(queue, via=1)
    bridges = [BridgeThread(cluster.urls((1, 2, 3))), BridgeThread(cluster.urls((2, 3, 1)))]
    for bridge in bridges:
        bridge.start()
    try:
        result = await rolling_restart(cluster, [b.port for b in bridges], queue)
        print(f"\nrolling restart of 3 nodes through 2 bridges: {result.line()}")
        for step in result.steps:
            print(f"  {'steady' if step.node == 0 else f'node {step.node}'}: {step}")
        assert len(result.steps) == 4
        assert result.lost == 0, f"{result.lost} receipted messages never delivered"
        assert all(step.receipts > 0 for step in result.steps), "publishing stopped during a step"
        assert result.reconnects >= 1, "stopping the nodes should have cost some client its connection"
    finally:
        for bridge in bridges:
            bridge.stop()
        cluster.api(2).delete_queue(queue)
