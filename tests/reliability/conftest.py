"""The reliability tests use the integration fixtures (real RabbitMQ, bridges on port 0)."""

from tests.integration.conftest import bridge, connected, dial, raw  # noqa: F401
