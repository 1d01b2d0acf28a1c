"""What a stream refuses with a connection error is decided in the core (issue 39).

RabbitMQ closes the whole AMQP connection for an auto-ack consume with a prefetch on a stream
and (before 4.0) for a NACK of a stream's delivery; the bridge shares that connection between
sessions. So the core gives the plugin's ERRORs without sending either (core/streams.py); the
harness stands in for RabbitMQ (``Harness.streams``: what IsStream finds).
"""

from __future__ import annotations

from stomp_bridge.core import plans as p
from stomp_bridge.core.state import CLOSED, OPEN
from stomp_bridge.protocol.refusals import channel_died_body
from testkit.core import Harness

OLD = (3, 10, 8)


def connected(broker: tuple[int, ...] = (4, 3, 6), **rules: object) -> Harness:
    h = Harness(broker=broker, **rules)
    h.connect()
    return h


def errors(h: Harness) -> list[tuple[str, str, str | None]]:
    return [(f.headers["message"], f.body.decode(), f.headers.get("receipt-id")) for f in h.frames()
            if f.command == "ERROR"]


# -- ack:auto with a prefetch ------------------------------------------------------------------


def test_auto_ack_with_a_prefetch_on_a_stream_gets_the_plugins_two_errors_and_nothing_is_consumed():
    h = connected()
    h.streams.add("s")
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/s", "id": "a", "prefetch-count": "10", "receipt": "r"})
    text = "automatic acknowledgement not supported by stream queue 's' in vhost '/'"
    assert errors(h) == [("Processing error", "Processing error", None),
                         ("AMQP channel died", channel_died_body(540, text), None)]
    assert h.core.state is CLOSED and h.of(p.Consume) == [] and h.of(p.IsStream) == [p.IsStream("s")]


def test_the_texts_are_those_of_the_broker_behind():
    h = connected(OLD)
    h.streams.add("s")
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/s", "id": "a", "activemq.prefetchSize": "5"})
    text = "automatic acknowledgement not supported by stream queues queue 's' in vhost '/'"
    assert errors(h)[1] == ("AMQP channel died", channel_died_body(540, text), None)


def test_auto_ack_with_a_prefetch_on_a_queue_that_is_no_stream_consumes():
    h = connected()
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/q", "id": "a", "prefetch-count": "10",
                          "x-stream-offset": "first", "receipt": "r"})
    assert h.commands() == ["RECEIPT"] and [c.queue for c in h.of(p.Consume)] == ["q"]


def test_a_stream_this_session_declares_is_refused_without_asking():
    h = connected()
    h.frame("SUBSCRIBE", {"destination": "/queue/s", "id": "a", "prefetch-count": "10", "x-queue-type": "stream"})
    assert [e[0] for e in errors(h)] == ["Processing error", "AMQP channel died"]
    assert h.of(p.IsStream) == [] and h.of(p.Consume) == [] and [d.declare.queue for d in h.of(p.Declare)] == ["s"]


def test_auto_ack_without_a_prefetch_asks_nothing():
    """The bridge acknowledges an ack:auto consume itself (as a stream accepts): nothing to refuse."""
    h = connected()
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/s", "id": "a", "receipt": "r"})
    assert h.commands() == ["RECEIPT"] and h.of(p.IsStream) == []


def test_client_acks_and_named_stream_subscriptions_are_never_refused():
    h = connected()
    h.streams.add("s")
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/s", "id": "a", "ack": "client", "prefetch-count": "10"})
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/s", "id": "b", "prefetch-count": "10",
                          "x-stream-consumer-name": "n", "receipt": "r"})
    assert h.commands() == ["RECEIPT"] and h.of(p.IsStream) == [] and len(h.of(p.Consume)) == 2


# -- NACK before 4.0 ---------------------------------------------------------------------------


def stream_delivery(h: Harness, tag: str, delivery_tag: int, offset: object = 7) -> str:
    h.deliver(tag, delivery_tag, headers={"x-stream-offset": offset})
    [message] = h.frames()
    return message.headers["ack"]


