"""Transactions as the plugin keeps them: held frames per id, run at COMMIT, dropped at ABORT.

The ERROR texts are the plugin's (checked against it by tests/integration/test_transactions.py);
the limits are the bridge's own guard against a client holding unbounded memory.
"""

from __future__ import annotations

import pytest

from stomp_bridge.protocol.errors import FrameRejected
from stomp_bridge.protocol.frames import Frame
from stomp_bridge.core.transactions import Transactions, transaction_id


def _send(tx: str | None, body: bytes = b"") -> Frame:
    headers = {"destination": "/queue/a"}
    if tx is not None:
        headers["transaction"] = tx
    return Frame("SEND", headers, body)


def test_held_frames_come_back_at_commit_in_order_and_the_transaction_closes():
    txs = Transactions(max_transactions=4, max_actions=10)
    txs.begin("t")
    frames = [_send("t", b"1"), Frame("ACK", {"id": "x", "transaction": "t"}), _send("t", b"2")]
    assert all(txs.hold(f) for f in frames)
    assert txs.commit("t") == frames
    assert len(txs) == 0
    with pytest.raises(FrameRejected) as err:
        txs.commit("t")
    assert (err.value.message, err.value.detail) == ("Bad transaction", "Invalid transaction identifier: \"t\"\n")


def test_a_frame_without_transaction_header_is_not_held():
    txs = Transactions(4, 10)
    txs.begin("t")
    assert not txs.hold(_send(None))
    assert txs.commit("t") == []


def test_a_second_begin_restarts_the_transaction_empty():
    txs = Transactions(4, 10)
    txs.begin("t")
    txs.hold(_send("t"))
    txs.begin("t")
    assert txs.commit("t") == []


def test_abort_drops_the_frames_and_closes():
    txs = Transactions(4, 10)
    txs.begin("t")
    txs.hold(_send("t"))
    txs.abort("t")
    with pytest.raises(FrameRejected, match="Bad transaction"):
        txs.abort("t")


@pytest.mark.parametrize("use", ["hold", "commit", "abort"])
def test_an_unknown_transaction_is_the_plugins_error(use):
    txs = Transactions(4, 10)
    with pytest.raises(FrameRejected) as err:
        if use == "hold":
            txs.hold(_send("nope"))
        else:
            getattr(txs, use)("nope")
    assert err.value.message == "Bad transaction"
    assert err.value.detail == "Invalid transaction identifier: \"nope\"\n"


def test_the_number_of_open_transactions_is_bounded_but_a_restart_is_not_a_new_one():
    txs = Transactions(max_transactions=2, max_actions=10)
    txs.begin("a")
    txs.begin("b")
    txs.begin("a")  # a restart: still two open
    with pytest.raises(FrameRejected) as err:
        txs.begin("c")
    assert err.value.message == "Transaction limit exceeded"
    assert err.value.detail == "Too many concurrent transactions (limit 2)"


def test_the_frames_per_transaction_are_bounded():
    txs = Transactions(max_transactions=2, max_actions=2)
    txs.begin("t")
    txs.hold(_send("t"))
    txs.hold(_send("t"))
    with pytest.raises(FrameRejected) as err:
        txs.hold(_send("t"))
    assert (err.value.message, err.value.detail) == (
        "Transaction too large", "Too many actions in transaction (limit 2)")
    assert len(txs.commit("t")) == 2


def test_clear_forgets_every_transaction():
    txs = Transactions(4, 10)
    txs.begin("a")
    txs.begin("b")
    txs.clear()
    assert len(txs) == 0


@pytest.mark.parametrize("command", ["BEGIN", "COMMIT", "ABORT"])
def test_transaction_commands_need_the_header(command):
    assert transaction_id({"transaction": "t"}, command) == "t"
    with pytest.raises(FrameRejected) as err:
        transaction_id({}, command)
    assert err.value.message == "Missing transaction"
    assert err.value.detail == f"\"{command}\" must include a 'transaction' header\n"


def test_the_bytes_held_by_a_connections_transactions_are_bounded_together():
    """Frames are counted with their headers (name, colon, value, EOL), across transactions."""
    frame = _send("a", b"x" * 100)  # 100 + len("destination:/queue/a\n") + len("transaction:a\n")
    size = 100 + 21 + 14
    txs = Transactions(max_transactions=4, max_actions=100, max_bytes=3 * size)
    txs.begin("a")
    txs.begin("b")
    assert txs.hold(frame) and txs.hold(frame)
    assert txs.hold(_send("b", b"y" * 100))  # "b" is as long as "a"
    assert (txs.bytes, txs.held_bytes) == ({"a": 2 * size, "b": size}, 3 * size)
    with pytest.raises(FrameRejected) as err:
        txs.hold(_send("b", b"z"))
    assert err.value.message == "Transaction too large"
    assert f"limit {3 * size} bytes" in err.value.detail and "max_transaction_bytes" in err.value.detail
    assert len(txs.commit("b")) == 1  # the refused frame was not held


@pytest.mark.parametrize("end", ["commit", "abort", "begin again", "clear"])
def test_bytes_are_given_back_when_a_transaction_ends_or_restarts(end):
    txs = Transactions(max_transactions=4, max_actions=100, max_bytes=1000)
    txs.begin("t")
    txs.hold(_send("t", b"x" * 900))
    with pytest.raises(FrameRejected, match="Transaction too large"):
        txs.hold(_send("t", b"x" * 900))
    if end == "begin again":
        txs.begin("t")
    elif end == "clear":
        txs.clear()
        txs.begin("t")
    else:
        getattr(txs, end)("t")
        txs.begin("t")
    assert txs.held_bytes == 0
    assert txs.hold(_send("t", b"x" * 900))
