"""Destination parsing, MESSAGE destinations, queue names and SEND/SUBSCRIBE plans.

Expected values come from RabbitMQ 3.10.8's STOMP plugin (rabbit_routing_util:parse_endpoint/1
run on the broker's own beams, and queue names / ERROR frames observed on the wire).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import stomp_bridge.protocol.destinations as d
from stomp_bridge.protocol.destinations import (
    TEMP_QUEUE_DECLARE,
    Destination,
    QueueDeclare,
    durable_queue_to_delete,
    durable_subscription_queue_name,
    escape_destination_part,
    message_destination,
    parse_destination,
    reply_to_temp_queue,
    require_durable_id,
    DestinationRules,
    subscription_queue_name,
    term_to_binary_pair,
    transient_subscription_queue_name,
)
from stomp_bridge.protocol.dialect import Dialect
from stomp_bridge.protocol.errors import InvalidDestination, ProtocolError, StompError

RULES = DestinationRules()  # amq.topic behind /topic/, the newest broker

UNKNOWN_TAIL = "is not a valid destination.\nValid destination types are: /temp-queue, /exchange, /topic, /queue, /amq/queue, /reply-queue/.\n"


@pytest.mark.parametrize(
    ("header", "kind", "name", "pattern"),
    [
        ("/queue/a", "queue", "a", None),
        ("/queue/a%2Fb", "queue", "a/b", None),
        ("/queue/a%2fb", "queue", "a%2fb", None),  # only upper-case %2F is decoded
        ("/queue/a%25b", "queue", "a%25b", None),  # %25 is not decoded
        ("/queue/café", "queue", "café", None),
        ("foo", "queue", "foo", None),  # no slash at all: a queue name
        ("foo%2Fbar", "queue", "foo/bar", None),
        ("", "queue", "", None),  # refused later as blank
        ("/topic/a.b.#", "topic", "a.b.#", None),
        ("/exchange/x", "exchange", "x", None),
        ("/exchange/x/", "exchange", "x", ""),
        ("/exchange/x/k", "exchange", "x", "k"),
        ("/exchange/a%2Fb/c%2Fd", "exchange", "a/b", "c/d"),
        ("/amq/queue/q", "amq/queue", "q", None),
        ("/temp-queue/t", "temp-queue", "t", None),
        ("/reply-queue/r", "reply-queue", "r", None),
        ("/reply-queue/a/b%2Fc", "reply-queue", "a/b/c", None),  # slashes kept
        ("/reply-queue//", "reply-queue", "/", None),
    ],
)
def test_parse_destination_accepts_what_the_plugin_accepts(header, kind, name, pattern):
    assert parse_destination(header) == Destination(kind, name, pattern)


@pytest.mark.parametrize(
    ("header", "message", "detail"),
    [
        ("/queue", "Invalid destination", "'' is not a valid queue destination\n"),
        ("/queue/", "Invalid destination", "'/' is not a valid queue destination\n"),
        ("/queue/a/b", "Invalid destination", "'/a/b' is not a valid queue destination\n"),
        ("/queue/a/", "Invalid destination", "'/a/' is not a valid queue destination\n"),
        ("/queue//a", "Invalid destination", "'//a' is not a valid queue destination\n"),
        ("/topic", "Invalid destination", "'' is not a valid topic destination\n"),
        ("/exchange", "Invalid destination", "'' is not a valid exchange destination\n"),
        ("/exchange/", "Invalid destination", "'/' is not a valid exchange destination\n"),
        ("/exchange//k", "Invalid destination", "'//k' is not a valid exchange destination\n"),
        ("/exchange/x/k/z", "Invalid destination", "'/x/k/z' is not a valid exchange destination\n"),
        ("/amq/queue", "Invalid destination", "'' is not a valid amqqueue destination\n"),
        ("/amq/queue/a/b", "Invalid destination", "'/a/b' is not a valid amqqueue destination\n"),
        ("/temp-queue/", "Invalid destination", "'/' is not a valid temp_queue destination\n"),
        ("/reply-queue/", "Invalid destination", "'/' is not a valid reply_queue destination\n"),
        ("/foo/bar", "Unknown destination", "'/foo/bar' " + UNKNOWN_TAIL),
        ("/reply-queue", "Unknown destination", "'/reply-queue' " + UNKNOWN_TAIL),
        ("/amq/q", "Unknown destination", "'/amq/q' " + UNKNOWN_TAIL),
        ("/Queue/x", "Unknown destination", "'/Queue/x' " + UNKNOWN_TAIL),
        ("queue/x", "Unknown destination", "'queue/x' " + UNKNOWN_TAIL),
        ("//queue/x", "Unknown destination", "'//queue/x' " + UNKNOWN_TAIL),
    ],
)
def test_parse_destination_refuses_with_the_plugins_error_texts(header, message, detail):
    with pytest.raises(InvalidDestination) as info:
        parse_destination(header)
    assert (info.value.message, info.value.detail) == (message, detail)


@pytest.mark.parametrize(
    ("exchange", "routing_key", "expected"),
    [
        ("", "q", "/queue/q"),
        ("amq.topic", "a.b", "/topic/a.b"),
        ("amq.direct", "", "/exchange/amq.direct"),
        ("amq.direct", "k", "/exchange/amq.direct/k"),
        # observed on 3.10.8: upper-case hex, one %XX per UTF-8 byte, DEL and space kept
        ("amq.topic", "a/b%c\x01é\x7f~ z", "/topic/a%2Fb%25c%01%C3%A9\x7f~ z"),
        ("ex/é%", "", "/exchange/ex%2F%C3%A9%25"),
        ("ex/é%", "r/k", "/exchange/ex%2F%C3%A9%25/r%2Fk"),
        ("", "q/1%é \x01", "/queue/q%2F1%25%C3%A9 %01"),
    ],
)
def test_message_destination_escapes_like_format_destination(exchange, routing_key, expected):
    assert message_destination(exchange, routing_key) == expected


def test_message_destination_ignores_the_default_topic_exchange():
    assert message_destination("my.topic", "k") == "/exchange/my.topic/k"


# The plugin's parser only decodes %2F: a routing key without '%' and of printable ASCII
# comes back unchanged from a MESSAGE destination.
_round_trippable = st.text(st.characters(min_codepoint=32, max_codepoint=127, blacklist_characters="%"), min_size=1)


@given(_round_trippable)
def test_message_destination_round_trips_through_parse_for_queues(routing_key):
    assert parse_destination(message_destination("", routing_key)) == Destination("queue", routing_key)


@given(_round_trippable, _round_trippable)
def test_message_destination_round_trips_through_parse_for_exchanges(exchange, routing_key):
    if exchange == "amq.topic":
        return
    parsed = parse_destination(message_destination(exchange, routing_key))
    assert parsed == Destination("exchange", exchange, routing_key)


@given(st.text())
def test_escaped_destination_parts_are_printable_ascii_without_slashes(text):
    escaped = escape_destination_part(text)
    assert "/" not in escaped
    assert all(32 <= ord(c) <= 127 for c in escaped)


# -- queue names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "sub_id", "expected"),
    [  # created by the 3.10.8 plugin with SUBSCRIBE durable:true, read back from the management API
        ("my-durable", "1234", "stomp-subscription-ywnduRGdS9QBdgzKJKz3-A"),
        ("a.b.#", "sub-é", "stomp-subscription-GARfS9Ks8NTX10OtpuZYYQ"),
        ("caf/é", "", "stomp-subscription-4CQFUZlTIwZ4fmttsVuLoA"),  # /topic/caf%2Fé, id:""
        ("dur2", "d2", "stomp-subscription-zrdDK-zj0Ow7yPrh21bGag"),
        ("dk", "d3", "stomp-subscription-vxYup6v7USnr4qYSBuXdWA"),  # /exchange/amq.direct/dk
    ],
)
def test_durable_subscription_queue_name_matches_the_native_plugin(name, sub_id, expected):
    assert durable_subscription_queue_name(name, sub_id) == expected


def test_term_to_binary_of_strings_and_binaries():
    assert term_to_binary_pair("ab", "") == b"\x83h\x02k\x00\x02abj"
    assert term_to_binary_pair("é", b"\x00\x01") == b"\x83h\x02k\x00\x02\xc3\xa9m\x00\x00\x00\x02\x00\x01"
    long = term_to_binary_pair("a" * 65536, "")
    assert long[3:8] == b"l\x00\x01\x00\x00" and long[8:10] == b"aa" and long.endswith(b"j")


def test_x_queue_name_overrides_the_generated_name():
    assert subscription_queue_name("t", "1", "mine") == "mine"


def test_transient_names_hash_random_bytes():
    a = transient_subscription_queue_name("t", b"\x00" * 16)
    assert a == transient_subscription_queue_name("t", b"\x00" * 16)
    assert a.startswith("stomp-subscription-") and len(a) == len("stomp-subscription-") + 22
    assert transient_subscription_queue_name("t") != transient_subscription_queue_name("t")


# -- SEND ---------------------------------------------------------------------------------


def _dest(header):
    return parse_destination(header)


@pytest.mark.parametrize(
    ("header", "exchange", "routing_key"),
    [
        ("/queue/q", "", "q"),
        ("/amq/queue/q", "", "q"),
        ("/reply-queue/amq.gen-x", "", "amq.gen-x"),
        ("/topic/a.b", "amq.topic", "a.b"),
        ("/exchange/x", "x", ""),
        ("/exchange/x/k", "x", "k"),
    ],
)
def test_send_target_routes_like_parse_routing(header, exchange, routing_key):
    target = RULES.send_target(_dest(header), {})
    assert (target.exchange, target.routing_key) == (exchange, routing_key)
    assert (target.declare is not None) == header.startswith("/queue/")


def test_default_topic_exchange_applies_to_every_amq_topic_destination():
    assert DestinationRules("my.topic").send_target(_dest("/topic/t"), {}).exchange == "my.topic"
    assert DestinationRules("my.topic").send_target(_dest("/exchange/amq.topic/t"), {}).exchange == "my.topic"
    assert DestinationRules("my.topic").send_target(_dest("/exchange/other/t"), {}).exchange == "other"


def test_send_to_a_queue_declares_a_durable_queue_with_header_arguments():
    target = RULES.send_target(_dest("/queue/q"), {"x-max-length": "10", "x-dead-letter-exchange": " dlx "})
    assert target.declare == QueueDeclare("q", True, False, False, {"x-max-length": 10, "x-dead-letter-exchange": "dlx"}, True)


def test_send_after_the_first_declares_nothing_and_skips_its_checks():
    assert RULES.send_target(_dest("/queue/q"), {"durable": "yes"}, declare=False).declare is None


@pytest.mark.parametrize(
    ("header", "headers", "message", "detail"),
    [
        ("", {}, "Invalid destination", "Destination cannot be blank"),
        ("/temp-queue/x", {}, "Invalid destination", "'/temp-queue/x' is not a valid destination for 'SEND'\n"),
        ("/topic/t", {"x-max-length": "abc"}, "Processing error", "Processing error"),
        ("/temp-queue/x", {"x-expires": "1.5"}, "Processing error", "Processing error"),
        ("/queue/q", {"durable": "yes"}, "Processing error", "Processing error"),
    ],
)
def test_send_target_errors(header, headers, message, detail):
    with pytest.raises((InvalidDestination, ProtocolError)) as info:
        RULES.send_target(_dest(header), headers)
    assert (info.value.message, info.value.detail) == (message, detail)


# -- SUBSCRIBE ----------------------------------------------------------------------------

R = b"\x01" * 16


V3_10, V4_0, V4_3 = Dialect((3, 10, 8)), Dialect((4, 0, 5)), Dialect((4, 3, 6))


@pytest.mark.parametrize(
    ("header", "headers", "durable", "auto_delete", "exclusive"),
    [  # as observed in the management API on 4.0.5 (and 3.10.8 but for /exchange/, see below)
        ("/queue/q", {}, True, False, False),
        ("/queue/q", {"durable": "false"}, False, True, True),
        ("/topic/t", {}, False, True, False),
        ("/topic/t", {"id": "1", "durable": "true"}, True, True, False),
        ("/topic/t", {"id": "1", "durable": "true", "auto-delete": "false"}, True, False, False),
        ("/topic/t", {"id": "1", "persistent": "true", "auto-delete": "false"}, True, False, False),
        ("/topic/t", {"exclusive": "true"}, False, True, True),
        # an unreadable value drops the kind's default, leaving the durable-derived one (verified)
        ("/topic/t", {"exclusive": "yes"}, False, True, True),
        ("/topic/t", {"id": "1", "durable": "true", "auto-delete": "maybe"}, True, False, False),
        ("/exchange/amq.direct/k", {}, False, True, True),
        ("/exchange/amq.direct/k", {"id": "1", "durable": "true"}, True, True, True),
    ],
)
def test_subscribe_declares_with_the_plugins_defaults(header, headers, durable, auto_delete, exclusive):
    declare = DestinationRules(dialect=V4_0).subscribe_plan(_dest(header), headers, random=R).declare
    assert (declare.durable, declare.auto_delete, declare.exclusive) == (durable, auto_delete, exclusive)


@pytest.mark.parametrize("dialect", [V4_3, Dialect((4, 2, 0)), Dialect()])
def test_topic_subscription_queues_are_exclusive_from_4_2(dialect):
    """rabbitmq-server #13016: no transient shared queue, which 4.3 can deny (verified on 4.3.6)."""
    declare = DestinationRules(dialect=dialect).subscribe_plan(_dest("/topic/t"), {}, random=R).declare
    assert (declare.durable, declare.auto_delete, declare.exclusive) == (False, True, True)
    shared = DestinationRules(dialect=dialect).subscribe_plan(_dest("/topic/t"), {"exclusive": "false"}, random=R).declare
    assert shared.exclusive is False  # asked for: RabbitMQ decides (4.3 may refuse it)
    durable = DestinationRules(dialect=dialect).subscribe_plan(_dest("/topic/t"), {"id": "1", "durable": "true"}).declare
    assert (durable.durable, durable.exclusive) == (True, False)


