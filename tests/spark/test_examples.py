"""The example jobs in examples/spark/, end to end on small data."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from stomp_bridge.spark.partitions import partition_for_key
from testkit.brokers import selected
from tests.integration.rawstomp import RawStomp
from tests.spark.conftest import consume

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "spark"


def _example(name: str) -> ModuleType:
    """examples/spark/<name>.py imported under its own name, as running a job from that directory
    does (the jobs import their sibling ``common``), without putting the directory on sys.path."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_example("common")
bulk_load = _example("bulk_load")
windowed_aggregation = _example("windowed_aggregation")
super_stream = _example("super_stream")


def _connection_args(stomp_target) -> list[str]:
    """The examples' connection flags for the broker under test: its own stream port too (the
    default 5552 is the machine's own broker's, which may answer while the tests use another)."""
    local = selected()
    return ["--host", stomp_target.host, "--port", str(stomp_target.port),
            "--stream-port", str(local.stream_port if local is not None else 5552)]


def test_windowed_aggregation_writes_parquet_and_publishes_each_window(
        spark, stream, publish, stomp_target, unique, tmp_path):
    topic = f"/topic/aggregates-{unique}"
    events = [("a", 1.0, "2026-01-01T00:00:05Z"), ("b", 10.0, "2026-01-01T00:00:10Z"),
              ("a", 3.0, "2026-01-01T00:00:30Z"), ("a", 5.0, "2026-01-01T00:01:10Z"),
              ("tick", 0.0, "2026-01-01T00:05:00Z")]  # moves the watermark past the first two windows
    publish(f"/amq/queue/{stream}", [json.dumps({"key": k, "value": v, "ts": ts}) for k, v, ts in events] + ["junk"])
    args = windowed_aggregation.parse_args([
        *_connection_args(stomp_target), "--stream", stream, "--output", str(tmp_path / "agg"),
        "--checkpoint", str(tmp_path / "checkpoint"), "--topic", topic, "--available-now"])
    with RawStomp(stomp_target.address, timeout=15) as listener:
        listener.connect()
        listener.subscribe(topic)
        query = windowed_aggregation.start(spark, args)
        query.awaitTermination(180)
        assert query.exception() is None
        published = sorted((json.loads(listener.expect("MESSAGE").body) for _ in range(3)),
                           key=lambda m: (m["window_start"], m["key"]))
        listener.no_frame(0.3)
    expected = [("2026-01-01T00:00:00", "a", 2, 4.0, 2.0, 3.0), ("2026-01-01T00:00:00", "b", 1, 10.0, 10.0, 10.0),
                ("2026-01-01T00:01:00", "a", 1, 5.0, 5.0, 5.0)]
    assert [(m["window_start"][:19], m["key"], m["count"], m["sum"], m["mean"], m["max"]) for m in published] == expected
    rows = spark.read.parquet(str(tmp_path / "agg")).orderBy("window_start", "key").collect()
    assert [(r.window_start.isoformat()[:19], r.key, r["count"], r["sum"], r.mean, r["max"]) for r in rows] == expected


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_bulk_load_publishes_every_row(spark, stream, stomp_target, tmp_path, fmt):
    path = str(tmp_path / f"rows.{fmt}")
    df = spark.createDataFrame([(i, f"name-{i}") for i in range(25)], "id BIGINT, name STRING").coalesce(1)
    if fmt == "csv":
        df.write.option("header", "true").csv(path)
    else:
        df.write.parquet(path)
    args = bulk_load.parse_args([*_connection_args(stomp_target), "--input", path, "--format", fmt,
                                 "--destination", f"/amq/queue/{stream}", "--partitions", "2"])
    assert bulk_load.publish(spark, args) == 25
    got = consume(stomp_target, f"/amq/queue/{stream}", 25, {"x-stream-offset": "first"})
    assert sorted((json.loads(f.body)["id"], json.loads(f.body)["name"]) for f in got) == [
        (i, f"name-{i}") for i in range(25)]
    assert all(f["persistent"] == "true" for f in got)


def test_super_stream_example_writes_by_customer_and_copies_each_partition_once(
        spark, super_streams, stomp_target, unique, tmp_path):
    name = super_streams.declare(f"orders-{unique}", 3)
    connection = _connection_args(stomp_target)
    args = super_stream.parse_args(["write", *connection, "--super-stream", name, "--rows", "60",
                                    "--customers", "12"])
    assert super_stream.write(spark, args) == 60
    read_args = super_stream.parse_args([
        "read", *connection, "--super-stream", name, "--output", str(tmp_path / "orders"),
        "--checkpoint", str(tmp_path / "checkpoint"), "--available-now", "--max-per-trigger", "25"])
    query = super_stream.start(spark, read_args)
    query.awaitTermination(180)
    assert query.exception() is None
    rows = spark.read.parquet(str(tmp_path / "orders")).collect()
    assert sorted(r.order_id for r in rows) == list(range(60))
    for row in rows:  # every customer's orders in the partition the stream clients' hash picks
        assert row.destination == f"/queue/{name}-{partition_for_key(row.customer, 3)}"
