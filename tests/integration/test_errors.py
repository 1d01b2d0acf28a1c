"""Which ERRORs end the connection, error by error, as the plugin decides (differential).

The plugin answers most refusals of a single frame with an ERROR and carries on (its
``error/3``); it closes after a failed login, a malformed frame, or anything RabbitMQ refused
on the channel. Clients rely on both. Checked against the plugins of 3.10.8, 4.0.5 and 4.3.6.
"""

from __future__ import annotations

import pytest

from tests.integration.rawstomp import RawStomp

VALID_TYPES = "/temp-queue, /exchange, /topic, /queue, /amq/queue, /reply-queue/"

# (frames to send, ERROR message, ERROR body); every frame asks for receipt "r"
KEPT = {
    "unknown command": ([("FOO", {})], "Bad command", 'Could not interpret command "FOO"\n'),
    "SEND without destination": ([("SEND", {})], "Missing destination",
                                 "\"SEND\" must include a 'destination' header\n"),
    "SEND to an unknown kind": ([("SEND", {"destination": "/bogus/x"})], "Unknown destination",
                                f"'/bogus/x' is not a valid destination.\nValid destination types are: {VALID_TYPES}.\n"),
    "SEND to a blank queue": ([("SEND", {"destination": "/queue/"})], "Invalid destination",
                              "'/' is not a valid queue destination\n"),
    "SEND to a temp queue": ([("SEND", {"destination": "/temp-queue/x"})], "Invalid destination",
                             "'/temp-queue/x' is not a valid destination for 'SEND'\n"),
    "SEND in an unknown transaction": ([("SEND", {"destination": "/topic/x", "transaction": "nope"})],
                                       "Bad transaction", 'Invalid transaction identifier: "nope"\n'),
    "COMMIT of an unknown transaction": ([("COMMIT", {"transaction": "nope"})], "Bad transaction",
                                         'Invalid transaction identifier: "nope"\n'),
    "ABORT of an unknown transaction": ([("ABORT", {"transaction": "nope"})], "Bad transaction",
                                        'Invalid transaction identifier: "nope"\n'),
    "BEGIN without transaction": ([("BEGIN", {})], "Missing transaction",
                                  "\"BEGIN\" must include a 'transaction' header\n"),
    "ACK without id": ([("ACK", {})], "Missing header", '"ACK" must include the "id" header\n'),
    "ACK with a malformed id": ([("ACK", {"id": "garbage"})], "Invalid header",
                                '"ACK" must include a valid "id" header\n'),
    "UNSUBSCRIBE of an unknown id": ([("UNSUBSCRIBE", {"id": "nope"})], "No subscription found",
                                     "UNSUBSCRIBE must refer to an existing subscription.\n"
                                     "Subscription to \"id='nope'\" not found.\n"),
    "UNSUBSCRIBE of an unknown destination": (
        [("UNSUBSCRIBE", {"destination": "/queue/zz"})], "No subscription found",
        "UNSUBSCRIBE must refer to an existing subscription.\n"
        "Subscription to \"destination='/queue/zz'\" not found.\n"),
    "UNSUBSCRIBE without id or destination": ([("UNSUBSCRIBE", {})], "Missing destination or id",
                                              "UNSUBSCRIBE must include a 'destination' or 'id' header"),
    "SUBSCRIBE without destination": ([("SUBSCRIBE", {"id": "s"})], "Missing destination",
                                      "\"SUBSCRIBE\" must include a 'destination' header\n"),
    "SUBSCRIBE to an unknown kind": ([("SUBSCRIBE", {"destination": "/bogus", "id": "s"})], "Unknown destination",
                                     f"'/bogus' is not a valid destination.\nValid destination types are: {VALID_TYPES}.\n"),
    "durable SUBSCRIBE without id": ([("SUBSCRIBE", {"destination": "/topic/a", "durable": "true"})],
                                     "Missing Header", "Header 'id' is required for durable subscriptions"),
    "prefetch-count not a number": ([("SUBSCRIBE", {"destination": "/topic/a", "id": "s", "prefetch-count": "abc"})],
                                    "Processing error", "Processing error"),
    "queue argument not a number": ([("SEND", {"destination": "/queue/xa-never", "x-max-length": "abc"})],
                                    "Processing error", "Processing error"),
}


@pytest.mark.parametrize("case", list(KEPT))
def test_a_refused_frame_gets_its_error_and_the_connection_goes_on(connected, case):
    frames, message, body = KEPT[case]
    conn = connected()
    for command, headers in frames:
        conn.send_frame(command, {**headers, "receipt": "r"}, "x" if command == "SEND" else "")
    error = conn.expect("ERROR")
    assert (error["message"], error.text) == (message, body)
    assert error["version"] == "1.0,1.1,1.2" and error["content-type"] == "text/plain"
    # still usable (a frame RabbitMQ need not route: 4.4's plugin never receipts an unroutable SEND)
    conn.receipt("BEGIN", {"transaction": "alive"}, receipt_id="alive")


