"""STOMP over WebSocket against a real bridge and RabbitMQ, with websockets' own client.

Bridge-only (the native web-stomp plugin is not enabled on the test broker):
each test starts a bridge with ``ws_port=0`` and the settings it needs. The
browser and @stomp/stompjs tests are in tests/e2e.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed, InvalidMessage, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from testkit.bridge import BridgeThread
from tests.integration.test_backpressure import COUNT, SIZE, _ready
from tests.integration.test_bridge_settings import CLI_EXIT_TIMEOUT, CLI_START_TIMEOUT, CliProcess
from tests.integration.test_operations import get, metric

pytestmark = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="the bridge's WebSocket listener"
)

TIMEOUT = 5.0  # per read; the heart-beat timeout below needs 2 s
# CONNECTED waits for an AMQP login to the shared broker, which can be slow while other test
# runs load it: a deadline, not a timing assertion.
LOGIN_TIMEOUT = 20.0
CONNECT = "CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0"


def url(server: BridgeThread, path: str = "/ws", scheme: str = "ws") -> str:
    port = server.wss_port if scheme == "wss" else server.ws_port
    return f"{scheme}://127.0.0.1:{port}{path}"


def frame(command: str, headers: dict[str, str] | None = None, body: str | bytes = b"") -> bytes:
    lines = [command, *(f"{k}:{v}" for k, v in (headers or {}).items())]
    body = body.encode() if isinstance(body, str) else body
    return ("\n".join(lines) + "\n\n").encode() + body + b"\0"


def command_of(message: str | bytes) -> str:
    data = message.encode() if isinstance(message, str) else message
    return data.split(b"\n", 1)[0].decode()


def header(message: str | bytes, name: str) -> str | None:
    data = message.encode() if isinstance(message, str) else message
    for line in data.split(b"\n\n", 1)[0].split(b"\n")[1:]:
        key, _, value = line.decode().partition(":")
        if key == name:
            return value
    return None


def open_ws(server: BridgeThread, **kwargs) -> ClientConnection:
    kwargs.setdefault("subprotocols", ["v12.stomp", "v11.stomp", "v10.stomp"])
    kwargs.setdefault("open_timeout", TIMEOUT)
    return connect(url(server), **kwargs)


@contextmanager
def logged_in(server: BridgeThread, **kwargs) -> Iterator[ClientConnection]:
    with open_ws(server, **kwargs) as ws:
        ws.send(CONNECT)
        reply = ws.recv(timeout=LOGIN_TIMEOUT)
        assert command_of(reply) == "CONNECTED", reply
        yield ws


def recv_until_closed(ws: ClientConnection) -> tuple[list[str | bytes], ConnectionClosed]:
    """Every message up to the close frame, and the close."""
    received = []
    while True:
        try:
            received.append(ws.recv(timeout=LOGIN_TIMEOUT))
        except ConnectionClosed as closed:
            return received, closed


@pytest.fixture
def ws_bridge(bridge):
    def make(**settings: object) -> BridgeThread:
        settings.setdefault("ws_port", 0)
        return bridge(**settings)

    return make


# -- HTTP side of the endpoint ------------------------------------------------------------


def test_plain_http_get_explains_the_endpoint(ws_bridge):
    server = ws_bridge()
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{server.ws_port}/ws", timeout=TIMEOUT)
    assert err.value.code == 426
    text = err.value.read().decode()
    assert "STOMP over WebSocket" in text and "/ws" in text
    assert "Traceback" not in text


def test_upgrade_on_another_path_is_refused_with_the_right_path(ws_bridge):
    server = ws_bridge(ws_path="/stomp")
    with pytest.raises(InvalidStatus) as err:
        connect(url(server, "/ws"), open_timeout=TIMEOUT)
    assert err.value.response.status_code == 404
    assert b"/stomp" in err.value.response.body
    with connect(url(server, "/stomp?client=x"), open_timeout=TIMEOUT) as ws:
        ws.send(CONNECT)
        assert command_of(ws.recv(timeout=LOGIN_TIMEOUT)) == "CONNECTED"


@pytest.mark.parametrize(
    "offered, chosen",
    [
        (["v10.stomp", "v11.stomp", "v12.stomp"], "v12.stomp"),  # the highest, whatever the order
        (["v11.stomp", "v10.stomp"], "v11.stomp"),
        (["v10.stomp"], "v10.stomp"),
        (["stomp"], "stomp"),
        (["mqtt", "v12.stomp"], "v12.stomp"),
        (["mqtt"], None),  # web-stomp accepts, with no subprotocol
        (None, None),
    ],
)
def test_subprotocol_negotiation_follows_web_stomp(ws_bridge, offered, chosen):
    server = ws_bridge()
    with open_ws(server, subprotocols=offered) as ws:
        assert ws.subprotocol == chosen
        ws.send(CONNECT)
        assert command_of(ws.recv(timeout=LOGIN_TIMEOUT)) == "CONNECTED"


# -- framing ----------------------------------------------------------------------------


def test_several_frames_in_one_message_and_one_frame_across_messages(ws_bridge, unique):
    server = ws_bridge()
    topic = f"/topic/ws-{unique}"
    with open_ws(server) as ws:
        ws.send(CONNECT + frame("SUBSCRIBE", {"id": "s", "destination": topic, "receipt": "r1"}).decode())
        assert command_of(ws.recv(timeout=LOGIN_TIMEOUT)) == "CONNECTED"
        assert header(ws.recv(timeout=TIMEOUT), "receipt-id") == "r1"
        whole = frame("SEND", {"destination": topic, "receipt": "r2"}, "split body")
        for i in range(0, len(whole), 7):  # text and binary messages, split anywhere
            part = whole[i:i + 7]
            ws.send(part if i % 2 else part.decode())
        replies = [ws.recv(timeout=TIMEOUT), ws.recv(timeout=TIMEOUT)]
        assert sorted(command_of(r) for r in replies) == ["MESSAGE", "RECEIPT"]
        message = next(r for r in replies if command_of(r) == "MESSAGE")
        # one frame per message, nothing else in it; NUL and the plugin's trailing_lf end it, as
        # native web-stomp sends them
        assert message.endswith("split body\0\n")


def test_each_frame_and_heart_beat_is_its_own_message(ws_bridge, unique):
    server = ws_bridge()
    topic = f"/topic/ws-{unique}"
    with open_ws(server) as ws:
        ws.send("CONNECT\naccept-version:1.2\nhost:/\nheart-beat:0,1000\n\n\0")
        connected = ws.recv(timeout=LOGIN_TIMEOUT)
        assert header(connected, "heart-beat") == "1000,0"
        ws.send(frame("SUBSCRIBE", {"id": "s", "destination": topic}).decode())
        ws.send(b"".join(frame("SEND", {"destination": topic}, f"m{i}") for i in range(3)))
        received: list[str | bytes] = []
        while received.count("\n") < 1 or len(received) - received.count("\n") < 3:
            received.append(ws.recv(timeout=TIMEOUT))  # the server beats every second
        messages = [m for m in received if m != "\n"]
        assert [command_of(m) for m in messages] == ["MESSAGE"] * 3
        assert [m.count("\0") for m in messages] == [1, 1, 1]  # one frame per message


def test_utf8_frames_go_out_as_text_and_other_bodies_as_binary(ws_bridge, unique):
    server = ws_bridge()
    topic = f"/topic/ws-{unique}"
    with logged_in(server) as ws:
        ws.send(frame("SUBSCRIBE", {"id": "s", "destination": topic}).decode())
        ws.send(frame("SEND", {"destination": topic}, "grüße"))
        raw = b"\xff\x00\xfe"
        ws.send(frame("SEND", {"destination": topic, "content-length": str(len(raw))}, raw))
        text, binary = ws.recv(timeout=TIMEOUT), ws.recv(timeout=TIMEOUT)
        assert isinstance(text, str) and text.endswith("grüße\0\n")
        assert isinstance(binary, bytes) and binary.endswith(b"\n\n" + raw + b"\0\n")


# -- errors and closing -------------------------------------------------------------------


def test_silent_client_gets_heart_beat_timeout_error_then_close(ws_bridge):
    server = ws_bridge()
    with open_ws(server) as ws:
        ws.send("CONNECT\naccept-version:1.2\nhost:/\nheart-beat:1000,0\n\n\0")  # promises beats
        assert header(ws.recv(timeout=LOGIN_TIMEOUT), "heart-beat") == "0,1000"
        received, closed = recv_until_closed(ws)  # ... and sends none
    assert [header(m, "message") for m in received] == ["Heart-beat timeout"]
    assert closed.rcvd is not None and closed.rcvd.code == 1000


def test_error_frame_arrives_before_the_close_frame(ws_bridge):
    server = ws_bridge()
    with logged_in(server) as ws:
        ws.send("SEND\ndestination:/topic/x\ncontent-length:zz\n\n\0")  # malformed: fatal
        received, closed = recv_until_closed(ws)
    assert [command_of(m) for m in received] == ["ERROR"]
    assert header(received[0], "message") == "Invalid content-length"
    assert closed.rcvd is not None and closed.rcvd.code == 1000


def test_message_over_ws_max_message_size_gets_error_then_close_1009(ws_bridge):
    server = ws_bridge(ws_max_message_size=2048)
    with logged_in(server, max_size=None) as ws:
        ws.send(frame("SEND", {"destination": "/topic/big"}, "x" * 4096))
        received, closed = recv_until_closed(ws)
    assert [command_of(m) for m in received] == ["ERROR"]
    assert header(received[0], "message") == "Frame too large"
    assert "2048" in received[0]
    assert closed.rcvd is not None and closed.rcvd.code == 1009


def test_client_close_ends_the_session(ws_bridge):
    server = ws_bridge(http_port=0)
    with logged_in(server) as ws:
        pass
    assert ws.close_code == 1000
    server_side = server._server
    assert server_side is not None
    end = time.monotonic() + TIMEOUT
    while server_side.connection_count and time.monotonic() < end:
        time.sleep(0.02)
    assert server_side.connection_count == 0


# -- security ---------------------------------------------------------------------------


def test_origin_allow_list_refuses_other_pages(ws_bridge):
    server = ws_bridge(ws_allowed_origins="https://app.example.com, http://localhost:8080")
    with logged_in(server, origin="https://app.example.com"):
        pass
    with logged_in(server):  # no Origin: not a browser, nothing to hijack
        pass
    with pytest.raises(InvalidStatus) as err:
        open_ws(server, origin="https://evil.example.net")
    assert err.value.response.status_code == 403
    assert b"ws_allowed_origins" in err.value.response.body
    status, text = get(server, "/metrics")
    assert metric(text, "stomp_bridge_connections_refused_total", '{limit="origin"}') == 1


@pytest.fixture
def ws_user(rabbit, unique):
    name, password = f"stomp-ws-{unique}", "ws-secret"
    rabbit.create_user(name, password)
    rabbit.set_permissions(name)
    yield name, password
    rabbit.delete_user(name)


def basic(login: str, passcode: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{login}:{passcode}".encode()).decode()}


def test_http_basic_auth_is_the_login_when_enabled(ws_bridge, ws_user):
    server = ws_bridge(ws_use_http_auth=True)
    name, password = ws_user
    # CONNECT's login is ignored: the upgrade request's credentials log in.
    with open_ws(server, additional_headers=basic(name, password)) as ws:
        ws.send("CONNECT\naccept-version:1.2\nhost:/\nlogin:nobody\npasscode:wrong\n\n\0")
        assert command_of(ws.recv(timeout=LOGIN_TIMEOUT)) == "CONNECTED"
        assert server._server is not None
        assert [c.session.ended()[1]["user"] for c in server._server._connections.values()] == [name]
    with open_ws(server, additional_headers=basic(name, "not-it")) as ws:
        ws.send(CONNECT)  # right guest credentials in CONNECT do not help
        received, _ = recv_until_closed(ws)
        assert [command_of(m) for m in received] == ["ERROR"]
        assert header(received[0], "message") == "Bad CONNECT"  # the plugin's text for a refused login


def test_http_basic_auth_off_keeps_connect_credentials(ws_bridge, ws_user):
    server = ws_bridge()
    name, password = ws_user
    with open_ws(server, additional_headers=basic("nobody", "wrong")) as ws:
        ws.send(f"CONNECT\naccept-version:1.2\nhost:/\nlogin:{name}\npasscode:{password}\n\n\0")
        assert command_of(ws.recv(timeout=LOGIN_TIMEOUT)) == "CONNECTED"


def test_http_auth_without_credentials_or_default_user_asks_for_them(ws_bridge):
    server = ws_bridge(ws_use_http_auth=True, default_user=None)
    with pytest.raises(InvalidStatus) as err:
        open_ws(server)
    assert err.value.response.status_code == 401
    assert err.value.response.headers["WWW-Authenticate"].startswith("Basic")


# -- shared with TCP: limits, metrics, shutdown ---------------------------------------------


def test_connection_limit_counts_tcp_and_websocket_clients_together(ws_bridge, dial):
    server = ws_bridge(max_connections=1)
    tcp = dial(server)
    tcp.connect()
    with open_ws(server) as ws:
        received, _ = recv_until_closed(ws)
    assert [command_of(m) for m in received] == ["ERROR"]
    assert header(received[0], "message") == "Too many connections"
    status, text = get(server, "/metrics")
    assert metric(text, "stomp_bridge_connections_refused_total", '{limit="total"}') == 1


def test_websocket_clients_show_in_the_metrics(ws_bridge):
    server = ws_bridge()
    with logged_in(server) as ws:
        ws.send(frame("SEND", {"destination": "/topic/metrics", "receipt": "r"}))
        assert command_of(ws.recv(timeout=TIMEOUT)) == "RECEIPT"
        _, text = get(server, "/metrics")
    assert metric(text, "stomp_bridge_connections") == 1
    assert metric(text, "stomp_bridge_websocket_upgrades_total") == 1
    assert metric(text, 'stomp_bridge_frames_received_total', '{command="SEND"}') == 1
    assert metric(text, "stomp_bridge_messages_published_total") == 1


def test_shutdown_sends_error_then_closes_websocket_clients(broker):
    server = BridgeThread(broker.amqp_url, ws_port=0, shutdown_grace=2)
    server.start()
    with logged_in(server) as ws:
        server.stop()
        received, closed = recv_until_closed(ws)
    assert [command_of(m) for m in received] == ["ERROR"]
    assert header(received[0], "message") == "Server shutdown"
    assert closed.rcvd is not None and closed.rcvd.code == 1000


# -- wss ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("wss")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


def test_wss_carries_stomp_with_the_tls_settings(ws_bridge, certificate):
    cert, key = certificate
    server = ws_bridge(ws_port=None, wss_port=0, tls_cert_file=str(cert), tls_key_file=str(key))
    assert server.ws_port is None
    context = ssl.create_default_context(cafile=str(cert))
    with connect(url(server, scheme="wss"), ssl=context, subprotocols=["v12.stomp"], open_timeout=TIMEOUT) as ws:
        ws.send(CONNECT)
        assert command_of(ws.recv(timeout=LOGIN_TIMEOUT)) == "CONNECTED"
        ws.send("BOGUS\n\n\0")  # an ERROR that keeps the connection, as the plugin's
        assert header(ws.recv(timeout=TIMEOUT), "message") == "Bad command"
        ws.send("DISCONNECT\nreceipt:bye\n\n\0")
        received, _ = recv_until_closed(ws)
    assert [command_of(m) for m in received] == ["RECEIPT"]


def test_websocket_client_that_does_not_read_leaves_messages_in_the_queue(ws_bridge, connected, broker, queues, unique):
    """The same backpressure as TCP (test_backpressure.py): a full WebSocket write
    buffer stops the bridge reading that client's deliveries from RabbitMQ."""
    name = f"ws-slow-{unique}"
    queues.append(name)
    server = ws_bridge()
    producer = connected()
    body = b"m" * SIZE
    producer.send_raw(b"".join(
        f"SEND\ndestination:/queue/{name}\ncontent-length:{SIZE}\n\n".encode() + body + b"\0"
        for _ in range(COUNT - 1)
    ))
    producer.receipt("SEND", {"destination": f"/queue/{name}"}, body, receipt_id="all-sent")
    # websockets' client stops reading its socket once max_queue messages wait unread. No
    # compression: these bodies deflate to almost nothing, and every message would fit the
    # socket buffers (backpressure counts the bytes on the wire).
    with logged_in(server, max_queue=4, max_size=None, compression=None) as ws:
        ws.send(frame("SUBSCRIBE", {"destination": f"/queue/{name}", "id": "slow", "ack": "auto"}))
        deadline = time.monotonic() + 20
        last = _ready(broker.amqp_url, name)
        while time.monotonic() < deadline:  # no event says "stopped pulling": wait for a steady depth
            time.sleep(1.0)
            now = _ready(broker.amqp_url, name)
            if now == last:
                break
            last = now
        assert last >= COUNT - 2500, f"only {last} of {COUNT} messages still queued: the bridge buffered the rest"
        received = 0
        while received < COUNT:
            message = ws.recv(timeout=30)
            if message == "\n":
                continue
            assert command_of(message) == "MESSAGE"
            received += 1
    assert _ready(broker.amqp_url, name) == 0


