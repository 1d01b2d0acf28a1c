"""Short runs of every part of the reliability harness (``python -m reliability`` runs them longer).

Each asserts the property, never a timing: parser and sessions fuzzed without a
non-protocol error, every hostile client answered while a well-behaved one keeps
working, no message lost under faults, nothing leaked after a soak.
"""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from reliability import faults, fuzz_isolation, fuzz_parser, fuzz_session, hostile, siege, soak
from reliability.broker import PrivateRabbit
from testkit.management import Management

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native",
                       reason="the harness tests the bridge's own processes"),
]


@pytest.fixture
def mgmt(broker, rabbit) -> Management:
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # writes to sockets a fault just reset
    return Management(broker.api_url, broker.user, broker.password)


def test_parser_fuzzing_finds_only_protocol_errors(tmp_path):
    result = fuzz_parser.fuzz(10_000, tmp_path)
    assert not result["crashed"], result["output"]
    assert result["executions"] >= 10_000


def test_session_fuzzing_leaves_the_bridge_up_and_a_good_client_working(broker, mgmt):
    result = asyncio.run(fuzz_session.run(broker.amqp_url, mgmt, sessions=100, seed=7))
    assert result["sessions"] == 100
    assert result["probe"]["n"] > 0


def test_no_attacker_frame_ends_a_neighbours_session(broker, mgmt):
    """Issue 39: an attacker session of guest (issue 39's 22 sequences, the refusals in
    reliability/hard_errors.py, random frames) beside neighbours of guest that share its AMQP
    connections, on three bridges (shared connections with and without the opt-in features, the
    default pooling): no neighbour gets an ERROR, loses its connection or stalls, and RabbitMQ closes
    no shared AMQP connection (the bridge's counter by reply code)."""
    name = broker.local.name if broker.local is not None else "remote"
    result = asyncio.run(fuzz_isolation.run(name, broker.amqp_url, mgmt, seed=39, profile="short", log=lambda m: None))
    assert result["cases"] >= 100, result["per_variant"]
    failures = [f"{f['case']} ({f['variant']}): {f['problems'][0][:400]}\n    " + "\n    ".join(f.get("steps", []))
                for f in result["failures"]]
    assert not failures, f"{len(failures)} of {result['cases']} cases on {name}:\n" + "\n".join(failures)


def test_hostile_clients_each_get_their_error_or_close(broker, mgmt):
    vhost = mgmt.temporary_vhost()
    try:
        result = asyncio.run(hostile.run(broker.amqp_url, vhost, window=1.0, subscriptions=300, baseline=1.0))
    finally:
        mgmt.delete_vhost(vhost)
    assert result["attacks"] >= len(hostile.ATTACKS)
    assert result["outcomes"]["ERROR Connect timeout"] == 20 + 500  # slowloris, CONNECT flood
    assert result["outcomes"]["ERROR Too many subscriptions"] == 1
    # login_failures_per_minute, and the pair's first turn (6 s later) if a lane still guessing waits for it
    assert result["outcomes"]["guess refused by RabbitMQ"] in (10, 11)
    assert result["outcomes"]["guess refused by the bridge (throttled)"] > 0


def test_the_siege_tells_a_locked_out_or_starved_user_from_a_slow_machine():
    """The login verdict needs no broker: refusals and a gap against the other user fail, both
    users slow alike (the machine) does not."""
    def probe(medians: list[float], refused: int = 0) -> dict:
        logins = siege.Logins(seconds=medians, refused=["10 failed logins"] * refused)
        return logins.summary()

    slow = [1.6, 1.7, 1.6]
    assert siege.login_problems({"attacked user": probe(slow), "other user": probe(slow)}) == []
    locked = siege.login_problems({"attacked user": probe([0.4], refused=29), "other user": probe([0.5] * 30)})
    assert locked and "29 of 30 fresh logins refused" in locked[0]
    starved = siege.login_problems({"attacked user": probe([6.0, 12.0, 7.0]), "other user": probe([0.5] * 3)})
    assert starved and "starved" in starved[0]


def test_hostile_mode_loses_nothing_stays_within_its_rss_bound_and_lets_both_users_in(broker, mgmt):
    """Every attack at once (reliability/siege.py) for 10 s beside a resending publisher and a
    consumer: no receipted message lost; the bridge's peak RSS within what its settings allow
    (siege.rss_bound_mb), and given back once the attackers are gone (within siege.AFTER_SLACK_MB
    of before: memory.py); fresh logins, once a second, of the user under a password flood from
    its own address and of another user: none refused, and the attacked user's median within 1 s of
    the other user's in the same run (siege.login_problems: the machine's load slows both alike).
    (The first needs a login throttle that cannot be turned against the user it protects:
    issue 30's item 2, the login branch.)"""
    result = asyncio.run(siege.run(broker.amqp_url, mgmt, seconds=10.0))
    assert result["sent"] > 0 and result["lost"] == 0, result
    assert result["rss_mb"]["peak"] <= result["bound_mb"], result["rss_mb"]
    assert result["rss_mb"]["after"] <= result["rss_mb"]["before"] + siege.AFTER_SLACK_MB, result["rss_mb"]
    assert result["reads_held"] >= siege.ATTACKERS["junk after login"], result  # each flood was stopped
    assert result["attacks"]["transaction flood"]["answers"].get("ERROR Transaction too large"), result
    assert siege.login_problems(result["logins"]) == [], result["logins"]
    assert siege.problems(result) == []


def test_resending_client_loses_nothing_when_proxies_cut_delay_and_pause(broker, mgmt):
    tally = asyncio.run(faults.proxies(broker.amqp_url, mgmt, seconds=5.0))
    assert tally.faults >= 1 and tally.sent > 0
    assert tally.lost == 0, tally


def test_resending_client_loses_nothing_when_the_bridge_is_killed(broker, mgmt):
    tally = asyncio.run(faults.kill9(broker.amqp_url, mgmt, seconds=5.0, interval=(1.0, 2.0)))
    assert tally.faults >= 1 and tally.sent > 0
    assert tally.lost == 0, tally


def test_resending_client_loses_nothing_when_a_private_rabbitmq_restarts():
    why_not = PrivateRabbit.available()
    if why_not is not None:
        pytest.skip(f"cannot start a private RabbitMQ node here: {why_not}")
    tally = asyncio.run(faults.rabbit_restart(seconds=6.0, restarts=2))
    assert tally.faults == 2 and tally.sent > 0
    assert tally.lost == 0, tally


def test_soak_loses_no_message_and_leaks_nothing(broker, mgmt):
    result = asyncio.run(soak.run(broker.amqp_url, mgmt, seconds=10.0, warmup=3.0))
    assert result["sent"] > 0
    assert result["problems"] == [], result
