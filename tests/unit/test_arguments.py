"""Header values that become AMQP arguments: binding arguments for a headers exchange (the
queue arguments' tests are in test_headers.py, where they began)."""

import pytest

from stomp_bridge.protocol.arguments import binding_arguments
from stomp_bridge.protocol.destinations import DestinationRules, parse_destination
from stomp_bridge.protocol.errors import FrameRejected

SUBSCRIBE = {"destination": "/exchange/hx", "id": "s1", "ack": "client", "receipt": "r",
             "prefetch-count": "10", "x-queue-name": "mine", "x-max-length": "5"}


def test_no_x_match_no_binding_arguments():
    assert binding_arguments({**SUBSCRIBE, "code": "100"}) is None


@pytest.mark.parametrize("match", ["all", "any", "all-with-x", "any-with-x"])
def test_x_match_and_the_applications_headers_become_the_binding(match):
    args = binding_arguments({**SUBSCRIBE, "x-match": match, "code": "100", "region": "eu"})
    assert args == {"x-match": match, "code": "100", "region": "eu"}  # no STOMP or x- header


def test_a_bad_x_match_is_refused_naming_the_values():
    with pytest.raises(FrameRejected) as err:
        binding_arguments({"x-match": "some"})
    assert err.value.message == "Invalid header"
    assert "x-match must be all, any, all-with-x or any-with-x, not 'some'" in err.value.detail


def test_only_exchange_subscriptions_with_the_setting_bind_with_arguments():
    headers = {**SUBSCRIBE, "x-match": "all", "code": "100"}
    on = DestinationRules(headers_bindings=True)
    plan = on.subscribe_plan(parse_destination("/exchange/hx"), headers)
    assert plan.binding == ("hx", "") and plan.binding_arguments == {"x-match": "all", "code": "100"}
    off = DestinationRules().subscribe_plan(parse_destination("/exchange/hx"), headers)
    assert off.binding_arguments is None  # the plugin's way: arguments ignored
    topic = on.subscribe_plan(parse_destination("/topic/t"), {**headers, "destination": "/topic/t"})
    assert topic.binding_arguments is None