def test_cli_serves_websocket_and_shuts_it_down_on_sigterm(broker):
    """The command runs on uvloop (the tests' BridgeThread on asyncio's own loop)."""
    process = CliProcess(["--port", "0", "--amqp-url", broker.amqp_url])
    try:
        line = process.wait_line("stomp-bridge listening", CLI_START_TIMEOUT)
        port = re.search(r"ws_port=(\d+)", line)
        assert port is not None, line
        with connect(f"ws://127.0.0.1:{port.group(1)}/ws", subprotocols=["v12.stomp"], open_timeout=TIMEOUT) as ws:
            ws.send(CONNECT)
            assert command_of(ws.recv(timeout=LOGIN_TIMEOUT)) == "CONNECTED"
            process.proc.send_signal(signal.SIGTERM)
            received, closed = recv_until_closed(ws)
        assert [header(m, "message") for m in received] == ["Server shutdown"]
        assert process.proc.wait(CLI_EXIT_TIMEOUT) == 0
    finally:
        process.stop()


def test_cli_ws_port_none_turns_the_listener_off(broker):
    process = CliProcess(["--port", "0", "--ws-port", "none", "--amqp-url", broker.amqp_url])
    try:
        line = process.wait_line("stomp-bridge listening", CLI_START_TIMEOUT)
        assert "ws_port=None" in line or "ws_port=" not in line, line
    finally:
        process.stop()


