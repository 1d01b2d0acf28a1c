"""Fixtures for the Spark data source tests: one local[2] SparkSession for the whole run.

Spark's Python workers are separate processes: they import ``stomp_bridge.spark``
from the test interpreter's environment (``PYSPARK_PYTHON``) and reach the
bridge, which runs in this process, over TCP.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from tests.integration.rawstomp import RawStomp

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("The Spark tests need Java 17 or later: `apt-get install openjdk-17-jre-headless` "
                    "or set JAVA_HOME.", pytrace=False)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from stomp_bridge.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("stomp-bridge-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def stream_port(broker) -> int:
    """RabbitMQ's stream port of the broker under test (5552; the 4.x test brokers': testkit.brokers)."""
    return broker.local.stream_port if broker.local is not None else 5552


@pytest.fixture(params=["stomp", "stream"])
def stomp_options(request, stomp_target, broker) -> dict[str, str]:
    """Options that point the data source at the STOMP server under test, once per path: ``stomp``
    (everything through the STOMP server) and ``stream`` (protocol=auto with the broker's stream
    port: streams over the stream protocol, queues and exchanges through STOMP)."""
    options = {"host": stomp_target.host, "port": str(stomp_target.port), "login": "guest", "passcode": "guest"}
    if request.param == "stomp":
        return {**options, "protocol": "stomp"}
    return {**options, "streamHost": broker.host, "streamPort": str(stream_port(broker))}


@pytest.fixture
def stream(rabbit, unique):
    """A new stream queue's name; deleted after the test."""
    name = f"spark-stream-{unique}"
    rabbit.declare_queue(name, arguments={"x-queue-type": "stream"})
    yield name
    rabbit.delete_queue(name)


@pytest.fixture
def publish(stomp_target):
    """``publish(destination, bodies, headers=None)``: SEND each body with a receipt, on one connection."""
    conns: list[RawStomp] = []

    def send(destination: str, bodies, headers: dict[str, str] | None = None) -> None:
        conn = RawStomp(stomp_target.address, timeout=10)
        conns.append(conn)
        conn.connect()
        for i, body in enumerate(bodies):
            conn.send_frame("SEND", {"destination": destination, "receipt": f"p{i}", **(headers or {})}, body)
        conn.wait_receipt(f"p{len(bodies) - 1}")
        conn.close()

    yield send
    for conn in conns:
        conn.close()


def consume(stomp_target, destination: str, count: int, headers: dict[str, str] | None = None) -> list:
    """``count`` MESSAGEs from ``destination`` (a stream: from its first offset)."""
    with RawStomp(stomp_target.address, timeout=15) as conn:
        conn.connect()
        conn.subscribe(destination, ack="client-individual", headers={"prefetch-count": "1000", **(headers or {})})
        frames = []
        for _ in range(count):
            frame = conn.expect("MESSAGE")
            conn.send_frame("ACK", {"id": frame["ack"]})
            frames.append(frame)
        conn.no_frame(0.3)
        return frames


class SuperStreams:
    """Declares super streams the way ``rabbitmq-streams add_super_stream`` does (a direct exchange
    with ``x-super-stream: true``, stream queues ``<name>-<n>`` bound with routing key ``<n>`` and
    ``x-stream-partition-order``), and deletes them after the test."""

    def __init__(self, rabbit) -> None:
        self.rabbit = rabbit
        self.exchanges: list[str] = []
        self.queues: list[str] = []

    def declare(self, name: str, partitions: int) -> str:
        q = self.rabbit.q
        self.rabbit.request("PUT", f"/exchanges/%2F/{q(name)}", {
            "type": "direct", "durable": True, "auto_delete": False, "arguments": {"x-super-stream": True}})
        self.exchanges.append(name)
        for i in range(partitions):
            self.add_partition(name, i)
        return name

    def add_partition(self, name: str, index: int, arguments: dict | None = None) -> str:
        queue = f"{name}-{index}"
        self.rabbit.declare_queue(queue, arguments={"x-queue-type": "stream", **(arguments or {})})
        self.queues.append(queue)
        self.rabbit.request("POST", f"/bindings/%2F/e/{self.rabbit.q(name)}/q/{self.rabbit.q(queue)}",
                            {"routing_key": str(index), "arguments": {"x-stream-partition-order": index}})
        return queue

    def cleanup(self) -> None:
        for queue in self.queues:
            self.rabbit.delete_queue(queue)
        for exchange in self.exchanges:
            self.rabbit.delete_exchange(exchange)


@pytest.fixture
def super_streams(rabbit):
    streams = SuperStreams(rabbit)
    yield streams
    streams.cleanup()
