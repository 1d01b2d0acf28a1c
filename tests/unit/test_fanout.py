"""Fan-out at the edge (edge_fanout): which SUBSCRIBEs share a queue, what RabbitMQ still checks
for each, and that every subscriber gets the MESSAGEs a queue of its own would have held, byte for
byte as the bridge would write them from its own delivery (core/fanout.py, session/fanout.py),
over the real sessions, cores and hub with a fake RabbitMQ (testkit/core.py)."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from stomp_bridge.amqp.delivery import Delivery
from stomp_bridge.core import plans as p
from stomp_bridge.core.state import CLOSED, OPEN
from stomp_bridge.metrics import Counters
from stomp_bridge.session.fanout import CONSUMER_TAG, FanoutHub
from testkit.core import Harness


class Bridge:
    """Sessions of one bridge: one loop, one hub."""

    def __init__(self, limit: int = 1 << 20, **rules: object) -> None:
        self.loop = asyncio.new_event_loop()
        self.counters = Counters()
        self.hub = FanoutHub(self.counters, limit)
        self.rules = {"edge_fanout": True, **rules}
        self.sessions: list[Harness] = []

    def session(self, **rules: object) -> Harness:
        h = Harness(hub=self.hub, loop=self.loop, **{**self.rules, **rules})
        h.connect()
        self.sessions.append(h)
        return h

    def group_channel(self):
        channels = [c for h in self.sessions for c in h.siblings if not c.closed]
        assert len(channels) == 1, channels
        return channels[0]

    def publish(self, delivery_tag: int, body: bytes = b"m", **properties: object) -> None:
        """RabbitMQ delivers a message of the shared queue (one read of the group's channel)."""
        channel = self.group_channel()
        events = channel.events
        props = {"headers": {}, **properties}
        self.sessions[0]._call(lambda: (
            events.delivered(Delivery(CONSUMER_TAG, delivery_tag, False, "amq.topic", "t", props, body)),
            events.batch_ended()))


def subscribe(h: Harness, sub_id: str = "s", destination: str = "/topic/t", **headers: str) -> None:
    h.frame("SUBSCRIBE", {"destination": destination, "id": sub_id, "receipt": f"r-{sub_id}", **headers})
    assert [f.command for f in h.frames()] == ["RECEIPT"]


def messages(h: Harness) -> list:
    return [f for f in h.frames() if f.command == "MESSAGE"]


# -- which SUBSCRIBEs share ----------------------------------------------------------------------


def test_subscribers_of_one_topic_share_one_queue_and_rabbitmq_checks_each_as_its_own():
    bridge = Bridge()
    a, b = bridge.session(), bridge.session()
    subscribe(a)
    subscribe(b)
    for h in (a, b):  # the queue it would have had: declared, bound, deleted; then the shared one
        assert [type(x) for x in h.plans if type(x) in (p.Declare, p.Bind, p.DeleteQueue, p.JoinFanout,
                                                          p.Consume)] == [p.Declare, p.Bind, p.DeleteQueue,
                                                                          p.JoinFanout]
        declare = h.of(p.Declare)[0].declare
        assert declare.exclusive and declare.auto_delete and not declare.durable
        assert h.of(p.Bind)[0][1:3] == ("amq.topic", "t")
    channel = bridge.group_channel()
    assert [(auto_ack, no_ack) for _, _, no_ack, auto_ack in channel.consumed] == [(True, True)]
    assert bridge.hub.groups == 1 and bridge.counters.fanout_subscribers == 2 and bridge.counters.fanout_queues == 1


def test_each_subscriber_gets_the_message_its_own_queue_would_have_made():
    bridge = Bridge()
    a, b = bridge.session(), bridge.session()
    subscribe(a, "one")
    subscribe(b, "two")
    alone = Harness()  # the same delivery to a subscription of its own, as the bridge writes it
    alone.connect()
    alone.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "one"})
    props = {"headers": {"color": "red", "n": 5, "subscription": "spoofed"}, "delivery_mode": 2,
             "content_type": "text/plain"}
    bridge.publish(7, b"body", **props)
    alone.deliver("T_one", 7, b"body", exchange="amq.topic", routing_key="t", **props)
    [mine] = messages(a)
    [theirs] = messages(b)
    [own] = messages(alone)
    assert mine == own  # byte for byte the frame the bridge makes of its own delivery
    assert (mine.headers["subscription"], theirs.headers["subscription"]) == ("one", "two")
    assert mine.headers["message-id"] == "T_one@@session-test@@7" and theirs.headers["message-id"] == "T_two@@session-test@@7"
    assert {k: v for k, v in mine.headers.items() if k not in ("subscription", "message-id")} == {
        k: v for k, v in theirs.headers.items() if k not in ("subscription", "message-id")}
    assert bridge.counters.fanout_copies == 2


