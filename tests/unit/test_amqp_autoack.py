"""The ack:auto window's rule (amqp/autoack.py), without a broker, a clock or an event loop."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stomp_bridge.amqp.autoack import ARM_TIMER, HOLD, NOTHING, RELEASE, AutoAck


def window(size: int = 8, *consumers: str) -> AutoAck:
    auto = AutoAck(size)
    for tag in consumers or ("T_auto",):
        auto.add_consumer(tag)
    return auto


def test_only_ack_auto_consumers_deliveries_are_pending() -> None:
    auto = window(8, "T_auto")
    auto.delivered("T_auto", 1)
    auto.delivered("T_client", 2)
    auto.delivered("T_auto", 3)
    assert auto.pending == [1, 3]


def test_nothing_pending_asks_for_nothing_even_when_the_timer_fires() -> None:
    auto = window()
    assert auto.settle(now=False, writable=True) is NOTHING
    assert auto.settle(now=True, writable=True) is NOTHING


def test_the_first_pending_ack_arms_the_timer_once() -> None:
    auto = window(16)  # flush at 4
    auto.delivered("T_auto", 1)
    assert auto.settle(now=False, writable=True) is ARM_TIMER
    auto.delivered("T_auto", 2)
    assert auto.settle(now=False, writable=True) is NOTHING, "one timer per batch of acks"


def test_the_timer_releases_what_is_pending() -> None:
    auto = window(8)
    auto.delivered("T_auto", 1)
    auto.settle(now=False, writable=True)
    auto.timer_fired()
    assert auto.settle(now=True, writable=True) is RELEASE
    assert auto.take() == [(1, True)]
    assert not auto.timer_armed


def test_a_quarter_of_the_window_releases_at_once() -> None:
    auto = window(8)  # flush at 2
    auto.delivered("T_auto", 1)
    assert auto.settle(now=False, writable=True) is ARM_TIMER
    auto.delivered("T_auto", 2)
    assert auto.settle(now=False, writable=True) is RELEASE
    assert auto.take() == [(2, True)], "one multiple ack covers the batch"
    assert auto.pending == [] and not auto.timer_armed


def test_a_tiny_window_flushes_every_delivery() -> None:
    auto = window(3)  # a quarter of 3 rounds to 0: at least 1
    auto.delivered("T_auto", 1)
    assert auto.settle(now=False, writable=True) is RELEASE


def test_a_full_client_socket_holds_the_acks_and_the_window_fills() -> None:
    auto = window(8)
    for tag in (1, 2, 3):
        auto.delivered("T_auto", tag)
    assert auto.settle(now=False, writable=False) is HOLD
    auto.hold()
    assert auto.settle(now=False, writable=True) is NOTHING, "held until resume"
    assert auto.settle(now=True, writable=True) is NOTHING, "the timer does not release a held window"
    assert auto.pending == [1, 2, 3]
    auto.resume()
    assert auto.settle(now=True, writable=True) is RELEASE


def test_a_client_ack_consumer_on_the_channel_makes_every_ack_individual() -> None:
    auto = window(8)
    auto.individual = True
    for tag in (1, 3, 4):
        auto.delivered("T_auto", tag)
    assert auto.take() == [(1, False), (3, False), (4, False)]


def test_a_clients_multiple_ack_settles_the_pending_tags_it_covers() -> None:
    auto = window(8)
    for tag in (1, 2, 5):
        auto.delivered("T_auto", tag)
    auto.client_acked(2, multiple=False)
    assert auto.pending == [1, 2, 5], "a single ack covers only its own tag"
    auto.client_acked(3, multiple=True)
    assert auto.pending == [5]


def test_a_clients_multiple_nack_first_acks_the_ack_auto_deliveries_it_covers() -> None:
    auto = window(8)
    for tag in (1, 2, 4, 6):
        auto.delivered("T_auto", tag)
    assert auto.client_nacked(4, multiple=False) == []
    assert auto.client_nacked(4, multiple=True) == [1, 2]
    assert auto.pending == [6]


def test_a_consumer_removed_no_longer_adds_acks() -> None:
    auto = window(8)
    auto.discard_consumer("T_auto")
    auto.delivered("T_auto", 1)
    assert auto.pending == []


@given(st.lists(st.tuples(st.sampled_from(["deliver", "read", "timer", "full", "drain"]), st.booleans()), max_size=60))
def test_every_ack_auto_delivery_is_acked_once_in_order(events: list[tuple[str, bool]]) -> None:
    """Whatever the reads, timers and stalls, each pending tag leaves through take() exactly once,
    nothing is released while held, and a multiple ack never passes an undelivered tag."""
    auto = window(8)
    tag = 0
    acked: list[int] = []
    held = False
    for event, writable in events:
        if event == "deliver":
            tag += 1
            auto.delivered("T_auto", tag)
            continue
        if event == "timer":
            auto.timer_fired()
        if event == "full" and not held:
            held = auto.settle(False, False) is HOLD
            if held:
                auto.hold()
            continue
        if event == "drain" and held:
            auto.resume()
            held = False
        step = auto.settle(event == "timer", writable and not held)
        if held:
            assert step is NOTHING
        if step is RELEASE:
            before = list(auto.pending)
            (last, multiple), = auto.take()
            assert multiple and last == before[-1] <= tag
            acked.extend(before)
    acked.extend(auto.pending)  # what close() acks
    assert acked == list(range(1, tag + 1))
