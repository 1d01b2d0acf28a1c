"""Consumer tags of a subscription's extra consumers, and when a windowed one grows.

The tags must stay distinct from any client's and from each other: a delivery would reach
the wrong subscription, and RabbitMQ answers a consumer tag used twice on a channel by closing
the whole (shared) connection.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stomp_bridge.core.subscriptions import MAX_TAG_BYTES, Subscription, part_tag, window_tag
from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol import headers as hdr


def _sub(**kw) -> Subscription:
    return Subscription("T_s", dest.parse_destination("/queue/a"), "a", ack=True, multiple=False, **kw)


def test_the_first_part_of_a_composite_uses_the_subscriptions_own_tag():
    assert part_tag("T_s", 0) == "T_s"


def test_later_parts_and_windows_get_distinct_tags():
    tags = {part_tag("T_s", 1), part_tag("T_s", 2), window_tag("T_s", 1), window_tag("T_s", 2)}
    assert tags == {"P1_T_s", "P2_T_s", "W1_T_s", "W2_T_s"}


def test_no_client_id_produces_a_tag_of_the_bridges_own():
    """issue 39: ``id:a@@part1`` and a composite ``id:a`` took the same consumer tag (530 on the
    shared connection); so did ``id:w@@window1`` and the first extra window of ``id:w``."""
    for sub_id in ("a@@part1", "w@@window1", "P1_T_a", "W1_T_w"):
        client = hdr.subscribe_consumer_tag({"id": sub_id})
        assert client not in {part_tag("T_a", 1), window_tag("T_w", 1)}


ids = st.text(min_size=0, max_size=300)


@given(ids, ids, st.integers(1, 1000), st.integers(1, 1000), st.booleans(), st.booleans())
def test_tags_of_different_subscriptions_or_numbers_never_meet(a, b, m, n, a_window, b_window):
    tag_a, tag_b = hdr.INTERNAL_TAG_PREFIX + a, hdr.INTERNAL_TAG_PREFIX + b
    made_a = (window_tag if a_window else part_tag)(tag_a, m)
    made_b = (window_tag if b_window else part_tag)(tag_b, n)
    assert made_a not in (tag_a, tag_b, hdr.QUEUE_TAG_PREFIX + b)
    assert len(made_a.encode()) <= MAX_TAG_BYTES
    if (a, m, a_window) != (b, n, b_window):
        assert made_a != made_b


def test_a_window_is_full_when_the_client_holds_every_windows_deliveries():
    sub = _sub(window=2)
    sub.unacked = 1
    assert not sub.window_full()
    sub.unacked = 2
    assert sub.window_full()
    sub.extra_tags = (window_tag("T_s", 1),)  # two windows now: room for two more
    assert not sub.window_full()
    sub.unacked = 4
    assert sub.window_full()
