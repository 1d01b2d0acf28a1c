"""Load while failing: a few hundred STOMP connections of mixed traffic (consumers, resending
publishers, idle connections) through two bridges, each a child process with all three nodes in
its ``amqp_url``, while node 1 is killed (``kill -9``) and started again; two rounds of it.
Nothing receipted is lost; once each round's clients have gone each bridge holds no connection
and no more file descriptors or asyncio tasks than before the traffic, has logged nothing at
ERROR, and its RSS after the second round is within the bound of
:meth:`testkit.load.LoadResult.problems` of its RSS after the first. The long version
(thousands of connections, ``kill -9`` and a graceful stop per round): ``python -m reliability
--only cluster --long``.
"""

from __future__ import annotations

import os

import pytest

from testkit.bridgeproc import BridgeProcess
from testkit.load import bridge_processes, load_while_failing

pytestmark = pytest.mark.rabbitmqctl


def open_files(pid: int) -> list[str]:
    """Process ``pid``'s open files, sockets as local port -> remote port (from /proc/net/tcp*)."""
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
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        inode = target[8:-1] if target.startswith("socket:[") else None
        out.append(ports.get(inode, target) if inode else target)
    return sorted(out)


def what_they_hold(bridges: list[BridgeProcess]) -> str:
    return "\n".join(f"bridge {i + 1}: files {open_files(b.pid)}\nlog:\n{b.log_tail()}" for i, b in enumerate(bridges))


async def test_load_through_two_bridges_while_node_1_dies_loses_nothing_and_leaks_nothing(cluster, unique):
    queues = [f"ha-load-{unique}-{i}" for i in range(3)]
    for i, queue in enumerate(queues):  # leaders on nodes 1, 2, 3
        cluster.api(i + 1).declare_queue(queue, arguments={"x-queue-type": "quorum",
                                                           "x-consumer-disconnected-timeout": 3000})
    try:
        with bridge_processes(cluster) as bridges:
            result = await load_while_failing(cluster, bridges, queues, connections=300, messages=10, rounds=2)
            print(f"\nload while failing, {result.connections} connections, {result.faults} kill -9 of node 1: "
                  f"{result.line()}; per bridge, before / peak per round / after each round: {result.resources()}")
            assert result.reconnects >= 1, "killing node 1 should have dropped some connections"
            problems = result.problems()
            if problems:
                pytest.fail("\n".join(problems) + "\n" + what_they_hold(bridges))
    finally:
        for queue in queues:
            cluster.api(2).delete_queue(queue)