def test_exchange_subscription_queues_were_not_exclusive_in_3_10():
    declare = DestinationRules(dialect=V3_10).subscribe_plan(_dest("/exchange/amq.fanout"), {}, random=R).declare
    assert (declare.durable, declare.auto_delete, declare.exclusive) == (False, True, False)


def test_quorum_and_stream_queues_are_forced_durable_and_shared_in_4x():
    headers = {"x-queue-type": "quorum", "durable": "false"}
    declare = DestinationRules(dialect=V4_3).subscribe_plan(_dest("/queue/q"), headers).declare
    assert (declare.durable, declare.exclusive, declare.arguments) == (True, False, {"x-queue-type": "quorum"})
    assert DestinationRules(dialect=V3_10).subscribe_plan(_dest("/queue/q"), headers).declare.durable is False
    stream = DestinationRules(dialect=V4_0).subscribe_plan(_dest("/topic/t"), {"x-queue-type": "stream"}, random=R).declare
    assert (stream.durable, stream.exclusive) == (True, False)


def test_durable_topic_subscription_plan():
    plan = RULES.subscribe_plan(_dest("/topic/my-durable"), {"id": "1234", "durable": "true", "auto-delete": "false"})
    assert plan.queue == plan.declare.queue == "stomp-subscription-ywnduRGdS9QBdgzKJKz3-A"
    assert plan.binding == ("amq.topic", "my-durable")
    assert plan.delete_on_failure


