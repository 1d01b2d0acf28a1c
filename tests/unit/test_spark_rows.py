"""The Spark connector's pure parts: STOMP framing of its client, MESSAGE -> row, JSON -> columns."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest
from pyspark.sql.types import (
    ArrayType, BooleanType, DateType, DecimalType, DoubleType, LongType, MapType, StringType, StructField,
    StructType, TimestampType,
)

from stomp_bridge.spark.client import Frame, describe, encode_frame, parse_frame
from stomp_bridge.spark.rows import (
    JsonFieldError, body_bytes, json_parser, raw_values, row_to_json, send_headers,
)
from stomp_bridge.spark.source import split_range


def test_encode_escapes_headers_except_on_connect():
    assert encode_frame("SEND", {"destination": "/queue/a", "k": "x:y\nz"}, b"hi") == (
        b"SEND\ndestination:/queue/a\nk:x\\cy\\nz\ncontent-length:2\n\nhi\0")
    assert encode_frame("CONNECT", {"passcode": "a:b"}) == b"CONNECT\npasscode:a:b\n\n\0"


def test_parse_frames_one_at_a_time_skipping_heartbeats():
    buffer = bytearray(b"\n\nMESSAGE\nk:a\\cb\nk:second\ncontent-length:3\n\na\0b\0RECEIPT\nreceipt-id:1\n\n\0RECE")
    first = parse_frame(buffer)
    assert (first.command, first.headers["k"], first.body) == ("MESSAGE", "a:b", b"a\0b")
    assert parse_frame(buffer).headers == {"receipt-id": "1"}
    assert parse_frame(buffer) is None
    assert buffer == bytearray(b"RECE")


def test_parse_waits_for_the_whole_body():
    buffer = bytearray(b"MESSAGE\ncontent-length:5\n\nab")
    assert parse_frame(buffer) is None
    buffer += b"cde\0"
    assert parse_frame(buffer).body == b"abcde"


def test_describe_quotes_the_brokers_reason():
    error = Frame("ERROR", {"message": "not_found"}, b"NOT_FOUND - no exchange 'x' in vhost '/'")
    assert describe(error) == "not_found: NOT_FOUND - no exchange 'x' in vhost '/'"


def test_raw_values_of_a_stream_message():
    frame = Frame("MESSAGE", {"subscription": "spark", "destination": "/queue/s", "message-id": "m@@1",
                              "redelivered": "false", "ack": "m@@1", "x-stream-offset": "7",
                              "timestamp": "1700000000", "colour": "red"}, b"\xffbody")
    body, text, destination, headers, message_id, offset, timestamp = raw_values(frame)
    assert (body, text, destination, message_id, offset) == (b"\xffbody", None, "/queue/s", "m@@1", 7)
    assert headers == {"timestamp": "1700000000", "colour": "red"}
    assert timestamp == datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)


SCHEMA = StructType([
    StructField("key", StringType()),
    StructField("value", DoubleType()),
    StructField("n", LongType()),
    StructField("ok", BooleanType()),
    StructField("at", TimestampType()),
    StructField("day", DateType()),
    StructField("price", DecimalType(10, 2)),
    StructField("tags", ArrayType(StringType())),
    StructField("attrs", MapType(StringType(), LongType())),
    StructField("inner", StructType([StructField("x", LongType())])),
])


def test_json_body_to_typed_values():
    body = json.dumps({"key": "a", "value": 1, "n": 2.0, "ok": True, "at": "2026-01-01T00:00:00Z",
                       "day": "2026-01-02", "price": "1.25", "tags": ["x", None], "attrs": {"a": 1},
                       "inner": {"x": 5}, "extra": "ignored"}).encode()
    assert json_parser(SCHEMA, fail_fast=True)(body) == (
        "a", 1.0, 2, True, datetime(2026, 1, 1, tzinfo=timezone.utc), date(2026, 1, 2), Decimal("1.25"),
        ["x", None], {"a": 1}, (5,))


@pytest.mark.parametrize("body", [b"not json", b'{"n": 1.5}', b'{"ok": "yes"}', b"[1]", b'{"inner": 3}'])
def test_json_that_does_not_fit_is_null_or_fails_fast(body):
    assert json_parser(SCHEMA, fail_fast=False)(body) == (None,) * 10
    with pytest.raises(JsonFieldError, match="body is not JSON matching the schema"):
        json_parser(SCHEMA, fail_fast=True)(body)


def test_rows_to_send_frames():
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert row_to_json({"k": "a", "at": at, "day": at.date(), "d": Decimal("1.5"), "b": b"\x00"}) == (
        b'{"k":"a","at":"2026-01-01T00:00:00+00:00","day":"2026-01-01","d":1.5,"b":"AA=="}')
    naive = datetime(2026, 1, 1, 12)
    assert json.loads(row_to_json({"at": naive}))["at"] == naive.astimezone(timezone.utc).isoformat()
    assert send_headers({"a": "1", "receipt": "x", "destination": "/q", "n": None}, True, "text/plain") == {
        "a": "1", "persistent": "true", "content-type": "text/plain"}
    assert send_headers(None, False, None) == {}
    assert (body_bytes("é"), body_bytes(bytearray(b"x")), body_bytes(None)) == ("é".encode(), b"x", b"")


@pytest.mark.parametrize(
    ("lo", "hi", "parts", "ranges"),
    [(0, 10, 3, [(0, 4), (4, 7), (7, 10)]), (5, 7, 4, [(5, 6), (6, 7)]), (3, 3, 2, []), (0, 1, 1, [(0, 1)])],
)
def test_split_range(lo, hi, parts, ranges):
    assert [p.value for p in split_range(lo, hi, parts)] == ranges
