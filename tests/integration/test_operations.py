"""Operations: /metrics, /healthz, /readyz, connection limits, idle timeout, close log lines,
whom the PROXY header and the HTTP endpoint trust."""

from __future__ import annotations

import datetime
import logging
import os
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from stomp_bridge.metrics import CLOSE_REASONS
from stomp_bridge.protocol.frames import CLIENT_COMMANDS, SERVER_COMMANDS
from stomp_bridge.tls import HANDSHAKE_FAILURES
from testkit.bridge import BridgeThread
from testkit.brokers import rabbitmqctl
from testkit.faultproxy import FaultProxy
from tests.integration.conftest import CONNECT_FAILURE_CLOSE_TIMEOUT
from tests.integration.rawstomp import RawStomp

REFUSALS = {"total", "per_ip", "origin", "http_auth", "proxy_protocol", "untrusted_proxy"}

pytestmark = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="the bridge's own endpoints"
)


def get(server: BridgeThread, path: str) -> tuple[int, str]:
    url = f"http://127.0.0.1:{server._server.ops.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metric(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def test_metrics_follow_the_frames(bridge, dial, queues, unique):
    server = bridge()
    before = get(server, "/metrics")[1]
    name = f"metrics-{unique}"
    queues.append(name)
    conn = dial(server)
    conn.connect()
    conn.subscribe(f"/queue/{name}")
    for i in range(3):
        conn.receipt("SEND", {"destination": f"/queue/{name}", "persistent": "true"}, f"m{i}", receipt_id=f"r{i}")
    messages = [conn.expect("MESSAGE") for _ in range(3)]
    assert [m.body for m in messages] == [b"m0", b"m1", b"m2"]
    status, after = get(server, "/metrics")
    assert status == 200
    send = 'stomp_bridge_frames_received_total{command="SEND"}'
    assert metric(after, send) - metric(before, send) == 3
    assert metric(after, "stomp_bridge_messages_published_total") - metric(before, "stomp_bridge_messages_published_total") == 3
    assert metric(after, "stomp_bridge_messages_delivered_total") - metric(before, "stomp_bridge_messages_delivered_total") == 3
    assert metric(after, 'stomp_bridge_frames_sent_total', '{command="RECEIPT"}') >= 4  # SUBSCRIBE + 3 SENDs
    assert metric(after, "stomp_bridge_connections") == 1
    assert metric(after, "stomp_bridge_publish_confirm_seconds_count") >= 3
    assert metric(after, "stomp_bridge_received_bytes_total") > metric(before, "stomp_bridge_received_bytes_total")


def test_metrics_carry_the_process_standard_families(bridge, dial):
    """process_* from /proc: this process's memory, CPU, descriptors (each client holds one more)
    and start, with no prometheus_client import needed in a bridge process."""
    server = bridge()
    before = get(server, "/metrics")[1]
    conns = [dial(server) for _ in range(5)]
    for conn in conns:
        conn.connect()
    after = get(server, "/metrics")[1]
    assert metric(after, "process_open_fds") >= metric(before, "process_open_fds") + 5
    assert metric(after, "process_max_fds") >= metric(after, "process_open_fds")
    with open("/proc/self/status") as status:
        rss = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
    assert metric(after, "process_resident_memory_bytes") == pytest.approx(rss, rel=0.25)
    assert metric(after, "process_cpu_seconds_total") >= metric(before, "process_cpu_seconds_total") > 0
    start = metric(after, "process_start_time_seconds")
    assert time.time() - 24 * 3600 < start < time.time()
    assert "# TYPE process_cpu_seconds_total counter" in after


def test_errors_and_auth_failures_are_counted(bridge, dial):
    server = bridge()
    conn = dial(server)
    conn.send_frame("CONNECT", {"accept-version": "1.2", "login": "guest", "passcode": "wrong"})
    assert conn.error_then_close()["message"] == "Bad CONNECT"
    text = get(server, "/metrics")[1]
    assert metric(text, "stomp_bridge_auth_failures_total") == 1
    assert metric(text, "stomp_bridge_errors_total", '{reason="Bad CONNECT"}') == 1


