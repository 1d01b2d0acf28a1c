"""Whose STOMP plugin a connection behaves as: RabbitMQ 4.3's (and older) or 4.4's native one
(the ``rabbitmq_stomp_dialect`` setting, ``core/rules.native_stomp``), and what each changes."""

from __future__ import annotations

from collections import deque

import pytest
from pydantic import ValidationError

from stomp_bridge.core.rules import native_stomp
from stomp_bridge.settings import Settings
from stomp_bridge.core import plans as p
from stomp_bridge.core.state import CLOSED, OPEN
from testkit.core import Harness


@pytest.mark.parametrize("dialect, version, native", [
    ("auto", (4, 3, 6), False),  # 4.3.6, and the 4.4 preview built on it: 4.3's rules
    ("auto", (3, 10, 8), False),
    ("auto", (4, 4, 0), True),
    ("auto", (4, 4), True),
    ("auto", (5, 0, 1), True),
    ("auto", (), False),  # a version it cannot read: 4.3's, the plugin most brokers have
    ("4.3", (4, 4, 0), False),
    ("4.4", (4, 3, 6), True),
    ("4.4", (), True),
])
def test_the_dialect_is_the_setting_or_with_auto_the_version_rabbitmq_reports(dialect, version, native):
    assert native_stomp(dialect, version) is native


@pytest.mark.parametrize("dialect, broker, native", [
    ("auto", (4, 3, 6), False), ("auto", (4, 4, 0), True), ("4.4", (4, 3, 6), True), ("4.3", (4, 4, 1), False),
])
def test_a_connection_takes_its_dialect_when_rabbitmq_took_the_login(dialect, broker, native):
    h = Harness(broker=broker, rabbitmq_stomp_dialect=dialect)
    assert h.core.native_stomp is False  # before the login: nothing is known of the broker
    h.connect()
    assert h.core.native_stomp is native


def test_an_unknown_dialect_is_refused_and_named():
    with pytest.raises(ValidationError, match=r"rabbitmq_stomp_dialect\n.*'auto', '4.3' or '4.4'"):
        Settings(rabbitmq_stomp_dialect="4.5")


# -- an ACK or NACK of a delivery tag the channel does not hold ------------------------------


def _subscribed(dialect: str, ack: str = "client-individual") -> Harness:
    h = Harness(rabbitmq_stomp_dialect=dialect)
    h.connect()
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": ack})
    h.deliver("T_s", 1)
    h.frames()
    return h


@pytest.mark.parametrize("command", ["ACK", "NACK"])
def test_before_4_4_an_unknown_tag_gets_its_receipt_then_rabbitmqs_error_and_the_end(command):
    h = _subscribed("4.3")
    h.frame(command, {"id": "T_s@@session-test@@7", "receipt": "r"})
    receipt, error = h.frames()
    assert (receipt.command, receipt.headers) == ("RECEIPT", {"receipt-id": "r"})
    assert error.command == "ERROR" and "receipt-id" not in error.headers
    assert (error.headers["message"], error.body) == ("precondition_failed", b"PRECONDITION_FAILED - unknown delivery tag 7")
    assert h.core.state is CLOSED and h.closes == 1
    assert h.of(p.Ack) == h.of(p.Nack) == []


def test_before_4_4_the_receipt_waits_for_the_publishes_before_it_and_nothing_is_read_meanwhile():
    h = _subscribed("4.3")
    h.frame("SEND", {"destination": "/queue/q"})
    h.frame("ACK", {"id": "T_s@@session-test@@7", "receipt": "r"})
    h.frame("SEND", {"destination": "/queue/q", "receipt": "after"})
    assert h.frames() == [] and len(h.of(p.Publish)) == 1
    h.confirm(1)
    assert h.commands() == ["RECEIPT", "ERROR"] and h.core.state is CLOSED


def test_before_4_4_without_a_receipt_the_error_comes_at_once():
    h = _subscribed("4.3")
    h.frame("ACK", {"id": "T_s@@session-test@@1"})
    h.frame("ACK", {"id": "T_s@@session-test@@1"})  # settled already
    [error] = h.frames()
    assert error.body == b"PRECONDITION_FAILED - unknown delivery tag 1" and h.core.state is CLOSED


def _committed_unknown_tag(dialect: str):
    """A COMMIT (receipt c) of a transaction holding an ACK of tag 7, never delivered (receipt a), then a SEND."""
    h = _subscribed(dialect)
    h.frame("BEGIN", {"transaction": "t"})
    h.frame("ACK", {"id": "T_s@@session-test@@7", "transaction": "t", "receipt": "a"})
    h.frame("SEND", {"destination": "/queue/q", "transaction": "t"})
    h.frame("COMMIT", {"transaction": "t", "receipt": "c"})
    return h


def test_before_4_4_a_commit_holding_one_gets_its_receipt_then_the_error():
    h = _committed_unknown_tag("4.3")
    frames = h.frames()
    assert [(f.command, f.headers.get("receipt-id")) for f in frames] == [("RECEIPT", "a"), ("RECEIPT", "c"), ("ERROR", None)]
    assert frames[2].headers["message"] == "precondition_failed" and h.core.state is CLOSED
    assert h.of(p.Publish) == []  # RabbitMQ closed the channel on the ACK: the SEND after it never ran


@pytest.mark.parametrize("command", ["ACK", "NACK"])
@pytest.mark.parametrize("tag", ["7", "1"])  # never delivered; settled already (below)
def test_in_front_of_4_4_an_unknown_tag_is_message_not_found_and_the_connection_stays(command, tag):
    h = _subscribed("4.4")
    h.frame("ACK", {"id": "T_s@@session-test@@1"})
    h.frame(command, {"id": f"T_s@@session-test@@{tag}", "receipt": "r"})
    [error] = h.frames()
    assert error.command == "ERROR" and "receipt-id" not in error.headers
    assert (error.headers["message"], error.body) == ("Message not found", f"unknown delivery tag {tag}\n".encode())
    assert h.core.state is OPEN
    h.frame("SEND", {"destination": "/queue/q", "receipt": "after"})
    h.confirm(1)
    assert h.commands() == ["RECEIPT"]


