"""The harness's own tests use the repository's shared fixtures (a real RabbitMQ, its API)."""

from testkit.fixtures import broker, rabbit  # noqa: F401 - fixtures
