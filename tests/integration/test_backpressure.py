"""A client that does not read its socket must not make the server buffer its queue.

RabbitMQ's plugin blocks on the socket and credit flow stops the queue; the
bridge stops reading that client's AMQP connection once its write buffer is
full, so TCP pushes back on RabbitMQ. Either way the messages wait in the
queue, not in the server's memory, and none is lost.
"""

from __future__ import annotations

import asyncio
import os
import time

import aiormq
import pytest

COUNT = 4000
SIZE = 16 * 1024  # 64 MiB in all: far more than socket buffers and the bridge's 1 MiB


def _ready(amqp_url: str, queue: str) -> int:
    """Messages waiting in ``queue`` now (a passive declare is live; the HTTP API lags)."""

    async def count() -> int:
        connection = await aiormq.connect(amqp_url)
        try:
            channel = await connection.channel()
            ok = await channel.queue_declare(queue, passive=True)
            return ok.message_count
        finally:
            await connection.close()

    return asyncio.run(count())


@pytest.mark.parametrize("ack", ["auto", "client"])
def test_slow_consumer_leaves_messages_in_the_queue_and_loses_none(connected, broker, queues, unique, ack):
    """With ``ack:client`` and no prefetch-count the client may hold all 4,000 unacknowledged
    while it reads (the plugin's unlimited prefetch); the bridge consumes in windows
    (client_ack_window) and adds one each time the client has read a whole one, never while it
    stops reading (RabbitMQ 4.3 denies the global QoS that used to pause it)."""
    name = f"slow-{unique}"
    queues.append(name)
    producer = connected()
    body = b"m" * SIZE
    producer.send_raw(
        b"".join(
            f"SEND\ndestination:/queue/{name}\ncontent-length:{SIZE}\n\n".encode() + body + b"\x00"
            for _ in range(COUNT - 1)
        )
    )
    producer.receipt("SEND", {"destination": f"/queue/{name}"}, body, receipt_id="all-sent")

    consumer = connected()
    consumer.send_frame("SUBSCRIBE", {"destination": f"/queue/{name}", "id": "slow", "ack": ack})
    # No event says "the server stopped pulling": wait until the queue depth holds still.
    deadline = time.monotonic() + 20
    last = _ready(broker.amqp_url, name)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _ready(broker.amqp_url, name)
        if now == last:
            break
        last = now
    # At most ~40 MiB in flight (kernel socket buffers on both hops plus the server's own).
    assert last >= COUNT - 2500, f"only {last} of {COUNT} messages still queued: the server buffered the rest"

    received = 0
    consumer.sock.settimeout(30)
    while received < COUNT:
        frame = consumer.read_frame(timeout=30)
        assert frame.command == "MESSAGE", frame.headers
        assert len(frame.body) == SIZE
        received += 1
    if ack == "client":
        consumer.receipt("ACK", {"id": frame["ack"]}, receipt_id="all-acked")  # cumulative
    consumer.no_frame(0.5)
    assert _ready(broker.amqp_url, name) == 0


# -- a client that sends and never reads ------------------------------------------------------
#
# Every junk frame earns an ERROR that keeps the connection ("Bad command" after login, "Illegal
# command" before), every receipted frame a RECEIPT. The plugin's reader blocks on its socket once
# the client stops taking them, and reads nothing more; the bridge stops reading the client once
# write_buffer_high bytes wait for it. Either way the client's writes stall long before all it
# wants to send is through, and once it reads, everything goes on: one answer per frame, then the
# frame after them is answered. (Before the bridge did this, it read on and queued every answer:
# 29 bytes of memory per byte of junk.)

JUNK_FRAME = b"JUNK\nx:" + b"v" * 1010 + b"\n\n\0"  # 1 KiB: about 0.1 byte of ERROR per byte
JUNK_LIMIT = 64 * 1024 * 1024  # what the client tries to write unread; kernel buffers hold ~40 MB


