"""Scheduled delivery (AMQ_SCHEDULED_DELAY / AMQ_SCHEDULED_TIME): the message waits in RabbitMQ's
delay queues, not in the bridge, and reaches the SEND's own destination at its time."""

from __future__ import annotations

import os
import time

import pytest

from stomp_bridge.protocol import scheduled
from testkit.brokers import rabbitmqctl

pytestmark = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native",
    reason="scheduled delivery is the bridge's: the plugin publishes at once and keeps the header",
)

DELAY_MS = 1500


def sent(conn, headers: dict[str, str], body: str, receipt_id: str) -> None:
    """A receipted SEND; the first scheduled SEND on a broker may declare the delay levels
    (64 queues and exchanges: seconds on a busy machine)."""
    conn.send_frame("SEND", {**headers, "receipt": receipt_id}, body)
    conn.wait_receipt(receipt_id, timeout=60)


def test_a_delayed_send_is_receipted_at_once_and_delivered_at_its_time(connected, queues, unique):
    name = f"sched-{unique}"
    queues.extend([name, f"{name}-warm-up"])
    reader = connected()
    reader.subscribe(f"/queue/{name}", ack="client-individual")
    conn = connected()
    # Once per broker the first scheduled SEND declares the levels (seconds): not in the timing.
    sent(conn, {"destination": f"/queue/{name}-warm-up", "AMQ_SCHEDULED_DELAY": "1"}, "", receipt_id="w")
    t0 = time.time()
    sent(conn, {"destination": f"/queue/{name}", "AMQ_SCHEDULED_DELAY": str(DELAY_MS),
                          "persistent": "true", "colour": "red"}, "later", receipt_id="s")
    receipted = time.time()
    msg = reader.expect("MESSAGE", timeout=30)
    arrived = time.time()
    assert msg.body == b"later" and msg["colour"] == "red" and msg["persistent"] == "true"
    assert arrived - t0 >= DELAY_MS / 1000
    assert receipted - t0 < DELAY_MS / 1000  # the RECEIPT did not wait for the delay
    due = int(msg["_AMQ_SCHED_DELIVERY"])
    assert due - 50 <= t0 * 1000 + DELAY_MS <= due + 1000 * (receipted - t0) + 50
    assert "AMQ_SCHEDULED_DELAY" not in msg  # Artemis removes it too: a forwarded MESSAGE is not delayed again
    assert msg["destination"] == f"/queue/{name}"


def test_scheduled_time_is_absolute_and_wins_over_the_delay(connected, queues, unique):
    name = f"sched-{unique}"
    queues.append(name)
    reader = connected()
    reader.subscribe(f"/queue/{name}")
    conn = connected()
    at = int(time.time() * 1000) + DELAY_MS
    sent(conn, {"destination": f"/queue/{name}", "AMQ_SCHEDULED_TIME": str(at),
                          "AMQ_SCHEDULED_DELAY": "60000"}, "at", receipt_id="s")
    msg = reader.expect("MESSAGE", timeout=30)
    assert time.time() * 1000 >= at
    assert int(msg["_AMQ_SCHED_DELIVERY"]) == at


def test_the_final_routing_is_the_sends_exchange_routing_key_headers_and_reply_to(connected, unique):
    reader = connected()
    reader.subscribe(f"/topic/sched.{unique}.*")
    conn = connected()
    t0 = time.time()
    sent(conn, {"destination": f"/topic/sched.{unique}.a", "AMQ_SCHEDULED_DELAY": "300",
                          "reply-to": "/queue/answers", "correlation-id": "c-1", "x-tag": "t"},
                 "to a topic", receipt_id="s")
    msg = reader.expect("MESSAGE", timeout=30)
    assert time.time() - t0 >= 0.3
    assert msg["destination"] == f"/topic/sched.{unique}.a"
    assert (msg["reply-to"], msg["correlation-id"], msg["x-tag"]) == ("/queue/answers", "c-1", "t")


def test_a_scheduled_message_waits_in_rabbitmq_and_outlives_the_bridge_that_took_it(
        bridge, dial, rabbit, queues, unique):
    """Sent through one bridge, which then stops; read through another (any replica)."""
    name = f"sched-{unique}"
    queues.append(name)
    first = bridge()
    conn = dial(first)
    conn.connect()
    sent(conn, {"destination": f"/queue/{name}", "AMQ_SCHEDULED_DELAY": "4000",
                          "persistent": "true"}, "survivor", receipt_id="s")
    conn.close()
    first.stop()
    assert rabbit.get(name) == []  # not at its destination yet: it waits in the delay levels
    second = dial(bridge())
    second.connect()
    second.subscribe(f"/queue/{name}")
    assert second.expect("MESSAGE", timeout=30).body == b"survivor"


