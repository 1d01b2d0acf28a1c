"""Consumer tags of a subscription's extra consumers, and when a windowed one grows.

The tags must stay distinct from any client's (they carry "@@", which no usable
subscription id has) and from each other, or a delivery would reach the wrong
subscription.
"""

from __future__ import annotations

from stomp_bridge.protocol import destinations as dest
from stomp_bridge.core.subscriptions import Subscription, part_tag, window_tag


def _sub(**kw) -> Subscription:
    return Subscription("T_s", dest.parse_destination("/queue/a"), "a", ack=True, multiple=False, **kw)


def test_the_first_part_of_a_composite_uses_the_subscriptions_own_tag():
    assert part_tag("T_s", 0) == "T_s"


def test_later_parts_and_windows_get_distinct_tags():
    tags = {part_tag("T_s", 1), part_tag("T_s", 2), window_tag("T_s", 1), window_tag("T_s", 2)}
    assert tags == {"T_s@@part1", "T_s@@part2", "T_s@@window1", "T_s@@window2"}


def test_a_window_is_full_when_the_client_holds_every_windows_deliveries():
    sub = _sub(window=2)
    sub.unacked = 1
    assert not sub.window_full()
    sub.unacked = 2
    assert sub.window_full()
    sub.extra_tags = ("T_s@@window1",)  # two windows now: room for two more
    assert not sub.window_full()
    sub.unacked = 4
    assert sub.window_full()