def test_in_front_of_4_4_a_commit_holding_one_gets_the_error_then_its_receipt_and_runs_the_rest():
    h = _committed_unknown_tag("4.4")
    h.confirm(1)
    frames = h.frames()
    assert [(f.command, f.headers.get("receipt-id")) for f in frames] == [("RECEIPT", "a"), ("ERROR", None), ("RECEIPT", "c")]
    assert frames[1].headers["message"] == "Message not found" and h.core.state is OPEN
    assert len(h.of(p.Publish)) == 1


# -- what else 4.4's plugin changed on purpose -----------------------------------------------


@pytest.mark.parametrize("detail, message, native_message, native_detail", [
    ("NOT_FOUND - no exchange 'x' in vhost '/'", "not_found", "not_found", "no exchange 'x' in vhost '/'"),
    ("PRECONDITION_FAILED - user_id property set to 'bob' but authenticated user was 'guest'", "precondition_failed",
     "access_refused", "user_id property set to 'bob' but authenticated user was 'guest'"),
    ("ACCESS_REFUSED - access to queue 'q' in vhost '/' refused for user 'u'", "access_refused",
     "access_refused", "access to queue 'q' in vhost '/' refused for user 'u'"),
    ("The connection to RabbitMQ closed (gone). Reconnect to retry.", "Broker connection lost",
     "Broker connection lost", "The connection to RabbitMQ closed (gone). Reconnect to retry."),
])
def test_in_front_of_4_4_rabbitmqs_errors_lose_the_amqp_prefix(detail, message, native_message, native_detail):
    from stomp_bridge.protocol.errors import BrokerError, native_stomp_error

    error = BrokerError(message, detail, receipt_id="r")
    native = native_stomp_error(error)
    assert (native.message, native.detail, native.receipt_id) == (native_message, native_detail, "r")
    assert (error.message, error.detail) == (message, detail)  # the error itself is kept as it was


@pytest.mark.parametrize("dialect, body", [
    ("4.3", b"NOT_FOUND - no queue 'q' in vhost '/'"), ("4.4", b"no queue 'q' in vhost '/'"),
])
def test_the_error_frame_is_the_dialects(dialect, body):
    from testkit.core import refusal

    h = Harness(rabbitmq_stomp_dialect=dialect)
    h.connect()
    h.refuse[p.Consume] = deque([refusal()])
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/q", "id": "s"})
    error = h.frames()[-1]
    assert (error.headers["message"], error.body) == ("not_found", body)


@pytest.mark.parametrize("dialect", ["4.3", "4.4"])
def test_an_ack_after_unsubscribe_settles_only_in_front_of_4_4(dialect):
    h = _subscribed(dialect)
    h.frame("UNSUBSCRIBE", {"id": "s"})
    h.frame("ACK", {"id": "T_s@@session-test@@1", "receipt": "r"})
    if dialect == "4.4":
        assert h.of(p.Ack) == [p.Ack(1, False)] and h.commands() == ["RECEIPT"]
    else:
        [error] = h.frames()
        assert error.headers["message"] == "Subscription not found" and h.of(p.Ack) == []


@pytest.mark.parametrize("dialect", ["4.3", "4.4"])
def test_a_durable_unsubscribe_deletes_the_subscriptions_own_queue_in_front_of_4_4(dialect):
    h = Harness(rabbitmq_stomp_dialect=dialect)
    h.connect()
    h.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "s", "durable": "true", "x-queue-name": "own"})
    h.frame("UNSUBSCRIBE", {"id": "s", "durable": "true"})
    deleted = [plan.queue for plan in h.of(p.DeleteQueue)]
    assert deleted == (["own"] if dialect == "4.4" else ["stomp-subscription-" + deleted[0][len("stomp-subscription-"):]])
    assert deleted[0] == "own" or deleted[0].startswith("stomp-subscription-")


@pytest.mark.parametrize("dialect", ["4.3", "4.4"])
def test_a_commit_skips_an_ack_an_earlier_cumulative_ack_settled_in_front_of_4_4(dialect):
    h = _subscribed(dialect, ack="client")
    h.deliver("T_s", 2)
    h.frames()
    h.frame("BEGIN", {"transaction": "t"})
    h.frame("ACK", {"id": "T_s@@session-test@@2", "transaction": "t"})
    h.frame("ACK", {"id": "T_s@@session-test@@1", "transaction": "t"})
    h.frame("COMMIT", {"transaction": "t", "receipt": "c"})
    if dialect == "4.4":
        assert h.of(p.Ack) == [p.Ack(2, True)] and h.commands() == ["RECEIPT"]
    else:  # 4.3's plugin passes the second on, and RabbitMQ closes the channel
        assert h.commands() == ["RECEIPT", "ERROR"] and h.core.state is CLOSED


def test_in_front_of_4_4_the_named_delivery_acked_twice_in_a_commit_is_still_not_found():
    h = _subscribed("4.4", ack="client")
    h.frame("BEGIN", {"transaction": "t"})
    h.frame("ACK", {"id": "T_s@@session-test@@1", "transaction": "t"})
    h.frame("ACK", {"id": "T_s@@session-test@@1", "transaction": "t"})
    h.frame("COMMIT", {"transaction": "t", "receipt": "c"})
    assert h.commands() == ["ERROR", "RECEIPT"] and h.core.state is OPEN