def test_transient_topic_subscription_gets_a_fresh_name_and_binds_to_the_default_topic_exchange():
    plan = DestinationRules("my.topic").subscribe_plan(_dest("/topic/a.*"), {"id": "1"}, random=R)
    assert plan.queue == transient_subscription_queue_name("a.*", R)
    assert plan.binding == ("my.topic", "a.*")


def test_exchange_subscription_without_pattern_binds_with_an_empty_key():
    plan = RULES.subscribe_plan(_dest("/exchange/amq.fanout"), {"x-queue-name": "mine"})
    assert (plan.queue, plan.binding) == ("mine", ("amq.fanout", ""))


@pytest.mark.parametrize("header", ["/amq/queue/q", "/reply-queue/q"])
def test_existing_queue_subscriptions_declare_and_bind_nothing(header):
    assert RULES.subscribe_plan(_dest(header), {"x-max-length": "5"}) == RULES.subscribe_plan(_dest(header), {})
    plan = RULES.subscribe_plan(_dest(header), {})
    assert (plan.queue, plan.declare, plan.binding, plan.delete_on_failure) == ("q", None, None, False)


def test_queue_subscription_declares_once_per_session():
    plan = RULES.subscribe_plan(_dest("/queue/q"), {})
    assert plan.declare.once_per_session and plan.binding is None
    assert RULES.subscribe_plan(_dest("/queue/q"), {}, declare=False).declare is None