def test_proxy_protocol_header_before_the_upgrade_names_the_client(ws_bridge):
    """proxy_protocol covers the WebSocket listener too, as web-stomp's: the balancer's
    header comes first, and its source address is the client's (loopback_users, limits)."""
    server = ws_bridge(proxy_protocol=True, proxy_protocol_trusted=["127.0.0.1/32"], loopback_users=["guest"])
    for source, expected in (("203.0.113.7", "ERROR"), ("127.0.0.1", "CONNECTED")):
        sock = socket.create_connection(("127.0.0.1", server.ws_port), timeout=TIMEOUT)
        sock.sendall(f"PROXY TCP4 {source} 127.0.0.1 40000 15674\r\n".encode())
        with connect(url(server), sock=sock, subprotocols=["v12.stomp"], open_timeout=TIMEOUT) as ws:
            ws.send(CONNECT)
            reply = ws.recv(timeout=LOGIN_TIMEOUT)
        assert command_of(reply) == expected, reply
        if expected == "ERROR":
            assert "non-loopback access denied" in reply
    # Without the header the upgrade request itself is refused.
    with pytest.raises((InvalidMessage, ConnectionError, EOFError)):
        open_ws(server)
    _, text = get(server, "/metrics")
    assert metric(text, "stomp_bridge_connections_refused_total", '{limit="proxy_protocol"}') == 1