def test_a_nack_of_a_streams_delivery_gets_its_receipt_then_the_plugins_error_and_is_never_sent():
    h = connected(OLD)
    h.streams.add("s")
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/s", "id": "a", "ack": "client", "prefetch-count": "10"})
    ack = stream_delivery(h, "T_a", 1)
    h.frame("NACK", {"id": ack, "receipt": "n"})
    frames = h.frames()
    text = "basic.nack and basic.reject not supported by stream queues queue 's' in vhost '/'"
    assert [(f.command, f.headers.get("receipt-id"), f.body.decode()) for f in frames] == [
        ("RECEIPT", "n", ""), ("ERROR", None, channel_died_body(540, text))]
    assert h.of(p.Nack) == [] and h.of(p.IsStream) == [p.IsStream("s", exact=True)] and h.core.state is CLOSED


def test_a_nack_of_a_queue_that_only_carries_a_streams_offsets_is_sent():
    h = connected(OLD)
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/q", "id": "a", "ack": "client-individual"})
    ack = stream_delivery(h, "T_a", 1)
    h.frame("NACK", {"id": ack})
    assert h.of(p.IsStream) == [p.IsStream("q", exact=True)] and h.of(p.Nack) == [p.Nack(1, False, True)]
    assert h.core.state is OPEN


def test_a_delivery_without_an_offset_is_no_streams_and_its_nack_asks_nothing():
    h = connected(OLD)
    h.streams.add("q")
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/q", "id": "a", "ack": "client"})
    h.deliver("T_a", 1)
    [message] = h.frames()
    h.frame("NACK", {"id": message.headers["ack"]})
    assert h.of(p.IsStream) == [] and h.of(p.Nack) == [p.Nack(1, True, True)]


def test_a_publishers_own_offset_header_does_not_hide_a_streams_delivery():
    """A message published with its own x-stream-offset (a string) comes from a stream with two;
    the one decoded may be the publisher's (found by the isolation fuzzer): any such header asks."""
    h = connected(OLD)
    h.streams.add("s")
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/s", "id": "a", "ack": "client-individual", "prefetch-count": "9"})
    ack = stream_delivery(h, "T_a", 1, offset="bogus")
    h.frame("NACK", {"id": ack})
    assert [e[0] for e in errors(h)] == ["AMQP channel died"] and h.of(p.Nack) == []


def test_a_declared_stream_is_known_and_a_cumulative_nack_covering_its_delivery_is_refused():
    h = connected(OLD)
    h.frame("SUBSCRIBE", {"destination": "/queue/s", "id": "s", "ack": "client-individual",
                          "prefetch-count": "5", "x-queue-type": "stream"})
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "q", "ack": "client"})
    stream_delivery(h, "T_s", 1)
    h.deliver("T_q", 2)
    [message] = h.frames()
    h.frame("NACK", {"id": message.headers["ack"]})  # ack:client: settles delivery 1 too
    assert [e[0] for e in errors(h)] == ["AMQP channel died"] and h.of(p.Nack) == [] and h.of(p.IsStream) == []


def test_a_nack_in_a_transaction_is_refused_at_commit():
    h = connected(OLD)
    h.streams.add("s")
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/s", "id": "a", "ack": "client", "prefetch-count": "10"})
    ack = stream_delivery(h, "T_a", 1)
    h.frame("BEGIN", {"transaction": "t"})
    h.frame("NACK", {"id": ack, "transaction": "t"})
    h.frame("COMMIT", {"transaction": "t", "receipt": "c"})
    assert [e[0] for e in errors(h)] == ["AMQP channel died"] and h.of(p.Nack) == []


def test_from_4_0_a_stream_takes_the_nack():
    h = connected((4, 0, 5))
    h.streams.add("s")
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/s", "id": "a", "ack": "client", "prefetch-count": "10"})
    ack = stream_delivery(h, "T_a", 1)
    h.frame("NACK", {"id": ack})
    assert h.of(p.Nack) == [p.Nack(1, True, True)] and h.of(p.IsStream) == []


def test_acks_forget_the_marks_they_settle():
    h = connected(OLD)
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/q", "id": "a", "ack": "client"})
    ack = stream_delivery(h, "T_a", 1)
    h.frame("ACK", {"id": ack})
    assert not h.core.unacked.marked
