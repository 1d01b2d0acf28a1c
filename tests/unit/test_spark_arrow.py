"""Arrow batches and AMQP 1.0 messages of the Spark connector's fast paths, without Spark's JVM."""

from __future__ import annotations

import asyncio
import json

import pytest

pa = pytest.importorskip("pyarrow")  # the [spark] extra
from pyspark.sql.types import (  # noqa: E402
    BinaryType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from stomp_bridge.spark.amqp10 import DURABLE, chunk_bodies, decode, encode  # noqa: E402
from stomp_bridge.spark.arrow import BatchMaker, Columns  # noqa: E402
from stomp_bridge.spark.partitions import partition_for_key  # noqa: E402

RAW = [StructField("body", BinaryType()), StructField("body_text", StringType()),
       StructField("destination", StringType()), StructField("headers", MapType(StringType(), StringType())),
       StructField("message_id", StringType()), StructField("stream_offset", LongType()),
       StructField("timestamp", TimestampType())]
JSON = StructType([StructField("key", StringType()), StructField("value", DoubleType()), StructField("n", LongType())])


def _columns(bodies: list[bytes]) -> Columns:
    c = Columns()
    c.id_prefix = "s@"
    for i, b in enumerate(bodies):
        c.add(b, "/amq/queue/s", None if i % 2 else {"k": str(i)}, None, i, 1_700_000_000_000 if i == 0 else None)
    return c


def test_a_batch_has_the_raw_columns_in_sparks_arrow_types():
    maker = BatchMaker(StructType(RAW), None, False)
    batch = maker.batch(_columns([b"a", b"\xff", b"c"]))
    assert batch.schema == maker.schema
    rows = batch.to_pylist()
    assert [r["body"] for r in rows] == [b"a", b"\xff", b"c"]
    assert [r["body_text"] for r in rows] == ["a", None, "c"]  # not UTF-8: null
    assert [r["message_id"] for r in rows] == ["s@0", "s@1", "s@2"]
    assert rows[0]["headers"] == [("k", "0")] and rows[1]["headers"] == []
    assert int(rows[0]["timestamp"].timestamp()) == 1_700_000_000 and rows[1]["timestamp"] is None


def test_json_columns_by_pyarrow_mean_what_the_body_by_body_parser_gives():
    maker = BatchMaker(StructType(JSON.fields + RAW), JSON, False)
    good = [json.dumps({"key": f"k{i}", "value": i / 2, "n": i}).encode() for i in range(5)]
    good[2] = b'{"key": "k2",\n "value": 1, "n": 2}'  # a raw newline: whitespace
    fast = maker.batch(_columns(good)).to_pylist()
    assert [(r["key"], r["value"], r["n"]) for r in fast] == [
        ("k0", 0.0, 0), ("k1", 0.5, 1), ("k2", 1.0, 2), ("k3", 1.5, 3), ("k4", 2.0, 4)]
    mixed = maker.batch(_columns(good[:2] + [b"not json", b""])).to_pylist()  # body by body
    assert [(r["key"], r["n"]) for r in mixed] == [("k0", 0), ("k1", 1), (None, None), (None, None)]


def test_amqp10_messages_round_trip_and_plain_chunks_are_sliced_whole():
    message = encode(b"hello", {"colour": "red"}, "text/plain")
    body, headers, message_id, created, destination = decode(message)
    assert body == b"hello"
    assert headers == {"persistent": "true", "content-type": "text/plain", "colour": "red"}
    assert (message_id, created, destination) == (None, None, None)
    plain = [b"\x00\x53\x75\xa0" + bytes((len(b),)) + b for b in (b"one", b"two", b"three")]
    plain[1] = DURABLE + plain[1]
    data = b"".join(len(m).to_bytes(4, "big") + m for m in plain)
    assert chunk_bodies(data, 3, 0, 3) == [b"one", b"two", b"three"]
    assert chunk_bodies(data, 3, 1, 2) == [b"two"]
    other = data + len(message).to_bytes(4, "big") + message
    assert chunk_bodies(other, 4, 0, 4) is None  # properties: decoded one by one instead


def test_rstream_decodes_what_the_writer_encodes():
    from rstream import amqp_decoder

    m = amqp_decoder(encode(b"body", {"k": "v"}, "application/json"))
    assert m.body == b"body"
    assert m.application_properties == {b"k": b"v"} or m.application_properties == {"k": "v"}


def test_the_rstream_key_hash_is_rstreams_own():
    from rstream.superstream import HashRoutingMurmurStrategy

    class Metadata:
        async def partitions(self):
            return ["p-0", "p-1", "p-2"]

    async def key_of(message):
        return message

    strategy = HashRoutingMurmurStrategy(key_of)
    keys = [f"key-{i}" for i in range(200)] + ["clé", ""]
    theirs = {k: asyncio.run(strategy.route(k, Metadata()))[0] for k in keys}
    assert {k: f"p-{partition_for_key(k, 3, 'rstream')}" for k in keys} == theirs
    assert any(partition_for_key(k, 3) != partition_for_key(k, 3, "rstream") for k in keys)


def test_rstream_still_keeps_the_negotiated_frame_max_where_the_writer_reads_it():
    """``StreamSession.frame_max`` reads rstream's private ``Client._frame_max`` (the write's
    batch limit): a newer rstream without it must fail here, not write batches RabbitMQ refuses."""
    import inspect

    import rstream.client as client  # the [spark] extra, which scripts/ensure-venv installs

    assert "self._frame_max" in inspect.getsource(client.Client), "rstream no longer sets Client._frame_max"
