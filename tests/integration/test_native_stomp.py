"""What RabbitMQ 4.4's native STOMP plugin changed on purpose, held both ways (differential).

In front of 4.4 (``STOMP_BRIDGE_TEST_BROKER=4.4``: the bridge then runs with
``rabbitmq_stomp_dialect = "4.4"``) the bridge does what the native plugin does; in front of 4.3
and older it keeps what their plugin did. ``native44`` says which the tests hold both targets
to. Each case was first read from the plugin's sources and checked against 4.3.6's plugin and
the 4.4 preview by raw socket. The ACK/NACK of an unknown delivery tag is in test_ack.py.
"""

from __future__ import annotations

import pytest


def test_an_error_of_rabbitmqs_has_the_words_of_the_plugin(connected, unique, native44):
    conn = connected()
    conn.send_frame("SEND", {"destination": f"/exchange/missing-{unique}/k", "receipt": "r"}, "x")
    error = conn.error_then_close()
    words = f"no exchange 'missing-{unique}' in vhost '/'"
    assert (error["message"], error.text) == ("not_found", words if native44 else f"NOT_FOUND - {words}")


def test_a_user_id_that_is_not_the_login(connected, rabbit, queues, unique, native44):
    name = f"uid-{unique}"
    queues.append(name)
    conn = connected()
    conn.send_frame("SEND", {"destination": f"/queue/{name}", "user-id": "bob", "receipt": "r"}, "x")
    error = conn.error_then_close()
    words = "user_id property set to 'bob' but authenticated user was 'guest'"
    if native44:
        assert (error["message"], error.text) == ("access_refused", words)
    else:
        assert (error["message"], error.text) == ("precondition_failed", f"PRECONDITION_FAILED - {words}")
    assert rabbit.get(name) == []


def _holding_two(conn, name: str) -> tuple[str, str]:
    conn.subscribe(f"/queue/{name}", sub_id="s", ack="client-individual")
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, "a", receipt_id="a")
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, "b", receipt_id="b")
    return conn.expect("MESSAGE")["ack"], conn.expect("MESSAGE")["ack"]


def _settle_both(conn, first: str, second: str, native44: bool) -> None:
    conn.send_frame("ACK", {"id": first, "receipt": "ra"})
    conn.send_frame("NACK", {"id": second, "requeue": "false", "receipt": "rn"})
    if native44:  # 4.4: a delivery outlives its subscription
        assert conn.expect("RECEIPT")["receipt-id"] == "ra"
        assert conn.expect("RECEIPT")["receipt-id"] == "rn"
        return
    for ack_id in (first, second):  # 4.3: the ACK must name a subscription there is
        error = conn.expect("ERROR")
        assert (error["message"], error.text) == ("Subscription not found", f'Message with id "{ack_id}" has no subscription')


def test_an_ack_or_nack_after_unsubscribe(connected, rabbit, queues, unique, native44):
    name = f"after-unsub-{unique}"
    queues.append(name)
    conn = connected()
    first, second = _holding_two(conn, name)
    conn.receipt("UNSUBSCRIBE", {"id": "s"}, receipt_id="u")
    _settle_both(conn, first, second, native44)
    conn.send_frame("DISCONNECT", {"receipt": "bye"})
    conn.read_until_closed()
    assert [m["payload"] for m in rabbit.get(name, count=5)] == ([] if native44 else ["a", "b"])


def test_an_ack_or_nack_after_the_server_cancelled(connected, rabbit, queues, unique, native44):
    name = f"after-cancel-{unique}"
    queues.append(name)
    conn = connected()
    first, second = _holding_two(conn, name)
    rabbit.delete_queue(name)
    cancelled = conn.expect("ERROR")
    assert cancelled["message"] == "Server cancelled subscription" and cancelled["subscription"] == "s"
    _settle_both(conn, first, second, native44)


