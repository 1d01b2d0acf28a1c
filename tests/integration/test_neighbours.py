"""No client's frame may end another's session (issue 39), against the plugin's own answers.

Behind the bridge, sessions of one login share AMQP connections, and RabbitMQ answers some
mistakes with a connection error, which would end every session on the connection. Each test
here makes one such mistake from an "attacker" session of guest while neighbour sessions of
guest share its AMQP connection (a bridge with ``amqp_min_connections_per_login=1``; under the
plugin each has a connection of its own), checks the attacker's ERRORs against the plugin's
(the same expectations on both targets), and that every neighbour still receives.
"""

from __future__ import annotations

import os

import pytest

from stomp_bridge.protocol import refusals
from stomp_bridge.protocol.dialect import Dialect
from stomp_bridge.protocol.resume import offset_queue
from stomp_bridge.protocol import features
from tests.integration.rawstomp import RawStomp
from testkit.brokers import plugin_words

NATIVE = os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native"
NEIGHBOURS = 3
bridge_only = pytest.mark.skipif(NATIVE, reason="the bridge's own queues and consumer tags")


@pytest.fixture
def shared(stomp_target, bridge):
    """The port to attack: the native plugin's, or a bridge's that puts every session of a login
    on one AMQP connection."""
    if stomp_target.native:
        return stomp_target.port
    return bridge(amqp_min_connections_per_login=1).port


@pytest.fixture
def neighbours(shared, dial, unique):
    """Neighbour sessions of guest, subscribed to a topic; ``check()`` fails unless every one
    still receives a message sent after the attack."""
    topic = f"/topic/neighbours-{unique}"
    conns = []
    for n in range(NEIGHBOURS):
        conn = dial(shared)
        conn.connect()
        conn.subscribe(topic, sub_id=f"n{n}")
        conns.append(conn)

    def check() -> None:
        sender = dial(shared)
        sender.connect()
        sender.receipt("SEND", {"destination": topic}, b"still here")
        for conn in conns:
            assert conn.expect("MESSAGE", timeout=10).body == b"still here", "a neighbour lost its session"

    return check


@pytest.fixture
def stream(shared, dial, queues, unique):
    """A stream holding five messages, made through the target itself."""
    name = f"nb-stream-{unique}"
    queues.append(name)
    maker = dial(shared)
    maker.connect()
    maker.subscribe(f"/queue/{name}", sub_id="make", ack="client",
                    headers={"x-queue-type": "stream", "prefetch-count": "10"})
    maker.receipt("UNSUBSCRIBE", {"id": "make"})
    for n in range(5):
        maker.receipt("SEND", {"destination": f"/amq/queue/{name}", "persistent": "true"}, f"m{n}",
                      receipt_id=f"s{n}")
    maker.close()
    return name


@pytest.fixture
def dialect(broker) -> Dialect:
    return Dialect(broker.version_tuple)


def error_frames(conn: RawStomp) -> list[tuple[str, str]]:
    """The ERRORs up to the end of the connection (message, body)."""
    return [(f["message"], f.text) for f in conn.read_until_closed(timeout=15) if f.command == "ERROR"]


# -- group 1: NACK of a stream's delivery ------------------------------------------------------


@pytest.mark.parametrize("destination", ["/amq/queue/{s}", "/queue/{s}"])
@pytest.mark.parametrize("ack", ["client", "client-individual"])
@pytest.mark.parametrize("how", ["plain", "requeue-false", "transaction", "named"])
def test_a_nack_of_a_streams_delivery(shared, dial, neighbours, stream, dialect, destination, ack, how):
    attacker = dial(shared)
    attacker.connect()
    headers = {"x-stream-offset": "first", "prefetch-count": "10"}
    if destination.startswith("/queue/"):
        headers["x-queue-type"] = "stream"
    if how == "named":
        headers["x-stream-consumer-name"] = "nb-reader"
    attacker.subscribe(destination.format(s=stream), sub_id="a", ack=ack, headers=headers)
    message = attacker.expect("MESSAGE")
    nack = {"id": message["ack"], "receipt": "n"}
    if how == "requeue-false":
        nack["requeue"] = "false"
    if how == "transaction":
        attacker.send_frame("BEGIN", {"transaction": "t"})
        attacker.send_frame("NACK", {**nack, "transaction": "t"})
        attacker.send_frame("COMMIT", {"transaction": "t"})
    else:
        attacker.send_frame("NACK", nack)
    attacker.wait_receipt("n")
    if dialect.stream_nack_refused:  # 3.x: RabbitMQ closes the connection the NACK came on
        expected = refusals.stream_nack(dialect, stream, "/")
        assert error_frames(attacker) == [(expected.message, expected.detail)]
    else:  # 4.0 and later take it
        attacker.receipt("SEND", {"destination": "/topic/nb-after"}, b"x", receipt_id="after")
    neighbours()


