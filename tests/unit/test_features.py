"""Pure rules of the Apollo/Artemis extensions: composites, /dsub/, durable names, expiration."""

from __future__ import annotations

import pytest

from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol import features
from stomp_bridge.protocol.errors import InvalidDestination, ProtocolError


@pytest.mark.parametrize(
    ("value", "parts"),
    [
        ("/queue/a,/queue/b,/topic/c", ["/queue/a", "/queue/b", "/topic/c"]),
        ("/queue/a,/exchange/x/k", ["/queue/a", "/exchange/x/k"]),
        ("/queue/a,b", None),  # the plugin's queue named "a,b"
        ("/queue/a", None),
        ("/reply-queue/a,/queue/b", None),  # reply queue names are opaque
        ("a,/queue/b", None),
        ("/queue/a,", None),
    ],
)
def test_composite_parts(value, parts):
    assert features.composite_parts(value) == parts


@pytest.mark.parametrize(
    "value", ["/queue/a,/queue/b", "/topic/a,/topic/b", "/exchange/x,/queue/b", "/amq/queue/a,/queue/b"]
)
def test_every_composite_is_a_destination_the_plugin_refuses(value):
    with pytest.raises(InvalidDestination):
        dest.parse_destination(value)


@pytest.mark.parametrize(
    ("value", "client_id", "expected"),
    [
        ("/dsub/sub", None, [dest.Destination(dest.AMQ_QUEUE, "sub")]),
        ("/dsub/sub", "app", [dest.Destination(dest.AMQ_QUEUE, "app.sub")]),
        ("/dsub/a%2Fb", None, [dest.Destination(dest.AMQ_QUEUE, "a/b")]),
        ("/queue/a,/dsub/s", "c", [dest.Destination(dest.QUEUE, "a"), dest.Destination(dest.AMQ_QUEUE, "c.s")]),
        ("/nowhere/x", None, None),
    ],
)
def test_parse_extended(value, client_id, expected):
    assert features.parse_extended(value, client_id) == expected


@pytest.mark.parametrize("value", ["/dsub/", "/dsub/a/b"])
def test_invalid_dsub(value):
    with pytest.raises(InvalidDestination):
        features.parse_extended(value, None)


def test_composite_with_an_invalid_part_raises_the_plugin_error():
    with pytest.raises(InvalidDestination) as info:
        features.parse_extended("/queue/a,/nowhere/b", None)
    assert info.value.message == "Unknown destination"


@pytest.mark.parametrize(
    ("headers", "name"),
    [
        ({"durable-subscription-name": "a"}, "a"),
        ({"activemq.subscriptionName": "c", "durable-subscription-name": "b"}, "b"),
        ({"durable-subscriber-name": "x", "durable-subscription-name": "b"}, "x"),  # Artemis' precedence
        ({"id": "1"}, None),
    ],
)
def test_durable_subscription_name_precedence(headers, name):
    assert features.durable_subscription_name(headers) == name


def test_artemis_plan_names_a_durable_queue_after_client_id_and_name():
    destination = dest.parse_destination("/topic/t")
    plan = dest.DestinationRules().subscribe_plan(destination, {}, random=b"0" * 16)
    out = features.artemis_durable_plan(plan, destination, {"durable-subscription-name": "n"}, "cid")
    assert out.queue == "cid.n" and out.declare is not None
    assert (out.declare.queue, out.declare.durable, out.declare.auto_delete, out.declare.exclusive) == (
        "cid.n", True, False, False)
    assert out.binding == ("amq.topic", "t")


def test_artemis_plan_leaves_queue_destinations_alone():
    destination = dest.parse_destination("/queue/q")
    plan = dest.DestinationRules().subscribe_plan(destination, {})
    assert features.artemis_durable_plan(plan, destination, {"durable-subscription-name": "n"}, "c") is plan


def test_artemis_plan_without_client_id_is_an_error():
    destination = dest.parse_destination("/topic/t")
    plan = dest.DestinationRules().subscribe_plan(destination, {})
    with pytest.raises(ProtocolError) as info:
        features.artemis_durable_plan(plan, destination, {"durable-subscription-name": "n"}, None)
    assert info.value.message == "Missing client-id"


NOW = 1_700_000_000_000


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, (None, None)),
        ({"ttl": "2000"}, ("2000", NOW + 2000)),
        ({"expires": str(NOW + 5000)}, ("5000", NOW + 5000)),
        ({"expires": str(NOW - 5)}, ("0", NOW - 5)),  # the session drops it
        ({"expires": "0"}, (None, None)),  # JMS: 0 is "never"
        ({"ttl": "0", "expires": str(NOW + 10)}, ("10", NOW + 10)),
        ({"ttl": "100", "expires": str(NOW + 10)}, ("100", NOW + 100)),  # ttl wins
        ({"ttl": "100", "expiration": "7"}, (None, NOW + 100)),  # the plugin's header wins
        ({"ttl": " 5 "}, ("5", NOW + 5)),
    ],
)
def test_expiration(headers, expected):
    assert features.expiration(headers, NOW) == expected