# -- message bombs ------------------------------------------------------------------------
#
# permessage-deflate is negotiated by default (as web-stomp does): a compressed message is
# inflated at most ws_max_message_size bytes far, then refused (1009). With ws_compression
# off, a message sent compressed anyway (RSV1 set) is a protocol error (RFC 6455 §5.2: 1002),
# refused uninflated; an uncompressed message over that limit is refused at the frame header,
# or at the fragment that passes it (1009), unread. Each runs on a bridge process of its own
# (uvloop, as deployed) whose peak RSS is read from /proc, while a bystander on the same
# bridge is served.

BOMB = 256 * 1024 * 1024  # what the compressed message would inflate to
ANNOUNCED = 1 << 30  # the uncompressed message's announced length
STREAMED = 64 * 1024 * 1024  # at most this much of it is written before the bridge closes
PEAK_GROWTH = 32 * 1024 * 1024  # the bridge's peak RSS may grow by less than this


def memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, in bytes: now and at its peak."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


@contextmanager
def bridge_process(broker, **env: str) -> Iterator[tuple[int, int]]:
    """A bridge of its own, as the CLI runs it: (pid, ws_port)."""
    process = CliProcess(["--port", "0", "--amqp-url", broker.amqp_url], env)
    try:
        line = process.wait_line("stomp-bridge listening", CLI_START_TIMEOUT)
        port = re.search(r"ws_port=(\d+)", line)
        assert port is not None, line
        yield process.proc.pid, int(port.group(1))
    finally:
        process.stop()