def test_what_cannot_keep_the_plugins_meaning_shared_gets_a_queue_of_its_own():
    bridge = Bridge()
    h = bridge.session()
    cases = [
        {"ack": "client"}, {"ack": "client-individual"}, {"prefetch-count": "10"}, {"durable": "true"},
        {"x-queue-name": "mine"}, {"x-message-ttl": "1000"}, {"include-seq": "seq"},
    ]
    for n, headers in enumerate(cases):
        h.frame("SUBSCRIBE", {"destination": "/topic/t", "id": f"o{n}", **headers})
    h.frame("SUBSCRIBE", {"destination": "/topic/a,/topic/b", "id": "composite"})
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "queue"})
    h.frame("SUBSCRIBE", {"destination": "/topic/t"})  # no id
    assert h.of(p.JoinFanout) == [] and len(h.of(p.Consume)) == len(cases) + 4


def test_with_the_setting_off_nothing_is_shared():
    bridge = Bridge(edge_fanout=False)
    h = bridge.session()
    subscribe(h)
    assert h.of(p.JoinFanout) == [] and [c.queue for c in h.of(p.Consume)] == [h.of(p.Declare)[0].declare.queue]


def test_logins_and_bindings_make_groups_of_their_own():
    bridge = Bridge()
    a = bridge.session()
    subscribe(a, "t1", "/topic/t")
    subscribe(a, "t2", "/topic/u")
    subscribe(a, "x", "/exchange/amq.fanout")
    assert bridge.hub.groups == 3


def test_rabbitmqs_refusal_of_a_subscribe_is_its_own_and_joins_nothing():
    bridge = Bridge()
    a, b = bridge.session(), bridge.session()
    subscribe(a)
    from collections import deque

    from testkit.core import refusal

    b.refuse[p.Bind] = deque([refusal("ACCESS_REFUSED - access to topic 't' in exchange 'amq.topic' in vhost '/' "
                                      "refused for user 'guest'")])
    b.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "s", "receipt": "r"})
    [error] = b.frames()
    assert error.headers["message"] == "access_refused" and error.body.startswith(b"access to topic")
    assert b.of(p.JoinFanout) == [] and bridge.counters.fanout_subscribers == 1


# -- what each subscriber gets -----------------------------------------------------------------------


def test_a_selector_is_its_subscribers_own():
    bridge = Bridge()
    red, blue = bridge.session(), bridge.session()
    subscribe(red, "s", selector="color = 'red'")
    subscribe(blue, "s", selector="color = 'blue'")
    bridge.publish(1, b"r", headers={"color": "red"})
    bridge.publish(2, b"b", headers={"color": "blue"})
    assert [m.body for m in messages(red)] == [b"r"] and [m.body for m in messages(blue)] == [b"b"]


def test_messages_before_a_subscribers_receipt_wait_for_it():
    bridge = Bridge()
    a, b = bridge.session(), bridge.session()
    subscribe(a)
    b.frame("SEND", {"destination": "/queue/elsewhere"}, b"x")  # its RECEIPT waits for this confirm
    b.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "s", "receipt": "r"})
    bridge.publish(1, b"early")
    assert b.frames() == []  # held behind the RECEIPT, as the plugin delivers after it
    b.confirm(1)
    assert [(f.command, f.body) for f in b.frames()] == [("RECEIPT", b""), ("MESSAGE", b"early")]


