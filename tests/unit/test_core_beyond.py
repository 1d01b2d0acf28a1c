"""Issue 28's features in the STOMP core, with no broker (testkit.core.Harness): scheduled delivery
(AMQ_SCHEDULED_DELAY / AMQ_SCHEDULED_TIME) and named stream subscriptions that resume."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stomp_bridge.core import plans as p
from stomp_bridge.core.state import OPEN
from stomp_bridge.protocol import resume, scheduled
from testkit.core import Harness


def connected(**rules: object) -> Harness:
    h = Harness(**rules)
    h.connect()
    return h


# -- scheduled delivery: the rules ----------------------------------------------------------


@given(st.integers(min_value=1, max_value=scheduled.MAX_DELAY_MS))
def test_a_delay_is_the_sum_of_the_levels_its_message_passes_through(delay):
    plan = scheduled.schedule(delay, 0, exchange="amq.topic", mandatory=False)
    levels = [int(name[len(scheduled.BIT_HEADER):]) for name in plan.headers if name.startswith(scheduled.BIT_HEADER)]
    assert sum(1 << level for level in levels) == delay
    assert plan.exchange == scheduled.level_exchange(max(levels))  # it enters at its highest bit


def test_each_level_queue_holds_one_ttl_and_hands_down_to_the_level_below():
    """One TTL per queue: its head always expires first (no head-of-line blocking); the chain of
    dead-letter and alternate exchanges ends at the due exchange."""
    specs = scheduled.topology()
    queues = {s.name: s.arguments for s in specs if isinstance(s, scheduled.QueueSpec)}
    exchanges = {s.name: s.arguments for s in specs if isinstance(s, scheduled.ExchangeSpec)}
    for level in range(scheduled.LEVELS):
        args = queues[scheduled.level_queue(level)]
        assert args["x-message-ttl"] == 1 << level
        assert args["x-dead-letter-exchange"] == scheduled.below(level)
        assert args["x-queue-type"] == "quorum" and args["x-dead-letter-strategy"] == "at-least-once"
        assert exchanges[scheduled.level_exchange(level)]["alternate-exchange"] == scheduled.below(level)
    assert scheduled.below(0) == scheduled.DUE_EXCHANGE
    names = [s.name for s in specs if not isinstance(s, scheduled.BindingSpec)]
    assert names[-1] == scheduled.MARKER_QUEUE  # declared last (but for its binding)


def test_a_mandatory_message_leaves_through_a_quorum_exit_that_keeps_what_no_queue_takes():
    keep, _, drop, _ = scheduled.exits("amq.topic")
    assert keep.arguments["x-dead-letter-strategy"] == "at-least-once"
    assert keep.arguments["x-dead-letter-exchange"] == "amq.topic" and keep.arguments["x-message-ttl"] == 0
    assert "x-queue-type" not in drop.arguments  # classic: its dead-lettering drops the unroutable
    assert len(scheduled.exit_queue("x" * 255, "keep").encode()) <= 255


# -- scheduled delivery in the core ------------------------------------------------------------


def test_a_scheduled_send_declares_the_levels_once_then_publishes_into_its_highest_level():
    h = connected()
    h.missing.add(scheduled.MARKER_QUEUE)
    h.frame("SEND", {"destination": "/topic/a.b", "AMQ_SCHEDULED_DELAY": "1000", "persistent": "true",
                     "reply-to": "/queue/r", "receipt": "s"}, b"later")
    assert len(h.of(p.DeclareExchange)) == scheduled.LEVELS + 1
    [publish] = h.of(p.Publish)
    assert (publish.exchange, publish.routing_key, publish.mandatory) == (scheduled.level_exchange(9), "a.b", False)
    table = publish.properties["headers"]
    assert {k for k in table if k.startswith(scheduled.BIT_HEADER)} == {
        scheduled.BIT_HEADER + str(k) for k in (3, 5, 6, 7, 8, 9)}  # 1000 = 0b1111101000
    assert table[scheduled.EXCHANGE_HEADER] == "amq.topic" and table[scheduled.UNROUTABLE_HEADER] == "drop"
    assert table[scheduled.DUE_HEADER] == int(h.now * 1000) + 1000
    assert "AMQ_SCHEDULED_DELAY" not in table
    assert publish.properties["reply_to"] == "/queue/r" and publish.properties["delivery_mode"] == 2
    assert h.frames() == []
    h.confirm(1)  # the RECEIPT once RabbitMQ confirmed the waiting copy
    assert [f.headers["receipt-id"] for f in h.frames()] == ["s"]
    before = len(h.plans)
    h.frame("SEND", {"destination": "/topic/a.b", "AMQ_SCHEDULED_DELAY": "5"})
    assert [type(plan) for plan in h.plans[before:]] == [p.Publish]  # nothing declared again


def test_a_scheduled_send_to_an_existing_topology_declares_only_its_exchanges_exits():
    h = connected()
    h.frame("SEND", {"destination": "/queue/q", "AMQ_SCHEDULED_DELAY": "100", "mandatory": "true"})
    assert [plan.queue for plan in h.of(p.QueueExists)] == [scheduled.MARKER_QUEUE]
    assert h.of(p.DeclareExchange) == []
    exits = [plan.declare.queue for plan in h.of(p.Declare) if plan.declare.queue.startswith(scheduled.PREFIX)]
    assert exits == [scheduled.exit_queue("", "keep"), scheduled.exit_queue("", "drop")]
    [publish] = h.of(p.Publish)
    assert publish.routing_key == "q" and publish.properties["headers"][scheduled.UNROUTABLE_HEADER] == "keep"
    assert h.core.mandatory is not None and not h.core.mandatory  # not tracked for a return: it cannot come back


def test_scheduled_time_wins_over_the_delay_and_a_past_time_sends_at_once():
    h = connected()
    now = int(h.now * 1000)
    h.frame("SEND", {"destination": "/topic/t", "AMQ_SCHEDULED_TIME": str(now + 4), "AMQ_SCHEDULED_DELAY": "9999"})
    h.frame("SEND", {"destination": "/topic/t", "AMQ_SCHEDULED_TIME": str(now - 1)})
    first, second = h.of(p.Publish)
    assert first.exchange == scheduled.level_exchange(2) and first.properties["headers"][scheduled.DUE_HEADER] == now + 4
    assert second.exchange == "amq.topic"


def test_a_transactional_or_composite_scheduled_send_waits_like_any_other():
    h = connected()
    h.frame("BEGIN", {"transaction": "t"})
    h.frame("SEND", {"destination": "/topic/a", "transaction": "t", "AMQ_SCHEDULED_DELAY": "2"})
    assert h.of(p.Publish) == []
    h.frame("COMMIT", {"transaction": "t"})
    h.frame("SEND", {"destination": "/topic/b,/queue/c", "AMQ_SCHEDULED_DELAY": "1"})
    assert [(plan.exchange, plan.routing_key) for plan in h.of(p.Publish)] == [
        (scheduled.level_exchange(1), "a"), (scheduled.level_exchange(0), "b"), (scheduled.level_exchange(0), "c")]


def test_a_scheduled_retained_or_expiring_send_is_refused_and_the_connection_stays():
    h = connected(retained_messages=True)
    h.frame("SEND", {"destination": "/topic/t", "AMQ_SCHEDULED_DELAY": "10", "retain": "set", "receipt": "1"})
    h.frame("SEND", {"destination": "/topic/t", "AMQ_SCHEDULED_DELAY": "10", "ttl": "50", "receipt": "2"})
    h.frame("SEND", {"destination": "/topic/t", "AMQ_SCHEDULED_DELAY": "later", "receipt": "3"})
    errors = h.frames()
    assert [(e.headers["message"], e.headers["receipt-id"]) for e in errors] == [("Invalid header", r) for r in "123"]
    assert h.of(p.Publish) == [] and h.core.state is OPEN


# -- named stream subscriptions ----------------------------------------------------------------


def subscribed(stored: bytes | None = None, ack: str = "client-individual", rules: dict | None = None,
               **headers: str) -> Harness:
    h = connected(**(rules or {}))
    queue = resume.offset_queue("s", "reader")
    if stored is not None:
        h.peeks[queue] = ({}, stored)
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/s", "id": "r", "ack": ack, resume.NAME_HEADER: "reader",
                          "prefetch-count": "10", **headers})
    return h


def delivered(h: Harness, *offsets: int) -> None:
    for offset in offsets:
        h.deliver("T_r", offset + 1, headers={"x-stream-offset": offset})


def receipts(h: Harness) -> list[str]:
    return [f.headers["receipt-id"] for f in h.frames() if f.command == "RECEIPT"]


def timers(h: Harness) -> list[p.SetTimer]:
    return [plan for plan in h.of(p.SetTimer) if plan.name not in ("token", "connect")]


def stores(h: Harness) -> list[bytes]:
    return [plan.body for plan in h.of(p.Publish) if plan.routing_key == resume.offset_queue("s", "reader")]


def test_a_named_subscription_reads_its_stored_offset_and_starts_after_it():
    h = subscribed(b"41", **{"x-stream-offset": "first"})
    queue = resume.offset_queue("s", "reader")
    assert [plan.queue for plan in h.of(p.Peek)] == [queue]
    [declare] = [plan.declare for plan in h.of(p.Declare)]
    assert (declare.queue, declare.durable, declare.arguments) == (queue, True, {"x-max-length": 1})
    [consume] = h.of(p.Consume)
    assert consume.arguments["x-stream-offset"] == 42


def test_with_nothing_stored_it_starts_where_the_subscribe_says():
    [consume] = subscribed(None, **{"x-stream-offset": "first"}).of(p.Consume)
    assert consume.arguments["x-stream-offset"] == "first"


def test_an_ack_stores_the_offset_below_the_first_unsettled_delivery_and_its_receipt_waits_for_it():
    h = subscribed()
    delivered(h, 0, 1, 2, 3)
    h.frame("ACK", {"id": "T_r@@session-test@@2", "receipt": "a"})  # offset 1: offset 0 still unsettled
    assert stores(h) == []
    h.frame("ACK", {"id": "T_r@@session-test@@1", "receipt": "b"})  # offset 0: 0 and 1 settled
    assert stores(h) == [b"1"]
    [store] = [plan for plan in h.of(p.Publish)]
    assert store.properties["delivery_mode"] == 2 and store.properties["headers"]["stream"] == "s"
    assert receipts(h) == ["a"]  # b waits for RabbitMQ's confirm of the offset
    h.confirm(1)
    assert receipts(h) == ["b"]


def test_a_cumulative_ack_stores_its_own_offset_and_a_nack_settles_too():
    h = subscribed(ack="client")
    delivered(h, 5, 6, 7)
    h.frame("ACK", {"id": "T_r@@session-test@@7"})  # offset 6, and 5 with it
    h.frame("NACK", {"id": "T_r@@session-test@@8"})
    assert stores(h) == [b"6", b"7"]


def test_ack_auto_stores_the_newest_offset_once_per_interval_and_at_disconnect():
    h = subscribed(ack="auto")
    [consume] = h.of(p.Consume)
    assert consume.no_ack and consume.stream_auto  # RabbitMQ refuses no_ack on a stream: the bridge acks
    delivered(h, 0, 1, 2)
    [timer] = timers(h)
    assert (timer.name, timer.delay) == ("offset:T_r", resume.STORE_INTERVAL)
    assert stores(h) == []
    h.advance(resume.STORE_INTERVAL)
    assert stores(h) == [b"2"]
    delivered(h, 3)
    assert len(timers(h)) == 2
    h.frame("DISCONNECT", {"receipt": "bye"})
    assert stores(h) == [b"2", b"3"]


def test_unsubscribe_stores_the_offset_or_with_the_name_forgets_it():
    h = subscribed(ack="auto")
    delivered(h, 0)
    h.frame("UNSUBSCRIBE", {"id": "r"})
    assert stores(h) == [b"0"] and h.of(p.DeleteQueue) == []
    h = subscribed(ack="auto")
    h.frame("UNSUBSCRIBE", {"id": "r", resume.NAME_HEADER: "reader"})
    assert [plan.queue for plan in h.of(p.DeleteQueue)] == [resume.offset_queue("s", "reader")]


def test_an_artemis_durable_name_on_a_stream_names_the_subscription_with_the_client_id():
    h = Harness()
    h.connect(**{"client-id": "cid"})
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/s", "id": "d", "ack": "client",
                          "durable-subscription-name": "dur"})
    assert [plan.queue for plan in h.of(p.Peek)] == [resume.offset_queue("s", "cid.dur")]
    [consume] = h.of(p.Consume)
    assert consume.prefetch == h.core.rules.client_ack_window  # a stream needs one; no windows


def test_a_name_on_a_topic_or_a_composite_destination_is_refused():
    h = connected()
    h.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "1", resume.NAME_HEADER: "n"})
    h.frame("SUBSCRIBE", {"destination": "/queue/a,/queue/b", "id": "2", resume.NAME_HEADER: "n"})
    assert [f.headers["message"] for f in h.frames()] == ["Invalid header", "Invalid header"]
    assert h.of(p.Peek) == [] and h.core.state is OPEN


def test_subscribing_again_after_rabbitmq_cancelled_starts_after_the_offset_stored_meanwhile():
    h = subscribed(ack="client", rules={"resubscribe_on_cancel": True})
    delivered(h, 0, 1, 2)
    h.frame("ACK", {"id": "T_r@@session-test@@2"})  # offsets 0 and 1
    h.peeks[resume.offset_queue("s", "reader")] = ({}, b"1")  # what that ACK stored
    h.cancel("T_r")
    h.advance(1)
    first, again = h.of(p.Consume)
    assert again.arguments["x-stream-offset"] == 2 and len(h.of(p.Peek)) == 2
