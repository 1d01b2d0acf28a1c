"""What an ACK/NACK settles: one delivery (client-individual) or every earlier one (client).

A wrong settle is invisible until RabbitMQ redelivers or loses a message, so the
bookkeeping is checked here without a broker: the per-subscription counts drive
the ack window, and an unknown tag must be refused before RabbitMQ closes the
channel over it.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol.errors import BrokerError, FrameRejected
from stomp_bridge.core.acks import Unacked, ack_target, ack_target_checked
from stomp_bridge.core.subscriptions import Subscription

SESSION = "session-abc"


def _sub(tag: str, multiple: bool) -> Subscription:
    return Subscription(tag, dest.parse_destination("/queue/a"), "a", ack=True, multiple=multiple)


def test_client_individual_settles_only_the_named_delivery():
    sub = _sub("T_s", multiple=False)
    unacked = Unacked()
    for tag in (1, 2, 3):
        unacked.delivered(tag, sub)
    assert unacked.settle("T_s", 2) is False
    assert list(unacked.by_tag) == [1, 3]
    assert sub.unacked == 2


def test_client_ack_is_cumulative_across_subscriptions_on_the_channel():
    """AMQP multiple=true settles every earlier tag on the channel, whoever it was for."""
    cumulative, individual = _sub("T_c", multiple=True), _sub("T_i", multiple=False)
    unacked = Unacked()
    unacked.delivered(1, cumulative)
    unacked.delivered(2, individual)
    unacked.delivered(3, cumulative)
    unacked.delivered(4, cumulative)
    assert unacked.settle("T_c", 3) is True
    assert list(unacked.by_tag) == [4]
    assert (cumulative.unacked, individual.unacked) == (1, 0)


@pytest.mark.parametrize(("consumer_tag", "delivery_tag"), [("T_s", 9), ("T_other", 1)])
def test_an_unknown_delivery_is_rabbitmqs_precondition_failed(consumer_tag, delivery_tag):
    unacked = Unacked()
    unacked.delivered(1, _sub("T_s", multiple=False))
    with pytest.raises(BrokerError) as err:
        unacked.settle(consumer_tag, delivery_tag)
    assert err.value.message == "precondition_failed"
    assert err.value.detail == f"PRECONDITION_FAILED - unknown delivery tag {delivery_tag}"
    assert len(unacked) == 1


def test_a_settled_delivery_cannot_be_settled_again():
    unacked = Unacked()
    unacked.delivered(1, _sub("T_s", multiple=True))
    unacked.settle("T_s", 1)
    with pytest.raises(BrokerError):
        unacked.settle("T_s", 1)


@pytest.mark.parametrize(("version", "header"), [("1.2", "id"), ("1.1", "message-id"), ("1.0", "message-id")])
def test_ack_target_reads_the_versions_header(version, header):
    headers = {header: f"T_s@@{SESSION}@@7"}
    assert ack_target(headers, "ACK", version, SESSION) == ("T_s", 7)


def test_ack_target_errors():
    with pytest.raises(FrameRejected) as err:
        ack_target({}, "NACK", "1.2", SESSION)
    assert (err.value.message, err.value.detail) == ("Missing header", '"NACK" must include the "id" header\n')
    with pytest.raises(FrameRejected) as err:
        ack_target({"id": "T_s@@session-other@@7"}, "ACK", "1.2", SESSION)
    assert (err.value.message, err.value.detail) == ("Invalid header", '"ACK" must include a valid "id" header\n')


_ID_PARTS = st.sampled_from(["T_1", SESSION, "session-x", "7", "007", "-1", "+2", "x", "", "١", "²", " 3", "@", "@@"])
_TAGS = st.sampled_from(["7", "007", "0", "-1", "+2", "x", "", "١", "²", " 3", "3 ", "12345678901234567890"])


@given(parts=st.one_of(st.lists(_ID_PARTS, max_size=4), st.tuples(_ID_PARTS, st.sampled_from([SESSION]), _TAGS)),
       header=st.sampled_from(["id", "message-id", "ack"]), version=st.sampled_from(["1.0", "1.1", "1.2"]))
def test_ack_target_answers_as_the_plugins_checks_do(parts: list[str], header: str, version: str) -> None:
    headers = {header: "@@".join(parts)}

    def outcome(fn):  # noqa: ANN001, ANN202
        try:
            return fn(headers, "ACK", version, SESSION)
        except FrameRejected as exc:
            return (type(exc), str(exc))

    assert outcome(ack_target) == outcome(ack_target_checked)
