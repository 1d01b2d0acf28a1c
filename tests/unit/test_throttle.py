"""Failed logins per (client address, user): guessing kept slow however many connections guess,
the rightful user's known password never held back, nobody else locked out (a fake clock)."""

from __future__ import annotations

import asyncio

import pytest

from stomp_bridge.metrics import Counters
from stomp_bridge.protocol.errors import AccessRefused, BrokerError
from stomp_bridge.session.login_turn import login_turn
from stomp_bridge.session.throttle import KNOWN_PER_USER, LOGIN_KEPT, LoginThrottle
from tests.tokens import token

A, B = "10.0.0.1", "10.0.0.2"


def _throttle(limit: int = 3, **kw):
    now = [0.0]
    return LoginThrottle(limit, 60.0, clock=lambda: now[0], **kw), now


def _fail(t: LoginThrottle, address: str | None = A, user: str = "bob", passcode: str = "guess") -> None:
    admission = t.admit(address, user, passcode)
    assert admission.refused_for == 0 and admission.wait == 0
    t.failed(admission)


def _succeed(t: LoginThrottle, address: str | None = A, user: str = "bob", passcode: str = "right") -> None:
    admission = t.admit(address, user, passcode)
    t.succeeded(admission)


def test_below_the_limit_logins_go_at_once_and_the_limit_th_failure_spaces_the_next_turns():
    t, now = _throttle()
    for second in (0, 10, 20):
        now[0] = second
        _fail(t)
    # hot: one turn per window/limit (20 s here, 6 s at the default 10 per minute) after the last failure
    now[0] = 30
    first = t.admit(A, "bob", "guess")
    assert (first.wait, first.refused_for) == (10, 0), "its turn is within max_wait: it waits for it"
    second = t.admit(A, "bob", "guess")
    assert second.refused_for == 30 and second.wait == 0, "the next turn is 20 s after that: refused, told when"


def test_a_guesser_gets_the_limit_then_fewer_and_fewer_turns_up_to_one_a_window():
    t, now = _throttle(limit=10)
    checked = []
    while now[0] < 600:
        admission = t.admit(A, "bob", f"guess-{len(checked)}")
        if admission.refused_for:
            now[0] += admission.refused_for - t.max_wait  # come back as early as a wait is allowed
            continue
        now[0] += admission.wait
        checked.append(now[0])
        t.failed(admission)
    gaps = [round(b - a) for a, b in zip(checked[9:], checked[10:])]
    assert checked[:10] == [0.0] * 10
    assert gaps[:6] == [6, 12, 24, 48, 60, 60], gaps
    assert len(checked) == 10 + 4 + 8, "10 at once, 4 while the spacing grows, then one a minute"


def test_parallel_connections_get_no_more_turns_than_one():
    t, now = _throttle(limit=10)
    checked, guess = 0, 0
    in_flight: list = []
    for tick in range(6000):  # 1,000 connections guessing at once, each again every 0.1 s, for 10 minutes
        now[0] = tick / 10
        for admission in in_flight:  # RabbitMQ's answers to the last tick's
            t.failed(admission)
        in_flight = []
        for _ in range(1000):
            guess += 1
            admission = t.admit(A, "bob", f"guess-{guess}")
            if admission.refused_for:
                break  # every later one of this instant is refused too
            in_flight.append(admission)
            checked += 1
    assert checked <= 10 + 4 + 8, checked  # the sequential guesser's: parallel connections gain nothing


def test_many_clients_of_one_user_reconnecting_with_one_password_are_never_held_back():
    t, _ = _throttle(limit=3)
    _fail(t, passcode="typo")
    fleet = [t.admit(A, "bob", "right") for _ in range(10_000)]
    assert all(a.wait == 0 and a.refused_for == 0 for a in fleet)
    for admission in fleet:
        t.succeeded(admission)


def test_a_password_rabbitmq_accepted_is_never_held_back_from_the_guessed_address_or_any():
    t, now = _throttle()
    _succeed(t, B)  # bob's client logged in from elsewhere once
    for _ in range(50):
        admission = t.admit(A, "bob", "guess")
        if admission.refused_for == 0:
            t.failed(admission)
    assert t.admit(A, "bob", "guess").refused_for > 0
    for address in (A, B):
        rightful = t.admit(address, "bob", "right")
        assert (rightful.wait, rightful.refused_for) == (0, 0)
        t.succeeded(rightful)
    assert t.admit(A, "bob", "guess").refused_for > 0, "its success gave the guesser nothing"


