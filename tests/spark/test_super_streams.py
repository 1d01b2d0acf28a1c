"""Super streams (RabbitMQ 3.11+) through format("stomp"): partitions found by RabbitMQ's naming,
one Spark input partition per stream partition, offsets per partition in the checkpoint, key
routing as RabbitMQ's stream clients hash, and data loss that fails the query."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from stomp_bridge.spark.partitions import partition_for_key
from tests.integration.rawstomp import RawStomp
from tests.spark.conftest import consume, stream_port


def _fill(publish, name: str, counts: list[int]) -> None:
    for i, count in enumerate(counts):
        publish(f"/amq/queue/{name}-{i}", [f"p{i}-m{j}" for j in range(count)])


def _read(spark, stomp_options, **options):
    return spark.read.format("stomp").options(**stomp_options, **options).load()


def test_batch_read_finds_the_partitions_and_plans_one_input_partition_each(
        spark, stomp_options, super_streams, unique, publish):
    name = super_streams.declare(f"spark-super-{unique}", 3)
    _fill(publish, name, [4, 2, 3])
    df = _read(spark, stomp_options, superStream=name)
    assert df.rdd.getNumPartitions() == 3
    rows = df.collect()
    assert sorted(r.body_text for r in rows) == sorted(
        [f"p0-m{j}" for j in range(4)] + [f"p1-m{j}" for j in range(2)] + [f"p2-m{j}" for j in range(3)])
    assert {r.destination for r in rows} == {f"/queue/{name}-{i}" for i in range(3)}
    split = _read(spark, stomp_options, superStream=name, numPartitions="2")
    assert split.rdd.getNumPartitions() == 6
    assert split.count() == 9
    listed = _read(spark, stomp_options, superStream=name, partitions=f"{name}-0,{name}-2")
    assert sorted(r.body_text for r in listed.collect()) == sorted(
        [f"p0-m{j}" for j in range(4)] + [f"p2-m{j}" for j in range(3)])
    per_partition = _read(spark, stomp_options, superStream=name,
                          startingOffsets=json.dumps({f"{name}-0": 3, f"{name}-1": -1}))
    assert sorted(r.body_text for r in per_partition.collect()) == ["p0-m3"] + [f"p2-m{j}" for j in range(3)]


def _available_now(spark, stomp_options, name, out, checkpoint, **extra):
    query = (spark.readStream.format("stomp").options(**stomp_options, superStream=name, **extra).load()
             .select("destination", "stream_offset", "body_text")
             .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def _last_checkpointed_offsets(checkpoint: Path) -> dict:
    batches = sorted((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    return json.loads(batches[-1].read_text().splitlines()[-1])


def test_streaming_offsets_per_partition_survive_a_restart_exactly_once(
        spark, stomp_options, super_streams, unique, publish, tmp_path):
    name = super_streams.declare(f"spark-super-{unique}", 3)
    out, checkpoint = str(tmp_path / "out"), tmp_path / "checkpoint"
    _fill(publish, name, [6, 1, 3])
    # 10 messages, 4 per trigger shared fairly: 2+1+1 (partition 1 has only one), then 2+0+2, then 2
    assert _available_now(spark, stomp_options, name, out, str(checkpoint), maxMessagesPerTrigger="4") == [4, 4, 2]
    assert _last_checkpointed_offsets(checkpoint) == {f"{name}-0": 6, f"{name}-1": 1, f"{name}-2": 3}
    publish(f"/amq/queue/{name}-1", ["p1-late"])
    publish(f"/amq/queue/{name}-2", ["p2-late"])
    assert _available_now(spark, stomp_options, name, out, str(checkpoint), maxMessagesPerTrigger="4") == [2]
    assert _last_checkpointed_offsets(checkpoint) == {f"{name}-0": 6, f"{name}-1": 2, f"{name}-2": 4}
    rows = spark.read.parquet(out).collect()
    got = sorted((r.destination, r.stream_offset) for r in rows)
    assert got == sorted({(f"/queue/{name}-{i}", o) for i, n in enumerate([6, 2, 4]) for o in range(n)})
    assert len(got) == len(set(got))


def test_a_partition_added_while_the_query_runs_is_read_from_its_first_offset(
        spark, stomp_options, super_streams, unique, publish):
    name = super_streams.declare(f"spark-super-{unique}", 2)
    _fill(publish, name, [2, 2])
    table = f"super_{unique}"
    query = (spark.readStream.format("stomp").options(**stomp_options, superStream=name).load()
             .select("destination", "body_text").writeStream.format("memory").queryName(table).start())
    try:
        query.processAllAvailable()
        assert spark.table(table).count() == 4
        super_streams.add_partition(name, 2)
        publish(f"/amq/queue/{name}-2", ["p2-m0", "p2-m1", "p2-m2"])
        query.processAllAvailable()
        rows = spark.table(table).collect()
        assert sorted(r.body_text for r in rows if r.destination == f"/queue/{name}-2") == ["p2-m0", "p2-m1", "p2-m2"]
        assert len(rows) == 7
    finally:
        query.stop()


def test_a_partition_deleted_under_a_running_query_fails_it(spark, stomp_options, super_streams, unique, publish,
                                                          rabbit):
    name = super_streams.declare(f"spark-super-{unique}", 3)
    _fill(publish, name, [1, 1, 1])
    query = (spark.readStream.format("stomp").options(**stomp_options, superStream=name).load()
             .select("body_text").writeStream.format("memory").queryName(f"deleted_{unique}").start())
    try:
        query.processAllAvailable()
        rabbit.delete_queue(f"{name}-1")
        with pytest.raises(Exception) as info:
            query.processAllAvailable()
        assert f"data loss: partition {name}-1 of super stream {name} was deleted while the query read it" in str(
            info.value)
    finally:
        query.stop()


def test_write_by_partition_key_lands_where_the_stream_clients_hash_puts_it(
        spark, stomp_options, super_streams, unique, stomp_target):
    name = super_streams.declare(f"spark-super-{unique}", 3)
    keys = [f"hello{i}" for i in range(1, 31)]
    df = spark.createDataFrame([(k, f"body-{k}") for k in keys], "partitionKey STRING, body STRING").repartition(2)
    df.write.format("stomp").options(**stomp_options, superStream=name).mode("append").save()
    expected = {i: sorted(f"body-{k}" for k in keys if partition_for_key(k, 3) == i) for i in range(3)}
    assert all(expected.values())  # 30 keys reach every partition
    for i in range(3):
        got = consume(stomp_target, f"/amq/queue/{name}-{i}", len(expected[i]), {"x-stream-offset": "first"})
        assert sorted(f.body.decode() for f in got) == expected[i]


def test_write_by_routing_key_follows_the_super_streams_bindings(
        spark, stomp_options, super_streams, unique, stomp_target):
    name = super_streams.declare(f"spark-super-{unique}", 2)
    df = spark.createDataFrame([(str(i % 2), f"r{i}") for i in range(6)], "routingKey STRING, body STRING")
    df.write.format("stomp").options(**stomp_options, superStream=name).mode("append").save()
    for i in range(2):
        got = consume(stomp_target, f"/amq/queue/{name}-{i}", 3, {"x-stream-offset": "first"})
        assert sorted(f.body.decode() for f in got) == [f"r{j}" for j in range(i, 6, 2)]


def _first_offset(stomp_target, destination: str) -> int:
    with RawStomp(stomp_target.address, timeout=10) as conn:
        conn.connect()
        conn.subscribe(destination, ack="client", headers={"x-stream-offset": "first", "prefetch-count": "100"})
        return int(conn.expect("MESSAGE")["x-stream-offset"])


def _truncated_stream(rabbit, unique, publish, stomp_target) -> str:
    """A stream whose first offsets retention removed: 10 kB segments, 20 kB kept. (With 1 kB
    segments RabbitMQ 4.3 sometimes delivers nothing to a subscription at ``first``, through its
    own STOMP plugin too: a segment being deleted under the reader.)"""
    name = f"spark-truncated-{unique}"
    rabbit.declare_queue(name, arguments={"x-queue-type": "stream", "x-max-length-bytes": 20000,
                                          "x-stream-max-segment-size-bytes": 10000})
    deadline = time.monotonic() + 30
    batch = 0
    while True:
        publish(f"/amq/queue/{name}", [f"b{batch}-{i}-" + "x" * 200 for i in range(50)])
        batch += 1
        if _first_offset(stomp_target, f"/amq/queue/{name}") > 0:  # retention runs as segments roll over
            return name
        assert time.monotonic() < deadline, "retention never removed the stream's first segment"


def test_fail_on_data_loss_trips_on_a_truncated_stream_and_false_skips(
        spark, stomp_options, rabbit, unique, publish, stomp_target):
    name = _truncated_stream(rabbit, unique, publish, stomp_target)
    try:
        first = _first_offset(stomp_target, f"/amq/queue/{name}")
        with pytest.raises(Exception) as info:
            _read(spark, stomp_options, destination=f"/amq/queue/{name}", startingOffsets="0").collect()
        text = str(info.value)
        assert (f"data loss: stream {name} lost offsets 0 to {first - 1} to retention before the query read them "
                f"(offset 0 was next, the first still stored is {first})") in text
        assert "set option failOnDataLoss=false" in text
        skipped = _read(spark, stomp_options, destination=f"/amq/queue/{name}", startingOffsets="0",
                        failOnDataLoss="false")
        assert min(r.stream_offset for r in skipped.collect()) == first
        earliest = _read(spark, stomp_options, destination=f"/amq/queue/{name}")  # earliest: what is stored
        assert min(r.stream_offset for r in earliest.collect()) == first
    finally:
        rabbit.delete_queue(name)


def _store_consumer_offset(broker, stream: str, offset: int) -> None:
    """A stored consumer offset: RabbitMQ writes it as a tracking chunk, which takes an offset of
    the stream's and is never delivered (returns once the broker answers for it)."""
    import asyncio

    from rstream import Consumer

    async def store() -> None:
        consumer = Consumer(broker.host, stream_port(broker), username="guest", password="guest")
        await consumer.start()
        try:
            await consumer.store_offset(stream, "spark-test-reader", offset)
            for _ in range(100):  # the store has no answer; its query does, once it is written
                if await consumer.query_offset(stream, "spark-test-reader") == offset:
                    return
                await asyncio.sleep(0.05)
            raise AssertionError(f"the stored offset of {stream} never read back")
        finally:
            await consumer.close()

    asyncio.run(store())


