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
# Every junk frame earns an ERROR that keeps the connection ("Bad command"). The plugin's reader
# blocks on its socket once the client stops taking them, and reads nothing more; the bridge
# stops reading the client once write_buffer_high bytes wait for it. Either way the client's
# writes stall long before all it wants to send is through, and once it reads, everything goes
# on: one ERROR per junk frame, then the RECEIPT of the frame after them. (Before the bridge did
# this, it read on and queued every ERROR: 29 bytes of memory per byte of junk.)

JUNK_FRAME = b"JUNK\nx:" + b"v" * 1010 + b"\n\n\0"  # 1 KiB: about 0.1 byte of ERROR per byte
JUNK_LIMIT = 64 * 1024 * 1024  # what the client tries to write unread; kernel buffers hold ~40 MB


def _count_errors_until(sock, marker: bytes, counted: list[int]) -> None:
    tail = b""
    errors = 0
    while marker not in tail:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError(f"closed after {errors} ERRORs")
        data = tail + chunk
        errors += data.count(b"ERROR\n") - tail.count(b"ERROR\n")
        tail = data[-200:]
    counted.append(errors)


@pytest.mark.parametrize("logged_in", [True, False], ids=["logged-in", "before-login"])
def test_a_client_that_sends_junk_and_never_reads_is_not_read_until_it_reads(stomp_target, unique, logged_in):
    """Logged in, each junk frame is a "Bad command"; before login, an "Illegal command" (and a
    CONNECT after them all still logs in)."""
    import threading

    from testkit.flood import login, unread_socket, write_until_stalled

    sock = unread_socket(stomp_target.port, stomp_target.host)
    try:
        if logged_in:
            login(sock)
        written = write_until_stalled(sock, JUNK_FRAME * 64, JUNK_LIMIT)
        assert written < JUNK_LIMIT, "the server read every byte of a client that never read its ERRORs"
        counted: list[int] = []
        sock.settimeout(60)  # for the reader and the writer alike, before either uses it
        marker = b"receipt-id:after-junk" if logged_in else b"CONNECTED"
        reader = threading.Thread(target=_count_errors_until, args=(sock, marker, counted))
        reader.start()
        rest = -written % len(JUNK_FRAME)  # the junk frame cut short by the stall
        sock.sendall(JUNK_FRAME[len(JUNK_FRAME) - rest:] if rest else b"")
        if logged_in:
            sock.sendall(f"SEND\ndestination:/topic/junk-{unique}\nreceipt:after-junk\n\nx\0".encode())
        else:
            sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0")
        reader.join(90)
        assert counted == [(written + rest) // len(JUNK_FRAME)]
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

    server = bridge(connect_timeout=1, close_timeout=1)
    counters = server._server.counters
    sock = unread_socket(server.port)
    try:
        write_until_stalled(sock, JUNK * 4096, JUNK_LIMIT, stall=1.0)
        deadline = time.monotonic() + 20
        while counters.connections_closed["Connect timeout"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # counted once the socket is gone: no event reaches the test's thread
        assert counters.connections_closed["Connect timeout"] == 1
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNRESET
        assert counters.connections_aborted == 1
    finally:
        sock.close()