def test_a_durable_unsubscribe_and_the_subscriptions_own_queue(connected, rabbit, queues, unique, native44):
    # 4.4 deletes the queue the subscription consumed from; 4.3 the one the UNSUBSCRIBE's headers
    # name (id and x-queue-name: here none), so a queue named by x-queue-name stays
    own = f"own-{unique}"
    queues.append(own)
    conn = connected()
    conn.receipt("SUBSCRIBE", {"destination": f"/topic/durable-{unique}", "id": "d", "durable": "true",
                               "auto-delete": "false", "x-queue-name": own}, receipt_id="s")
    assert rabbit.queue(own) is not None
    conn.receipt("UNSUBSCRIBE", {"id": "d", "durable": "true"}, receipt_id="u")
    assert (rabbit.queue(own) is None) is native44


def test_a_commit_holding_an_ack_an_earlier_cumulative_ack_covers(connected, rabbit, queues, unique, native44):
    name = f"tx-cumulative-{unique}"
    queues.append(name)
    conn = connected()
    conn.subscribe(f"/queue/{name}", sub_id="s", ack="client")
    for body in ("a", "b"):
        conn.receipt("SEND", {"destination": f"/queue/{name}"}, body, receipt_id=body)
    first, second = conn.expect("MESSAGE")["ack"], conn.expect("MESSAGE")["ack"]
    conn.receipt("BEGIN", {"transaction": "t"}, receipt_id="b")
    conn.send_frame("ACK", {"id": second, "transaction": "t"})  # settles both
    conn.send_frame("ACK", {"id": first, "transaction": "t"})  # 4.4: skipped; 4.3: passed on
    conn.send_frame("COMMIT", {"transaction": "t", "receipt": "c"})
    if native44:
        assert conn.expect("RECEIPT")["receipt-id"] == "c"
        conn.receipt("SEND", {"destination": f"/queue/{name}"}, "alive", receipt_id="alive")
        conn.expect("MESSAGE")
        return
    frames = conn.read_until_closed()
    assert [(f.command, f.get("receipt-id")) for f in frames] == [("RECEIPT", "c"), ("ERROR", None)], frames
    assert frames[1]["message"] == "precondition_failed"


def test_the_seventeenth_open_transaction(connected, stomp_target, native44):
    # 4.4's limit, which the bridge has always had (max_transactions); 4.3's plugin had none
    conn = connected()
    for i in range(16):
        conn.receipt("BEGIN", {"transaction": f"t{i}"}, receipt_id=f"b{i}")
    conn.send_frame("BEGIN", {"transaction": "t16", "receipt": "b16"})
    if stomp_target.native and not native44:
        assert conn.expect("RECEIPT")["receipt-id"] == "b16"
        return
    error = conn.expect("ERROR")
    assert (error["message"], error.text) == ("Transaction limit exceeded", "Too many concurrent transactions (limit 16)")
    conn.receipt("COMMIT", {"transaction": "t0"}, receipt_id="still-open")


def test_a_vhost_at_its_connection_limit(raw, rabbit, stomp_target, native44):
    # 4.4's words are not followed: RabbitMQ says why it closes connection.open, but aiormq drops
    # its reply text there, so the bridge cannot tell the limit from a vhost it may not use
    # (docs/compatibility.md)
    vhost = rabbit.temporary_vhost("limit")
    try:
        rabbit.request("PUT", f"/vhost-limits/{rabbit.q(vhost)}/max-connections", {"value": 0})
        conn = raw()
        conn.send_frame("CONNECT", {"accept-version": "1.2", "host": vhost, "login": "guest", "passcode": "guest"})
        error = conn.expect("ERROR")  # the plugins close a while after
        native_words = native44 and stomp_target.native
        words = "Connection refused: vhost connection limit reached" if native_words else f"Virtual host '{vhost}' access denied"
        assert (error["message"], error.text) == ("Bad CONNECT", words)
    finally:
        rabbit.delete_vhost(vhost)