def test_a_success_keeps_the_failures_and_makes_the_password_known():
    t, now = _throttle()
    for _ in range(3):
        _fail(t)
    now[0] = 20
    admission = t.admit(A, "bob", "new-password")  # not known yet: its turn
    assert admission.wait == 0 and admission.refused_for == 0
    t.succeeded(admission)
    assert t.admit(A, "bob", "another-guess").refused_for > 0
    assert t.admit(A, "bob", "new-password").refused_for == 0


def test_a_known_password_is_forgotten_when_refused_and_after_known_good_seconds():
    t, now = _throttle(known_good_seconds=3600)
    _succeed(t, B, passcode="old")
    _succeed(t, B, passcode="kept")
    for _ in range(3):
        _fail(t)
    changed = t.admit(A, "bob", "old")
    assert changed.wait == 0 and changed.refused_for == 0, "known: no turn"
    t.failed(changed)  # changed in RabbitMQ since
    assert t.admit(A, "bob", "old").refused_for > 0
    assert t.admit(A, "bob", "kept").refused_for == 0
    now[0] = 3600  # the pair has cooled meanwhile: guess again
    for _ in range(3):
        _fail(t)
    assert t.admit(A, "bob", "kept").refused_for > 0, "accepted an hour ago: no longer known"


def test_a_hot_pair_cools_a_window_after_its_next_turn_passed_without_a_failure():
    t, now = _throttle()
    for _ in range(3):
        _fail(t)
    now[0] = 20 + 59
    assert t.admit(A, "bob", "guess").wait == 0, "its turn came, no failure for 59 s more: still hot, but due"
    t, now = _throttle()
    for _ in range(3):
        _fail(t)
    now[0] = 20 + 60
    _fail(t)
    _fail(t)
    assert t.admit(A, "bob", "guess").refused_for == 0, "cool: two failures are below the limit again"


def test_other_users_and_other_addresses_are_not_affected():
    t, _ = _throttle()
    for _ in range(3):
        _fail(t)
    assert t.admit(A, "bob", "x").refused_for > 0
    assert t.admit(A, "alice", "x") .refused_for == 0
    assert t.admit(B, "bob", "x").refused_for == 0


def test_off_at_zero_and_without_an_address():
    t, _ = _throttle(limit=0)
    for _ in range(100):
        _fail(t)
    assert t.admit(A, "bob", "x").wait == 0
    t, _ = _throttle()
    for _ in range(5):
        _fail(t, None)
    assert t.admit(None, "bob", "x").refused_for == 0


def test_memory_is_bounded_by_the_pairs_and_users_kept():
    t, _ = _throttle(max_keys=100, max_users=50)
    for n in range(10_000):
        _fail(t, user=f"user-{n}")
        _succeed(t, user=f"user-{n}")
        _succeed(t, user="busy", passcode=f"p-{n}")
    assert len(t) == 100
    assert sum(1 for n in range(10_000) if t.known(f"user-{n}", t._digest("right"))) == 49  # noqa: SLF001
    assert [t.known("busy", t._digest(f"p-{n}")) for n in range(9_995, 10_000)].count(True) == KNOWN_PER_USER  # noqa: SLF001
    for _ in range(2):
        _fail(t, user="user-9999")
    t.admit(A, "user-9999", "x")
    assert t.admit(A, "user-9999", "x").refused_for > 0, "the newest pairs are the ones kept"


def test_a_crowd_of_oauth_tokens_in_flight_is_not_taken_for_guessing():
    t, _ = _throttle(limit=3)
    crowd = [t.admit(A, "bob", token(f"client-{n}")) for n in range(1000)]
    assert all(a.wait == 0 and a.refused_for == 0 for a in crowd)
    for admission in crowd[:2]:
        t.failed(admission)  # two expired ones: below the limit still
    assert t.admit(A, "bob", "guess").refused_for == 0


