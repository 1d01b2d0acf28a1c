"""Test fixtures shared by every test (``broker``, ``rabbit`` and ``unique`` come from testkit/fixtures.py,
which the repository's conftest.py loads).

Where the broker comes from, in order: ``STOMP_BRIDGE_TEST_AMQP_URL``; the local
broker ``STOMP_BRIDGE_TEST_BROKER`` names (4.3 by default, 4.0, or the machine's
own: testkit/brokers.py, started when it does not answer); a testcontainers RabbitMQ
when Docker is running. Without any of them integration tests fail (never skip) and
say how to get one.

Which STOMP server the integration tests talk to: the bridge (default, started
in-process on a free port), or RabbitMQ's own STOMP plugin when
``STOMP_BRIDGE_TEST_TARGET=native`` (the selected broker's STOMP port, or
``STOMP_BRIDGE_TEST_NATIVE_PORT``). Running the same tests both ways is the differential test.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from testkit.brokers import native_stomp
from testkit.ports import port_open

TARGET = os.environ.get("STOMP_BRIDGE_TEST_TARGET", "bridge")


@dataclass
class StompTarget:
    host: str
    port: int
    native: bool

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)


@pytest.fixture(scope="session")
def native44() -> bool:
    """The plugin the tests hold both targets to is RabbitMQ 4.4's native STOMP (the bridge
    follows it there: ``rabbitmq_stomp_dialect``), not 4.3's and older."""
    return native_stomp()


@pytest.fixture(scope="session")
def stomp_target(broker) -> StompTarget:
    if TARGET == "native":
        if not port_open(broker.native_port, broker.host):
            pytest.fail(
                f"STOMP_BRIDGE_TEST_TARGET=native but nothing answers on {broker.host}:{broker.native_port}. "
                "Run `rabbitmq-plugins enable rabbitmq_stomp`.",
                pytrace=False,
            )
        yield StompTarget(broker.host, broker.native_port, native=True)
        return
    from testkit.bridge import BridgeThread

    # STOMP_BRIDGE_TEST_FANOUT=1: the same differential tests with fan-out at the edge on
    # (edge_fanout: topic subscribers of one login sharing a queue must see what the plugin gives)
    bridge = BridgeThread(amqp_url=broker.amqp_url, edge_fanout=os.environ.get("STOMP_BRIDGE_TEST_FANOUT") == "1")
    bridge.start()
    try:
        yield StompTarget("127.0.0.1", bridge.port, native=False)
    finally:
        bridge.stop()