def test_a_range_that_begins_at_a_tracking_chunk_reads_on_without_data_loss(
        spark, stomp_options, rabbit, unique, publish, stomp_target, broker):
    # CI: a query's partition began at the offset of a segment's tracking chunk, and the read failed
    # with "lost offsets 87 to 87" on a stream retention had not touched there
    name = f"spark-tracked-{unique}"
    rabbit.declare_queue(name, arguments={"x-queue-type": "stream"})
    try:
        publish(f"/amq/queue/{name}", [f"a{i}" for i in range(5)])  # offsets 0 to 4
        _store_consumer_offset(broker, name, 3)  # offset 5
        publish(f"/amq/queue/{name}", [f"b{i}" for i in range(5)])  # offsets 6 to 10
        with RawStomp(stomp_target.address, timeout=10) as conn:  # the gap is there
            conn.connect()
            conn.subscribe(f"/amq/queue/{name}", ack="client", headers={"x-stream-offset": "offset=5", "prefetch-count": "10"})
            assert conn.expect("MESSAGE")["x-stream-offset"] == "6"
        rows = _read(spark, stomp_options, destination=f"/amq/queue/{name}", startingOffsets="5").collect()
        assert sorted((r.stream_offset, r.body_text) for r in rows) == [(6 + i, f"b{i}") for i in range(5)]
        split = _read(spark, stomp_options, destination=f"/amq/queue/{name}", numPartitions="2").collect()
        assert len(split) == 10
    finally:
        rabbit.delete_queue(name)


