"""The cluster fixture of tests/cluster: every node of scripts/rabbitmq-cluster up before and
after each test (a test may kill or stop nodes), left running like the other test brokers."""

from __future__ import annotations

import pytest

from testkit.cluster import Cluster, ClusterError


@pytest.fixture
def cluster():
    nodes = Cluster()
    try:
        nodes.start()
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield nodes
    nodes.start()
