"""Acknowledgement modes, ACK/NACK per version, prefetch, redelivery."""

from __future__ import annotations

import pytest


def _fill(conn, name: str, count: int) -> None:
    for i in range(count):
        conn.receipt("SEND", {"destination": f"/queue/{name}"}, f"m{i}", receipt_id=f"fill-{i}")


def _remaining(rabbit, name: str) -> list[str]:
    return [m["payload"] for m in rabbit.get(name, count=100)]


def test_auto_ack_removes_messages_on_delivery(connected, rabbit, queues, unique):
    name = f"auto-{unique}"
    queues.append(name)
    conn = connected()
    _fill(conn, name, 2)
    conn.subscribe(f"/queue/{name}", ack="auto")
    msgs = [conn.expect("MESSAGE"), conn.expect("MESSAGE")]
    assert all("ack" not in m for m in msgs)
    conn.send_frame("DISCONNECT", {"receipt": "bye"})
    conn.read_until_closed()
    assert _remaining(rabbit, name) == []


def test_client_ack_is_cumulative(connected, rabbit, queues, unique):
    name = f"client-{unique}"
    queues.append(name)
    conn = connected()
    _fill(conn, name, 3)
    conn.subscribe(f"/queue/{name}", ack="client")
    msgs = [conn.expect("MESSAGE") for _ in range(3)]
    conn.receipt("ACK", {"id": msgs[1]["ack"]}, receipt_id="ack")  # acks m0 and m1
    conn.send_frame("DISCONNECT", {"receipt": "bye"})
    conn.read_until_closed()
    assert _remaining(rabbit, name) == ["m2"]


def test_client_individual_ack_acks_only_that_message(connected, rabbit, queues, unique):
    name = f"indiv-{unique}"
    queues.append(name)
    conn = connected()
    _fill(conn, name, 3)
    conn.subscribe(f"/queue/{name}", ack="client-individual")
    msgs = [conn.expect("MESSAGE") for _ in range(3)]
    conn.receipt("ACK", {"id": msgs[1]["ack"]}, receipt_id="ack")
    conn.send_frame("DISCONNECT", {"receipt": "bye"})
    conn.read_until_closed()
    assert _remaining(rabbit, name) == ["m0", "m2"]


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_ack_with_message_id_and_subscription_in_old_versions(connected, rabbit, queues, unique, version):
    name = f"old-{unique}"
    queues.append(name)
    conn = connected(version)
    _fill(conn, name, 2)
    conn.subscribe(f"/queue/{name}", sub_id="s", ack="client-individual")
    first, second = conn.expect("MESSAGE"), conn.expect("MESSAGE")
    assert "ack" not in first  # the 'ack' header is STOMP 1.2 only
    conn.receipt("ACK", {"message-id": first["message-id"], "subscription": "s"}, receipt_id="a")
    conn.receipt("NACK", {"message-id": second["message-id"], "subscription": "s"}, receipt_id="n")
    again = conn.expect("MESSAGE")
    assert again.body == b"m1"
    assert again["redelivered"] == "true"
    assert again["message-id"] != second["message-id"]  # a redelivery gets a fresh id


@pytest.mark.parametrize("version,headers,message,text", [
    ("1.1", {"subscription": "s"}, "Missing header", '"ACK" must include the "message-id" header\n'),
    ("1.1", {"subscription": "s", "message-id": "bogus"}, "Invalid header",
     '"ACK" must include a valid "message-id" header\n'),
    ("1.2", {}, "Missing header", '"ACK" must include the "id" header\n'),
])
def test_bad_ack_headers_are_errors(connected, version, headers, message, text):
    conn = connected(version)
    conn.send_frame("ACK", headers)
    error = conn.expect("ERROR")
    assert error["message"] == message
    assert error.text == text


def test_ack_header_is_message_id_in_1_2(connected, queues, unique):
    name = f"hdr-{unique}"
    queues.append(name)
    conn = connected("1.2")
    _fill(conn, name, 1)
    conn.subscribe(f"/queue/{name}", ack="client")
    msg = conn.expect("MESSAGE")
    assert msg["ack"] == msg["message-id"]


def test_nack_default_requeues_with_redelivered_flag(connected, rabbit, queues, unique):
    name = f"nack-{unique}"
    queues.append(name)
    conn = connected()
    _fill(conn, name, 1)
    conn.subscribe(f"/queue/{name}", ack="client-individual")
    first = conn.expect("MESSAGE")
    assert first["redelivered"] == "false"
    conn.receipt("NACK", {"id": first["ack"]}, receipt_id="n")
    again = conn.expect("MESSAGE")
    assert again.body == b"m0" and again["redelivered"] == "true"