def test_each_level_waits_its_own_time_so_a_short_delay_overtakes_a_long_one(connected, queues, unique):
    """No head-of-line blocking: a message due sooner, sent after one due later, is not held up."""
    name = f"sched-{unique}"
    queues.append(name)
    reader = connected()
    reader.subscribe(f"/queue/{name}")
    conn = connected()
    sent(conn, {"destination": f"/queue/{name}", "AMQ_SCHEDULED_DELAY": "6000"}, "long",
                 receipt_id="l")
    sent(conn, {"destination": f"/queue/{name}", "AMQ_SCHEDULED_DELAY": "500"}, "short",
                 receipt_id="s")
    assert [reader.expect("MESSAGE", timeout=30).body for _ in range(2)] == [b"short", b"long"]


def test_a_mandatory_scheduled_message_no_queue_takes_is_kept_not_dropped(connected, rabbit, unique):
    """At its time nothing takes it: RabbitMQ keeps it in the last delay queue (at-least-once
    dead-lettering) and routes it again later; a non-mandatory one is dropped as a publish is."""
    missing = f"sched-missing-{unique}"
    conn = connected()
    for mandatory in ("false", "true"):
        sent(conn, {"destination": f"/amq/queue/{missing}", "AMQ_SCHEDULED_DELAY": "200",
                              "mandatory": mandatory, "which": mandatory}, mandatory, receipt_id=mandatory)
    deadline = time.monotonic() + 30
    while True:
        queue = rabbit.queue(scheduled.exit_queue("", "keep")) or {}
        if queue.get("messages_dlx", 0) >= 1:
            break
        assert time.monotonic() < deadline, f"the mandatory message is not held: {queue}"
        time.sleep(0.5)
    # Let it go somewhere at RabbitMQ's next try (every 3 minutes), then away with its queue.
    rabbit.declare_queue(missing, arguments={"x-expires": 600_000})


@pytest.mark.parametrize("headers, text", [
    ({"AMQ_SCHEDULED_DELAY": "soon"}, "'AMQ_SCHEDULED_DELAY' must be a whole number of milliseconds, not 'soon'"),
    ({"AMQ_SCHEDULED_DELAY": str(1 << 32)}, "A scheduled delivery waits at most 4294967295 ms"),
    ({"AMQ_SCHEDULED_DELAY": "1000", "expiration": "5000"}, "A scheduled message cannot also expire"),
])
def test_a_schedule_the_bridge_cannot_keep_is_an_error_that_keeps_the_connection(connected, headers, text):
    conn = connected()
    conn.send_frame("SEND", {"destination": "/topic/sched-bad", "receipt": "r", **headers}, b"x")
    error = conn.error_then_usable()
    assert error["message"] == "Invalid header" and error["receipt-id"] == "r"
    assert error.text.startswith(text)


def test_no_delay_or_a_past_time_sends_at_once_as_a_plain_send(connected, queues, unique):
    """docs/migration/rabbitmq-plugin.md: zero, negative or past is a plain SEND: published at
    once, its AMQ_SCHEDULED_* header kept as any other header, no _AMQ_SCHED_DELIVERY."""
    name = f"sched-{unique}"
    queues.append(name)
    conn = connected()
    sends = [("AMQ_SCHEDULED_DELAY", "0", "now"), ("AMQ_SCHEDULED_DELAY", "-5000", "negative"),
             ("AMQ_SCHEDULED_TIME", "1000", "past")]
    for n, (header, value, body) in enumerate(sends):
        sent(conn, {"destination": f"/queue/{name}", header: value}, body, receipt_id=str(n))
    conn.subscribe(f"/queue/{name}")
    for header, value, body in sends:
        msg = conn.expect("MESSAGE")
        assert msg.body == body.encode() and msg[header] == value
        assert "_AMQ_SCHED_DELIVERY" not in msg


def test_a_scheduled_send_in_a_transaction_counts_its_delay_from_the_commit(connected, queues, unique):
    """A transaction's SENDs are published at its COMMIT: AMQ_SCHEDULED_DELAY counts from there
    (AMQ_SCHEDULED_TIME is a time, the same either way)."""
    name = f"sched-{unique}"
    queues.append(name)
    reader = connected()
    reader.subscribe(f"/queue/{name}")
    conn = connected()
    sent(conn, {"destination": f"/queue/{name}-warm-up", "AMQ_SCHEDULED_DELAY": "1"}, "", receipt_id="w")
    queues.append(f"{name}-warm-up")
    conn.send_frame("BEGIN", {"transaction": "t"})
    conn.send_frame("SEND", {"destination": f"/queue/{name}", "AMQ_SCHEDULED_DELAY": str(DELAY_MS),
                             "transaction": "t"}, "in a transaction")  # its RECEIPT would come at the COMMIT
    time.sleep(1.0)  # the transaction stays open a second: what is measured, not a wait for an event
    committed = time.time()
    conn.send_frame("COMMIT", {"transaction": "t", "receipt": "c"})
    conn.wait_receipt("c", timeout=60)
    msg = reader.expect("MESSAGE", timeout=30)
    assert time.time() - committed >= DELAY_MS / 1000
    assert int(msg["_AMQ_SCHED_DELIVERY"]) >= committed * 1000 + DELAY_MS - 50