def test_unsubscribe_leaves_and_the_last_to_leave_ends_the_queue():
    bridge = Bridge()
    a, b = bridge.session(), bridge.session()
    subscribe(a)
    subscribe(b)
    channel = bridge.group_channel()
    a.frame("UNSUBSCRIBE", {"id": "s", "receipt": "u"})
    assert a.commands() == ["RECEIPT"] and a.of(p.LeaveFanout) == [p.LeaveFanout("T_s")] and a.of(p.Cancel) == []
    bridge.publish(1, b"only b")
    assert messages(a) == [] and [m.body for m in messages(b)] == [b"only b"]
    b.close()  # its session ends: it leaves too
    assert channel.closed and bridge.hub.groups == 0 and bridge.counters.fanout_subscribers == 0
    assert bridge.counters.fanout_queues == 0


def test_a_subscriber_that_does_not_keep_up_is_closed_and_no_one_else_waits():
    bridge = Bridge(limit=64 * 1024)
    slow, fast = bridge.session(), bridge.session()
    subscribe(slow)
    subscribe(fast)
    slow.backlog = 64 * 1024 + 1  # its socket holds that much it has not taken
    bridge.publish(1, b"m")
    [message, error] = slow.frames()
    assert (message.command, error.headers["message"]) == ("MESSAGE", "Slow subscriber") and slow.core.state is CLOSED
    bridge.publish(2, b"n")
    assert [m.body for m in messages(fast)] == [b"m", b"n"] and fast.core.state is OPEN
    assert bridge.counters.fanout_slow_subscribers == 1


def test_when_rabbitmq_cancels_the_shared_consumer_each_subscriber_hears_it_as_its_own():
    bridge = Bridge()
    a, b = bridge.session(), bridge.session()
    subscribe(a, "one")
    subscribe(b, "two")
    channel = bridge.group_channel()
    a._call(lambda: channel.events.cancelled(CONSUMER_TAG))
    for h, sub_id in ((a, "one"), (b, "two")):
        [error] = h.frames()
        assert (error.headers["message"], error.headers["subscription"]) == ("Server cancelled subscription", sub_id)
        assert h.core.state is OPEN
    assert bridge.hub.groups == 0


# -- every subscriber gets exactly what its own queue would have held --------------------------------

actions = st.lists(
    st.one_of(
        st.tuples(st.just("subscribe"), st.integers(0, 2), st.sampled_from([None, "odd", "even"])),
        st.tuples(st.just("unsubscribe"), st.integers(0, 2)),
        st.tuples(st.just("publish"),),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(actions)
def test_any_mix_of_subscribe_unsubscribe_and_publish(steps):
    """Model: subscriber i's own queue holds each message published while it is subscribed (its
    selector applied), in order; the shared queue's copies must be exactly those."""
    bridge = Bridge()
    sessions = [bridge.session() for _ in range(3)]
    subscribed: dict[int, str | None] = {}
    expected: dict[int, list[bytes]] = {i: [] for i in range(3)}
    got: dict[int, list[bytes]] = {i: [] for i in range(3)}
    number = 0
    for step in steps:
        kind = step[0]
        if kind == "subscribe":
            _, i, parity = step
            if i in subscribed:
                continue
            headers = {"selector": f"parity = '{parity}'"} if parity else {}
            subscribe(sessions[i], "s", **headers)
            subscribed[i] = parity
        elif kind == "unsubscribe":
            i = step[1]
            if i not in subscribed:
                continue
            sessions[i].frame("UNSUBSCRIBE", {"id": "s"})
            del subscribed[i]
        else:
            if not subscribed:
                continue
            number += 1
            body = b"%d" % number
            bridge.publish(number, body, headers={"parity": "odd" if number % 2 else "even"})
            for i, parity in subscribed.items():
                if parity is None or (number % 2 == 1) == (parity == "odd"):
                    expected[i].append(body)
        for i, h in enumerate(sessions):
            got[i].extend(m.body for m in messages(h))
    assert got == expected
