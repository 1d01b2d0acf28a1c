"""The cluster fixture of tests/cluster: every node of scripts/rabbitmq-cluster up (and none
quorum-critical) before each test, which may kill or stop nodes; left running afterwards like
the other test brokers."""

from __future__ import annotations

import pytest

from testkit.cluster import Cluster, ClusterError


@pytest.fixture
def cluster():
    nodes = Cluster()
    try:
        nodes.start()
        if not nodes.healthy():
            # A Raft member that a kill -9 left unable to restart (Cluster.healthy): the tests
            # are about the bridge, so they get a new cluster rather than a broken one.
            nodes.reset()
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield nodes
    nodes.start()
