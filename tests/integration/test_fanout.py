"""Fan-out at the edge (edge_fanout), against the plugin: topic subscribers of one login that
share one queue in the bridge get what the plugin gives each from a queue of its own; RabbitMQ
refuses a subscriber as its own; a subscriber that does not keep up is closed, the others lose
nothing. (The whole differential suite also runs with fan-out on: STOMP_BRIDGE_TEST_FANOUT=1.)"""

from __future__ import annotations

import os
import socket

import pytest

from testkit.brokers import rabbitmqctl
from tests.integration.rawstomp import RawStomp

NATIVE = os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native"
bridge_only = pytest.mark.skipif(NATIVE, reason="the bridge's own sharing")
BUFFER = 1024 * 1024  # a subscriber's MESSAGEs the bridge holds before it closes it


@pytest.fixture
def target(stomp_target, bridge):
    """(port, the bridge or None): the plugin, or a bridge with fan-out at the edge."""
    if stomp_target.native:
        return stomp_target.port, None
    server = bridge(edge_fanout=True, fanout_subscriber_buffer=BUFFER)
    return server.port, server


def _connect(dial, port: int, **kwargs) -> RawStomp:
    conn = dial(port)
    conn.connect(**kwargs)
    return conn


def test_shared_subscribers_get_the_plugins_messages(target, dial, unique):
    port, server = target
    topic = f"/topic/fan.{unique}"
    subscribers = [_connect(dial, port) for _ in range(3)]
    for n, conn in enumerate(subscribers):
        conn.subscribe(topic, sub_id=f"s{n}")
    sender = _connect(dial, port)
    for n in range(3):
        sender.receipt("SEND", {"destination": topic, "persistent": "true", "color": f"c{n}",
                                "content-type": "text/plain"}, f"body {n}", receipt_id=f"r{n}")
    seen = []
    for n, conn in enumerate(subscribers):
        got = [conn.expect("MESSAGE") for _ in range(3)]
        assert [m.body for m in got] == [b"body 0", b"body 1", b"body 2"]  # RabbitMQ's order
        for m in got:
            assert m["subscription"] == f"s{n}" and m["destination"] == topic
            assert m["message-id"].startswith(f"T_s{n}@@")
        seen.append([{k: v for k, v in m.header_dict.items() if k not in ("subscription", "message-id")}
                     for m in got])
    assert seen[0] == seen[1] == seen[2]  # every other header as every other subscriber's
    assert [h["color"] for h in seen[0]] == ["c0", "c1", "c2"] and seen[0][0]["persistent"] == "true"
    if server is not None:
        counters = server._server.counters
        assert (counters.fanout_queues, counters.fanout_subscribers) == (1, 3)


@bridge_only
def test_rabbitmq_routes_one_copy_per_bridge_not_per_subscriber(target, dial, rabbit, unique):
    port, server = target
    key = f"fan1.{unique}"
    subscribers = [_connect(dial, port) for _ in range(5)]
    for n, conn in enumerate(subscribers):
        conn.subscribe(f"/topic/{key}", sub_id=f"s{n}")
    bound = [q for q in rabbit.topic_queues(key)]
    assert len(bound) == 1, bound  # one queue for the five (the probes' own are gone)
    _connect(dial, port).receipt("SEND", {"destination": f"/topic/{key}"}, b"x")
    for conn in subscribers:
        assert conn.expect("MESSAGE").body == b"x"


def test_rabbitmq_refuses_a_shared_subscriber_as_its_own(target, dial, rabbit, broker, unique):
    port, _ = target
    user = f"fan-{unique}"
    rabbit.create_user(user, "pw")
    try:
        rabbit.set_permissions(user)
        first = _connect(dial, port, login=user, passcode="pw")
        first.subscribe(f"/topic/allowed.{unique}", sub_id="first")  # the group's queue, if shared
        rabbit.set_topic_permissions(user, read="^nothing$")  # revoked meanwhile
        later = _connect(dial, port, login=user, passcode="pw")
        later.send_frame("SUBSCRIBE", {"destination": f"/topic/allowed.{unique}", "id": "later"})
        error = later.error_then_close()
        denied = "read access" if broker.version_tuple >= (4, 0) else "access"
        assert error["message"] == "access_refused"
        assert error.text == (f"{denied} to topic 'allowed.{unique}' in exchange 'amq.topic' in vhost '/' "
                              f"refused for user '{user}'")
        sender = _connect(dial, port)
        sender.receipt("SEND", {"destination": f"/topic/allowed.{unique}"}, b"still")
        assert first.expect("MESSAGE").body == b"still"  # what it had, it keeps (as under the plugin)
    finally:
        rabbit.delete_user(user)