def _rstream_send_by_key(broker, super_stream: str, keys: list[str]) -> None:
    """rstream's SuperStreamProducer with its hash routing (RouteType.Hash): body ``r-<key>``."""
    import asyncio

    from rstream import AMQPMessage, RouteType, SuperStreamProducer

    async def send() -> None:
        async def key_of(message):
            return message.application_properties["key"]

        async with SuperStreamProducer(broker.host, stream_port(broker), username="guest", password="guest",
                                       super_stream=super_stream, routing=RouteType.Hash,
                                       routing_extractor=key_of) as producer:
            confirmed = asyncio.Event()
            count = 0

            def on_confirm(status) -> None:
                nonlocal count
                count += 1
                if count == len(keys):
                    confirmed.set()

            for k in keys:
                await producer.send(AMQPMessage(body=f"r-{k}".encode(), application_properties={"key": k}),
                                    on_publish_confirm=on_confirm)
            await asyncio.wait_for(confirmed.wait(), 30)

    asyncio.run(send())


def _keys_by_partition(spark, stomp_options, name: str, partitions: int, total: int, prefix: str) -> dict[int, set]:
    out = {}
    for i in range(partitions):
        rows = _read(spark, stomp_options, superStream=name, partitions=f"{name}-{i}").collect()
        out[i] = {r.body_text[len(prefix):] for r in rows if r.body_text.startswith(prefix)}
    assert sum(len(v) for v in out.values()) == total
    return out


