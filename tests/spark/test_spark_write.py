"""Batch and streaming writes: every row a persistent SEND, confirmed before the task ends."""

from __future__ import annotations

import json

import pytest

from tests.spark.conftest import consume, stream_port


def test_batch_write_sends_every_row_with_its_headers(spark, stomp_options, stream, stomp_target):
    rows = [(f"body-{i}", {"k": str(i), "source": "spark"}) for i in range(40)]
    df = spark.createDataFrame(rows, "body STRING, headers MAP<STRING, STRING>").repartition(2)
    df.write.format("stomp").options(**stomp_options, destination=f"/amq/queue/{stream}").mode("append").save()
    got = consume(stomp_target, f"/amq/queue/{stream}", 40, {"x-stream-offset": "first"})
    assert sorted(f.body.decode() for f in got) == sorted(f"body-{i}" for i in range(40))
    for frame in got:
        i = frame.body.decode().split("-")[1]
        assert frame["k"] == i
        assert frame["source"] == "spark"
        assert frame["persistent"] == "true"


def test_write_without_a_body_column_sends_each_row_as_json(spark, stomp_options, stream, stomp_target):
    df = spark.createDataFrame([("a", 1, "2026-01-01")], "key STRING, n BIGINT, day STRING")
    df.write.format("stomp").options(**stomp_options, destination=f"/amq/queue/{stream}").mode("append").save()
    (frame,) = consume(stomp_target, f"/amq/queue/{stream}", 1, {"x-stream-offset": "first"})
    assert json.loads(frame.body) == {"key": "a", "n": 1, "day": "2026-01-01"}
    assert frame["content-type"] == "application/json"


def test_destination_column_routes_each_row(spark, stomp_options, rabbit, unique, stomp_target):
    queues = [f"spark-route-{unique}-{i}" for i in range(2)]
    for q in queues:
        rabbit.declare_queue(q)
    try:
        rows = [(f"/amq/queue/{queues[i % 2]}", f"r{i}") for i in range(6)]
        df = spark.createDataFrame(rows, "destination STRING, body STRING")
        df.write.format("stomp").options(**stomp_options).mode("append").save()
        for i, q in enumerate(queues):
            got = consume(stomp_target, f"/amq/queue/{q}", 3)
            assert sorted(f.body.decode() for f in got) == [f"r{j}" for j in range(i, 6, 2)]
    finally:
        for q in queues:
            rabbit.delete_queue(q)


def test_transactional_write_commits_each_task(spark, stomp_options, stream, stomp_target):
    df = spark.createDataFrame([(f"t{i}",) for i in range(30)], "body STRING").repartition(2)
    (df.write.format("stomp").options(**stomp_options, destination=f"/amq/queue/{stream}", transactional="true")
     .mode("append").save())
    got = consume(stomp_target, f"/amq/queue/{stream}", 30, {"x-stream-offset": "first"})
    assert sorted(f.body.decode() for f in got) == sorted(f"t{i}" for i in range(30))


def test_failed_publish_fails_the_task_with_the_brokers_reason(spark, stomp_options, unique):
    df = spark.createDataFrame([("x",)], "body STRING")
    with pytest.raises(Exception) as info:
        (df.write.format("stomp").options(**stomp_options, destination=f"/exchange/missing-{unique}/k")
         .mode("append").save())
    assert f"NOT_FOUND - no exchange 'missing-{unique}' in vhost '/'" in str(info.value)


