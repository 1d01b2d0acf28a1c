"""Large bodies both ways (SEND in, MESSAGE out), byte for byte, over every transport.

A body of 64 KiB or more takes the bridge's large-body path: received into a buffer of its
own size (TCP and TLS read straight into it), published as views of it, assembled from its
AMQP body frames into one buffer, and written to the client as (head, body, end) with one
vectored write (TCP, TLS) or joined into one message (WebSocket). 5 MiB is 40 AMQP body frames
of RabbitMQ's default frame_max and many socket reads each way. The test bridge runs asyncio's
loop; the ``stomp-bridge`` command (uvloop, as in production) is run too.
"""

from __future__ import annotations

import os

import pytest

from testkit.ports import free_port
from tests.conftest import StompTarget
from tests.integration.rawstomp import RawStomp, build_frame
from tests.integration.stomp_client import Client
from tests.integration.test_bridge_settings import CLI_START_TIMEOUT, cli  # noqa: F401 - fixture
from tests.integration.test_websocket import LOGIN_TIMEOUT, command_of, frame, header, logged_in
from tests.integration.tls_support import TlsStomp, client_context, test_pki, tls_settings  # noqa: F401

pytestmark = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="the bridge's own settings and listeners"
)

SIZE = 5 * 1024 * 1024
LIMIT = 8 * 1024 * 1024  # max_frame_size and ws_max_message_size of these bridges


def _body(seed: int) -> bytes:
    """Binary, NULs included (so only content-length can delimit it), and not periodic."""
    return bytes(range(256)) * (SIZE // 256 // 2) + os.urandom(SIZE // 2 - 7) + b"\0end\0" + bytes([seed, 0])


def _raw_round_trip(conn: RawStomp, name: str) -> None:
    conn.connect()
    conn.subscribe(f"/queue/{name}")
    sent = [_body(1), _body(2)]
    for i, body in enumerate(sent):
        conn.receipt("SEND", {"destination": f"/queue/{name}", "persistent": "true"}, body,
                     receipt_id=f"r-{i}", content_length=True)
    for body in sent:
        message = conn.expect("MESSAGE", timeout=60)
        assert message["content-length"] == str(SIZE)
        assert message.body == body


def test_large_bodies_both_ways_over_tcp_with_stomp_py(bridge, queues, unique):
    name = f"large-{unique}"
    queues.append(name)
    server = bridge(max_frame_size=LIMIT)
    with Client(StompTarget("127.0.0.1", server.port, native=False)) as client:
        client.subscribe(f"/queue/{name}")
        sent = [_body(1), _body(2), b"small after large", _body(3)]
        for body in sent:
            client.send_with_receipt(f"/queue/{name}", body, headers={"persistent": "true"})
        for body in sent:
            message = client.next_message(timeout=60)
            assert message.body == body
            assert message.headers["content-length"] == str(len(body))


def test_large_bodies_both_ways_over_tls(bridge, tls_settings, test_pki, queues, unique):  # noqa: F811
    name = f"large-tls-{unique}"
    queues.append(name)
    server = bridge(**tls_settings, max_frame_size=LIMIT)
    conn = TlsStomp(("127.0.0.1", server.tls_port), client_context(test_pki), timeout=60)
    try:
        _raw_round_trip(conn, name)
    finally:
        conn.close()


def test_large_bodies_both_ways_over_websocket(bridge, queues, unique):
    name = f"large-ws-{unique}"
    queues.append(name)
    server = bridge(ws_port=0, max_frame_size=LIMIT, ws_max_message_size=LIMIT)
    with logged_in(server, max_size=2 * LIMIT) as ws:
        ws.send(frame("SUBSCRIBE", {"destination": f"/queue/{name}", "id": "1", "receipt": "sub"}))
        assert command_of(ws.recv(timeout=LOGIN_TIMEOUT)) == "RECEIPT"
        sent = [_body(1), _body(2)]
        for i, body in enumerate(sent):
            ws.send(frame("SEND", {"destination": f"/queue/{name}", "receipt": f"r-{i}",
                                   "content-length": str(len(body))}, body))
        got, receipts = [], 0
        while len(got) < len(sent):
            message = ws.recv(timeout=60)
            if command_of(message) == "RECEIPT":
                receipts += 1
                continue
            assert command_of(message) == "MESSAGE", message[:200]
            assert isinstance(message, bytes)  # binary: one message per frame, never split
            assert header(message, "content-length") == str(SIZE)
            head_end = message.index(b"\n\n") + 2
            assert message[head_end:] == sent[len(got)] + b"\0\n"
            got.append(message)


def test_large_bodies_both_ways_through_the_command_on_uvloop(cli, broker, dial, queues, unique, test_pki):  # noqa: F811
    """The production event loop (uvloop): its buffered-protocol reads (plain and TLS) and
    vectored writes."""
    name = f"large-uv-{unique}"
    queues.append(name)
    port, tls_port = free_port(), free_port()
    process = cli("--port", str(port), "--amqp-url", broker.amqp_url,
                  env={"STOMP_BRIDGE_MAX_FRAME_SIZE": str(LIMIT), "STOMP_BRIDGE_TLS_PORT": str(tls_port),
                       "STOMP_BRIDGE_TLS_CERT_FILE": test_pki.server_cert,
                       "STOMP_BRIDGE_TLS_KEY_FILE": test_pki.server_key})
    process.wait_line("stomp-bridge listening", CLI_START_TIMEOUT)
    _raw_round_trip(dial(port, timeout=60), name)
    tls = TlsStomp(("127.0.0.1", tls_port), client_context(test_pki), timeout=60)
    try:
        _raw_round_trip(tls, f"{name}-tls")
        queues.append(f"{name}-tls")
    finally:
        tls.close()
    # A frame split in the middle of a large body, with the next frame in the same write.
    split = f"large-uv-split-{unique}"
    queues.append(split)
    conn = dial(port, timeout=60)
    conn.connect()
    body = _body(4)
    data = build_frame("SEND", {"destination": f"/queue/{split}"}, body, content_length=True)
    data += build_frame("SEND", {"destination": f"/queue/{split}", "receipt": "last"}, b"tail")
    conn.send_raw(data[: 70_000])
    conn.send_raw(data[70_000:])
    conn.wait_receipt("last")
    reader = dial(port, timeout=60)
    reader.connect()
    reader.subscribe(f"/queue/{split}")
    assert reader.expect("MESSAGE", timeout=60).body == body
    assert reader.expect("MESSAGE", timeout=60).body == b"tail"
