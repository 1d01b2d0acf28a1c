"""Batch and streaming reads of stream queues, and drains of classic queues, through the bridge."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.rawstomp import RawStomp
from tests.spark.conftest import stream_port


def _bodies(df) -> list[str]:
    return [r.body_text for r in df.orderBy("stream_offset").collect()]


def test_batch_read_of_a_whole_stream_has_every_column(spark, stomp_options, stream, publish):
    publish(f"/amq/queue/{stream}", [f"m{i}" for i in range(6)], {"colour": "red", "timestamp": "1700000000"})
    df = spark.read.format("stomp").options(**stomp_options, destination=f"/amq/queue/{stream}").load()
    rows = df.orderBy("stream_offset").collect()
    assert [r.stream_offset for r in rows] == list(range(6))
    assert [bytes(r.body) for r in rows] == [f"m{i}".encode() for i in range(6)]
    assert [r.body_text for r in rows] == [f"m{i}" for i in range(6)]
    first = rows[0]
    assert first.destination == f"/queue/{stream}"
    assert first.headers["colour"] == "red"
    assert "x-stream-offset" not in first.headers
    assert first.message_id
    assert int(first.timestamp.timestamp()) == 1700000000


def test_batch_read_of_an_offset_range_in_two_partitions(spark, stomp_options, stream, publish):
    publish(f"/amq/queue/{stream}", [f"m{i}" for i in range(10)])
    df = (spark.read.format("stomp")
          .options(**stomp_options, destination=f"/amq/queue/{stream}", startingOffsets="3",
                   endingOffsets="8", numPartitions="2").load())
    assert df.rdd.getNumPartitions() == 2
    assert _bodies(df) == ["m3", "m4", "m5", "m6", "m7"]


def test_batch_read_clamps_the_end_to_the_tail_and_resolves_timestamps(spark, stomp_options, stream, publish):
    publish(f"/amq/queue/{stream}", [f"m{i}" for i in range(4)])
    now = int(time.time())

    def load(**options):
        return spark.read.format("stomp").options(**stomp_options, destination=f"/amq/queue/{stream}",
                                                   **options).load()

    assert _bodies(load(endingOffsets="1000")) == ["m0", "m1", "m2", "m3"]
    assert _bodies(load(startingTimestamp=str(now - 3600), endingTimestamp=str(now + 3600))) == [
        "m0", "m1", "m2", "m3"]
    assert load(startingTimestamp=str(now + 3600)).count() == 0


def test_json_option_parses_bodies_into_typed_columns(spark, stomp_options, stream, publish):
    events = [{"key": "a", "value": 1.5, "n": 2, "at": "2026-01-01T00:00:00Z"},
              {"key": "b", "value": 2, "n": 3, "at": 1767225600},
              "not json"]
    publish(f"/amq/queue/{stream}", [e if isinstance(e, str) else json.dumps(e) for e in events])
    df = (spark.read.format("stomp")
          .options(**stomp_options, destination=f"/amq/queue/{stream}",
                   jsonSchema="key STRING, value DOUBLE, n BIGINT, at TIMESTAMP").load())
    assert df.columns[:4] == ["key", "value", "n", "at"]
    rows = df.orderBy("stream_offset").collect()
    assert [(r.key, r.value, r.n) for r in rows] == [("a", 1.5, 2), ("b", 2.0, 3), (None, None, None)]
    assert rows[0].at == rows[1].at
    assert rows[2].body_text == "not json"


def test_drain_takes_n_messages_and_leaves_the_rest(spark, stomp_options, rabbit, unique, publish, stomp_target):
    queue = f"spark-drain-{unique}"
    rabbit.declare_queue(queue)
    try:
        publish(f"/amq/queue/{queue}", [f"q{i}" for i in range(10)])
        df = (spark.read.format("stomp")
              .options(**stomp_options, destination=f"/amq/queue/{queue}", mode="drain", maxMessages="6",
                       drainIdleMs="2000").load())
        taken = sorted(r.body_text for r in df.collect())
        assert taken == sorted(f"q{i}" for i in range(6))
        with RawStomp(stomp_target.address, timeout=10) as conn:
            conn.connect()
            conn.subscribe(f"/amq/queue/{queue}", ack="auto")
            rest = [conn.expect("MESSAGE").body.decode() for _ in range(4)]
            conn.no_frame(0.3)
        assert rest == ["q6", "q7", "q8", "q9"]
    finally:
        rabbit.delete_queue(queue)


def _run_available_now(spark, stomp_options, stream, out, checkpoint, **extra):
    query = (spark.readStream.format("stomp")
             .options(**stomp_options, destination=f"/amq/queue/{stream}", **extra).load()
             .select("stream_offset", "body_text")
             .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_streaming_read_resumes_from_its_checkpoint_exactly_once(spark, stomp_options, stream, publish, tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    publish(f"/amq/queue/{stream}", [f"m{i}" for i in range(10)])
    batches = _run_available_now(spark, stomp_options, stream, out, checkpoint, maxMessagesPerTrigger="6")
    assert batches == [6, 4]  # the read limit made two micro-batches
    publish(f"/amq/queue/{stream}", [f"m{i}" for i in range(10, 15)])
    batches = _run_available_now(spark, stomp_options, stream, out, checkpoint, maxMessagesPerTrigger="6",
                                 numPartitions="2")  # the restart may split ranges differently
    assert batches == [5]
    rows = spark.read.parquet(out).orderBy("stream_offset").collect()
    assert [r.stream_offset for r in rows] == list(range(15))
    assert [r.body_text for r in rows] == [f"m{i}" for i in range(15)]


def test_streaming_query_picks_up_new_messages(spark, stomp_options, stream, publish):
    publish(f"/amq/queue/{stream}", ["early"])
    name = f"stomp_{stream.replace('-', '_')}"
    query = (spark.readStream.format("stomp")
             .options(**stomp_options, destination=f"/amq/queue/{stream}", startingOffsets="latest").load()
             .select("body_text").writeStream.format("memory").queryName(name).start())
    try:
        query.processAllAvailable()
        publish(f"/amq/queue/{stream}", ["late-1", "late-2"])
        query.processAllAvailable()
        assert sorted(r.body_text for r in spark.table(name).collect()) == ["late-1", "late-2"]
    finally:
        query.stop()


def test_reading_a_missing_stream_fails_with_the_brokers_reason(spark, stomp_options, unique):
    df = spark.read.format("stomp").options(**stomp_options, destination=f"/amq/queue/missing-{unique}").load()
    with pytest.raises(Exception) as info:
        df.collect()
    assert f"NOT_FOUND - no queue 'missing-{unique}' in vhost '/'" in str(info.value)


def test_unreachable_bridge_fails_with_the_address(spark, stomp_options):
    if stomp_options.get("protocol") == "stomp":
        broken, expected = {"port": "1"}, "cannot connect to the STOMP server at 127.0.0.1:1"
    else:
        broken, expected = {"protocol": "stream", "streamPort": "1"}, "connection to the stream port 127.0.0.1:1 failed"
    df = spark.read.format("stomp").options(**{**stomp_options, **broken}, destination="/amq/queue/x").load()
    with pytest.raises(Exception) as info:
        df.collect()
    assert expected in str(info.value)


def test_auto_reads_a_stream_over_the_stream_protocol_without_the_bridge(spark, stomp_target, broker, stream, publish):
    """protocol=auto picks the stream port for a stream: the read works with the bridge unreachable."""
    publish(f"/amq/queue/{stream}", [f"m{i}" for i in range(5)])
    options = {"host": stomp_target.host, "port": "1", "login": "guest", "passcode": "guest",
               "streamHost": broker.host, "streamPort": str(stream_port(broker)), "destination": f"/amq/queue/{stream}"}
    assert _bodies(spark.read.format("stomp").options(**options).load()) == [f"m{i}" for i in range(5)]
    with pytest.raises(Exception) as info:
        spark.read.format("stomp").options(**options, protocol="stomp").load().collect()
    assert "cannot connect to the STOMP server at 127.0.0.1:1" in str(info.value)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"destination": "/queue/x"}, "option destination='/queue/x' cannot be used for reading a stream"),
        ({"destination": "/amq/queue/x", "startingOffsets": "soon"}, "option startingOffsets='soon' must be"),
        ({"destination": "/amq/queue/x", "mode": "drain"}, "mode=drain needs option maxMessages"),
        ({"destination": "/amq/queue/x", "maxMessagesPerTrigger": "0"}, "maxMessagesPerTrigger='0' must be at least 1"),
    ],
)
def test_bad_read_options_fail_with_a_clear_message(spark, stomp_options, options, expected):
    with pytest.raises(Exception) as info:
        spark.read.format("stomp").options(**stomp_options, **options).load().collect()
    assert expected in str(info.value)


def test_a_user_schema_is_refused_in_favour_of_json_schema(spark, stomp_options):
    with pytest.raises(Exception) as info:
        spark.read.format("stomp").schema("key STRING").options(**stomp_options, destination="/amq/queue/x").load().collect()
    assert "drop .schema(...) and give the body's JSON columns with option jsonSchema" in str(info.value)


def test_streaming_read_refuses_drain_mode(spark, stomp_options):
    df = spark.readStream.format("stomp").options(**stomp_options, destination="/queue/x", mode="drain",
                                                  maxMessages="5").load()
    with pytest.raises(Exception) as info:
        df.writeStream.format("memory").queryName("never").start().processAllAvailable()
    assert "a streaming read needs mode=stream" in str(info.value)
