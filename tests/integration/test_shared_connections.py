"""STOMP sessions share AMQP connections (one channel each): who shares, and what stays apart.

Bridge-only: the native plugin has no AMQP connections of its own to share.
The pool is inspected in the bridge's own process (which connection serves
whom); RabbitMQ's answers are what the clients see.
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.parse

import aiormq
import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="the bridge's own AMQP connections"
)


def _groups(bridge) -> dict[tuple[str, str], list[int]]:
    """(user, vhost) -> sessions on each shared connection (not the publishing ones, which a
    session takes at its first SEND: test_a_refused_publish_ends_only_its_session_...)."""
    out: dict[tuple[str, str], list[int]] = {}
    for (user, _digest, vhost, *_auth, publishing), group in list(bridge._server.pool._connections.items()):
        if not publishing:
            out.setdefault((user, vhost), []).extend(len(shared.sessions) for shared in group)
    return out


@pytest.fixture
def user(rabbit, unique):
    name = f"shared-{unique}"
    rabbit.create_user(name, "pw1")
    rabbit.set_permissions(name)
    yield name
    rabbit.delete_user(name)


def test_sessions_with_the_same_login_share_connections_up_to_the_cap(bridge, dial, user):
    b = bridge(amqp_channels_per_connection=2, amqp_min_connections_per_login=1)
    conns = []
    for _ in range(3):
        conn = dial(b)
        conn.connect(login=user, passcode="pw1")
        conns.append(conn)
    assert _groups(b) == {(user, "/"): [2, 1]}
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{b._server.ops.port}/metrics", timeout=10) as r:
        assert "stomp_bridge_amqp_connections 2" in r.read().decode()
    conns[0].receipt("DISCONNECT", {})
    conns[0].read_until_closed()
    assert _groups(b) == {(user, "/"): [1, 1]}
    for conn in conns[1:]:
        conn.receipt("DISCONNECT", {})
        conn.read_until_closed()
    assert _groups(b) == {}, "the last session out closes the connection"


def test_a_wrong_passcode_is_refused_even_while_a_connection_for_that_user_is_open(bridge, dial, user):
    b = bridge(amqp_min_connections_per_login=1)
    good = dial(b)
    good.connect(login=user, passcode="pw1")
    bad = dial(b)
    bad.send_frame("CONNECT", {"accept-version": "1.2", "host": "/", "login": user, "passcode": "nope"})
    error = bad.error_then_close(timeout=15)
    assert error["message"] == "Bad CONNECT"
    assert _groups(b) == {(user, "/"): [1]}


def test_after_the_reuse_time_a_new_login_is_checked_by_rabbitmq_again(bridge, dial, rabbit, user):
    b = bridge(amqp_login_reuse_seconds=0, amqp_min_connections_per_login=1)
    first = dial(b)
    first.connect(login=user, passcode="pw1")
    rabbit.create_user(user, "pw2")  # the password changes while a shared connection is open
    again = dial(b)
    again.send_frame("CONNECT", {"accept-version": "1.2", "host": "/", "login": user, "passcode": "pw1"})
    assert again.error_then_close(timeout=15)["message"] == "Bad CONNECT"
    fresh = dial(b)
    fresh.connect(login=user, passcode="pw2")
    first.receipt("SEND", {"destination": "/topic/shared-still-open"}, b"x")  # the old session goes on
    assert sorted(_groups(b)[(user, "/")]) == [1, 1]


@pytest.fixture
def neighbours(bridge, dial, queues, unique):
    """A bridge with every session of a login on one AMQP connection, a queue, and two logged-in
    sessions of guest: a victim and a neighbour subscribed to the queue."""
    b = bridge(amqp_min_connections_per_login=1)
    name = f"neighbour-{unique}"
    queues.append(name)
    victim, neighbour = dial(b), dial(b)
    victim.connect()
    neighbour.connect()
    neighbour.subscribe(f"/queue/{name}")
    return b, name, victim, neighbour


def test_a_channel_error_ends_only_its_own_session(neighbours, unique):
    b, name, victim, neighbour = neighbours
    assert _groups(b) == {("guest", "/"): [2]}
    shared = next(iter(b._server.pool._connections.values()))[0]
    victim.send_frame("SUBSCRIBE", {"destination": f"/amq/queue/missing-{unique}", "id": "x"})
    assert victim.error_then_close()["message"] == "not_found"
    neighbour.receipt("SEND", {"destination": f"/queue/{name}"}, b"still here")
    assert neighbour.expect("MESSAGE").body == b"still here"
    assert next(iter(b._server.pool._connections.values())) == [shared], "same connection, no reconnect"


@pytest.mark.parametrize("destination", ["/queue/transient-{unique}", "/exchange/amq.fanout"])
def test_a_transient_shared_queue_costs_no_neighbour_its_connection(neighbours, broker, rabbit, destination, unique):
    """RabbitMQ 4.3 as the tests configure it (and a later release by default) denies a
    non-durable non-exclusive queue (``transient_nonexcl_queues``) with a connection error: the
    declare goes on a connection of its own, so only the session that asked for it gets the
    ERROR, and on a broker that permits it the session gets its queue."""
    b, name, victim, neighbour = neighbours
    shared = next(iter(b._server.pool._connections.values()))[0]
    queue = f"transient-{unique}"
    victim.send_frame("SUBSCRIBE", {"destination": destination.format(unique=unique), "id": "t",
                                    "durable": "false", "exclusive": "false", "x-queue-name": queue,
                                    "receipt": "r-t"})
    try:
        if broker.version_tuple >= (4, 3):  # scripts/rabbitmq4 denies it on 4.3
            error = victim.error_then_close()
            assert (error["message"], error["receipt-id"]) == ("internal_error", "r-t")
            assert "transient_nonexcl_queues" in error.text
            assert rabbit.queue(queue) is None
        else:
            victim.wait_receipt("r-t")
            q = rabbit.queue(queue)
            assert (q["durable"], q["exclusive"]) == (False, False)
            victim.receipt("SUBSCRIBE", {"destination": f"/queue/{queue}-2", "id": "t2", "durable": "false",
                                         "exclusive": "false"})  # on the session's channel now
            assert shared.transient_queues
        neighbour.receipt("SEND", {"destination": f"/queue/{name}"}, b"still here")
        assert neighbour.expect("MESSAGE").body == b"still here"
        assert next(iter(b._server.pool._connections.values())) == [shared], "same connection, no reconnect"
    finally:
        for q in (queue, f"{queue}-2"):
            rabbit.request("DELETE", f"/queues/%2F/{q}")


def test_a_user_at_its_connection_limit_declares_its_transient_shared_queue_as_before(bridge, dial, rabbit, broker,
                                                                                       user, unique):
    """The short connection a transient non-exclusive queue is declared on is one more for the
    user: where RabbitMQ will not open it (the user's connection limit), the declare goes on the
    session's channel, as it did before and as the plugin's does, and RabbitMQ decides."""
    b = bridge(amqp_min_connections_per_login=1)
    rabbit.request("PUT", f"/user-limits/{user}/max-connections", {"value": 1})
    conn = dial(b)
    conn.connect(login=user, passcode="pw1")
    queue = f"limited-{unique}"
    conn.send_frame("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "t", "durable": "false",
                                  "exclusive": "false", "receipt": "r-t"})
    try:
        if broker.version_tuple >= (4, 3):  # denied: RabbitMQ's answer, as without the limit
            error = conn.error_then_close()
            assert error["message"] == "internal_error" and "transient_nonexcl_queues" in error.text
        else:
            conn.wait_receipt("r-t")
            assert (rabbit.queue(queue)["durable"], rabbit.queue(queue)["exclusive"]) == (False, False)
    finally:
        rabbit.request("DELETE", f"/queues/%2F/{queue}")


def test_frames_over_rabbitmqs_frame_max_are_refused_and_cost_no_neighbour_its_connection(neighbours, unique):
    """RabbitMQ closes the whole connection on a frame over its frame_max (128 KiB): a SEND's
    headers or a SUBSCRIBE's queue arguments that large are refused before they are sent (the
    plugin, on a direct connection, has no such limit: docs/compatibility.md)."""
    b, name, victim, neighbour = neighbours
    shared = next(iter(b._server.pool._connections.values()))[0]
    big = "v" * 60_000
    victim.receipt("SEND", {"destination": f"/queue/{name}"}, b"first")  # its publishing channel is open
    assert neighbour.expect("MESSAGE").body == b"first"
    victim.send_frame("SEND", {"destination": f"/queue/{name}", "receipt": "r-1", "a": big, "b": big, "c": big})
    error = victim.expect("ERROR")
    assert (error["message"], error["receipt-id"]) == ("Invalid header", "r-1") and "frame_max" in error.text
    victim.receipt("SEND", {"destination": f"/queue/{name}"}, b"second")  # not fatal, as a bad header
    assert neighbour.expect("MESSAGE").body == b"second"
    victim.send_frame("SUBSCRIBE", {"destination": f"/queue/args-{unique}", "id": "a", "receipt": "r-2",
                                    "x-dead-letter-exchange": big, "x-dead-letter-routing-key": big,
                                    "x-overflow": big})
    error = victim.error_then_close()
    assert (error["message"], error["receipt-id"]) == ("Invalid header", "r-2") and "frame_max" in error.text
    neighbour.receipt("SEND", {"destination": f"/queue/{name}"}, b"still here")
    assert neighbour.expect("MESSAGE").body == b"still here"
    assert next(iter(b._server.pool._connections.values())) == [shared], "same connection, no reconnect"


def test_a_refused_publish_ends_only_its_session_and_gives_back_both_its_channels(neighbours, unique):
    """A session's publishes travel on a channel of a publishing connection (amqp_separate_publishers):
    RabbitMQ closing that channel (a publish to a missing exchange) ends the session with the
    plugin's ERROR, and the session's consuming channel is closed too, not left open on the shared
    connection; neighbours on both connections go on."""
    b, name, victim, neighbour = neighbours
    neighbour.receipt("SEND", {"destination": f"/queue/{name}"}, b"first")
    assert neighbour.expect("MESSAGE").body == b"first"
    victim.receipt("SEND", {"destination": f"/queue/{name}"}, b"second")
    assert neighbour.expect("MESSAGE").body == b"second"
    pool = b._server.pool
    consuming, publishing = ([s for key, group in pool._connections.items() if key[-1] is kind for s in group]
                             for kind in (False, True))
    assert [len(s.sessions) for s in consuming] == [2] and [len(s.sessions) for s in publishing] == [2]
    victim.send_frame("SEND", {"destination": f"/exchange/missing-{unique}/x"}, b"lost")
    error = victim.error_then_close()
    assert error["message"] == "not_found" and f"missing-{unique}" in error.text
    neighbour.receipt("SEND", {"destination": f"/queue/{name}"}, b"still here")
    assert neighbour.expect("MESSAGE").body == b"still here"
    deadline = time.monotonic() + 10
    while [len(s.sessions) for s in consuming + publishing] != [1, 1]:
        assert time.monotonic() < deadline, [dict(s.sessions) for s in consuming + publishing]
        time.sleep(0.05)  # polls the bridge's own tables
    assert [s.reserved for s in consuming + publishing] == [1, 1]


def test_a_connection_error_ends_every_session_on_it_with_the_reason(bridge, dial, rabbit, unique):
    b = bridge(amqp_min_connections_per_login=1)
    first, second = dial(b), dial(b)
    first.connect()
    second.connect()
    assert _groups(b) == {("guest", "/"): [2]}
    # The connection carries the name of the session that opened it.
    name = "stomp-bridge 127.0.0.1:%d (guest)" % first.sock.getsockname()[1]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # the management API lists a connection within moments
        names = [c["name"] for c in rabbit.request("GET", "/connections") or []
                 if (c.get("client_properties") or {}).get("connection_name") == name]
        if names:
            break
        time.sleep(0.2)
    assert names, f"RabbitMQ does not list {name!r}"
    rabbit.request("DELETE", f"/connections/{urllib.parse.quote(names[0], safe='')}")
    for conn in (first, second):
        error = conn.error_then_close(timeout=10)
        assert error["message"] == "connection_forced"


# -- a client that stops reading must not stall the others on its connection -------------

COUNT = 2000
SIZE = 16 * 1024  # 32 MiB in all: far more than the socket buffers, the bridge's buffer and the window


def _ready(amqp_url: str, queue: str) -> int:
    async def count() -> int:
        connection = await aiormq.connect(amqp_url)
        try:
            channel = await connection.channel()
            return (await channel.queue_declare(queue, passive=True)).message_count
        finally:
            await connection.close()

    return asyncio.run(count())


@pytest.mark.parametrize("ack", ["auto", "client"])  # client: no prefetch-count, so RabbitMQ would not stop
def test_a_stalled_consumer_does_not_stall_its_neighbour_on_the_same_connection(ack, bridge, dial, broker, queues, unique):
    b = bridge(write_buffer_high=64 * 1024, auto_ack_window=50, amqp_min_connections_per_login=1)
    slow_q, fast_q = f"stalled-{unique}", f"lively-{unique}"
    queues.extend([slow_q, fast_q])
    producer, stalled, neighbour = dial(b), dial(b, timeout=30), dial(b)
    for conn in (producer, stalled, neighbour):
        conn.connect()
    stalled.subscribe(f"/queue/{slow_q}", ack=ack)  # then it stops reading
    neighbour.subscribe(f"/queue/{fast_q}")
    assert _groups(b) == {("guest", "/"): [3]}, "all three share one AMQP connection"
    body = b"s" * SIZE
    producer.send_raw(b"".join(
        f"SEND\ndestination:/queue/{slow_q}\ncontent-length:{SIZE}\n\n".encode() + body + b"\x00"
        for _ in range(COUNT - 1)
    ))
    producer.receipt("SEND", {"destination": f"/queue/{slow_q}"}, body, receipt_id="all-sent")

    # The neighbour's round trips go on while the stalled client's deliveries back up.
    for i in range(50):
        neighbour.receipt("SEND", {"destination": f"/queue/{fast_q}"}, f"ping {i}", receipt_id=f"p{i}")
        assert neighbour.expect("MESSAGE").body == f"ping {i}".encode()

    # No event says "RabbitMQ stopped sending": wait until the queue depth holds still.
    deadline = time.monotonic() + 20
    last = _ready(broker.amqp_url, slow_q)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _ready(broker.amqp_url, slow_q)
        if now == last:
            break
        last = now
    # In flight at most (16 MiB): the window or the time the channel limit takes to apply, the
    # bridge's 64 KiB, and the kernel socket buffers on both hops (several MiB each on loopback).
    assert last >= COUNT - 1000, f"only {last} of {COUNT} still queued: the bridge buffered the rest"
    neighbour.receipt("SEND", {"destination": f"/queue/{fast_q}"}, b"after", receipt_id="after")
    assert neighbour.expect("MESSAGE").body == b"after"

    for _ in range(COUNT):  # the stalled client reads again and gets every message
        frame = stalled.read_frame(timeout=30)
        assert frame.command == "MESSAGE", frame.headers
        assert len(frame.body) == SIZE
    if ack == "client":
        stalled.receipt("ACK", {"id": frame["ack"]}, receipt_id="acked")
    assert _ready(broker.amqp_url, slow_q) == 0


def test_an_exclusive_queue_ends_with_its_session_while_the_connection_lives_on(bridge, dial, rabbit, unique):
    b = bridge(amqp_min_connections_per_login=1)
    owner, neighbour = dial(b), dial(b)
    owner.connect()
    neighbour.connect()
    assert _groups(b) == {("guest", "/"): [2]}
    name = f"exclusive-{unique}"
    owner.receipt("SEND", {"destination": f"/queue/{name}", "exclusive": "true"}, b"x")
    assert rabbit.queue(name)["exclusive"] is True
    owner.receipt("DISCONNECT", {})
    owner.read_until_closed()
    assert _groups(b) == {("guest", "/"): [1]}, "the neighbour keeps the shared connection open"
    assert rabbit.queue(name) is None, "the plugin's exclusive queue ends with its STOMP connection"


def _unacked_by_user(user: str) -> int:
    """RabbitMQ's live count (not the management API's sampled one) of the user's unacked deliveries."""
    import json

    from testkit.brokers import rabbitmqctl

    out = rabbitmqctl("list_channels", "-q", "--formatter", "json", "user", "messages_unacknowledged")
    return sum(row["messages_unacknowledged"] for row in json.loads(out or "[]") if row["user"] == user)