@contextmanager
def ws_client(port: int, **kwargs) -> Iterator[ClientConnection]:
    with connect(f"ws://127.0.0.1:{port}/ws", subprotocols=["v12.stomp"], open_timeout=TIMEOUT, **kwargs) as ws:
        ws.send(CONNECT)
        reply = ws.recv(timeout=LOGIN_TIMEOUT)
        assert command_of(reply) == "CONNECTED", reply
        yield ws


class Bystander:
    """Another client of the same bridge: each round trip is a SEND it gets back as MESSAGE."""

    def __init__(self, ws: ClientConnection, topic: str) -> None:
        self.ws, self.topic, self.trips = ws, topic, 0
        ws.send(frame("SUBSCRIBE", {"id": "s", "destination": topic, "receipt": "sub"}))
        assert header(ws.recv(timeout=TIMEOUT), "receipt-id") == "sub"

    def round_trip(self) -> None:
        self.trips += 1
        body = f"still served {self.trips}"
        self.ws.send(frame("SEND", {"destination": self.topic}, body))
        message = self.ws.recv(timeout=TIMEOUT)
        assert command_of(message) == "MESSAGE" and body in message, message


def ws_frame(head1: int, payload: bytes, length: int | None = None) -> bytes:
    """A client's frame as written by hand (websockets' own serializer refuses RSV1 without
    the extension): ``head1`` holds FIN, RSV1 and the opcode; ``length`` may announce more than
    ``payload``. The zero mask key leaves the payload as it is."""
    n = len(payload) if length is None else length
    if n < 126:
        head = struct.pack("!BB", head1, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", head1, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", head1, 0x80 | 127, n)
    return head + bytes(4) + payload