@pytest.mark.parametrize(
    ("header", "headers", "message", "detail"),
    [
        ("/temp-queue/x", {"id": "1"}, "Invalid destination", "'/temp-queue/x' is not a valid destination for 'SUBSCRIBE'\n"),
        ("", {}, "Invalid destination", "Destination cannot be blank"),
        ("/queue/q", {"x-max-length": "abc"}, "Processing error", "Processing error"),
        ("/topic/t", {"durable": "True"}, "Processing error", "Processing error"),  # passes the id check
        ("/topic/t", {"durable": "yes"}, "Processing error", "Processing error"),
    ],
)
def test_subscribe_plan_errors(header, headers, message, detail):
    with pytest.raises((InvalidDestination, ProtocolError)) as info:
        RULES.subscribe_plan(_dest(header), headers)
    assert (info.value.message, info.value.detail) == (message, detail)


@pytest.mark.parametrize("headers", [{"durable": "true"}, {"persistent": "true"}])
def test_durable_subscribe_without_id_is_a_missing_header(headers):
    with pytest.raises(ProtocolError) as info:
        require_durable_id(headers)
    assert (info.value.message, info.value.detail) == ("Missing Header", "Header 'id' is required for durable subscriptions")


@pytest.mark.parametrize("headers", [{}, {"durable": "True"}, {"durable": "true", "id": "1"}])
def test_durable_id_check_passes(headers):
    require_durable_id(headers)


