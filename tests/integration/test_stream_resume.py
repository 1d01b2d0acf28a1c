"""Named stream subscriptions (x-stream-consumer-name, or an Artemis durable subscription name on
a stream): the settled offset is kept in RabbitMQ, and a SUBSCRIBE with the same name, on any
bridge, starts right after it."""

from __future__ import annotations

import os

import pytest

from stomp_bridge.protocol import resume

pytestmark = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native",
    reason="named stream subscriptions are the bridge's: the plugin ignores x-stream-consumer-name",
)


@pytest.fixture
def stream(connected, queues, rabbit, unique):
    """A stream with m0 … m4 (offsets 0 … 4); its offset queues go at teardown."""
    name = f"resume-{unique}"
    queues.append(name)
    conn = connected()
    conn.subscribe(f"/queue/{name}", sub_id="decl", ack="client",
                   headers={"prefetch-count": "10", "x-queue-type": "stream"})
    conn.receipt("UNSUBSCRIBE", {"id": "decl"}, receipt_id="undecl")
    for i in range(5):
        conn.receipt("SEND", {"destination": f"/amq/queue/{name}"}, f"m{i}", receipt_id=f"s{i}")
    yield name
    for queue in rabbit.queues():
        if queue["name"].startswith(resume.OFFSET_QUEUE_PREFIX):
            if queue["name"] in {resume.offset_queue(name, n) for n in ("reader", "cid.durable")}:
                rabbit.delete_queue(queue["name"])


def named(conn, stream: str, ack: str = "client-individual", name: str = "reader", **headers: str) -> None:
    conn.subscribe(f"/amq/queue/{stream}", sub_id="r", ack=ack,
                   headers={resume.NAME_HEADER: name, "x-stream-offset": "first", "prefetch-count": "10", **headers})


def stored(rabbit, queue: str) -> str | None:
    """The offset an offset queue holds, read and left in place."""
    got = rabbit.request("POST", f"/queues/%2F/{rabbit.q(queue)}/get",
                         {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"})
    return got[0]["payload"] if got else None


def read(conn, n: int) -> list:
    return [conn.expect("MESSAGE") for _ in range(n)]


def test_a_named_subscription_starts_after_the_last_acked_offset_after_a_crash(connected, stream):
    """Delivered m0 … m4, acknowledged m0 … m2 (with a RECEIPT), then the connection drops
    (no DISCONNECT): m3 and m4, delivered and never acknowledged, come again."""
    first = connected()
    named(first, stream)
    msgs = read(first, 5)
    assert [m.body for m in msgs] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    for i in range(3):
        first.receipt("ACK", {"id": msgs[i]["ack"]}, receipt_id=f"a{i}")
    first.close()
    again = connected()
    named(again, stream)
    msg = again.expect("MESSAGE")
    assert (msg.body, msg["x-stream-offset"]) == (b"m3", "3")


def test_an_unacked_gap_is_delivered_again_with_everything_after_it(connected, stream):
    """client-individual: m0, m2 and m3 acknowledged, m1 not: the resume starts at m1, and
    m2 and m3 come again too (the stored offset is the one below the first unsettled)."""
    first = connected()
    named(first, stream)
    msgs = read(first, 5)
    for i in (0, 2, 3):
        first.receipt("ACK", {"id": msgs[i]["ack"]}, receipt_id=f"a{i}")
    first.close()
    again = connected()
    named(again, stream, **{"x-stream-offset": "next"})  # a stored offset wins over the SUBSCRIBE's
    assert [m.body for m in read(again, 4)] == [b"m1", b"m2", b"m3", b"m4"]


def test_a_cumulative_ack_moves_the_offset_to_it(connected, stream):
    first = connected()
    named(first, stream, ack="client")
    msgs = read(first, 5)
    first.receipt("ACK", {"id": msgs[3]["ack"]}, receipt_id="a")
    first.close()
    again = connected()
    named(again, stream, ack="client")
    assert again.expect("MESSAGE").body == b"m4"


def test_it_resumes_on_another_bridge_after_the_first_one_stopped(bridge, dial, stream):
    one, two = bridge(), bridge()
    first = dial(one)
    first.connect()
    named(first, stream)
    msgs = read(first, 3)
    first.receipt("ACK", {"id": msgs[1]["ack"]}, receipt_id="a1")
    first.receipt("ACK", {"id": msgs[0]["ack"]}, receipt_id="a0")
    one.stop()
    again = dial(two)
    again.connect()
    named(again, stream)
    assert again.expect("MESSAGE").body == b"m2"


def test_ack_auto_stores_what_was_delivered_by_disconnect(connected, stream):
    first = connected()
    named(first, stream, ack="auto")
    read(first, 5)
    first.receipt("DISCONNECT", {}, receipt_id="bye")
    writer = connected()
    writer.receipt("SEND", {"destination": f"/amq/queue/{stream}"}, "m5", receipt_id="m5")
    again = connected()
    named(again, stream, ack="auto")
    assert again.expect("MESSAGE").body == b"m5"


def test_ack_auto_stores_the_offset_within_a_second_without_a_disconnect(connected, rabbit, stream):
    first = connected()
    named(first, stream, ack="auto")
    read(first, 5)
    queue = resume.offset_queue(stream, "reader")
    found = None
    for _ in range(40):  # the store is due one second after the first delivery
        found = stored(rabbit, queue)
        if found == "4":
            break
        first.no_frame(0.25)
    assert found == "4"


def test_unsubscribe_naming_the_subscription_forgets_its_offset(connected, rabbit, stream):
    first = connected()
    named(first, stream, ack="client")
    msgs = read(first, 5)
    first.receipt("ACK", {"id": msgs[4]["ack"]}, receipt_id="a")
    assert stored(rabbit, resume.offset_queue(stream, "reader")) == "4"
    first.receipt("UNSUBSCRIBE", {"id": "r", resume.NAME_HEADER: "reader"}, receipt_id="u")
    assert rabbit.queue(resume.offset_queue(stream, "reader")) is None
    again = connected()
    named(again, stream)
    assert again.expect("MESSAGE").body == b"m0"  # from the SUBSCRIBE's own x-stream-offset


def test_an_artemis_durable_subscription_name_on_a_stream_is_a_named_subscription(connected, stream):
    """Without prefetch-count too: a named subscription reads a stream, which needs one."""
    first = connected(extra={"client-id": "cid"})
    first.subscribe(f"/amq/queue/{stream}", sub_id="d", ack="client",
                    headers={"durable-subscription-name": "durable", "x-stream-offset": "first"})
    msgs = read(first, 2)
    first.receipt("ACK", {"id": msgs[1]["ack"]}, receipt_id="a")
    first.close()
    again = connected(extra={"client-id": "cid"})
    again.subscribe(f"/amq/queue/{stream}", sub_id="d", ack="client",
                    headers={"durable-subscription-name": "durable"})
    assert again.expect("MESSAGE").body == b"m2"


def test_a_name_on_a_topic_is_an_error_that_keeps_the_connection(connected):
    conn = connected()
    conn.send_frame("SUBSCRIBE", {"destination": "/topic/t", "id": "x", resume.NAME_HEADER: "n", "receipt": "r"})
    error = conn.error_then_usable()
    assert error["message"] == "Invalid header" and error["receipt-id"] == "r"
    assert "reads one stream" in error.text