def test_ack_auto_deliveries_are_acknowledged_while_the_client_is_quiet(bridge, dial, user, queues, unique):
    """The bridge batches its acks of ack:auto deliveries (a quarter of auto_ack_window, or a
    short delay): a few messages on an idle connection must not stay unacked in RabbitMQ,
    where a channel failure would hand them to another consumer again."""
    b = bridge(auto_ack_window=400)
    name = f"autoack-{unique}"
    queues.append(name)
    conn = dial(b)
    conn.connect(login=user, passcode="pw1")
    conn.subscribe(f"/queue/{name}")
    for i in range(3):
        conn.send_frame("SEND", {"destination": f"/queue/{name}"}, f"m{i}")
    assert [conn.expect("MESSAGE").body for _ in range(3)] == [b"m0", b"m1", b"m2"]
    # No event says RabbitMQ took the acks: ask it until a deadline.
    deadline = time.monotonic() + 10
    while (unacked := _unacked_by_user(user)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert unacked == 0
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, "still here", receipt_id="after")
    assert conn.expect("MESSAGE").body == b"still here"


def test_many_sessions_of_one_login_never_pass_the_channel_cap_and_cost_others_nothing(bridge, dial, user):
    """The channel-exhaustion attack: one client opens session after session with one login.
    Each AMQP connection carries at most amqp_channels_per_connection of them (never more than
    RabbitMQ's channel_max), new ones open further connections of that user only, and another
    user's login is unaffected (RabbitMQ's own view: rabbitmqctl list_connections)."""
    import json

    from testkit.brokers import rabbitmqctl

    b = bridge(amqp_channels_per_connection=8, amqp_min_connections_per_login=1)
    conns = []
    for _ in range(60):
        conn = dial(b)
        conn.connect(login=user, passcode="pw1")
        conns.append(conn)
    other = dial(b)
    other.connect()
    other.receipt("SEND", {"destination": "/topic/unaffected"}, "x")
    listed = json.loads(rabbitmqctl("list_connections", "-q", "--formatter", "json", "user", "channels") or "[]")
    mine = [row["channels"] for row in listed if row["user"] == user]
    assert sorted(mine) == [4] + [8] * 7, mine  # 60 sessions: 7 full connections and one with 4
    assert _groups(b)[(user, "/")] == [8] * 7 + [4]