def test_unsubscribe_deletes_only_durable_topic_queues():
    topic = _dest("/topic/my-durable")
    assert durable_queue_to_delete(topic, {"id": "1234", "durable": "true"}) == "stomp-subscription-ywnduRGdS9QBdgzKJKz3-A"
    assert durable_queue_to_delete(topic, {"id": "1234"}) is None
    assert durable_queue_to_delete(_dest("/exchange/x/k"), {"id": "1", "durable": "true"}) is None


@pytest.mark.parametrize(
    ("reply_to", "temp_id"),
    [("/temp-queue/foo", "foo"), ("/queue/foo", None), ("foo", None), ("/reply-queue/amq.gen-1", None)],
)
def test_reply_to_temp_queue(reply_to, temp_id):
    assert reply_to_temp_queue(reply_to) == temp_id


def test_unparsable_reply_to_is_a_processing_error():
    with pytest.raises(ProtocolError) as info:
        reply_to_temp_queue("/foo/bar")
    assert info.value.message == "Processing error"


def test_temp_queues_are_server_named_exclusive_auto_delete():
    assert TEMP_QUEUE_DECLARE == QueueDeclare("", False, True, True, {})


def test_temp_queue_names_are_the_servers_unless_a_prefix_is_set():
    assert d.temp_queue_declare(None, "session-abc", "x") is d.TEMP_QUEUE_DECLARE
    named = d.temp_queue_declare("stomp-temp-", "session-abc", "replies")
    assert (named.queue, named.exclusive, named.auto_delete, named.durable) == (
        "stomp-temp-abc.replies", True, True, False,
    )
    with pytest.raises(InvalidDestination, match="over 255 bytes"):
        d.temp_queue_declare("p-", "session-abc", "x" * 250)


