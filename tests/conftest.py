"""Test fixtures shared by every test.

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
import uuid
from dataclasses import dataclass

import pytest

from testkit.brokers import HOW_TO_GET_A_BROKER, find_broker, port_open
from testkit.management import Management

TARGET = os.environ.get("STOMP_BRIDGE_TEST_TARGET", "bridge")

@pytest.fixture(scope="session")
def broker():
    try:
        found, container = find_broker()
    except RuntimeError as exc:
        pytest.fail(f"{exc}\n{HOW_TO_GET_A_BROKER}", pytrace=False)
    if found is None:
        pytest.fail(HOW_TO_GET_A_BROKER, pytrace=False)
    try:
        overview = Management(found.api_url, found.user, found.password).overview()
        found.version = str(overview.get("rabbitmq_version", ""))
    except Exception:  # noqa: BLE001 - the rabbit fixture reports an unreachable API
        pass
    yield found
    if container is not None:  # pragma: no cover
        container.stop()


@pytest.fixture(scope="session")
def rabbit(broker) -> Management:
    api = Management(broker.api_url, broker.user, broker.password)
    try:
        api.overview()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(
            f"RabbitMQ's management API is not reachable at {broker.api_url} ({exc}). "
            "Enable it with `rabbitmq-plugins enable rabbitmq_management` "
            "or set STOMP_BRIDGE_TEST_API_URL.",
            pytrace=False,
        )
    return api


@dataclass
class StompTarget:
    host: str
    port: int
    native: bool

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)


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

    bridge = BridgeThread(amqp_url=broker.amqp_url)
    bridge.start()
    try:
        yield StompTarget("127.0.0.1", bridge.port, native=False)
    finally:
        bridge.stop()


@pytest.fixture
def unique() -> str:
    """A name no other test (or earlier run) uses."""
    return uuid.uuid4().hex[:12]