def test_health_and_readiness(bridge):
    server = bridge()
    assert get(server, "/healthz") == (200, "ok\n")
    assert get(server, "/readyz") == (200, "ready\n")
    assert get(server, "/nope")[0] == 404


def test_not_ready_when_rabbitmq_does_not_answer(bridge):
    server = bridge(amqp_url="amqp://guest:guest@127.0.0.1:1/")
    status, body = get(server, "/readyz")
    assert status == 503
    assert "127.0.0.1:1" in body and "not reachable" in body


def _warned(ports: list[int], since: str) -> set[int]:
    """Which of these client ports RabbitMQ's log (since the UTC time ``since``) has a WARNING or
    ERROR ``closing AMQP connection`` line for: a connection that closed without logging out."""
    patterns = ", ".join(f'<<"127.0.0.1:{port} -> ">>' for port in ports)
    out = rabbitmqctl("eval", f"""
        {{ok, B}} = file:read_file(hd(rabbit:log_locations())),
        Since = <<"{since}">>,
        Ls = [L || L <- binary:split(B, <<"\n">>, [global]), byte_size(L) > 26, binary:part(L, 0, 26) >= Since,
                   binary:match(L, <<"closing AMQP connection">>) =/= nomatch,
                   binary:match(L, [<<"[warning]">>, <<"[error]">>]) =/= nomatch],
        [{{P, length([L || L <- Ls, binary:match(L, P) =/= nomatch])}} || P <- [{patterns}]].""")
    return {int(port) for port, count in re.findall(r'127\.0\.0\.1:(\d+) -> ">>,(\d+)', out) if int(count)}