FIN, RSV1, CONT, TEXT = 0x80, 0x40, 0x0, 0x1
BOMB_SEND = frame("SEND", {"destination": "/topic/ws-bomb"})[:-1]  # a SEND whose body never ends


def deflate_bomb(size: int) -> bytes:
    """A permessage-deflate payload (RFC 7692 §7.2.1) that inflates to ``size`` zero bytes."""
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    chunk = bytes(1 << 20)
    data = b"".join(compressor.compress(chunk) for _ in range(size >> 20))
    data += compressor.flush(zlib.Z_SYNC_FLUSH)
    assert data.endswith(b"\x00\x00\xff\xff")
    return data[:-4]


def write_until_closed(sock: socket.socket, chunks: Iterator[bytes]) -> int:
    """Write ``chunks`` until the bridge's close stops them; the bytes written."""
    written = 0
    try:
        for chunk in chunks:
            sock.sendall(chunk)
            written += len(chunk)
    except OSError:
        pass  # the bridge closed the connection while we were still writing: the point
    return written


def test_permessage_deflate_is_negotiated_as_web_stomp_does(ws_bridge, unique):
    server = ws_bridge()
    with open_ws(server, compression="deflate") as ws:  # offers permessage-deflate
        offered = ws.response.headers["Sec-WebSocket-Extensions"]
        assert offered.startswith("permessage-deflate"), offered
        assert [ext.name for ext in ws.protocol.extensions] == ["permessage-deflate"]
        ws.send(CONNECT)
        assert command_of(ws.recv(timeout=LOGIN_TIMEOUT)) == "CONNECTED"
        Bystander(ws, f"/topic/ws-deflate-{unique}").round_trip()  # compressed both ways


