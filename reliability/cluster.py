"""The cluster part (``--only cluster``): the fault scenarios of tests/cluster, longer, on the
three-node RabbitMQ 4.3 cluster of scripts/rabbitmq-cluster (started here; ports 5691-5693).

Per fault kind: ``kill -9`` and graceful stop of node 1 under a client-individual consumer of a
quorum queue and under a stream reader (``cluster_faults`` times each), rolling restarts of the
three nodes under traffic through two bridges (``cluster_rounds``), memory alarms
(``cluster_alarms``), and load while failing: ``cluster_connections`` connections through two
bridges (child processes, so that their RSS is their own) while node 1 is killed and stopped,
``cluster_load_rounds`` times. Every scenario is in testkit/scenarios.py, load while failing
in testkit/load.py.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import asdict

from testkit.bridge import BridgeThread
from testkit.cluster import BRIDGE_ORDERS, Cluster
from testkit.load import bridge_processes, load_while_failing
from testkit.scenarios import consume_through_fault, memory_alarm, read_stream_through_fault, rolling_restart

QUORUM = {"x-queue-type": "quorum", "x-consumer-disconnected-timeout": 3000}


def _tally(name: str, faults: int, results: list) -> dict:
    return {"scenario": name, "faults": faults, "sent": sum(r.sent for r in results),
            "receipted": sum(r.receipted for r in results), "received": sum(r.received for r in results),
            "lost": sum(r.lost for r in results), "duplicated": sum(r.duplicates for r in results),
            "reconnects": sum(r.reconnects for r in results)}


async def run(p: dict, log) -> dict:
    cluster = Cluster()
    await asyncio.to_thread(cluster.start)
    if not await asyncio.to_thread(cluster.healthy):
        await asyncio.to_thread(cluster.reset)
    version = cluster.api(1).overview().get("rabbitmq_version", "?")
    rows: list[dict] = []
    details: dict = {"version": version}
    tag = uuid.uuid4().hex[:8]

    async def with_bridges(count: int, body, **settings):
        bridges = [BridgeThread(cluster.urls(order), **settings) for order in BRIDGE_ORDERS[:count]]
        for bridge in bridges:
            bridge.start()
        try:
            return await body(bridges)
        finally:
            for bridge in bridges:
                bridge.stop()

    def declare(name: str, **arguments) -> None:
        cluster.api(1).declare_queue(name, arguments=arguments)

    async def under_fault(
        fault: str, what: str, prefix: str, arguments: dict, members: int | None, scenario, failure,
    ) -> list:
        """``cluster_faults`` times: a fresh queue, ``scenario`` through one bridge while node 1
        fails by ``fault``, the queue deleted, the cluster whole again; ``failure(r)`` names what went wrong."""
        results = []
        for i in range(p["cluster_faults"]):
            log(f"cluster: {what} ({i + 1}/{p['cluster_faults']}) ...")
            queue = f"{prefix}-{i}"
            declare(queue, **arguments)
            if members is not None:
                await asyncio.to_thread(cluster.wait_members_online, queue, members)
            r = await with_bridges(1, lambda b, q=queue: scenario(
                cluster, b[0].port, q, fault, messages=p["cluster_messages"], at=p["cluster_messages"] // 3))
            cluster.api(2).delete_queue(queue)
            problem = failure(r)
            if problem:
                raise AssertionError(f"{what}: {problem}")
            results.append(r)
            await asyncio.to_thread(cluster.start)
        return results

    for fault in ("kill", "shutdown"):
        label = "kill -9" if fault == "kill" else "graceful stop"
        results = await under_fault(
            fault, f"{label} of node 1 under a consumer", f"rel-consume-{tag}-{fault}", QUORUM, None,
            consume_through_fault,
            lambda r: (r.lost or r.left) and f"lost {r.lost}, never acknowledged {len(r.left)}")
        rows.append(_tally(f"{label} of node 1, client-individual consumer on a quorum queue",
                           len(results), results))
        results = await under_fault(
            fault, f"{label} of node 1 under a stream reader", f"rel-stream-{tag}-{fault}",
            {"x-queue-type": "stream"}, 2,
            read_stream_through_fault,
            lambda r: (r.lost or r.duplicates) and f"lost {r.lost}, read again {r.duplicates}")
        rows.append(_tally(f"{label} of node 1, stream reader resuming at its offset", len(results), results))

    log(f"cluster: {p['cluster_rounds']} rolling restart(s) through two bridges ...")
    queue = f"rel-rolling-{tag}"
    declare(queue, **QUORUM)
    await asyncio.to_thread(cluster.wait_members_online, queue, 1)
    r = await with_bridges(2, lambda b: rolling_restart(cluster, [x.port for x in b], queue,
                                                        rounds=p["cluster_rounds"]))
    cluster.api(2).delete_queue(queue)
    details["rolling_restart_steps"] = [asdict(step) for step in r.steps]
    rows.append(_tally("rolling restart (graceful stop + start of each node), 2 bridges", 3 * p["cluster_rounds"],
                       [r]))
    if r.lost:
        raise AssertionError(f"rolling restart: lost {r.lost}")

    results = []
    for i in range(p["cluster_alarms"]):
        log(f"cluster: memory alarm ({i + 1}/{p['cluster_alarms']}) ...")
        blocked, other = f"rel-alarm-{tag}-{i}-pub", f"rel-alarm-{tag}-{i}-con"
        declare(blocked, **QUORUM)
        declare(other, **QUORUM)
        # Every session of the login on one AMQP connection: the consumer shares the publisher's.
        a = await with_bridges(1, lambda b, x=blocked, y=other: memory_alarm(cluster, b[0], x, y),
                               amqp_min_connections_per_login=1)
        for name in (blocked, other):
            cluster.api(2).delete_queue(name)
        if a.lost or a.receipts_during_alarm or a.consumed_during_alarm < 100:
            raise AssertionError(f"memory alarm: {a}")
        results.append(a)
    details["alarm_read_mb"] = [round(a.read_during_alarm / 1e6, 2) for a in results]
    rows.append(_tally("memory alarm (publisher held back, a consumer on its AMQP connection going on)", len(results),
                       results))

    log(f"cluster: load while failing, {p['cluster_connections']} connections ...")
    queues = [f"rel-load-{tag}-{i}" for i in range(3)]
    for i, name in enumerate(queues):
        cluster.api(i + 1).declare_queue(name, arguments=QUORUM)
    faults = ("kill", "shutdown")
    with bridge_processes(cluster) as bridges:
        load = await load_while_failing(cluster, bridges, queues, connections=p["cluster_connections"],
                                        messages=p["cluster_load_messages"], faults=faults,
                                        rounds=p["cluster_load_rounds"])
    for name in queues:
        cluster.api(2).delete_queue(name)
    details["load"] = {"connections": load.connections, "rounds": len(load.after), "reconnects": load.reconnects,
                       "bridges": load.resources(), "before": load.before, "peak": load.peak, "after": load.after}
    rows.append(_tally(f"load while failing: {load.connections} connections in {len(load.after)} rounds, "
                       "kill -9 + graceful stop of node 1 in each", load.faults, [load]))
    log(f"cluster: load while failing, each bridge's figures (before / peak / after): {load.resources()}")
    problems = load.problems()
    if problems:
        raise AssertionError("load while failing: " + "; ".join(problems))
    await asyncio.to_thread(cluster.start)
    return {"rows": rows, **details}