def _old_probe(port: int) -> None:
    """What /readyz used to do to RabbitMQ: the AMQP header, connection.start back, a hang-up."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        assert sock.recv(7)[:1] == b"\x01"  # a method frame: connection.start


@pytest.mark.rabbitmqctl
def test_readyz_leaves_no_warning_in_rabbitmqs_log(bridge, broker, dial):
    """The chart's readiness probe and HAProxy's health check ask /readyz every few seconds: it
    answers from the AMQP connections the bridge holds, else opens a connection to a node that
    answered AMQP before and closes it before a byte, so RabbitMQ logs nothing at INFO or above.
    Only the start-up check speaks AMQP (once per node), and RabbitMQ logs its hang-up."""
    since = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    url = urllib.parse.urlsplit(broker.amqp_url)
    with FaultProxy((url.hostname, url.port)) as proxy:  # names the connections as RabbitMQ sees them
        server = bridge(amqp_url=f"amqp://guest:guest@127.0.0.1:{proxy.port}/")
        for _ in range(5):  # no client: no AMQP connection of the bridge's
            assert get(server, "/readyz") == (200, "ready\n")
        conn = dial(server)
        conn.connect()
        before = proxy.total_connections
        for _ in range(5):  # a client's AMQP connection is open: RabbitMQ answers, nothing is asked
            assert get(server, "/readyz") == (200, "ready\n")
        asked = proxy.total_connections - before
        conn.send_frame("DISCONNECT", {"receipt": "bye"})
        conn.expect("RECEIPT")
        server.stop()  # its AMQP connections closed cleanly before the proxy goes (which resets them)
        _old_probe(proxy.port)  # the marker: its WARNING is written after the others'
        ports = proxy.upstream_ports
    deadline = time.monotonic() + 20
    while ports[-1] not in (warned := _warned(ports, since)):
        assert time.monotonic() < deadline, "RabbitMQ never logged the marker's hang-up"
        time.sleep(0.2)
    assert warned - {ports[-1]} <= {ports[0]}, f"WARNINGs for {sorted(warned)} of {ports}"
    assert asked == 0, "with an AMQP connection open, /readyz asks RabbitMQ nothing"


def test_losing_every_node_is_one_warning_and_its_return_another(bridge, broker, dial, caplog, monkeypatch):
    """After start-up a bridge that reaches no RabbitMQ node says so once at WARNING, however long
    it lasts, and once again when a node is back (the clients' own lines are INFO)."""
    from stomp_bridge.transport import server as server_module

    monkeypatch.setattr(server_module, "BROKER_RETRY", 0.1)
    url = urllib.parse.urlsplit(broker.amqp_url)
    caplog.set_level(logging.INFO, logger="stomp_bridge")

    def lines(message: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.getMessage() == message]

    def wait_for(message: str) -> None:
        deadline = time.monotonic() + 15
        while not lines(message):
            assert time.monotonic() < deadline, f"never logged {message!r}"
            time.sleep(0.05)

    with FaultProxy((url.hostname, url.port)) as proxy:
        server = bridge(amqp_url=f"amqp://guest:guest@127.0.0.1:{proxy.port}/")
        conn = dial(server)
        conn.connect()
        proxy.refuse(close_listener=True)  # the node is gone: connections reset, new ones refused
        error = conn.error_then_close()
        assert error["message"] == "Broker connection lost"
        assert error.text.startswith("The connection to RabbitMQ closed (") and "<" not in error.text, error.text
        wait_for("RabbitMQ unreachable: no node answers; every CONNECT fails until one does")
        assert get(server, "/readyz")[0] == 503
        time.sleep(1.0)  # ten more checks, and no second line
        (down,) = lines("RabbitMQ unreachable: no node answers; every CONNECT fails until one does")
        assert down.levelno == logging.WARNING and f"127.0.0.1:{proxy.port}" in down.problems
        proxy.restore()
        wait_for("RabbitMQ reachable again")
        (back,) = lines("RabbitMQ reachable again")
        assert back.levelno == logging.WARNING and back.unreachable_seconds >= 1.0
        assert get(server, "/readyz")[0] == 200


def test_total_connection_limit_refuses_with_an_error(bridge, dial):
    server = bridge(max_connections=2)
    first, second = dial(server), dial(server)
    first.connect()
    second.connect()
    third = dial(server)
    error = third.error_then_close()
    assert error["message"] == "Too many connections"
    assert error["version"] == "1.0,1.1,1.2"  # as every ERROR the bridge writes
    assert "2 connections" in error.text
    metrics = get(server, "/metrics")[1]
    assert metric(metrics, "stomp_bridge_connections_refused_total", '{limit="total"}') == 1
    assert metric(metrics, "stomp_bridge_errors_total", '{reason="Too many connections"}') == 1
    first.receipt("SEND", {"destination": "/topic/still-fine"}, "x")


def test_per_address_connection_limit(bridge, dial):
    server = bridge(max_connections_per_ip=1)
    first = dial(server)
    first.connect()
    error = dial(server).error_then_close()
    assert error["message"] == "Too many connections"
    assert "127.0.0.1" in error.text
    first.send_frame("DISCONNECT", {"receipt": "bye"})
    first.read_until_closed()
    # The address's slot is free again once its connection is gone.
    deadline = time.monotonic() + 5
    while server._server.connection_count and time.monotonic() < deadline:
        time.sleep(0.05)
    dial(server).connect()


def test_idle_timeout_drops_a_silent_client_without_heart_beats(bridge, dial):
    server = bridge(idle_timeout=1.0)
    conn = dial(server, timeout=10)
    conn.connect(heart_beat="0,0")
    started = time.monotonic()
    error = conn.error_then_close(timeout=10)
    assert error["message"] == "Idle timeout"
    assert 0.9 <= time.monotonic() - started <= 5


@pytest.mark.parametrize("offered", ["0,0", "30000,0"], ids=["none", "slower"])
def test_heartbeat_max_bounds_a_silent_client_whatever_it_offered(bridge, dial, offered):
    """A client offering no heart-beats, or slower ones than heartbeat_max, is told the bound
    in CONNECTED and dropped after heartbeat_tolerance times it of silence (Artemis' TTL max)."""
    server = bridge(heartbeat_max=1.0)
    conn = dial(server, timeout=10)
    connected = conn.connect(heart_beat=offered)
    assert connected["heart-beat"] == "0,1000"
    started = time.monotonic()
    error = conn.error_then_close(timeout=10)
    assert error["message"] == "Heart-beat timeout"
    assert 1.9 <= time.monotonic() - started <= 6  # heartbeat_tolerance 2 x 1 s
    assert metric(get(server, "/metrics")[1], "stomp_bridge_heartbeat_timeouts_total") == 1


def test_heartbeat_min_raises_the_intervals_a_client_asks_for(bridge, dial):
    server = bridge(heartbeat_min=3.0)
    conn = dial(server)
    assert conn.connect(heart_beat="1000,1000")["heart-beat"] == "3000,3000"
    conn.receipt("SEND", {"destination": "/topic/hb-min"}, "still served")


def test_one_info_line_when_a_client_connects_and_one_when_it_leaves(bridge, dial, caplog):
    caplog.set_level(logging.INFO, logger="stomp_bridge")
    server = bridge()
    conn = dial(server)
    conn.connect()
    conn.send_frame("DISCONNECT", {"receipt": "bye"})
    conn.read_until_closed()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        closed = [r for r in caplog.records if r.getMessage() == "connection closed"]
        if closed:
            break
        time.sleep(0.05)
    assert len(closed) == 1
    opened = [r for r in caplog.records if r.getMessage() == "client connected"]
    assert len(opened) == 1 and opened[0].user == "guest" and opened[0].version == "1.2"
    record = closed[0]
    assert record.user == "guest" and record.vhost == "/"
    assert record.reason == "client closed"
    assert record.peer.startswith("127.0.0.1:")


def _closed_line(caplog) -> logging.LogRecord:
    deadline = time.monotonic() + 5
    while not (closed := [r for r in caplog.records if r.getMessage() == "connection closed"]):
        assert time.monotonic() < deadline, "no 'connection closed' line"
        time.sleep(0.05)
    (record,) = closed
    return record


@pytest.mark.parametrize(("passcode", "vhost", "detail"), [
    ("wrong", "/", "ACCESS_REFUSED"),
    ("guest", "no-such-vhost-for-ops", "the vhost does not exist, or the user may not use it"),
], ids=["passcode", "vhost"])
def test_a_failed_login_line_names_the_user_and_says_why_in_words(bridge, dial, caplog, passcode, vhost, detail):
    """Which user failed is what an operator looks for (a client with a stale password, a
    guessing attacker); the reason is RabbitMQ's, in words: aiormq's 'Expected one of
    ['Connection.OpenOk'], got <Connection.Close object at 0x…>' named no vhost and an address."""
    caplog.set_level(logging.INFO, logger="stomp_bridge")
    conn = dial(bridge())
    conn.send_frame("CONNECT", {"accept-version": "1.2", "host": vhost, "login": "guest", "passcode": passcode})
    assert conn.error_then_close()["message"] == "Bad CONNECT"
    record = _closed_line(caplog)
    assert (record.user, record.reason) == ("guest", "Bad CONNECT")
    assert detail in record.detail
    assert "object at 0x" not in record.detail and "<" not in record.detail


def test_a_dead_node_in_the_list_is_skipped(bridge, dial, broker):
    server = bridge(amqp_url=f"amqp://guest:guest@127.0.0.1:1/,{broker.amqp_url}")
    conn = dial(server)
    assert conn.connect()["version"] == "1.2"
    assert get(server, "/readyz")[0] == 200


def test_no_node_answering_refuses_connect_clearly(bridge, dial):
    server = bridge(amqp_url="amqp://guest:guest@127.0.0.1:1/,amqp://guest:guest@127.0.0.1:2/")
    conn = dial(server)
    conn.send_frame("CONNECT", {"accept-version": "1.2", "login": "guest", "passcode": "guest"})
    error = conn.error_then_close()
    assert error["message"] == "Broker unavailable"
    assert "None of the 2 RabbitMQ node(s) answered" in error.text
    text = get(server, "/metrics")[1]
    assert metric(text, "stomp_bridge_amqp_connection_failures_total") == 1
    assert get(server, "/readyz")[0] == 503


# -- PROXY protocol --------------------------------------------------------------------


def _proxied(server: BridgeThread, header: bytes) -> RawStomp:
    conn = RawStomp(("127.0.0.1", server.port))
    conn.send_raw(header)
    return conn


def test_proxy_protocol_address_is_the_client_address(bridge, rabbit, unique):
    server = bridge(proxy_protocol=True, proxy_protocol_trusted=["127.0.0.1/32"], loopback_users=["guest"])
    # guest may only log in from loopback: through a balancer from 203.0.113.7 it may not.
    conn = _proxied(server, b"PROXY TCP4 203.0.113.7 127.0.0.1 40000 61613\r\n")
    try:
        conn.send_frame("CONNECT", {"accept-version": "1.2", "login": "guest", "passcode": "guest"})
        error = conn.error_then_close()
        assert (error["message"], error.text) == ("Bad CONNECT", "non-loopback access denied")
    finally:
        conn.close()
    # The same bytes in the header's own packet as the CONNECT (v2 binary this time).
    import socket
    import struct

    v2 = (b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack(">H", 12)
          + socket.inet_aton("127.0.0.1") + socket.inet_aton("127.0.0.1") + struct.pack(">HH", 40001, 61613))
    conn = _proxied(server, v2 + b"CONNECT\naccept-version:1.2\nlogin:guest\npasscode:guest\n\n\x00")
    try:
        assert conn.expect("CONNECTED")["version"] == "1.2"
    finally:
        conn.close()


def test_proxy_protocol_required_when_on(bridge):
    server = bridge(proxy_protocol=True, proxy_protocol_trusted=["127.0.0.1/32"])
    conn = _proxied(server, b"CONNECT\naccept-version:1.2\n\n\x00")
    try:
        error = conn.error_then_close()
        assert error["message"] == "Invalid PROXY protocol header"
    finally:
        conn.close()


# The header a client outside the balancers' networks would send to pass for a loopback client
# (loopback_users) or for another address (the per-address limits).
SPOOFED = b"PROXY TCP4 127.0.0.1 127.0.0.1 40000 61613\r\n"
GUEST_CONNECT = b"CONNECT\naccept-version:1.2\nlogin:guest\npasscode:guest\n\n\x00"


def test_proxy_header_is_taken_only_from_a_trusted_peer(bridge, caplog):
    caplog.set_level(logging.INFO, logger="stomp_bridge")
    trusted = bridge(proxy_protocol=True, proxy_protocol_trusted=["127.0.0.1/32"], loopback_users=["guest"])
    conn = _proxied(trusted, SPOOFED + GUEST_CONNECT)
    try:
        assert conn.expect("CONNECTED")["version"] == "1.2"
    finally:
        conn.close()
    # The same bytes from a peer (127.0.0.1) outside the trusted networks: refused before its
    # header is read, so the address it claims never reaches loopback_users or the limits.
    untrusted = bridge(proxy_protocol=True, proxy_protocol_trusted=["10.0.0.0/8", "fd00::/8"],
                       loopback_users=["guest"])
    conn = _proxied(untrusted, SPOOFED + GUEST_CONNECT)
    try:
        error = conn.error_then_close()
    finally:
        conn.close()
    assert error["message"] == "Untrusted PROXY protocol peer"
    assert error.text.startswith("127.0.0.1 is not a trusted proxy")
    assert "proxy_protocol_trusted" in error.text
    text = get(untrusted, "/metrics")[1]
    assert metric(text, "stomp_bridge_connections_refused_total", '{limit="untrusted_proxy"}') == 1
    assert metric(text, "stomp_bridge_connections_refused_total", '{limit="proxy_protocol"}') == 0
    assert metric(text, "stomp_bridge_connections_opened_total") == 0
    refused = [r for r in caplog.records if r.getMessage() == "connection refused"]
    assert [(r.peer, r.reason) for r in refused] == [("127.0.0.1", "untrusted_proxy")]


def test_http_endpoint_listens_only_on_http_host(bridge):
    """http_host=127.0.0.1: /metrics is not reachable at another address of the machine
    (127.0.0.2 is loopback too, but not the bound address)."""
    local = bridge(http_host="127.0.0.1")
    sockets = local._server.ops._server.sockets
    assert sockets and {s.getsockname()[0] for s in sockets} == {"127.0.0.1"}
    assert get(local, "/healthz") == (200, "ok\n")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", local._server.ops.port), timeout=5).close()
    # The default (every interface) answers there: the refusal above is the binding's doing.
    everywhere = bridge()
    socket.create_connection(("127.0.0.2", everywhere._server.ops.port), timeout=5).close()


def test_metrics_carry_nothing_a_client_or_rabbitmq_chose(bridge, dial, unique):
    """Labels come from fixed sets: no command, user, vhost, queue, destination, peer address
    or reply text of RabbitMQ's ends up in /metrics (ERROR texts name them; labels must not)."""
    server = bridge()
    conn = dial(server)
    conn.connect()
    conn.send_frame(f"X{unique}", {"destination": f"/queue/d-{unique}"})  # an invented command
    assert conn.expect("ERROR")["message"] == "Bad command"
    conn.send_frame("SEND", {"destination": f"/topic/t-{unique}", f"h-{unique}": unique}, unique)
    # RabbitMQ's reply text names the queue: "NOT_FOUND - no queue 'q-...' in vhost '/'".
    conn.send_frame("SUBSCRIBE", {"destination": f"/amq/queue/q-{unique}", "id": "s-1"})
    error = conn.error_then_close()
    assert (error["message"], f"q-{unique}" in error.text) == ("not_found", True)
    stranger = dial(server, timeout=CONNECT_FAILURE_CLOSE_TIMEOUT)  # RabbitMQ refuses the login
    stranger.send_frame("CONNECT", {"accept-version": "1.2", "login": f"u-{unique}",
                                    "passcode": f"p-{unique}", "host": f"v-{unique}"})
    assert stranger.error_then_close()["message"] == "Bad CONNECT"
    text = get(server, "/metrics")[1]
    assert unique not in text and "127.0.0.1" not in text
    assert metric(text, "stomp_bridge_frames_received_total", '{command="other"}') == 1
    assert metric(text, "stomp_bridge_errors_total", '{reason="not_found"}') == 1
    labels = {value for name, value in re.findall(r'^stomp_bridge_\w+\{(\w+)="([^"]*)"', text, re.M)
              if name != "le"}
    assert labels and labels <= (
        CLOSE_REASONS | CLIENT_COMMANDS | SERVER_COMMANDS | REFUSALS | set(HANDSHAKE_FAILURES) | {"other"}
    )


def test_debug_frame_log_masks_passcodes_and_cuts_bodies(bridge, dial, caplog, unique):
    caplog.set_level(logging.DEBUG, logger="stomp_bridge")
    server = bridge()
    conn = dial(server)
    conn.connect()  # login guest / passcode guest
    conn.receipt("SEND", {"destination": f"/topic/log.{unique}"}, "x" * 1000, receipt_id="big")
    frames = [r for r in caplog.records if r.getMessage() == "frame"]
    connect = next(r for r in frames if r.command == "CONNECT")
    assert connect.direction == "in" and connect.headers["passcode"] == "***"
    send = next(r for r in frames if r.command == "SEND")
    assert send.body.endswith("... (1000 bytes)") and len(send.body) < 300
    assert any(r.command == "RECEIPT" and r.direction == "out" for r in frames)
    assert all("guest" not in str(r.headers.get("passcode", "")) for r in frames)
