"""Stream queues over STOMP: declaration, offsets, x-stream-offset on MESSAGE."""

from __future__ import annotations

import time

import pytest
from testkit.brokers import plugin_words

STREAM_SUB = {"prefetch-count": "10"}


def _version(rabbit) -> tuple[int, ...]:
    return tuple(int(p) for p in rabbit.overview()["rabbitmq_version"].split(".")[:2])


def _make_stream(conn, name: str, count: int) -> None:
    conn.subscribe(f"/queue/{name}", sub_id="decl", ack="client",
                   headers={**STREAM_SUB, "x-queue-type": "stream"})
    conn.receipt("UNSUBSCRIBE", {"id": "decl"}, receipt_id="undecl")
    for i in range(count):
        conn.receipt("SEND", {"destination": f"/amq/queue/{name}"}, f"m{i}", receipt_id=f"s{i}")


def _read(conn, n: int) -> list:
    return [conn.expect("MESSAGE") for _ in range(n)]


def test_subscribe_with_stream_type_creates_stream(connected, rabbit, queues, unique):
    name = f"stream-{unique}"
    queues.append(name)
    conn = connected()
    conn.subscribe(f"/queue/{name}", ack="client", headers={**STREAM_SUB, "x-queue-type": "stream"})
    q = rabbit.queue(name)
    assert q["type"] == "stream"
    assert q["durable"] is True
    assert q["arguments"] == {"x-queue-type": "stream"}


def test_offset_first_reads_everything_with_offsets(connected, queues, unique):
    name = f"stream-{unique}"
    queues.append(name)
    conn = connected()
    _make_stream(conn, name, 3)
    reader = connected()
    reader.subscribe(f"/amq/queue/{name}", ack="client", headers={**STREAM_SUB, "x-stream-offset": "first"})
    msgs = _read(reader, 3)
    assert [m.body for m in msgs] == [b"m0", b"m1", b"m2"]
    assert [m["x-stream-offset"] for m in msgs] == ["0", "1", "2"]
    assert msgs[0]["destination"] == f"/queue/{name}"


def test_offset_n_starts_there(connected, queues, unique):
    name = f"stream-{unique}"
    queues.append(name)
    conn = connected()
    _make_stream(conn, name, 3)
    reader = connected()
    reader.subscribe(f"/amq/queue/{name}", ack="client", headers={**STREAM_SUB, "x-stream-offset": "offset=1"})
    msg = reader.expect("MESSAGE")
    assert (msg.body, msg["x-stream-offset"]) == (b"m1", "1")


def test_offset_next_only_sees_new_messages(connected, queues, unique):
    name = f"stream-{unique}"
    queues.append(name)
    conn = connected()
    _make_stream(conn, name, 2)
    reader = connected()
    reader.subscribe(f"/amq/queue/{name}", ack="client", headers={**STREAM_SUB, "x-stream-offset": "next"})
    reader.no_frame(0.3)
    conn.receipt("SEND", {"destination": f"/amq/queue/{name}"}, "new", receipt_id="new")
    msg = reader.expect("MESSAGE")
    assert (msg.body, msg["x-stream-offset"]) == (b"new", "2")


def test_offset_timestamp_in_the_past_reads_from_start(connected, queues, unique):
    name = f"stream-{unique}"
    queues.append(name)
    conn = connected()
    _make_stream(conn, name, 2)
    reader = connected()
    past = int(time.time()) - 3600
    reader.subscribe(f"/amq/queue/{name}", ack="client",
                     headers={**STREAM_SUB, "x-stream-offset": f"timestamp={past}"})
    assert [m.body for m in _read(reader, 2)] == [b"m0", b"m1"]


def test_stream_needs_prefetch_count(connected, broker, queues, unique):
    name = f"stream-{unique}"
    queues.append(name)
    conn = connected()
    _make_stream(conn, name, 1)
    reader = connected()
    reader.send_frame("SUBSCRIBE", {"destination": f"/amq/queue/{name}", "id": "x", "ack": "auto",
                                    "x-stream-offset": "first"})
    error = reader.error_then_close()
    assert error["message"] == "precondition_failed"
    if broker.version_tuple >= (4, 0):
        assert error.text == plugin_words(f"PRECONDITION_FAILED - consumer prefetch count is not set for "
                              f"stream queue '{name}' in vhost '/'")
    else:
        assert error.text == plugin_words(f"PRECONDITION_FAILED - consumer prefetch count is not set for "
                              f"'queue '{name}' in vhost '/''")


def test_stream_filter_headers_go_to_rabbitmq_which_decides(connected, broker, queues, unique):
    """The plugin passes x-stream-filter on whatever the queue: RabbitMQ 4.x refuses it on a
    classic queue, 3.10 ignores it. The bridge used to refuse it itself below 3.13."""
    name = f"sf-{unique}"
    queues.append(name)
    conn = connected()
    conn.send_frame("SUBSCRIBE", {"destination": f"/queue/{name}", "id": "f", "x-stream-filter": "red",
                                  "receipt": "r"})
    if broker.version_tuple >= (3, 13):
        error = conn.error_then_close()
        assert error["message"] == "precondition_failed"
        assert error.text == plugin_words(f"PRECONDITION_FAILED - invalid arg 'x-stream-filter' for queue '{name}' in "
                              "vhost '/' of queue type rabbit_classic_queue")
    else:
        assert conn.expect("RECEIPT")["receipt-id"] == "r"


def test_stream_filtering(connected, rabbit, queues, unique):
    if _version(rabbit) < (3, 13):
        pytest.skip(f"stream filtering needs RabbitMQ 3.13+, broker is {rabbit.overview()['rabbitmq_version']}")
    name = f"stream-{unique}"
    queues.append(name)
    conn = connected()
    conn.subscribe(f"/queue/{name}", sub_id="decl", ack="client",
                   headers={**STREAM_SUB, "x-queue-type": "stream", "x-stream-filter-size-bytes": "32"})
    for i, colour in enumerate(["red", "blue", "red"]):
        conn.receipt("SEND", {"destination": f"/amq/queue/{name}", "x-stream-filter-value": colour},
                     f"{colour}{i}", receipt_id=f"f{i}")
    reader = connected()
    reader.subscribe(f"/amq/queue/{name}", ack="client",
                     headers={**STREAM_SUB, "x-stream-offset": "first", "x-stream-filter": "red"})
    bodies = []
    while len([b for b in bodies if b.startswith(b"red")]) < 2:
        bodies.append(reader.expect("MESSAGE").body)
    assert [b for b in bodies if b.startswith(b"red")] == [b"red0", b"red2"]