_DEST_TEXT = st.one_of(
    st.sampled_from(["/queue/a", "/queue/", "/topic/t.x", "/exchange/amq.topic/k", "/exchange/x", "/exchange/x/",
                     "/amq/queue/q", "/reply-queue/r", "/temp-queue/t", "/temp-topic/t", "plain", "", "/dsub/a",
                     "/queue/a%2Fb", "/queue/a/b", "/bridge/token", "/queue/a,/topic/b"]),
    st.text(alphabet="/aqueotpicxhng-%2F.,", max_size=20),
)
_SEND_HEADERS = st.dictionaries(
    st.sampled_from(["destination", "x-max-length", "x-queue-type", "x-dead-letter-exchange", "x-custom",
                     "receipt", "persistent", "x-max-priority"]),
    st.sampled_from(["1", "classic", "abc", "", " 5 "]),
    max_size=4,
)


@given(value=_DEST_TEXT, headers=_SEND_HEADERS,
       dialect=st.sampled_from([Dialect(), Dialect((3, 10, 8)), Dialect((4, 0, 5))]))
def test_the_cached_send_target_is_send_targets_answer(value: str, headers: dict, dialect: Dialect) -> None:
    """What the SEND path takes from the cache is what parse_destination and send_target give;
    where they would raise or declare, the cache answers None."""
    rules = DestinationRules("amq.topic", dialect)
    plain = rules.plain_send_target(value, headers)
    try:
        parsed = d.parse_destination(value)
        declared = rules.send_target(parsed, headers, declare=False)
    except StompError:  # a bad destination or queue argument: the uncached path's ERROR
        assert plain is None
        return
    if plain is None:
        assert not rules.argument_names.isdisjoint(headers) or parsed.kind == d.TEMP_QUEUE or not parsed.name
        return
    assert plain == (parsed, declared)
    if parsed.kind != d.QUEUE:
        assert plain[1] == rules.send_target(parsed, headers, declare=True)  # no declare: the same target whether or not the session declared it


@pytest.mark.parametrize("value, ok", [
    ("1Y", True), ("7D", True), ("99999999999999999999D", True), ("12h", True),
    ("bogus", False), ("", False), ("-1h", False), ("0s", False), ("10", False), ("1x", False), ("1hh", False),
])
def test_a_streams_max_age_is_refused_as_rabbitmq_4_3_refuses_it(value, ok):
    """RabbitMQ 4.0 crashes on some (541 on the connection every session of the login may share):
    decided here, in 4.3's words, on every broker."""
    headers = {"x-queue-type": "stream", "x-max-age": value}
    rules = DestinationRules(vhost="v")
    if ok:
        assert rules.send_target(_dest("/queue/s"), headers).declare.arguments["x-max-age"] == value
    else:
        with pytest.raises(StompError) as refused:
            rules.send_target(_dest("/queue/s"), headers)
        assert (refused.value.message, refused.value.detail) == (
            "precondition_failed", "PRECONDITION_FAILED - invalid arg 'x-max-age' for queue 's' in vhost 'v': invalid_max_age")


def test_a_destination_longer_than_any_valid_one_is_parsed_and_not_kept():
    """The parse caches keep 4,096 destinations: 4,096 of 60 kB held 470 MB of a bridge that a
    client had sent 240 MB (a routing key past 255 bytes is refused later, once parsed). Past
    CACHED_LENGTH a destination is parsed each time; up to it, cached as before."""
    d._cached_destination.cache_clear()  # noqa: SLF001
    d._cached_send_target.cache_clear()  # noqa: SLF001
    rules = DestinationRules("amq.topic", V4_3)
    for n in range(50):
        value = f"/queue/{n}-" + "x" * 60_000
        assert parse_destination(value) == Destination("queue", value[7:], None, value)
        assert rules.plain_send_target(value, {}) is not None
    assert d._cached_destination.cache_info().currsize == 0  # noqa: SLF001
    assert d._cached_send_target.cache_info().currsize == 0  # noqa: SLF001
    longest_valid = "/exchange/" + "%2F" * 255 + "/" + "%2F" * 255
    assert len(longest_valid) <= d.CACHED_LENGTH
    assert parse_destination(longest_valid).name == "/" * 255
    assert rules.plain_send_target("/queue/q", {}) is not None
    assert d._cached_destination.cache_info().currsize == 2  # noqa: SLF001
    assert d._cached_send_target.cache_info().currsize == 1  # noqa: SLF001