def test_ws_compression_off_negotiates_no_extension(ws_bridge):
    server = ws_bridge(ws_compression=False)
    with open_ws(server, compression="deflate") as ws:
        assert "Sec-WebSocket-Extensions" not in ws.response.headers
        assert ws.protocol.extensions == []


@pytest.mark.parametrize("compression", ["true", "false"])
def test_a_compressed_message_bomb_is_refused_uninflated_and_costs_only_its_client(broker, unique, compression):
    """Negotiated (the default), the bomb is inflated no further than ws_max_message_size:
    1009 after "Frame too large". Not negotiated, RSV1 is a protocol error: 1002."""
    payload = deflate_bomb(BOMB)
    bomb = ws_frame(FIN | RSV1 | TEXT, payload)
    with bridge_process(broker, STOMP_BRIDGE_WS_COMPRESSION=compression) as (pid, port):
        with ws_client(port) as other, ws_client(port, compression="deflate") as attacker:
            bystander = Bystander(other, f"/topic/ws-bomb-{unique}")
            bystander.round_trip()
            before = memory(pid)
            attacker.socket.sendall(bomb[: len(bomb) // 2])
            bystander.round_trip()  # served while the bomb is half in
            attacker.socket.sendall(bomb[len(bomb) // 2:])
            received, closed = recv_until_closed(attacker)
            after = memory(pid)
            bystander.round_trip()
    print(f"\ncompressed bomb: {len(payload)} bytes inflating to {BOMB}; bridge RSS {before[0]} -> {after[0]}, "
          f"peak {before[1]} -> {after[1]} (+{after[1] - before[1]})")
    if compression == "true":
        assert [header(m, "message") for m in received] == ["Frame too large"]
        assert closed.rcvd is not None and closed.rcvd.code == 1009
    else:
        assert [header(m, "message") for m in received] == ["Invalid WebSocket frame"]
        assert "reserved bits" in received[0]
        assert closed.rcvd is not None and closed.rcvd.code == 1002
    assert after[1] - before[1] < PEAK_GROWTH


def _one_frame() -> Iterator[bytes]:
    yield ws_frame(FIN | TEXT, BOMB_SEND, length=ANNOUNCED)
    chunk = b"x" * 65536
    for _ in range(STREAMED // len(chunk)):
        yield chunk


def _fragments() -> Iterator[bytes]:
    chunk = b"x" * 65536
    yield ws_frame(TEXT, BOMB_SEND)
    for _ in range(STREAMED // len(chunk)):
        yield ws_frame(CONT, chunk)


@pytest.mark.parametrize("chunks", [_one_frame, _fragments], ids=["one-frame", "fragments"])
def test_an_oversized_message_is_cut_off_unbuffered_with_1009_and_costs_only_its_client(broker, unique, chunks):
    limit = 1024 * 1024  # below max_frame_size: the WebSocket limit, not STOMP's, ends it
    with bridge_process(broker, STOMP_BRIDGE_WS_MAX_MESSAGE_SIZE=str(limit)) as (pid, port):
        with ws_client(port) as other, ws_client(port) as attacker:
            bystander = Bystander(other, f"/topic/ws-big-{unique}")
            before = memory(pid)
            written = write_until_closed(attacker.socket, chunks())
            received, closed = recv_until_closed(attacker)
            after = memory(pid)
            bystander.round_trip()
    print(f"\n{chunks.__name__}: {written} bytes written before the close; bridge RSS "
          f"{before[0]} -> {after[0]}, peak {before[1]} -> {after[1]} (+{after[1] - before[1]})")
    assert [header(m, "message") for m in received] == ["Frame too large"]
    assert closed.rcvd is not None and closed.rcvd.code == 1009
    assert after[1] - before[1] < PEAK_GROWTH


@pytest.mark.parametrize("flood", ["junk", "pings"])
def test_a_websocket_client_that_sends_and_never_reads_is_not_read(ws_bridge, flood):
    """Junk STOMP frames (each an ERROR, one message each) or pings (each a pong, answered by
    websockets as it reads them) from a client that reads nothing: once write_buffer_high bytes
    wait for it the bridge reads no more, so its writes stall. Before, it read on and queued every
    answer (64 MB of pings: 57 MB more RSS in a bridge process)."""
    from testkit.flood import PING, login, unread_socket, write_until_stalled, ws_frame, ws_upgrade
    from tests.integration.test_backpressure import JUNK_FRAME, JUNK_LIMIT

    server = ws_bridge()
    sock = unread_socket(server.ws_port)
    try:
        ws_upgrade(sock)
        login(sock, send=ws_frame)
        data = ws_frame(JUNK_FRAME * 64) if flood == "junk" else ws_frame(b"p" * 125, PING) * 512
        written = write_until_stalled(sock, data, JUNK_LIMIT)
        assert written < JUNK_LIMIT, f"the bridge read every byte of {flood} from a client that never read"
    finally:
        sock.close()


def test_proxy_protocol_header_from_an_untrusted_peer_is_refused_before_the_upgrade(ws_bridge):
    """A peer outside proxy_protocol_trusted could name any client in its header: its
    connection is closed before anything is read, as for a bad header."""
    server = ws_bridge(proxy_protocol=True, proxy_protocol_trusted=["10.0.0.0/8"], loopback_users=["guest"])
    with socket.create_connection(("127.0.0.1", server.ws_port), timeout=TIMEOUT) as sock:
        sock.sendall(
            b"PROXY TCP4 127.0.0.1 127.0.0.1 40000 15674\r\n"
            b"GET /ws HTTP/1.1\r\nHost: bridge\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            b"Sec-WebSocket-Protocol: v12.stomp\r\n\r\n"
        )
        try:
            answer = sock.recv(4096)
        except ConnectionResetError:  # closed with our bytes unread: the kernel resets
            answer = b""
    assert answer == b"", "no HTTP response, no upgrade"
    _, text = get(server, "/metrics")
    assert metric(text, "stomp_bridge_connections_refused_total", '{limit="untrusted_proxy"}') == 1
    assert metric(text, "stomp_bridge_websocket_upgrades_total") == 0
