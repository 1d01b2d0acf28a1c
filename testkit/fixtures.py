"""The pytest fixtures every suite of the repository shares (``tests/``, ``reliability/tests/``),
a plugin the repository's top-level conftest.py loads.

- ``broker``: the RabbitMQ the tests use (:func:`testkit.brokers.find_broker`); fails, never
  skips, with how to get one.
- ``rabbit``: its management API (:class:`testkit.management.Management`).
- ``unique``: a name no other test (or earlier run) uses.
"""

from __future__ import annotations

import uuid

import pytest

from testkit.brokers import HOW_TO_GET_A_BROKER, find_broker
from testkit.management import Management


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


@pytest.fixture
def unique() -> str:
    """A name no other test (or earlier run) uses."""
    return uuid.uuid4().hex[:12]
