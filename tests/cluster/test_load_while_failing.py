"""Load while failing: a few hundred STOMP connections of mixed traffic (consumers, resending
publishers, idle connections) through two bridges while node 1 is killed (``kill -9``) and
started again; nothing receipted is lost, and once the clients have gone the bridges hold no
more file descriptors or asyncio tasks than before. The long version (thousands of connections,
several faults): ``python -m reliability --only cluster --long``.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from testkit.bridge import BridgeThread
from testkit.scenarios import load_while_failing, thread_resources

pytestmark = pytest.mark.rabbitmqctl


def open_sockets() -> list[str]:
    """This process's open files, sockets as local port -> remote port (from /proc/net/tcp*)."""
    ports = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            ports[f[9]] = f"{int(f[1].split(':')[1], 16)}->{int(f[2].split(':')[1], 16)} st {f[3]}"
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        inode = target[8:-1] if target.startswith("socket:[") else None
        out.append(ports.get(inode, target) if inode else target)
    return sorted(out)


async def test_load_through_two_bridges_while_node_1_dies_loses_nothing_and_leaks_nothing(cluster, unique):
    queues = [f"ha-load-{unique}-{i}" for i in range(3)]
    for i, queue in enumerate(queues):  # leaders on nodes 1, 2, 3
        cluster.api(i + 1).declare_queue(queue, arguments={"x-queue-type": "quorum",
                                                           "x-consumer-disconnected-timeout": 3000})
    bridges = [BridgeThread(cluster.urls((1, 2, 3))), BridgeThread(cluster.urls((2, 3, 1)))]
    for bridge in bridges:
        bridge.start()
    try:
        result = await load_while_failing(cluster, [b.port for b in bridges], thread_resources(bridges), queues,
                                          connections=300, messages=10)
        print(f"\nload while failing, {result.connections} connections, {result.faults} kill -9 of node 1: "
              f"{result.line()}; resources before {result.before}, after {result.after}")
        assert result.lost == 0
        assert result.reconnects >= 1, "killing node 1 should have dropped some connections"
        grown = {k: (result.before[k], result.after[k]) for k in result.before if result.after[k] > result.before[k]}
        if grown:
            tasks = [b.call(lambda: sorted(t.get_coro().__qualname__ for t in asyncio.all_tasks())) for b in bridges]
            fds = open_sockets()
            pytest.fail(f"the bridges kept file descriptors or tasks: {grown}; tasks {tasks}; fds {fds}")
    finally:
        for bridge in bridges:
            bridge.stop()
        for queue in queues:
            cluster.api(2).delete_queue(queue)