@pytest.mark.parametrize("headers", [{"ttl": "-1"}, {"ttl": "soon"}, {"expires": "1.5"}])
def test_invalid_expiration_headers(headers):
    with pytest.raises(ProtocolError):
        features.expiration(headers, NOW)


@pytest.mark.parametrize(
    ("value", "allowed"),
    [("/topic/t", True), ("/exchange/x/k", True), ("/queue/q", False), ("/amq/queue/q", False),
     ("/reply-queue/r", False)],
)
def test_selectors_only_on_private_queues(value, allowed):
    destination = dest.parse_destination(value)
    if allowed:
        features.check_selector_destination(destination)
    else:
        with pytest.raises(ProtocolError):
            features.check_selector_destination(destination)


def test_exclusive_plan_asks_for_a_single_active_consumer_queue():
    plan = dest.DestinationRules().subscribe_plan(dest.parse_destination("/queue/q"), {"exclusive": "true"})
    out = features.exclusive_plan(plan)
    assert out.declare is not None
    assert out.declare.exclusive is False
    assert out.declare.arguments == {"x-single-active-consumer": True}
    assert plan.declare is not None and plan.declare.arguments == {}  # the original is untouched


@pytest.mark.parametrize(
    ("headers", "prefetch", "offset"),
    [
        ({"credit": "5,0"}, "5", None),
        ({"credit": "7"}, "7", None),
        ({"credit": "5", "prefetch-count": "9"}, "9", None),  # the plugin's header wins
        ({"consumer-window-size": "0"}, "1", None),
        ({"consumer-window-size": "-1"}, "0", None),
        ({"consumer-window-size": "1024", "activemq.prefetchSize": "3"}, "1024", None),
        ({"activemq.prefetchSize": "3"}, "3", None),
        ({"from-seq": "10"}, None, "offset=10"),
        ({"from-seq": "-1"}, None, "next"),
        ({"from-seq": "10", "x-stream-offset": "first"}, None, "first"),
    ],
)
def test_translate_subscribe_headers(headers, prefetch, offset):
    out = features.translate_subscribe_headers(headers)
    assert out.get("prefetch-count") == prefetch
    assert out.get("x-stream-offset") == offset


def test_translate_returns_the_same_dict_without_extension_headers():
    headers = {"destination": "/queue/a", "ack": "client"}
    assert features.translate_subscribe_headers(headers) is headers


@pytest.mark.parametrize("headers", [{"credit": "x"}, {"credit": "-2"}, {"from-seq": "a"},
                                     {"consumer-window-size": "1k"}])
def test_translate_refuses_bad_numbers(headers):
    with pytest.raises(ProtocolError):
        features.translate_subscribe_headers(headers)


def test_retained_queue_names_are_deterministic_short_and_distinct():
    a = features.retained_queue("amq.topic", "prices")
    assert a == features.retained_queue("amq.topic", "prices")
    assert a.startswith("stomp-retained-") and len(a) < 64
    assert a != features.retained_queue("amq.topic", "prices2")
    assert features.retained_queue("x", "") != features.retained_queue("", "x")
    assert len(features.retained_queue("e", "k" * 255)) < 64


@pytest.mark.parametrize(("value", "action"), [("set", "set"), ("true", "set"), ("remove", "remove"),
                                               ("false", None), (None, None)])
def test_retain_action(value, action):
    assert features.retain_action({} if value is None else {"retain": value}) == action


def test_temp_topic_is_scoped_to_the_session():
    found = features.parse_temp_topic("/temp-topic/replies", "session-abc")
    assert found == dest.Destination(dest.TOPIC, "temp-topic.session-abc.replies")
    assert features.temp_topic_reply_to("/temp-topic/replies", "session-abc") == "/topic/temp-topic.session-abc.replies"
    assert features.parse_extended("/temp-topic/a,/queue/b", None, "s") == [
        dest.Destination(dest.TOPIC, "temp-topic.s.a"), dest.Destination(dest.QUEUE, "b")]
    for bad in ("/temp-topic/", "/temp-topic/a/b"):
        with pytest.raises(InvalidDestination):
            features.parse_temp_topic(bad, "s")


def test_dsub_in_first_place_of_a_composite():
    assert features.parse_extended("/dsub/s,/queue/b", "c") == [
        dest.Destination(dest.AMQ_QUEUE, "c.s"), dest.Destination(dest.QUEUE, "b")]


def test_token_claims_and_expiry_read_a_jwt_and_nothing_else():
    import base64
    import json

    def jwt(claims: object) -> str:
        part = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        return f"eyJhbGciOiJIUzI1NiJ9.{part}.c2lnbmF0dXJl"

    claims = features.token_claims(jwt({"sub": "u", "exp": 1900000000}))
    assert claims == {"sub": "u", "exp": 1900000000}
    assert features.token_expiry(claims) == 1900000000.0
    assert features.token_expiry(features.token_claims(jwt({"sub": "u"}))) is None  # no exp: no timer
    assert features.token_expiry({"exp": True}) is None
    assert features.token_claims(jwt(["not", "claims"])) is None
    for passcode in ("guest", "a.b", "a..c", "a.!!!.c", ""):
        assert features.token_claims(passcode) is None, passcode
    assert features.token_expiry(features.token_claims("a.e30.c")) is None  # {}: no exp