def test_streaming_write_copies_a_stream(spark, stomp_options, stream, rabbit, unique, publish, stomp_target, tmp_path):
    target = f"spark-copy-{unique}"
    rabbit.declare_queue(target, arguments={"x-queue-type": "stream"})
    try:
        publish(f"/amq/queue/{stream}", [f"c{i}" for i in range(8)], {"origin": "test"})
        query = (spark.readStream.format("stomp").options(**stomp_options, destination=f"/amq/queue/{stream}").load()
                 .select("body", "headers")
                 .writeStream.format("stomp").options(**stomp_options, destination=f"/amq/queue/{target}")
                 .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        got = consume(stomp_target, f"/amq/queue/{target}", 8, {"x-stream-offset": "first"})
        assert [f.body.decode() for f in got] == [f"c{i}" for i in range(8)]
        assert all(f["origin"] == "test" for f in got)
    finally:
        rabbit.delete_queue(target)


def test_a_micro_batch_run_again_after_a_restart_adds_nothing_to_the_stream(
        spark, stream, rabbit, unique, publish, stomp_target, broker, tmp_path):
    """The stream path's exactly-once write: a restart runs the micro-batch whose commit Spark did not
    record again, with the same query id and batch id, so the same producer name and publishing ids,
    and RabbitMQ drops what it has (through STOMP there is no deduplication: the stream path only)."""
    options = {"host": stomp_target.host, "port": str(stomp_target.port), "login": "guest", "passcode": "guest",
               "streamHost": broker.host, "streamPort": str(stream_port(broker))}
    target = f"spark-once-{unique}"
    rabbit.declare_queue(target, arguments={"x-queue-type": "stream"})
    checkpoint = tmp_path / "cp"

    def run() -> None:
        query = (spark.readStream.format("stomp").options(**options, destination=f"/amq/queue/{stream}").load()
                 .select("body").writeStream.format("stomp").options(**options, destination=f"/amq/queue/{target}")
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None

    try:
        publish(f"/amq/queue/{stream}", [f"o{i}" for i in range(8)])
        run()
        commits = sorted((checkpoint / "commits").iterdir(), key=lambda f: int(f.name) if f.name.isdigit() else -1)
        assert commits[-1].name.isdigit()
        commits[-1].unlink()  # as if the driver died after the write, before its commit
        (checkpoint / "commits" / f".{commits[-1].name}.crc").unlink(missing_ok=True)
        run()
        got = consume(stomp_target, f"/amq/queue/{target}", 8, {"x-stream-offset": "first"})  # and no 9th
        assert [f.body.decode() for f in got] == [f"o{i}" for i in range(8)]
    finally:
        rabbit.delete_queue(target)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, "option destination is missing"),
        ({"destination": "/amq/queue/x", "port": "http"}, "option port='http' is not an integer"),
        ({"destination": "/amq/queue/x", "passcode": None}, "options login and passcode go together"),
        ({"destination": "/nowhere/x"}, "option destination='/nowhere/x' cannot be used for writing"),
    ],
)
def test_bad_write_options_fail_before_any_task(spark, stomp_options, options, expected):
    opts = {**stomp_options, **options}
    opts = {k: v for k, v in opts.items() if v is not None}
    df = spark.createDataFrame([("x",)], "body STRING")
    with pytest.raises(Exception) as info:
        df.write.format("stomp").options(**opts).mode("append").save()
    assert expected in str(info.value)


def test_wrong_credentials_fail_with_the_servers_refusal(spark, stomp_options, stream):
    df = spark.createDataFrame([("x",)], "body STRING")
    with pytest.raises(Exception) as info:
        (df.write.format("stomp").options(**{**stomp_options, "passcode": "wrong"}, destination=f"/amq/queue/{stream}")
         .mode("append").save())
    if stomp_options.get("protocol") == "stomp":
        assert "the STOMP server refused CONNECT: Bad CONNECT: Access refused for user 'guest'" in str(info.value)
    else:
        assert "refused the login of 'guest' on vhost '/'" in str(info.value)


def test_a_retried_stream_write_task_is_deduplicated_by_rabbitmq(spark, stomp_target, broker, stream):
    """The task's own write() twice with the same producer name (a retried attempt of partition 0
    of one write): RabbitMQ drops the second attempt's rows, by their publishing ids."""
    import pyarrow as pa

    from stomp_bridge.spark.source import StompWriter
    from tests.spark.conftest import stream_port

    options = {"host": stomp_target.host, "port": str(stomp_target.port), "login": "guest", "passcode": "guest",
               "streamHost": broker.host, "streamPort": str(stream_port(broker)), "protocol": "stream",
               "destination": f"/amq/queue/{stream}"}
    writer = StompWriter(options, spark.createDataFrame([], "body STRING").schema)
    batch = pa.RecordBatch.from_pydict({"body": [f"d{i}" for i in range(50)]})
    assert writer.write(iter([batch.slice(0, 30)])).messages == 30  # the first attempt fails after 30 rows
    assert writer.write(iter([batch])).messages == 50  # the retry sends all 50: RabbitMQ confirms all
    got = spark.read.format("stomp").options(**options).load().orderBy("stream_offset").collect()
    assert [r.body_text for r in got] == [f"d{i}" for i in range(50)]