def test_nack_requeue_false_dead_letters(connected, rabbit, queues, unique):
    name, dlq = f"src-{unique}", f"dlq-{unique}"
    queues.extend([name, dlq])
    rabbit.declare_queue(dlq)
    conn = connected()
    conn.receipt("SEND", {"destination": f"/queue/{name}", "x-dead-letter-exchange": "",
                          "x-dead-letter-routing-key": dlq}, "doomed")
    conn.subscribe(f"/queue/{name}", ack="client-individual",
                   headers={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    msg = conn.expect("MESSAGE")
    conn.receipt("NACK", {"id": msg["ack"], "requeue": "false"}, receipt_id="n")
    conn.no_frame(0.3)
    (dead,) = rabbit.get(dlq)
    assert dead["payload"] == "doomed"
    assert dead["properties"]["headers"]["x-death"][0]["reason"] == "rejected"
    assert rabbit.get(name) == []


def test_prefetch_count_limits_unacked_deliveries(connected, queues, unique):
    name = f"prefetch-{unique}"
    queues.append(name)
    conn = connected()
    _fill(conn, name, 5)
    conn.subscribe(f"/queue/{name}", ack="client-individual", headers={"prefetch-count": "2"})
    first, second = conn.expect("MESSAGE"), conn.expect("MESSAGE")
    conn.no_frame(0.5)
    conn.send_frame("ACK", {"id": first["ack"]})
    assert conn.expect("MESSAGE").body == b"m2"
    conn.no_frame(0.5)
    conn.send_frame("ACK", {"id": second["ack"]})
    assert conn.expect("MESSAGE").body == b"m3"


def test_unsubscribe_stops_deliveries(connected, queues, unique):
    name = f"unsub-{unique}"
    queues.append(name)
    conn = connected()
    conn.subscribe(f"/queue/{name}", sub_id="u")
    conn.receipt("UNSUBSCRIBE", {"id": "u"}, receipt_id="un")
    other = connected()
    other.receipt("SEND", {"destination": f"/queue/{name}"}, "after unsubscribe")
    conn.no_frame(0.5)


def test_unacked_messages_return_to_queue_on_close(connected, rabbit, queues, unique):
    name = f"return-{unique}"
    queues.append(name)
    conn = connected()
    _fill(conn, name, 2)
    conn.subscribe(f"/queue/{name}", ack="client")
    conn.expect("MESSAGE"), conn.expect("MESSAGE")
    conn.close()
    again = connected()
    again.subscribe(f"/queue/{name}", ack="client")
    redelivered = [again.expect("MESSAGE") for _ in range(2)]
    assert [m.body for m in redelivered] == [b"m0", b"m1"]
    assert all(m["redelivered"] == "true" for m in redelivered)


# -- an ACK or NACK of a delivery tag the channel does not hold --------------------------------
# RabbitMQ 4.3 and older: the plugin passes it on to its channel and answers the frame, so the
# RECEIPT comes first; RabbitMQ then closes the channel: ERROR precondition_failed, without
# receipt-id, and the end (3.10.8, 4.0.5, 4.3.6). 4.4's native plugin: ERROR "Message not found",
# without receipt-id or RECEIPT, and the connection stays. The tag is the client's number (the
# native plugin counts deliveries from 0, RabbitMQ's channels from 1). "Still usable" is a SEND
# to a queue: 4.4's plugin never receipts an unroutable one (docs/compatibility.md).


def _tag(ack_id: str) -> int:
    return int(ack_id.rsplit("@@", 1)[1])


def _unknown_tag_answer(conn, tag: int, native44: bool, queue: str, receipted: str | None = "r") -> None:
    if native44:
        error = conn.expect("ERROR")
        assert "receipt-id" not in error, error
        assert (error["message"], error.text) == ("Message not found", f"unknown delivery tag {tag}\n")
        conn.receipt("SEND", {"destination": f"/queue/{queue}"}, "x", receipt_id="alive")
        return
    frames = conn.read_until_closed()
    expected = [("RECEIPT", receipted)] if receipted else []
    assert [(f.command, f.get("receipt-id")) for f in frames] == [*expected, ("ERROR", None)], frames
    error = frames[-1]
    assert (error["message"], error.text) == ("precondition_failed", f"PRECONDITION_FAILED - unknown delivery tag {tag}")


def _delivered(connected, queues, name: str, ack: str):
    """A connection subscribed to a new queue ``name`` with ``ack``, and its one MESSAGE's ack id."""
    queues.append(name)
    conn = connected()
    conn.subscribe(f"/queue/{name}", ack=ack)
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, "m", receipt_id="sent")
    return conn, conn.expect("MESSAGE")["message-id"]


@pytest.mark.parametrize("command", ["ACK", "NACK"])
@pytest.mark.parametrize("case", ["ack:auto", "never delivered", "settled already"])
def test_an_ack_or_nack_of_a_tag_the_channel_does_not_hold(connected, queues, unique, native44, command, case):
    name = f"unknown-tag-{unique}"
    conn, message_id = _delivered(connected, queues, name, "auto" if case == "ack:auto" else "client-individual")
    if case == "never delivered":
        message_id = message_id.rsplit("@@", 1)[0] + "@@777"
    elif case == "settled already":
        conn.receipt("ACK", {"id": message_id}, receipt_id="first")
    conn.send_frame(command, {"id": message_id, "receipt": "r"})
    _unknown_tag_answer(conn, _tag(message_id), native44, name)


def test_a_commit_holding_an_ack_of_a_tag_the_channel_does_not_hold(connected, queues, unique, native44):
    # 4.3: the ACK's RECEIPT when held, the COMMIT's, then the ERROR; 4.4: the ERROR, then the COMMIT's
    name = f"unknown-tag-tx-{unique}"
    conn, message_id = _delivered(connected, queues, name, "auto")
    conn.receipt("BEGIN", {"transaction": "t"}, receipt_id="b")
    conn.receipt("ACK", {"id": message_id, "transaction": "t"}, receipt_id="a")
    conn.send_frame("COMMIT", {"transaction": "t", "receipt": "c"})
    if native44:
        error = conn.expect("ERROR")
        assert "receipt-id" not in error and error["message"] == "Message not found", error
        assert conn.expect("RECEIPT")["receipt-id"] == "c"
        conn.receipt("SEND", {"destination": f"/queue/{name}"}, "x", receipt_id="alive")
        return
    _unknown_tag_answer(conn, _tag(message_id), native44, name, receipted="c")


def test_without_a_receipt_the_error_is_all(connected, queues, unique, native44):
    name = f"unknown-tag-plain-{unique}"
    conn, message_id = _delivered(connected, queues, name, "client")
    message_id = message_id.rsplit("@@", 1)[0] + "@@5"
    conn.send_frame("ACK", {"id": message_id})
    _unknown_tag_answer(conn, 5, native44, name, receipted=None)
