"""Test fixtures shared by every test.

Where the broker comes from, in order: ``STOMP_BRIDGE_TEST_AMQP_URL``; the local
broker ``STOMP_BRIDGE_TEST_BROKER`` names (4.3 by default, 4.0, or the machine's
own: tests/brokers.py, started when it does not answer); a testcontainers RabbitMQ
when Docker is running. Without any of them integration tests fail (never skip) and
say how to get one.

Which STOMP server the integration tests talk to: the bridge (default, started
in-process on a free port), or RabbitMQ's own STOMP plugin when
``STOMP_BRIDGE_TEST_TARGET=native`` (the selected broker's STOMP port, or
``STOMP_BRIDGE_TEST_NATIVE_PORT``). Running the same tests both ways is the differential test.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from testkit.management import Management
from tests import brokers

TARGET = os.environ.get("STOMP_BRIDGE_TEST_TARGET", "bridge")

HOW_TO_GET_A_BROKER = (
    "Integration tests need a RabbitMQ. By default they use RabbitMQ 4.3, which "
    "`bash scripts/rabbitmq4 start 4.3` builds (debootstrap, as root) and starts; "
    "STOMP_BRIDGE_TEST_BROKER=4.0 or =system picks RabbitMQ 4.0 or the machine's own "
    "(`rabbitmq-server -detached`, Debian package `rabbitmq-server`); or point "
    "STOMP_BRIDGE_TEST_AMQP_URL at one (e.g. amqp://guest:guest@host:5672/), or run Docker "
    "so testcontainers can start one."
)


def _port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class Broker:
    amqp_url: str
    host: str
    api_url: str  # management HTTP API base, e.g. http://127.0.0.1:15672/api
    user: str
    password: str
    native_port: int = 61613  # the broker's own STOMP plugin
    local: brokers.LocalBroker | None = None  # None: a remote broker (no rabbitmqctl)
    version: str = ""  # RabbitMQ's version, from the management API

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split(".")[:3] if p.isdigit())


def _find_broker() -> tuple[Broker | None, Any]:
    url = os.environ.get("STOMP_BRIDGE_TEST_AMQP_URL")
    container = None
    local = brokers.selected()
    if local is not None:
        local.ensure_running()  # raises with how to start it by hand
        url = local.amqp_url
    if not url:
        try:  # pragma: no cover - only where Docker runs
            from testcontainers.rabbitmq import RabbitMqContainer

            container = RabbitMqContainer("rabbitmq:4.3-management")
            container.start()
            host = container.get_container_host_ip()
            port = container.get_exposed_port(5672)
            url = f"amqp://guest:guest@{host}:{port}/"
        except Exception:  # noqa: BLE001 - any failure means "no Docker"
            return None, None
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or "127.0.0.1"
    default_api = local.api_url if local is not None else f"http://{host}:15672/api"
    api = os.environ.get("STOMP_BRIDGE_TEST_API_URL", default_api)
    native = os.environ.get("STOMP_BRIDGE_TEST_NATIVE_PORT")
    return (
        Broker(
            amqp_url=url,
            host=host,
            api_url=api,
            user=urllib.parse.unquote(parsed.username or "guest"),
            password=urllib.parse.unquote(parsed.password or "guest"),
            native_port=int(native) if native else (local.stomp_port if local is not None else 61613),
            local=local,
        ),
        container,
    )


@pytest.fixture(scope="session")
def broker():
    try:
        found, container = _find_broker()
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
        if not _port_open(broker.host, broker.native_port):
            pytest.fail(
                f"STOMP_BRIDGE_TEST_TARGET=native but nothing answers on {broker.host}:{broker.native_port}. "
                "Run `rabbitmq-plugins enable rabbitmq_stomp`.",
                pytrace=False,
            )
        yield StompTarget(broker.host, broker.native_port, native=True)
        return
    from tests.bridge_runner import BridgeThread

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