def test_distinct_passwords_in_flight_count_so_concurrent_guesses_cannot_pass_the_limit():
    t, _ = _throttle(limit=3)
    burst = [t.admit(A, "bob", p) for p in ("guess-1", "guess-2", "guess-2", "guess-3")]
    assert all(a.wait == 0 and a.refused_for == 0 for a in burst), "three distinct ones in flight"
    assert t.admit(A, "bob", "guess-4").refused_for == 20, "a fourth: its turn (20 s) is too far to wait"
    for admission in burst:
        t.abandon(admission)  # RabbitMQ did not answer them: they count no more
    assert t.admit(A, "bob", "guess-5").refused_for == 20, "the pair stays hot until it cools"
    t, _ = _throttle(limit=3)
    one = t.admit(A, "bob", "guess-1")
    t.abandon(one)
    t.abandon(one)  # twice: still nothing pending
    for n in range(3):
        assert t.admit(A, "bob", f"another-{n}").wait == 0


# -- login_turn: the one wait ----------------------------------------------------------------


def _turn(t: LoginThrottle, counters: Counters, passcode: str, error: BaseException | None = None) -> None:
    async def go() -> None:
        async with login_turn(t, A, "bob", passcode, counters):
            if error is not None:
                raise error

    asyncio.run(go())


def test_login_turn_records_refusals_as_failures_and_no_answer_as_none():
    t = LoginThrottle(3, 0.3, max_wait=0.15)  # turns 0.1 s apart, then 0.2 s: too far to wait
    counters = Counters()
    for _ in range(3):
        with pytest.raises(AccessRefused):
            _turn(t, counters, "guess", AccessRefused("Bad CONNECT", "Access refused for user 'bob'"))
    with pytest.raises(BrokerError):
        _turn(t, counters, "guess", BrokerError("Broker connection lost", "no answer"))  # waited its turn
    assert counters.logins_delayed == 1
    _turn(t, counters, "right")  # the next turn: RabbitMQ accepts it
    assert counters.logins_delayed == 2
    _turn(t, counters, "right")  # known now: no turn
    assert counters.logins_delayed == 2
    with pytest.raises(AccessRefused, match="^Bad CONNECT: Access refused for user 'bob'$"):
        _turn(t, counters, "guess", AccessRefused("Bad CONNECT", "Access refused for user 'bob'"))
    assert counters.logins_throttled == 0
    with pytest.raises(AccessRefused, match="3 failed logins from 10.0.0.1 within 0.3 s; try again in 1 s"):
        _turn(t, counters, "guess", AccessRefused("Bad CONNECT", "Access refused for user 'bob'"))
    assert counters.logins_throttled == 1


def _held(admission) -> bool:
    return admission.wait > 0 or admission.refused_for > 0


def test_the_pairs_that_cooled_down_are_forgotten_after_a_flood():
    """A login flood of invented users leaves a pair each; once their window has passed with no
    failure (and a hot pair's next turn and a window more) they count as none, and sweep()
    gives their memory back."""
    t, now = _throttle(limit=3)
    for n in range(1000):
        _fail(t, user=f"invented-{n}")
    for _ in range(3):
        _fail(t)  # bob reached the limit: hot, his next turn at 20 s, cool at 80 s
    assert len(t) == 1001
    assert t.sweep() == 0, "nothing is forgotten within the window"
    now[0] = 61
    assert t.sweep() == 1000 and len(t) == 1, "the invented users cooled down; bob is still hot"
    now[0] = 81
    assert t.sweep() == 1 and len(t) == 0
    for _ in range(3):
        assert not _held(t.admit(A, "bob", "guess")), "a forgotten pair is a new one"


def test_a_sweep_keeps_a_pair_with_a_login_in_flight():
    t, now = _throttle(limit=3)
    _fail(t)
    waiting = t.admit(A, "bob", "guess-2")  # in flight: counted until RabbitMQ answers
    now[0] = 120
    assert t.sweep() == 0
    t.abandon(waiting)
    assert t.sweep() == 1


def test_a_long_login_is_kept_as_its_hmac_and_still_throttled():
    """A flood of invented 60 kB user names held 9 kB a pair (870 MB at max_keys): a login past
    LOGIN_KEPT characters is remembered by its HMAC, and throttled the same."""
    t, _ = _throttle(limit=3)
    long_user = "u" * 60_000
    for _ in range(3):
        _fail(t, user=long_user)
    assert _held(t.admit(A, long_user, "guess"))
    assert not _held(t.admit(A, "u" * 59_999 + "v", "guess")), "another long login is another pair"
    kept = [user for _, user in t._pairs]  # noqa: SLF001
    assert kept and all(len(user) <= LOGIN_KEPT + 1 for user in kept)
    _succeed(t, user=long_user, passcode="right")
    assert t.known(long_user, t._digest("right"))  # noqa: SLF001