def test_a_scheduled_message_carries_artemis_due_time_and_rabbitmqs_death_headers_not_the_levels(
        connected, queues, unique, broker):
    """What a MESSAGE of a scheduled SEND carries: _AMQ_SCHED_DELIVERY (Artemis'), RabbitMQ's
    x-first-death-* of the first level it waited in (and from RabbitMQ 3.13 x-last-death-*, of
    the last), never the levels' own routing headers (stomp-bridge-delay-<k>, -exchange,
    -unroutable)."""
    name = f"sched-{unique}"
    queues.append(name)
    reader = connected()
    reader.subscribe(f"/queue/{name}")
    conn = connected()
    sent(conn, {"destination": f"/queue/{name}", "AMQ_SCHEDULED_DELAY": "300"}, "x", receipt_id="s")
    msg = reader.expect("MESSAGE", timeout=30)
    headers = msg.header_dict
    assert not [h for h in headers if h.startswith("stomp-bridge-")], headers
    assert "_AMQ_SCHED_DELIVERY" in headers
    assert (headers["x-first-death-reason"], headers["x-first-death-queue"]) == ("expired", "stomp-bridge.delay.8")
    if broker.version_tuple >= (3, 13):
        assert headers["x-last-death-reason"] == "expired"
        assert headers["x-last-death-queue"] == scheduled.exit_queue("", "drop")
    else:
        assert not [h for h in headers if h.startswith("x-last-death-")], headers


def test_a_forwarded_message_with_the_levels_headers_waits_only_its_own_delay(connected, rabbit, queues, unique):
    """A SEND that carries a stomp-bridge-delay-<k> of its own (a MESSAGE forwarded with all its
    headers) is not held at level k: the levels' headers of a SEND are the bridge's to set. The
    queues a message waited in are RabbitMQ's x-death entries (read over the management API)."""
    name = f"sched-{unique}"
    queues.append(name)
    conn = connected()
    sent(conn, {"destination": f"/queue/{name}", "persistent": "true"}, "declared", receipt_id="d")
    assert [m["payload"] for m in rabbit.get(name)] == ["declared"]
    sent(conn, {"destination": f"/queue/{name}", "AMQ_SCHEDULED_DELAY": "256",  # level 8 alone
                "stomp-bridge-delay-7": "1", "stomp-bridge-delay-3": "1", "stomp-bridge-unroutable": "keep"},
         "forwarded", receipt_id="s")
    deadline = time.monotonic() + 30
    while not (got := rabbit.get(name)):
        assert time.monotonic() < deadline, "the scheduled message never arrived"
        time.sleep(0.2)
    (message,) = got
    waited = [death["queue"] for death in message["properties"]["headers"]["x-death"]]
    assert [q for q in waited if q.startswith("stomp-bridge.delay.") and q[19:].isdigit()] == ["stomp-bridge.delay.8"]
    assert scheduled.exit_queue("", "drop") in waited  # not mandatory: its own header, not the SEND's "keep"


@pytest.mark.rabbitmqctl  # restarts the local broker's RabbitMQ application
def test_a_persistent_scheduled_message_survives_a_broker_restart(bridge, dial, rabbit, queues, unique):
    """Receipted, then RabbitMQ stops and starts again while the message waits: it still
    arrives (quorum queues keep what they confirmed, and their dead-lettering resumes)."""
    name = f"sched-{unique}"
    queues.append(name)
    conn = dial(bridge())
    conn.connect()
    sent(conn, {"destination": f"/queue/{name}", "AMQ_SCHEDULED_DELAY": "8000", "persistent": "true"},
         "through a restart", receipt_id="s")
    sent(conn, {"destination": f"/queue/{name}", "persistent": "true"}, "declared", receipt_id="q")
    waiting = rabbit.request("POST", f"/queues/%2F/{rabbit.q(name)}/get",
                             {"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto"})
    assert [m["payload"] for m in waiting] == ["declared"]  # the scheduled one waits elsewhere
    rabbitmqctl("stop_app")
    try:
        rabbitmqctl("start_app")
    finally:
        rabbitmqctl("await_startup", timeout=120)
    reader = dial(bridge())
    deadline = time.monotonic() + 60
    while True:  # the bridge's pooled connections died with the app: a new one may take a moment
        try:
            reader.connect()
            break
        except Exception:  # noqa: BLE001 - not yet
            assert time.monotonic() < deadline, "the bridge did not reach RabbitMQ after its restart"
            reader.close()
            time.sleep(1)
            reader = dial(bridge())
    reader.subscribe(f"/queue/{name}")
    bodies = {reader.expect("MESSAGE", timeout=60).body for _ in range(2)}
    assert bodies == {b"declared", b"through a restart"}