@bridge_only
def test_a_subscriber_that_does_not_read_is_closed_and_the_others_lose_nothing(target, dial, unique):
    port, server = target
    topic = f"/topic/slow.{unique}"
    slow = socket.create_connection(("127.0.0.1", port))
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0"
                 + f"SUBSCRIBE\ndestination:{topic}\nid:slow\nreceipt:rs\n\n\0".encode())
    fast = _connect(dial, port)
    fast.subscribe(topic, sub_id="fast")
    sender = _connect(dial, port)
    body = b"x" * 32768
    count, window = 600, 8  # 20 MB: past what the kernel buffers for the slow one, and BUFFER
    got: list[str] = []
    for start in range(0, count, window):  # the fast one never has more than a window unread
        for n in range(start, start + window):
            sender.send_frame("SEND", {"destination": topic, "n": str(n)}, body)
        got.extend(fast.expect("MESSAGE", timeout=60)["n"] for _ in range(window))
    sender.receipt("SEND", {"destination": topic, "n": "last"}, body, receipt_id="last")
    got.append(fast.expect("MESSAGE", timeout=60)["n"])
    assert got == [str(n) for n in range(count)] + ["last"]
    counters = server._server.counters
    assert counters.fanout_slow_subscribers == 1 and counters.fanout_subscribers == 1
    assert counters.errors["Slow subscriber"] == 1
    slow.close()


@bridge_only
def test_the_subscriber_that_made_the_shared_queue_leaving_ends_nothing_for_the_others(target, dial, rabbit, unique):
    """The shared queue's channel is a session of the login's own, not the first subscriber's:
    that one disconnecting, or dropping its socket, leaves the others receiving."""
    port, server = target
    topic = f"/topic/first.{unique}"
    first, second, third = (_connect(dial, port) for _ in range(3))
    for n, conn in enumerate((first, second, third)):
        conn.subscribe(topic, sub_id=f"s{n}")
    first.receipt("DISCONNECT", {}, receipt_id="bye")
    third.sock.close()  # no DISCONNECT: the socket goes
    sender = _connect(dial, port)
    sender.receipt("SEND", {"destination": topic}, b"after")
    assert second.expect("MESSAGE").body == b"after"
    assert len(rabbit.topic_queues(f"first.{unique}")) == 1
    assert server._server.counters.fanout_subscribers == 1


@bridge_only
@pytest.mark.rabbitmqctl
def test_the_shared_queue_deleted_cancels_every_subscriber_as_its_own_would(target, dial, rabbit, unique):
    """RabbitMQ cancels the one consumer: each subscriber gets the plugin's ERROR for a deleted
    subscription queue, naming its own subscription; a later SUBSCRIBE makes a queue again."""
    port, server = target
    key = f"gone.{unique}"
    subscribers = [_connect(dial, port) for _ in range(2)]
    for n, conn in enumerate(subscribers):
        conn.subscribe(f"/topic/{key}", sub_id=f"s{n}")
    (queue,) = rabbit.topic_queues(key)
    rabbitmqctl("delete_queue", queue)
    for n, conn in enumerate(subscribers):
        error = conn.expect("ERROR")
        assert (error["message"], error["subscription"]) == ("Server cancelled subscription", f"s{n}")
    again = _connect(dial, port)
    again.subscribe(f"/topic/{key}", sub_id="again")
    _connect(dial, port).receipt("SEND", {"destination": f"/topic/{key}"}, b"new")
    assert again.expect("MESSAGE").body == b"new"
    assert server._server.counters.fanout_queues == 1


@bridge_only
def test_websocket_subscribers_share_with_tcp_ones_and_each_gets_a_whole_message(bridge, dial, unique):
    """Browsers (a WebSocket each, one with permessage-deflate) and a TCP client on one shared
    queue: each WebSocket message is one whole MESSAGE frame, with its own subscription."""
    from contextlib import ExitStack

    from websockets.sync.client import connect

    server = bridge(edge_fanout=True, ws_port=0)
    stack = ExitStack()  # closed at the end (with: the deprecated plain connect() warns)
    topic = f"/topic/ws.{unique}"
    sockets = []
    # two shared, and one whose include-seq gives it a queue of its own: the reference
    for n, (compression, extra) in enumerate((("deflate", ""), (None, ""), (None, "include-seq:seq\n"))):
        ws = stack.enter_context(connect(f"ws://127.0.0.1:{server.ws_port}/ws", subprotocols=["v12.stomp"],
                                         compression=compression, open_timeout=20))
        ws.send("CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0")
        assert ws.recv(timeout=20).startswith("CONNECTED")
        ws.send(f"SUBSCRIBE\ndestination:{topic}\nid:w{n}\n{extra}receipt:r{n}\n\n\0")
        assert ws.recv(timeout=20).startswith("RECEIPT")
        sockets.append(ws)
    tcp = _connect(dial, server.port)
    tcp.subscribe(topic, sub_id="t")
    body = "é" * 3000 + "end"  # larger than one read, text frames as stompjs sends them
    _connect(dial, server.port).receipt("SEND", {"destination": topic, "content-type": "text/plain"}, body)
    got = []
    for n, ws in enumerate(sockets):
        head, _, rest = ws.recv(timeout=20).partition("\n\n")
        lines = head.split("\n")
        assert lines[:3] == ["MESSAGE", f"subscription:w{n}", f"destination:{topic}"]
        got.append(([line for line in lines[3:] if not line.startswith(("message-id:", "seq:"))], rest))
    assert got[0] == got[1] == got[2]  # shared or not, the same MESSAGE
    assert got[0][1].startswith(body + "\0")
    assert tcp.expect("MESSAGE").body == body.encode()
    assert server._server.counters.fanout_queues == 1 and server._server.counters.fanout_copies == 3
    stack.close()