# -- group 2: ack:auto with a prefetch on a stream ----------------------------------------------


@pytest.mark.parametrize("headers", [
    {"prefetch-count": "10"}, {"activemq.prefetchSize": "10"},
    {"prefetch-count": "10", "x-stream-offset": "first"}, {"prefetch-count": "10", "from-seq": "0"},
], ids=["prefetch-count", "activemq.prefetchSize", "x-stream-offset", "from-seq"])
def test_ack_auto_with_a_prefetch_on_a_stream(shared, dial, neighbours, stream, dialect, headers):
    attacker = dial(shared)
    attacker.connect()
    attacker.send_frame("SUBSCRIBE", {"destination": f"/amq/queue/{stream}", "id": "a", "ack": "auto",
                                      "receipt": "r", **headers})
    if NATIVE and "activemq.prefetchSize" in headers:  # the plugin knows no ActiveMQ header: no prefetch
        expected_alone = refusals.stream_without_prefetch(dialect, stream, "/")
        assert error_frames(attacker) == [(expected_alone.message, plugin_words(expected_alone.detail))]
        neighbours()
        return
    expected = refusals.stream_auto_ack(dialect, stream, "/")
    assert expected.preceded_by is not None
    assert error_frames(attacker) == [
        (expected.preceded_by.message, expected.preceded_by.detail), (expected.message, expected.detail)]
    neighbours()


@pytest.mark.parametrize("headers", [{"x-stream-offset": "first"}, {"from-seq": "0"}])
def test_ack_auto_without_a_prefetch_but_with_a_stream_offset(shared, dial, neighbours, stream, dialect, headers):
    attacker = dial(shared)
    attacker.connect()
    attacker.send_frame("SUBSCRIBE", {"destination": f"/amq/queue/{stream}", "id": "a", "ack": "auto", **headers})
    expected = refusals.stream_without_prefetch(dialect, stream, "/")
    assert error_frames(attacker) == [(expected.message, plugin_words(expected.detail))]
    neighbours()


# -- group 3: browsing a stream -----------------------------------------------------------------


@pytest.mark.parametrize("destination", ["/amq/queue/{s}", "/queue/{s}"])
def test_browsing_a_stream(shared, dial, neighbours, stream, dialect, destination):
    attacker = dial(shared)
    attacker.connect()
    headers = {"destination": destination.format(s=stream), "id": "a", "browser": "true"}
    if destination.startswith("/queue/"):
        headers["x-queue-type"] = "stream"
    attacker.send_frame("SUBSCRIBE", headers)
    expected = refusals.stream_without_prefetch(dialect, stream, "/")
    assert error_frames(attacker) == [(expected.message, plugin_words(expected.detail))]
    neighbours()


# -- groups 4 and 5: consumer tags ----------------------------------------------------------------


def test_an_id_like_a_composite_parts_tag(shared, dial, neighbours, queues, unique):
    q1, q2 = f"nb-q1-{unique}", f"nb-q2-{unique}"
    queues.extend([q1, q2])
    attacker = dial(shared)
    attacker.connect()
    attacker.subscribe(f"/queue/{q1}", sub_id="a@@part1")
    attacker.send_frame("SUBSCRIBE", {"destination": f"/queue/{q1},/queue/{q2}", "id": "a", "receipt": "r"})
    if NATIVE:  # the plugin knows no composite destinations
        assert attacker.expect("ERROR")["message"] == "Invalid destination"
    else:  # Apollo's composite destination: a subscription to both
        attacker.wait_receipt("r")
        attacker.receipt("SEND", {"destination": f"/queue/{q2}"}, b"to q2", receipt_id="s")
        assert attacker.expect("MESSAGE").body == b"to q2"
    neighbours()


