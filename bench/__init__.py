"""Benchmarks, run by hand from the repository root: ``python -m bench`` (the bridge against
RabbitMQ's native STOMP plugin), ``python -m bench.logins`` (what a login costs) and
``python -m bench.spark`` (rows/s through the Spark connector)."""