def _count_until(sock, answer: bytes, marker: bytes, counted: list[int]) -> None:
    """Read until ``marker``; how many ``answer`` frames came before it."""
    tail = b""
    answers = 0
    while marker not in tail:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError(f"closed after {answers} answers")
        data = tail + chunk
        answers += data.count(answer) - tail.count(answer)
        tail = data[-200:]
    counted.append(answers)


# what the client floods with, what each such frame earns, whether it logs in first
FLOODS = {
    "junk logged in": (JUNK_FRAME, b"ERROR\n", True),  # Bad command
    "junk before login": (JUNK_FRAME, b"ERROR\n", False),  # Illegal command; a CONNECT after them logs in
    "receipts logged in": (b"BEGIN\ntransaction:t\nreceipt:r\n\n\0", b"RECEIPT\n", True),  # each restarts t
}


@pytest.mark.parametrize("flood", FLOODS)
def test_a_client_that_sends_and_never_reads_is_not_read_until_it_reads(stomp_target, unique, flood):
    import threading

    from testkit.flood import login, unread_socket, write_until_stalled

    frame, answer, logged_in = FLOODS[flood]
    sock = unread_socket(stomp_target.port, stomp_target.host)
    try:
        if logged_in:
            login(sock)
        written = write_until_stalled(sock, frame * (65536 // len(frame)), JUNK_LIMIT)
        assert written < JUNK_LIMIT, f"the server read every byte of a client that never read ({flood})"
        counted: list[int] = []
        sock.settimeout(60)  # for the reader and the writer alike, before either uses it
        marker = b"receipt-id:after-flood" if logged_in else b"CONNECTED"
        reader = threading.Thread(target=_count_until, args=(sock, answer, marker, counted))
        reader.start()
        rest = -written % len(frame)  # the frame cut short by the stall
        sock.sendall(frame[len(frame) - rest:] if rest else b"")
        if logged_in:
            sock.sendall(f"SEND\ndestination:/topic/flood-{unique}\nreceipt:after-flood\n\nx\0".encode())
        else:
            sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0")
        reader.join(90)
        last = 1 if logged_in and answer == b"RECEIPT\n" else 0  # the frame after the flood's own
        assert counted == [(written + rest) // len(frame) + last]
    finally:
        sock.close()


@pytest.mark.skipif(os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="bridge settings")
def test_a_connection_closed_while_its_client_does_not_read_is_aborted_after_close_timeout(bridge):
    """Before login, junk until the bridge stops reading, then the connect timeout's ERROR: the
    bridge closes, but what is queued never goes out. After close_timeout the socket is reset, so
    it neither stays ESTABLISHED with its buffer nor counts as closed while it does."""
    import errno
    import socket

    from testkit.flood import JUNK, unread_socket, write_until_stalled

    # The connect timeout must come after the flood stalled (the bridge stopped reading with a
    # full write queue), however slowly a loaded machine fills it: with 1 s it came first under
    # load, and a close with little queued needs no abort.
    server = bridge(connect_timeout=5, close_timeout=1)
    counters = server._server.counters
    sock = unread_socket(server.port)
    try:
        written = write_until_stalled(sock, JUNK * 4096, JUNK_LIMIT, stall=1.0)
        while counters.reads_held == 0:  # a stall of a loaded bridge, not yet its holding: more
            assert counters.connections_closed["Connect timeout"] == 0, "the connect timeout before the stall"
            more = write_until_stalled(sock, JUNK * 4096, JUNK_LIMIT - written, stall=1.0, offset=written)
            written += more
            assert more or counters.reads_held, f"the bridge stopped reading after {written} bytes, holding nothing"
        assert counters.reads_held == 1 and counters.connections_closed["Connect timeout"] == 0
        deadline = time.monotonic() + 20
        while counters.connections_closed["Connect timeout"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # counted once the socket is gone: no event reaches the test's thread
        assert counters.connections_closed["Connect timeout"] == 1
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNRESET
        assert counters.connections_aborted == 1
    finally:
        sock.close()