def test_an_id_like_a_windows_tag(shared, dial, neighbours, queues, unique):
    """Past 500 unacknowledged deliveries the bridge adds a consumer (a window) to a client-ack
    subscription with no prefetch: its tag must not be one a client id makes."""
    q1, q2 = f"nb-w1-{unique}", f"nb-w2-{unique}"
    queues.extend([q1, q2])
    attacker = dial(shared)
    attacker.connect()
    for _ in range(600):
        attacker.send_frame("SEND", {"destination": f"/queue/{q1}"}, b"x")
    attacker.receipt("SEND", {"destination": f"/queue/{q1}"}, b"x", receipt_id="sent")
    attacker.subscribe(f"/queue/{q2}", sub_id="w@@window1")
    attacker.subscribe(f"/queue/{q1}", sub_id="w", ack="client")
    for _ in range(601):
        assert attacker.expect("MESSAGE", timeout=10)["subscription"] == "w"
    attacker.receipt("SEND", {"destination": "/topic/nb-after"}, b"x", receipt_id="after")
    neighbours()


# -- groups 6 and 7: the bridge's own queues made streams ---------------------------------------


@bridge_only
def test_a_named_subscription_whose_offset_queue_a_client_made_a_stream(shared, dial, neighbours, stream, queues):
    queue = offset_queue(stream, "nb-reader")
    queues.append(queue)
    vandal = dial(shared)
    vandal.connect()
    vandal.subscribe(f"/queue/{queue}", sub_id="v", ack="client",
                     headers={"x-queue-type": "stream", "prefetch-count": "1"})
    attacker = dial(shared)
    attacker.connect()
    attacker.send_frame("SUBSCRIBE", {"destination": f"/amq/queue/{stream}", "id": "a", "ack": "client",
                                      "x-stream-consumer-name": "nb-reader"})
    [(message, text)] = error_frames(attacker)  # RabbitMQ's refusal of the bridge's declare, on its channel
    assert message == "precondition_failed" and "x-queue-type" in text
    neighbours()


@bridge_only
def test_a_topic_whose_retained_queue_a_client_made_a_stream(bridge, dial, queues, unique):
    port = bridge(amqp_min_connections_per_login=1, retained_messages=True).port
    topic = f"nb.retained.{unique}"
    queue = features.retained_queue("amq.topic", topic)
    queues.append(queue)
    others = []
    for n in range(NEIGHBOURS):
        conn = dial(port)
        conn.connect()
        conn.subscribe(f"/topic/nb-n-{unique}", sub_id=f"n{n}")
        others.append(conn)
    vandal = dial(port)
    vandal.connect()
    vandal.subscribe(f"/queue/{queue}", sub_id="v", ack="client", headers={"x-queue-type": "stream", "prefetch-count": "1"})
    vandal.receipt("SEND", {"destination": f"/amq/queue/{queue}"}, b"not a retained message", receipt_id="s")
    subscriber = dial(port)
    subscriber.connect()
    subscriber.subscribe(f"/topic/{topic}", sub_id="t")  # no retained message, no ERROR
    subscriber.no_frame(0.5)
    vandal.send_frame("SEND", {"destination": f"/topic/{topic}", "retain": "set", "receipt": "r"}, b"kept?")
    [(message, text)] = error_frames(vandal)  # the one who keeps a message there is refused
    assert message == "precondition_failed" and "x-queue-type" in text
    sender = dial(port)
    sender.connect()
    sender.receipt("SEND", {"destination": f"/topic/nb-n-{unique}"}, b"still here")
    for conn in others:
        assert conn.expect("MESSAGE", timeout=10).body == b"still here"


# -- found by the isolation fuzzer: a stream's x-max-age RabbitMQ 4.0 crashes on ------------------


@pytest.mark.parametrize("max_age", ["bogus", "-1h"])
def test_a_stream_declared_with_an_x_max_age_rabbitmq_cannot_read(shared, dial, neighbours, broker, queues, unique,
                                                                  max_age):
    name = f"nb-age-{unique}"
    queues.append(name)
    attacker = dial(shared)
    attacker.connect()
    attacker.send_frame("SEND", {"destination": f"/queue/{name}", "x-queue-type": "stream", "x-max-age": max_age,
                                 "receipt": "r"}, b"x")
    if broker.version_tuple < (3, 11):  # the 3.10 plugin passes no x-max-age: an ordinary stream
        attacker.wait_receipt("r")
    elif NATIVE and broker.version_tuple < (4, 3):  # 4.0's channel crashes: the plugin's connection ends
        assert [m for m, _ in error_frames(attacker)]
    else:  # RabbitMQ 4.3's refusal, which the bridge gives in front of every broker
        [(message, text)] = error_frames(attacker)
        assert (message, text) == (
            "precondition_failed",
            plugin_words(f"PRECONDITION_FAILED - invalid arg 'x-max-age' for queue '{name}' in vhost '/': invalid_max_age"))
    neighbours()
