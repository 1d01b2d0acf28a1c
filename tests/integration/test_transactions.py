"""BEGIN / COMMIT / ABORT."""

from __future__ import annotations


def _sync(conn) -> None:
    """Frames are handled in order: a receipt for a later BEGIN means earlier frames were seen.
    (A receipt on a transactional SEND itself only comes after COMMIT.)"""
    conn.receipt("BEGIN", {"transaction": "sync"}, receipt_id="sync")


def test_receipt_for_transactional_send_comes_only_after_commit(connected, queues, unique):
    name = f"txr-{unique}"
    queues.append(name)
    conn = connected()
    conn.receipt("BEGIN", {"transaction": "t"}, receipt_id="b")
    conn.send_frame("SEND", {"destination": f"/queue/{name}", "transaction": "t", "receipt": "s"}, "x")
    _sync(conn)
    assert conn.pending == []
    conn.no_frame(0.3)
    conn.send_frame("COMMIT", {"transaction": "t", "receipt": "c"})
    assert sorted(conn.expect("RECEIPT")["receipt-id"] for _ in range(2)) == ["c", "s"]


def test_sends_in_transaction_are_delivered_at_commit(connected, queues, unique):
    name = f"tx-{unique}"
    queues.append(name)
    sub = connected()
    sub.subscribe(f"/queue/{name}")
    conn = connected()
    conn.receipt("BEGIN", {"transaction": "t1"}, receipt_id="b")
    conn.send_frame("SEND", {"destination": f"/queue/{name}", "transaction": "t1"}, "one")
    conn.send_frame("SEND", {"destination": f"/queue/{name}", "transaction": "t1"}, "two")
    _sync(conn)
    sub.no_frame(0.5)
    conn.receipt("COMMIT", {"transaction": "t1"}, receipt_id="c")
    assert [sub.expect("MESSAGE").body for _ in range(2)] == [b"one", b"two"]


def test_abort_discards_sends(connected, rabbit, queues, unique):
    name = f"tx-{unique}"
    queues.append(name)
    conn = connected()
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, "outside", receipt_id="o")
    conn.receipt("BEGIN", {"transaction": "t1"}, receipt_id="b")
    conn.send_frame("SEND", {"destination": f"/queue/{name}", "transaction": "t1"}, "inside")
    conn.receipt("ABORT", {"transaction": "t1"}, receipt_id="a")
    assert [m["payload"] for m in rabbit.get(name, count=10)] == ["outside"]


def test_ack_in_transaction_takes_effect_at_commit(connected, rabbit, queues, unique):
    name = f"txack-{unique}"
    queues.append(name)
    conn = connected()
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, "a", receipt_id="s0")
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, "b", receipt_id="s1")
    conn.subscribe(f"/queue/{name}", ack="client-individual")
    first, second = conn.expect("MESSAGE"), conn.expect("MESSAGE")
    conn.receipt("BEGIN", {"transaction": "t"}, receipt_id="b")
    conn.receipt("ACK", {"id": first["ack"], "transaction": "t"}, receipt_id="a1")
    conn.receipt("ACK", {"id": second["ack"], "transaction": "t"}, receipt_id="a2")
    conn.receipt("ABORT", {"transaction": "t"}, receipt_id="ab")
    conn.receipt("BEGIN", {"transaction": "t2"}, receipt_id="b2")
    conn.receipt("ACK", {"id": first["ack"], "transaction": "t2"}, receipt_id="a3")
    conn.receipt("COMMIT", {"transaction": "t2"}, receipt_id="c2")
    conn.send_frame("DISCONNECT", {"receipt": "bye"})
    conn.read_until_closed()
    # Only the committed ACK took effect; the aborted one left "b" unacked -> back in the queue.
    assert [m["payload"] for m in rabbit.get(name, count=10)] == ["b"]


def test_unknown_transaction_is_an_error(connected, after_error, rabbit, queues, unique):
    name = f"txbad-{unique}"
    queues.append(name)
    for command, headers in [("COMMIT", {}), ("ABORT", {}), ("SEND", {"destination": f"/queue/{name}"})]:
        conn = connected()
        conn.send_frame(command, {"transaction": "nope", **headers}, "x" if command == "SEND" else "")
        error = conn.expect("ERROR")
        assert error["message"] == "Bad transaction"
        assert error.text == 'Invalid transaction identifier: "nope"\n'
        after_error(conn)
    assert rabbit.queue(name) is None or rabbit.get(name) == []


def test_uncommitted_transaction_is_discarded_on_close(connected, rabbit, queues, unique):
    name = f"txclose-{unique}"
    queues.append(name)
    conn = connected()
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, "declare", receipt_id="d")
    conn.receipt("BEGIN", {"transaction": "t"}, receipt_id="b")
    conn.send_frame("SEND", {"destination": f"/queue/{name}", "transaction": "t"}, "never")
    _sync(conn)
    conn.send_frame("DISCONNECT", {"receipt": "bye"})
    conn.read_until_closed()
    assert [m["payload"] for m in rabbit.get(name, count=10)] == ["declare"]
