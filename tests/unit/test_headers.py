"""STOMP headers <-> AMQP properties, queue arguments, message ids.

Expected values were observed on RabbitMQ 3.10.8's STOMP plugin; message_headers was also
compared with rabbit_stomp_util:headers/5 run on the broker's beams for 400 random deliveries.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stomp_bridge.protocol.dialect import Dialect
from stomp_bridge.protocol.errors import ProtocolError, StompError, tp
from stomp_bridge.protocol.frames import Frame, serialize
from stomp_bridge.protocol.headers import (
    ack_header_name,
    ack_mode,
    check_send_headers,
    consume_arguments,
    describe_subscription,
    message_headers,
    new_session_id,
    parse_bool,
    parse_message_id,
    prefetch_count,
    properties_from_send,
    reply_queue_consumer_tag,
    subscribe_consumer_tag,
    subscription_id,
    unsubscribe_consumer_tag,
)
from stomp_bridge.protocol.arguments import queue_arguments
from stomp_bridge.protocol.parser import FrameParser


# -- queue arguments ----------------------------------------------------------------------


def test_queue_arguments_types_and_trimming():
    headers = {
        "x-max-length": " 10 ",
        "x-message-ttl": "+5000",
        "x-expires": "600000",
        "x-max-length-bytes": "100000",
        "x-max-priority": "5",
        "x-dead-letter-exchange": " dlx ",
        "x-dead-letter-routing-key": "rk",
        "x-queue-type": "stream",
        "x-max-age": "1D",
        "x-stream-max-segment-size-bytes": "500000",
        "x-stream-filter-size-bytes": "32",
        "x-overflow": "reject-publish",  # documented; the bridge honours it (the plugin drops it)
        "x-other": "1",
    }
    assert queue_arguments(headers) == {
        "x-max-length": 10,
        "x-message-ttl": 5000,
        "x-expires": 600000,
        "x-max-length-bytes": 100000,
        "x-max-priority": 5,
        "x-dead-letter-exchange": "dlx",
        "x-dead-letter-routing-key": "rk",
        "x-queue-type": "stream",
        "x-max-age": "1D",
        "x-stream-max-segment-size-bytes": 500000,
        "x-stream-filter-size-bytes": 32,
        "x-overflow": "reject-publish",
    }


def test_queue_arguments_in_3_10_know_fewer_names_and_every_version_strips_only_spaces():
    headers = {"x-max-age": "1D", "x-stream-filter-size-bytes": "32", "x-queue-type": "\tquorum "}
    assert queue_arguments(headers, Dialect((3, 10, 8)).queue_argument_names) == {"x-queue-type": "\tquorum"}
    # string:strip/1 on 4.3.6 too (its decompiled build_argument/2)
    assert queue_arguments(headers)["x-queue-type"] == "\tquorum"
    assert queue_arguments(headers)["x-max-age"] == "1D"


@pytest.mark.parametrize(
    ("headers", "arguments"),
    [  # subscribe_arguments/1 of 4.x: passed on whatever the queue; RabbitMQ decides
        ({"x-stream-offset": "first"}, {"x-stream-offset": "first"}),
        ({"x-stream-offset": "offset=42"}, {"x-stream-offset": 42}),
        ({"x-stream-offset": "somewhere"}, {}),  # not_found: no argument at all
        ({"x-stream-filter": "eu"}, {"x-stream-filter": ["eu"]}),  # always an array
        ({"x-stream-filter": "eu,us"}, {"x-stream-filter": ["eu", "us"]}),
        ({"x-stream-filter": "eu,,us"}, {"x-stream-filter": ["eu", "", "us"]}),
        ({"x-stream-match-unfiltered": "True"}, {"x-stream-match-unfiltered": True}),
        ({"x-stream-match-unfiltered": "yes"}, {}),  # boolean_header: anything else is not_found
        ({"x-priority": " 5 "}, {"x-priority": 5}),
        ({"x-priority": "-3"}, {"x-priority": -3}),
    ],
)
def test_consume_arguments_follow_the_plugin(headers, arguments):
    assert consume_arguments(headers) == arguments


@pytest.mark.parametrize(
    "headers",
    [{"x-stream-offset": "offset=abc"}, {"x-stream-offset": "offset= 1"}, {"x-stream-offset": "timestamp=x"},
     {"x-priority": "high"}, {"x-priority": "1000"}],
)
def test_consume_arguments_that_crash_the_plugin_are_processing_errors(headers):
    with pytest.raises(ProtocolError) as info:
        consume_arguments(headers)
    assert (info.value.message, info.value.detail, info.value.fatal) == ("Processing error", "Processing error", False)


@pytest.mark.parametrize(
    ("tag", "description", "subscription"),
    [("T_s", "id='s'", "s"), ("Q_/queue/a", "destination='/queue/a'", "Unknown[/queue/a]")],
)
def test_subscription_descriptions_in_error_texts(tag, description, subscription):
    assert describe_subscription(tag) == description
    assert subscription_id(tag) == subscription
    assert tp(description) == f'"{description}"'
    assert tp('a"b\\c') == '"a\\"b\\\\c"'


@pytest.mark.parametrize(("value", "count"), [(None, 0), ("0", 0), (" 10 ", 10), ("70000", 70000)])
def test_prefetch_count(value, count):
    assert prefetch_count({} if value is None else {"prefetch-count": value}) == count


@pytest.mark.parametrize("value", ["abc", "-1", "1.5"])
def test_a_bad_prefetch_count_is_a_processing_error_that_keeps_the_connection(value):
    with pytest.raises(ProtocolError) as info:
        prefetch_count({"prefetch-count": value})
    assert (info.value.message, info.value.fatal) == ("Processing error", False)


@pytest.mark.parametrize("value", ["abc", "", "1.5", "1e3", "٣", "1_000", str(1 << 63)])
def test_a_bad_integer_argument_is_a_processing_error(value):
    with pytest.raises(ProtocolError) as info:
        queue_arguments({"x-max-length": value})
    assert (info.value.message, info.value.detail) == ("Processing error", "Processing error")


@pytest.mark.parametrize(("value", "result"), [("true", True), ("True", True), ("false", False), ("False", False), ("yes", None), ("TRUE", None), (None, None)])
def test_parse_bool(value, result):
    assert parse_bool(value) is result


# -- SEND ---------------------------------------------------------------------------------


def test_message_id_on_send_is_refused():
    with pytest.raises(StompError) as info:
        check_send_headers({"destination": "/queue/q", "message-id": "m"})
    assert (info.value.message, info.value.detail) == ("Invalid header", "'message-id' is not allowed on 'SEND'.\n")


def test_properties_from_send_maps_every_property_and_copies_the_rest_to_headers():
    headers = {
        "destination": "/queue/sendq",
        "receipt": "r1",
        "content-length": "2",
        "persistent": "true",
        "x-max-length": "10",
        "durable": "true",
        "custom": "v1",
        "amqp-message-id": "amid",
        "type": "t",
        "timestamp": " 123 ",
        "priority": "4",
        "content-type": "text/plain",
        "content-encoding": "enc",
        "reply-to": "/temp-queue/foo",
        "id": "x",
        "expiration": "100000",
        "user-id": "guest",
        "app-id": "a",
        "correlation-id": "cid",
    }
    props = properties_from_send(headers, reply_to="amq.gen-HgoPMwHEunukdOKfb4PGUw")
    assert props == {  # as read back through the management API from a native-plugin SEND
        "content_type": "text/plain",
        "content_encoding": "enc",
        "correlation_id": "cid",
        "reply_to": "amq.gen-HgoPMwHEunukdOKfb4PGUw",
        "expiration": "100000",
        "message_id": "amid",
        "message_type": "t",
        "user_id": "guest",
        "app_id": "a",
        "delivery_mode": 2,
        "priority": 4,
        "timestamp": 123,
        "headers": {"receipt": "r1", "content-length": "2", "x-max-length": "10", "durable": "true", "custom": "v1", "id": "x"},
    }


def test_minimal_send_has_an_empty_headers_table_and_no_delivery_mode():
    assert properties_from_send({"destination": "/topic/t", "persistent": "false"}) == {"headers": {}}


@pytest.mark.parametrize(("header", "value"), [("priority", "abc"), ("priority", "256"), ("timestamp", "-1"), ("timestamp", "x")])
def test_bad_integer_properties_are_processing_errors(header, value):
    with pytest.raises(ProtocolError) as info:
        properties_from_send({header: value})
    assert info.value.message == "Processing error"


# -- MESSAGE ------------------------------------------------------------------------------

SESSION = "session-dhusM0fUDcIMTiARIuZfVA"


def test_message_headers_match_a_native_plugin_delivery():
    properties = {
        "content_type": "text/x",
        "content_encoding": "gzip",
        "delivery_mode": 1,
        "priority": 3,
        "correlation_id": "c1",
        "reply_to": "some.queue",
        "expiration": "60000",
        "message_id": "m-1",
        "timestamp": datetime.fromtimestamp(1700000000, timezone.utc),
        "message_type": "typ",
        "user_id": "guest",
        "app_id": "app",
        "headers": {
            "colon:k": "v:\n",
            "destination": "/queue/fake",
            "i": 100000,
            "l": 5000000000,
            "rt": "x",
            "s": "str",
            "t": True,
            "f": 1.5,
            "tbl": {"a": "b"},
            "arr": [1],
            "n": None,
            "dt": datetime(2020, 1, 1),
            "ba": bytearray(b"x"),
        },
    }
    headers = message_headers("T_sub-1", SESSION, 1, "", "hdrtest", False, properties, ack=True)
    message_id = f"T_sub-1@@{SESSION}@@1"
    assert list(headers.items()) == [  # the frame the 3.10.8 plugin sent, in its order
        ("subscription", "sub-1"),
        ("destination", "/queue/hdrtest"),  # the table's "destination" comes later and loses
        ("message-id", message_id),
        ("redelivered", "false"),
        ("ack", message_id),
        ("colon:k", "v:\n"),
        ("i", "100000"),
        ("l", "5000000000"),
        ("rt", "x"),
        ("s", "str"),
        ("app-id", "app"),
        ("user-id", "guest"),
        ("type", "typ"),
        ("timestamp", "1700000000"),
        ("amqp-message-id", "m-1"),
        ("expiration", "60000"),
        ("reply-to", "/reply-queue/some.queue"),
        ("correlation-id", "c1"),
        ("priority", "3"),
        ("persistent", "1"),
        ("content-encoding", "gzip"),
        ("content-type", "text/x"),
    ]


@pytest.mark.parametrize(
    ("reply_to", "shown"),
    [
        ("amq.gen-1", "/reply-queue/amq.gen-1"),
        ("/temp-queue/x", "/reply-queue//temp-queue/x"),
        ("/queuex", "/queuex"),  # a plain prefix test
        ("/exchange/x/y", "/exchange/x/y"),
        ("/reply-queue/r", "/reply-queue/r"),
    ],
)
def test_message_reply_to_is_post_processed(reply_to, shown):
    assert message_headers("T_s", SESSION, 1, "", "q", False, {"reply_to": reply_to})["reply-to"] == shown


def test_persistent_messages_say_persistent_true():
    assert message_headers("T_s", SESSION, 1, "", "q", True, {"delivery_mode": 2})["persistent"] == "true"


def test_subscription_without_id_has_no_subscription_header():
    headers = message_headers("Q_/queue/nosubid", SESSION, 7, "", "nosubid", True, {})
    assert headers == {
        "destination": "/queue/nosubid",
        "message-id": f"Q_/queue/nosubid@@{SESSION}@@7",
        "redelivered": "true",
    }


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_an_amqp_headers_table_cannot_add_lines_or_frames_to_a_message(version):
    """An AMQP producer's table, properties and routing key reach every STOMP consumer of the
    queue: whatever they hold, the consumer reads one MESSAGE with one line per header, and a
    header STOMP cannot carry (NUL, an empty name) is left out (frames.serialize). (CR, which
    1.1 cannot escape: test_frames.)"""
    properties = {
        "correlation_id": "c\0MESSAGE",
        "headers": {
            "x\nsubscription": "forged",
            "k": "v\n\nMESSAGE\ndestination:/queue/forged\n\n",
            "nul": "a\0\nsubscription:s-1\n",
            "n\0ul": "v",
            "": "empty name",
            "back\\slash": "\\c",
            "content-length": "1",
        },
    }
    headers = message_headers("T_s", SESSION, 1, "x", "key\0\nforged", False, properties)
    wire = serialize(Frame("MESSAGE", headers, b"body"), "1.2" if version == "1.0" else version)
    parsed = FrameParser(version="1.2").frames(wire)
    assert parsed == [Frame("MESSAGE", {
        "subscription": "s",
        "destination": "/exchange/x/key%00%0Aforged",  # percent-encoded, as the plugin's
        "message-id": f"T_s@@{SESSION}@@1",
        "redelivered": "false",
        "x\nsubscription": "forged",
        "k": "v\n\nMESSAGE\ndestination:/queue/forged\n\n",
        "back\\slash": "\\c",
        "content-length": "4",
    }, b"body")]
    assert wire.count(b"\0") == 1 and wire.endswith(b"body\0")


def test_reply_queue_messages_carry_the_temp_queue_as_subscription():
    tag = reply_queue_consumer_tag("bar")
    headers = message_headers(tag, SESSION, 1, "", "amq.gen-x", False, {})
    assert headers["subscription"] == "/temp-queue/bar"
    assert headers["destination"] == "/queue/amq.gen-x"


def test_stream_offset_header_is_passed_through():
    headers = message_headers("T_s", SESSION, 1, "", "stream", False, {"headers": {"x-stream-offset": 40000}})
    assert headers["x-stream-offset"] == "40000"


# -- message ids, tags, ack modes ---------------------------------------------------------


@given(st.text().filter(lambda s: "@@" not in s), st.text().filter(lambda s: "@@" not in s), st.integers(min_value=0))
def test_message_id_round_trip(tag, session, delivery_tag):
    if tag.endswith("@") or session.startswith("@") or session.endswith("@"):
        return  # a stray '@' next to the separator would shift the split, as in the plugin
    message_id = message_headers(tag, session, delivery_tag, "", "q", False, {})["message-id"]
    assert parse_message_id(message_id) == (tag, session, delivery_tag)


@pytest.mark.parametrize(
    ("value", "command", "header", "message", "detail"),
    [
        ("garbage", "ACK", "id", "Invalid header", '"ACK" must include a valid "id" header\n'),
        ("", "ACK", "id", "Invalid header", '"ACK" must include a valid "id" header\n'),
        ("garbage", "ACK", "message-id", "Invalid header", '"ACK" must include a valid "message-id" header\n'),
        ("a@@b@@c@@1", "NACK", "message-id", "Invalid header", '"NACK" must include a valid "message-id" header\n'),
        ("a@@b@@x", "ACK", "id", "Processing error", "Processing error"),
        ("a@@b@@", "ACK", "id", "Processing error", "Processing error"),
    ],
)
def test_parse_message_id_errors(value, command, header, message, detail):
    with pytest.raises(ProtocolError) as info:
        parse_message_id(value, command, header)
    assert (info.value.message, info.value.detail) == (message, detail)


def test_ack_header_name_per_version():
    assert [ack_header_name(v) for v in ("1.0", "1.1", "1.2")] == ["message-id", "message-id", "id"]


@pytest.mark.parametrize(
    ("value", "mode"),
    [(None, ("auto", False)), ("auto", ("auto", False)), ("client", ("client", True)), ("client-individual", ("client", False))],
)
def test_ack_mode(value, mode):
    assert ack_mode({} if value is None else {"ack": value}) == mode


def test_unknown_ack_mode_is_a_processing_error():
    with pytest.raises(ProtocolError, match="Processing error"):
        ack_mode({"ack": "bogus"})


def test_consumer_tags():
    assert subscribe_consumer_tag({"id": "1", "destination": "/queue/q"}) == "T_1"
    assert subscribe_consumer_tag({"destination": "/queue/q"}) == "Q_/queue/q"
    with pytest.raises(ProtocolError, match="Processing error"):
        subscribe_consumer_tag({"id": "/temp-queue/a", "destination": "/topic/x"})
    with pytest.raises(ProtocolError) as info:
        unsubscribe_consumer_tag({"id": "/temp-queue/a"})
    assert (info.value.message, info.value.detail) == ("Invalid id", "UNSUBSCRIBE 'id' may not start with /temp-queue/\n")
    with pytest.raises(ProtocolError) as info:
        unsubscribe_consumer_tag({})
    assert info.value.message == "Missing destination or id"


def test_session_id_format():
    assert new_session_id(b"\x00" * 16) == "session-AAAAAAAAAAAAAAAAAAAAAA"
    assert len(new_session_id()) == len("session-") + 22


def test_tag_name_cuts_either_prefix():
    """Both prefixes have the length tag_name cuts; a longer one would leak into ids."""
    from stomp_bridge.protocol.headers import (
        INTERNAL_TAG_PREFIX, QUEUE_TAG_PREFIX, has_subscription_id, subscribe_consumer_tag, tag_name,
    )

    assert len(INTERNAL_TAG_PREFIX) == len(QUEUE_TAG_PREFIX)
    with_id = subscribe_consumer_tag({"id": "s-1", "destination": "/queue/a"})
    without = subscribe_consumer_tag({"destination": "/queue/a"})
    assert (tag_name(with_id), has_subscription_id(with_id)) == ("s-1", True)
    assert (tag_name(without), has_subscription_id(without)) == ("/queue/a", False)


@given(st.text(max_size=40), st.integers(1, 2**40))
def test_a_messages_subscription_header_is_tag_names_answer(tag, delivery_tag):
    """message_headers inlines tag_name (per delivery): held to it for any consumer tag."""
    from stomp_bridge.protocol import headers as hdr

    for consumer_tag in (tag, hdr.INTERNAL_TAG_PREFIX + tag, hdr.QUEUE_TAG_PREFIX + tag):
        out = hdr.message_headers(consumer_tag, "s", delivery_tag, "", "q", False, {})
        expected = hdr.tag_name(consumer_tag) if hdr.has_subscription_id(consumer_tag) else None
        assert out.get("subscription") == expected


_table = st.dictionaries(
    st.sampled_from(["subscription", "destination", "message-id", "redelivered", "content-length", "x", "k\\n:"]),
    st.one_of(st.text(max_size=8), st.integers(-5, 5)), max_size=5)


@given(st.text(max_size=12), st.integers(1, 2**40), st.booleans(), st.sampled_from(["", "amq.topic", "x"]),
       st.text(max_size=8), _table, st.sampled_from([None, 1, 2]), st.binary(max_size=20),
       st.sampled_from(["1.0", "1.1", "1.2"]))
def test_a_shared_delivery_makes_each_subscribers_message_as_its_own_delivery_would(
        sub_id, tag, redelivered, exchange, key, table, mode, body, version):
    """Fan-out at the edge: one delivery's common part encoded once, each subscriber's own first
    headers before it, is byte for byte the MESSAGE message_headers and encode_frame make."""
    from stomp_bridge.protocol import headers as hdr
    from stomp_bridge.protocol.frames import END_LF, encode_frame, message_head

    props = {"headers": table}
    if mode is not None:
        props["delivery_mode"] = mode
    consumer_tag = hdr.INTERNAL_TAG_PREFIX + sub_id
    shared = hdr.SharedMessage(tag, redelivered, exchange, key, props, body, END_LF)
    # the head from a subscriber's head_parts (made once per subscription) is message_head's
    v = "1.2" if version == "1.0" else version  # as core/fanout.py writes a 1.0 session's
    try:
        expected_head = message_head(shared.first(consumer_tag, "session-1"), v)
    except ValueError:
        with pytest.raises(ValueError):
            shared.head(hdr.SharedMessage.head_parts(consumer_tag, "session-1", v), v)
    else:
        assert shared.head(hdr.SharedMessage.head_parts(consumer_tag, "session-1", v), v) == expected_head
    whole_headers = hdr.message_headers(consumer_tag, "session-1", tag, exchange, key, redelivered, props)
    try:
        whole = encode_frame("MESSAGE", whole_headers, body, version, END_LF)
    except ValueError:
        with pytest.raises(ValueError):
            message_head(shared.first(consumer_tag, "session-1"), version) + shared.tail(version)
        return
    assert message_head(shared.first(consumer_tag, "session-1"), version) + shared.tail(version) == whole


def test_a_scheduled_messages_level_headers_stay_out_of_its_message():
    """The delay levels route by stomp-bridge-delay-<k>, -exchange and -unroutable; a MESSAGE
    shows _AMQ_SCHED_DELIVERY and RabbitMQ's x-first-death-* but not those."""
    from stomp_bridge.protocol import scheduled

    table = {"colour": "red", "stomp-bridge-delay-3": "1", "stomp-bridge-delay-8": "1", "stomp-bridge-exchange": "",
             "stomp-bridge-unroutable": "drop", "_AMQ_SCHED_DELIVERY": 1796168803451,
             "x-first-death-reason": "expired", "stomp-bridge-other": "kept"}
    out = message_headers("T_1", "session-x", 1, "", "q", False, {"headers": table})
    assert [name for name in out if name.startswith("stomp-bridge-")] == ["stomp-bridge-other"]
    assert (out["colour"], out["_AMQ_SCHED_DELIVERY"], out["x-first-death-reason"]) == ("red", "1796168803451", "expired")
    plain = message_headers("T_1", "session-x", 1, "", "q", False, {"headers": {"stomp-bridge-delay-3": "1"}})
    assert plain["stomp-bridge-delay-3"] == "1", "not a scheduled message: its headers are the sender's"
    send = {"AMQ_SCHEDULED_DELAY": "5", "stomp-bridge-delay-7": "1", "stomp-bridge-unroutable": "keep", "x": "y"}
    scheduled.without_schedule_headers(send)
    assert send == {"x": "y"}