def test_partition_key_hash_rstream_puts_keys_where_rstreams_super_stream_producer_does(
        spark, stomp_options, super_streams, unique, stomp_target, broker):
    name = super_streams.declare(f"spark-super-{unique}", 3)
    keys = [f"key-{i}" for i in range(60)]
    _rstream_send_by_key(broker, name, keys)
    rstreams = _keys_by_partition(spark, stomp_options, name, 3, 60, "r-")
    assert all(rstreams.values())
    df = spark.createDataFrame([(k, f"s-{k}") for k in keys], "partitionKey STRING, body STRING").repartition(2)
    df.write.format("stomp").options(**stomp_options, superStream=name, partitionKeyHash="rstream").mode("append").save()
    assert _keys_by_partition(spark, stomp_options, name, 3, 60, "s-") == rstreams
    # the default (the Java, Go and .NET clients' hash) does not agree with rstream's
    assert {i: {k for k in keys if partition_for_key(k, 3) == i} for i in range(3)} != rstreams


def test_a_misspelled_partition_in_starting_offsets_is_an_error_naming_the_known_ones(
        spark, stomp_options, super_streams, unique, publish):
    name = super_streams.declare(f"spark-super-{unique}", 2)
    _fill(publish, name, [1, 1])
    with pytest.raises(Exception) as info:
        _read(spark, stomp_options, superStream=name, startingOffsets=json.dumps({f"{name}_0": 0})).collect()
    assert (f"option startingOffsets names {name}_0, which is not a partition of {name}: "
            f"its partitions are {name}-0, {name}-1") in str(info.value)


def test_a_routing_key_write_counts_and_logs_the_rows_no_binding_takes(
        spark, stomp_target, broker, super_streams, unique, caplog):
    """The task's own write() (run here, in this process, where its log can be read): rows whose
    routingKey no binding takes are counted in the commit message and logged at WARNING."""
    import pyarrow as pa

    from stomp_bridge.spark.source import StompWriter

    name = super_streams.declare(f"spark-super-{unique}", 2)
    options = {"host": stomp_target.host, "port": str(stomp_target.port), "login": "guest", "passcode": "guest",
               "streamHost": broker.host, "streamPort": str(stream_port(broker)), "protocol": "stream",
               "superStream": name}
    keys = ["0", "1", "nowhere", "0", "elsewhere", "nowhere"]
    schema = spark.createDataFrame([], "routingKey STRING, body STRING").schema
    writer = StompWriter(options, schema)
    batch = pa.RecordBatch.from_pydict({"routingKey": keys, "body": [f"r{i}" for i in range(len(keys))]})
    with caplog.at_level("WARNING", logger="stomp_bridge.spark"):
        message = writer.write(iter([batch]))
    assert (message.messages, message.unroutable) == (3, 3)
    assert (f"superStream {name}: 3 row(s) had a routingKey no binding of the super stream takes; "
            "RabbitMQ would drop them, so they were not sent") in caplog.text
    got = {i: _read(spark, options, partitions=f"{name}-{i}").collect() for i in range(2)}
    assert sorted(r.body_text for r in got[0]) == ["r0", "r3"]
    assert [r.body_text for r in got[1]] == ["r1"]