def test_a_frame_before_connect_is_illegal_and_connect_still_works(raw):
    conn = raw()
    conn.send_frame("SEND", {"destination": "/topic/x"}, "too early")
    error = conn.expect("ERROR")
    assert (error["message"], error.text) == ("Illegal command", "You must log in using CONNECT first")
    assert conn.connect()["version"] == "1.2"


def _closes_after(conn: RawStomp, message: str) -> None:
    frames = conn.read_until_closed()
    errors = [f for f in frames if f.command == "ERROR"]
    assert [e["message"] for e in errors] == [message], frames
    assert frames[0].command == "ERROR" or frames[0].command == "RECEIPT", frames


def test_a_duplicate_subscription_id_closes(connected, unique):
    conn = connected()
    conn.subscribe(f"/topic/dup-{unique}", sub_id="s")
    conn.send_frame("SUBSCRIBE", {"destination": f"/topic/dup2-{unique}", "id": "s"})
    frames = conn.read_until_closed()
    assert frames[0]["message"] == "Duplicated subscription identifier"
    assert frames[0].text == "A subscription identified by 'T_s' already exists."


def test_what_rabbitmq_refuses_on_the_channel_closes(connected, unique):
    conn = connected()
    conn.send_frame("SEND", {"destination": f"/exchange/missing-{unique}/k"}, "x")
    _closes_after(conn, "not_found")


def test_a_second_begin_starts_the_transaction_again(connected, rabbit, queues, unique):
    name = f"rebegin-{unique}"
    queues.append(name)
    conn = connected()
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, "declared", receipt_id="d")
    conn.receipt("BEGIN", {"transaction": "t"}, receipt_id="b1")
    conn.send_frame("SEND", {"destination": f"/queue/{name}", "transaction": "t"}, "dropped")
    conn.receipt("BEGIN", {"transaction": "t"}, receipt_id="b2")
    conn.send_frame("SEND", {"destination": f"/queue/{name}", "transaction": "t"}, "kept")
    conn.receipt("COMMIT", {"transaction": "t"}, receipt_id="c")
    assert [m["payload"] for m in rabbit.get(name, count=10)] == ["declared", "kept"]


def test_a_failing_action_in_a_commit_gets_its_error_and_the_others_run(connected, rabbit, queues, unique):
    name = f"txpart-{unique}"
    queues.append(name)
    conn = connected()
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, "declared", receipt_id="d")
    conn.receipt("BEGIN", {"transaction": "t"}, receipt_id="b")
    conn.send_frame("SEND", {"destination": "/bogus/x", "transaction": "t"}, "nowhere")
    conn.send_frame("SEND", {"destination": f"/queue/{name}", "transaction": "t"}, "after")
    conn.send_frame("COMMIT", {"transaction": "t", "receipt": "c"})
    assert conn.expect("ERROR")["message"] == "Unknown destination"
    assert conn.expect("RECEIPT")["receipt-id"] == "c"
    assert [m["payload"] for m in rabbit.get(name, count=10)] == ["declared", "after"]


def test_every_frame_ends_with_nul_and_a_newline(connected):
    """The plugin's trailing_lf (on by default): "\\0\\n" after every frame. PHP's stomp client
    takes the byte after NUL as the next frame's first and loses it without the newline."""
    conn = connected()
    conn.send_frame("SEND", {"destination": "/topic/eol", "receipt": "r1"}, "x")
    conn.send_frame("FOO", {})
    data = conn.buf
    conn.sock.settimeout(5)
    while data.count(b"\0") < 2 or not data.endswith(b"\0\n"):
        chunk = conn.sock.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    # (what is left of CONNECTED in the buffer is its own trailing newline)
    assert data.lstrip(b"\n").startswith(b"RECEIPT\nreceipt-id:r1\n\n\0\nERROR\n"), data
    assert data.endswith(b"\0\n")


def test_subscribe_receipt_comes_before_the_first_message(connected, queues, unique):
    """A queue that already holds messages: the plugin answers SUBSCRIBE before it hands over
    any delivery, and clients wait for the RECEIPT before they expect MESSAGEs."""
    name = f"backlog-{unique}"
    queues.append(name)
    producer = connected()
    for i in range(50):
        producer.send_frame("SEND", {"destination": f"/queue/{name}"}, f"m{i}")
    producer.receipt("SEND", {"destination": f"/queue/{name}"}, "last", receipt_id="sent")
    for attempt in range(5):
        conn = connected()
        conn.send_frame("SUBSCRIBE", {"destination": f"/queue/{name}", "id": "s", "ack": "client-individual",
                                      "receipt": f"sub{attempt}"})
        first = conn.read_frame()
        assert (first.command, first.get("receipt-id")) == ("RECEIPT", f"sub{attempt}"), first
        assert conn.expect("MESSAGE").body == b"m0"
        conn.close()  # unacknowledged: back to the queue for the next attempt
