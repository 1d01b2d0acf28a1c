"""Failed logins per (client address, user): stop password guessing, lock nobody else out."""

from __future__ import annotations

from stomp_bridge.session.throttle import LoginThrottle


def _throttle(limit: int = 3, **kw):
    now = [0.0]
    return LoginThrottle(limit, 60.0, clock=lambda: now[0], **kw), now


def test_the_limit_th_failure_holds_that_user_from_that_address_until_the_oldest_leaves_the_window():
    t, now = _throttle()
    for second in (0, 10, 20):
        assert t.retry_after("10.0.0.1", "bob") == 0
        now[0] = second
        t.failed("10.0.0.1", "bob")
    now[0] = 30
    assert t.retry_after("10.0.0.1", "bob") == 30  # the failure at 0 s leaves at 60 s
    now[0] = 60
    assert t.retry_after("10.0.0.1", "bob") == 0


def test_other_users_and_other_addresses_are_not_affected():
    t, _ = _throttle()
    for _ in range(3):
        t.failed("10.0.0.1", "bob")
    assert t.retry_after("10.0.0.1", "bob") > 0
    assert t.retry_after("10.0.0.1", "alice") == 0
    assert t.retry_after("10.0.0.2", "bob") == 0


def test_a_successful_login_clears_the_count():
    t, _ = _throttle()
    t.failed("10.0.0.1", "bob")
    t.failed("10.0.0.1", "bob")
    t.succeeded("10.0.0.1", "bob")
    t.failed("10.0.0.1", "bob")
    assert t.retry_after("10.0.0.1", "bob") == 0


def test_off_at_zero_and_without_an_address():
    t, _ = _throttle(limit=0)
    for _ in range(100):
        t.failed("10.0.0.1", "bob")
    assert t.retry_after("10.0.0.1", "bob") == 0
    t, _ = _throttle()
    for _ in range(5):
        t.failed(None, "bob")
    assert t.retry_after(None, "bob") == 0


def test_memory_is_bounded_by_the_number_of_pairs_kept():
    t, _ = _throttle(max_keys=100)
    for n in range(10_000):
        t.failed("10.0.0.1", f"user-{n}")
    assert len(t) == 100
    for _ in range(2):
        t.failed("10.0.0.1", "user-9999")
    assert t.retry_after("10.0.0.1", "user-9999") > 0, "the newest pairs are the ones kept"


def test_after_a_failure_logins_in_flight_count_so_concurrent_guesses_cannot_pass_the_limit():
    t, _ = _throttle(limit=3)
    for _ in range(50):
        assert t.retry_after("10.0.0.1", "bob") == 0, "no failure yet: a burst of logins is never held"
        t.begin("10.0.0.1", "bob")
    for _ in range(50):
        t.succeeded("10.0.0.1", "bob")
    t.failed("10.0.0.1", "bob")
    t.begin("10.0.0.1", "bob")
    assert t.retry_after("10.0.0.1", "bob") == 0, "one failure, one in flight"
    t.begin("10.0.0.1", "bob")
    assert t.retry_after("10.0.0.1", "bob") > 0, "one failure, two in flight: a fourth waits"
    t.abandon("10.0.0.1", "bob")  # RabbitMQ did not answer that one: it counts no more
    assert t.retry_after("10.0.0.1", "bob") == 0
    t.failed("10.0.0.1", "bob")
    t.begin("10.0.0.1", "bob")
    t.succeeded("10.0.0.1", "bob")
    assert len(t) == 0, "a success clears the count"
