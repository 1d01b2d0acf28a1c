"""Bridge-only behaviour: settings, limits, shutdown and the ``stomp-bridge`` command.

These tests start their own bridges (``BridgeThread`` with the settings each
test needs, or the CLI as a subprocess), so they never run against the native
plugin. Every read has a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from testkit.ports import free_port
from tests.integration.rawstomp import build_frame

pytestmark = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="bridge settings"
)

REPO_ROOT = Path(__file__).resolve().parents[2]
FRAME_TOO_LARGE_MESSAGES = {"Frame too large", "Header too long", "Too many headers"}
CLI_START_TIMEOUT = 20.0
CLI_EXIT_TIMEOUT = 15.0


# -- fixtures and helpers -------------------------------------------------------------


@pytest.fixture
def user(rabbit, unique):
    """A RabbitMQ user (not in loopback_users) with full permissions on ``/``."""
    name, password = f"stomp-settings-{unique}", "pw"
    rabbit.create_user(name, password)
    rabbit.set_permissions(name)
    yield name, password
    rabbit.delete_user(name)


def non_loopback_ipv4() -> str | None:
    """A local IPv4 address that is not loopback, or None if the machine has none."""
    try:
        address = socket.gethostbyname(socket.gethostname())
        if not address.startswith("127."):
            return address
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for match in re.finditer(r"\binet (\d+\.\d+\.\d+\.\d+)/", out):
        if not match.group(1).startswith("127."):
            return match.group(1)
    return None


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


class CliProcess:
    """``python -m stomp_bridge`` as a subprocess; a thread collects its stderr lines."""

    def __init__(self, args: list[str], env_overrides: dict[str, str] | None = None) -> None:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("STOMP_BRIDGE_") or k.startswith("STOMP_BRIDGE_TEST_")}
        env["STOMP_BRIDGE_HTTP_PORT"] = "0"  # a free port: tests never collide on the default 9410
        env["STOMP_BRIDGE_WS_PORT"] = "0"  # nor on web-stomp's 15674
        env.update(env_overrides or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stomp_bridge", *args],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_line(self, needle: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no stderr line with {needle!r} within {timeout} s: {self.seen}")
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(
                    f"stomp-bridge exited ({self.proc.poll()}) before logging {needle!r}: {self.seen}"
                )
            self.seen.append(line)
            if needle in line:
                return line

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)


@pytest.fixture
def cli():
    """Factory for CLI subprocesses; any still running at teardown is killed."""
    started: list[CliProcess] = []

    def make(*args: str, env: dict[str, str] | None = None) -> CliProcess:
        process = CliProcess(list(args), env)
        started.append(process)
        return process

    yield make
    for process in started:
        process.stop()


# -- default user ---------------------------------------------------------------------


def test_connect_without_login_uses_default_user(bridge, dial):
    conn = dial(bridge())
    # guest is in loopback_users by default, and this client is on 127.0.0.1.
    conn.send_frame("CONNECT", {"accept-version": "1.2", "host": "/"})
    connected = conn.expect("CONNECTED")
    assert connected["version"] == "1.2"


def test_connect_without_login_and_no_default_user_is_refused(bridge, dial):
    conn = dial(bridge(default_user=None))
    conn.send_frame("CONNECT", {"accept-version": "1.2", "host": "/"})
    error = conn.error_then_close()
    assert error["message"] == "Bad CONNECT"
    assert error.text == "No login header and no default_user configured on the bridge"


# -- loopback_users -------------------------------------------------------------------


def test_loopback_user_may_connect_from_loopback(bridge, dial):
    conn = dial(bridge(loopback_users=["guest"]))
    assert conn.connect(login="guest", passcode="guest")["version"] == "1.2"


def test_loopback_user_from_non_loopback_address_is_refused(bridge, dial):
    address = non_loopback_ipv4()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    conn = dial(bridge(host="0.0.0.0", loopback_users=["guest"]), host=address)
    conn.send_frame("CONNECT", {"accept-version": "1.2", "host": "/", "login": "guest",
                                "passcode": "guest"})
    error = conn.error_then_close()
    assert error["message"] == "Bad CONNECT"
    assert error.text == "non-loopback access denied"


def test_user_not_in_loopback_users_connects_from_non_loopback_address(bridge, dial, user):
    address = non_loopback_ipv4()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    name, password = user
    conn = dial(bridge(host="0.0.0.0", loopback_users=["guest"]), host=address)
    assert conn.connect(login=name, passcode=password)["version"] == "1.2"


# -- implicit_connect -----------------------------------------------------------------


def test_default_topic_exchange_carries_topic_destinations(bridge, dial, rabbit, unique):
    exchange = f"topics-{unique}"
    rabbit.request("PUT", f"/exchanges/%2F/{exchange}", {"type": "topic", "durable": False, "auto_delete": False})
    try:
        server = bridge(default_topic_exchange=exchange)
        conn = dial(server)
        conn.connect()
        conn.subscribe(f"/topic/t.{unique}", sub_id="t")
        queue = next(q["name"] for q in rabbit.queues() if any(
            b["source"] == exchange for b in rabbit.bindings(q["name"])))
        assert queue.startswith("stomp-subscription-")
        conn.receipt("SEND", {"destination": f"/topic/t.{unique}"}, "via custom exchange")
        msg = conn.expect("MESSAGE")
        assert msg.body == b"via custom exchange"
        # The plugin's MESSAGE rule names amq.topic only; another exchange shows as /exchange/.
        assert msg["destination"] == f"/exchange/{exchange}/t.{unique}"
    finally:
        rabbit.request("DELETE", f"/exchanges/%2F/{exchange}")


def test_implicit_connect_logs_in_on_first_send_without_connected(bridge, dial, rabbit, queues, unique):
    name = f"implicit-{unique}"
    queues.append(name)
    conn = dial(bridge(implicit_connect=True))
    conn.send_frame("SEND", {"destination": f"/queue/{name}", "receipt": "r-1"}, "hello")
    first = conn.read_frame()
    assert first.command == "RECEIPT", f"expected RECEIPT (no CONNECTED), got {first.command} {first.headers}"
    assert first["receipt-id"] == "r-1"
    messages = rabbit.get(name)
    assert [m["payload"] for m in messages] == ["hello"]


def test_send_before_connect_is_illegal_without_implicit_connect(bridge, dial, rabbit):
    conn = dial(bridge())
    conn.send_frame("SEND", {"destination": "/queue/never-declared", "receipt": "r-1"}, "hello")
    error = conn.expect("ERROR")
    assert error["message"] == "Illegal command"
    assert error.text == "You must log in using CONNECT first"
    assert rabbit.queue("never-declared") is None
    # The plugin keeps the connection (its error/3): a CONNECT still logs in.
    assert conn.connect()["version"] == "1.2"


# -- frame size limits ----------------------------------------------------------------


def test_connect_with_header_over_pre_login_limit_is_refused(bridge, dial):
    conn = dial(bridge())
    conn.send_frame("CONNECT", {"accept-version": "1.2", "login": "guest", "passcode": "guest",
                                "x-big": "a" * 70_000})
    error = conn.error_then_close()
    assert error["message"] in FRAME_TOO_LARGE_MESSAGES, error.headers


def test_connect_frame_over_pre_login_limit_is_refused_as_frame_too_large(bridge, dial):
    # Each header is under max_header_length; together they pass 64 KiB.
    conn = dial(bridge())
    conn.send_frame("CONNECT", {"accept-version": "1.2", "login": "guest", "passcode": "guest",
                                "x-big-1": "a" * 40_000, "x-big-2": "b" * 40_000})
    error = conn.error_then_close()
    assert error["message"] == "Frame too large", error.headers
    assert str(64 * 1024) in error.text


def test_after_login_frame_limit_is_max_frame_size(bridge, dial, rabbit, queues, unique):
    name = f"big-{unique}"
    queues.append(name)
    conn = dial(bridge())
    conn.connect()
    body = b"x" * (100 * 1024)
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, body)
    messages = rabbit.get(name)
    assert len(messages) == 1 and len(messages[0]["payload"]) == len(body)


def test_frame_over_max_frame_size_closes_only_that_connection(bridge, dial, queues, unique):
    name = f"limit-{unique}"
    queues.append(name)
    server = bridge(max_frame_size=16 * 1024)
    big, other = dial(server), dial(server)
    big.connect()
    other.connect()
    big.send_frame("SEND", {"destination": f"/queue/{name}", "receipt": "r-big"}, b"x" * (20 * 1024))
    error = big.error_then_close()
    assert error["message"] == "Frame too large", error.headers
    other.receipt("SEND", {"destination": f"/queue/{name}"}, "small")


# -- close_on_error and trailing_lf ----------------------------------------------------


@pytest.mark.parametrize("frame", [("FOO", {}), ("SEND", {"destination": "/bogus/x"}),
                                   ("UNSUBSCRIBE", {"id": "nope"})])
def test_close_on_error_closes_after_every_error_as_stomp_1_2_says(bridge, dial, frame):
    conn = dial(bridge(close_on_error=True))
    conn.connect()
    conn.send_frame(*frame)
    assert len(conn.error_then_close().text) > 0


def test_close_on_error_also_closes_after_a_server_cancelled_subscription(bridge, dial, rabbit, unique):
    conn = dial(bridge(close_on_error=True))
    conn.connect()
    conn.subscribe(f"/queue/cancel-{unique}", sub_id="s")
    rabbit.delete_queue(f"cancel-{unique}")
    assert conn.error_then_close()["message"] == "Server cancelled subscription"


def test_trailing_lf_off_ends_frames_with_nul_only(bridge, dial):
    conn = dial(bridge(trailing_lf=False))
    conn.connect()
    conn.send_frame("SEND", {"destination": "/topic/eol", "receipt": "r1"}, "x")
    data = conn.buf
    conn.sock.settimeout(5)
    while not data.endswith(b"\0"):
        data += conn.sock.recv(65536)
    assert data == b"RECEIPT\nreceipt-id:r1\n\n\0"
    conn.no_frame(0.3)
    assert conn.buf == b""


# -- connect_timeout ------------------------------------------------------------------


def test_client_silent_past_connect_timeout_gets_error_and_close(bridge, dial):
    conn = dial(bridge(connect_timeout=1.0))
    started = time.monotonic()
    error = conn.error_then_close(timeout=5.0)
    assert error["message"] == "Connect timeout"
    assert time.monotonic() - started < 5.0


def test_frames_other_than_connect_do_not_stop_the_connect_timeout(bridge, dial):
    """'Illegal command' keeps the connection, as the plugin does; it must not keep it forever:
    only a CONNECT stops the clock (the plugin's login_timeout runs until login)."""
    conn = dial(bridge(connect_timeout=1.0))
    conn.send_frame("SEND", {"destination": "/topic/x"}, "before login")
    assert conn.expect("ERROR")["message"] == "Illegal command"
    frames = conn.read_until_closed(timeout=5.0)
    assert [f["message"] for f in frames] == ["Connect timeout"]


# -- publisher confirms ---------------------------------------------------------------


def _rejecting_queue(rabbit, queues, name: str) -> dict[str, str]:
    """A queue that holds one message and nacks every publish after it; SEND headers for it."""
    rabbit.declare_queue(name, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    queues.append(name)
    return {"destination": f"/amq/queue/{name}", "persistent": "true"}


def test_nacked_publish_becomes_error_naming_its_receipt_and_without_receipt(
    bridge, dial, rabbit, queues, unique
):
    name = f"reject-{unique}"
    headers = _rejecting_queue(rabbit, queues, name)
    conn = dial(bridge())
    conn.connect()
    conn.receipt("SEND", headers, "first", receipt_id="r-1")
    conn.send_frame("SEND", {**headers, "receipt": "r-2"}, "second")
    frames = conn.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"], [(f.command, f.headers) for f in frames]
    assert frames[0]["message"] == "Message rejected"
    # docs/migration/rabbitmq-plugin.md: "ERROR frames carry receipt-id when the failing frame had a receipt".
    assert frames[0].get("receipt-id") == "r-2", frames[0].headers
    assert [m["payload"] for m in rabbit.get(name, count=10)] == ["first"]


def test_disconnect_waiting_for_a_nacked_publish_ends_with_error_and_releases_the_connection(
    bridge, dial, rabbit, queues, unique
):
    headers = _rejecting_queue(rabbit, queues, f"reject-bye-{unique}")
    server = bridge()
    conn = dial(server)
    conn.connect()
    conn.receipt("SEND", headers, "first", receipt_id="r-1")
    # One write, so the DISCONNECT is already waiting for confirms when the nack comes.
    conn.send_raw(build_frame("SEND", headers, "refused") + build_frame("DISCONNECT", {"receipt": "bye"}))
    frames = conn.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"], [(f.command, f.headers) for f in frames]
    assert frames[0]["message"] == "Message rejected"
    # The server side of the connection ends too (it used to wait for confirms forever).
    deadline = time.monotonic() + 10
    while server._server.connection_count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server._server.connection_count == 0


# -- stream filtering on an old broker ------------------------------------------------


# -- the stomp-bridge command ---------------------------------------------------------


def test_cli_listens_serves_and_shuts_down_on_sigterm(cli, dial, broker):
    port = free_port()
    process = cli("--port", str(port), "--amqp-url", broker.amqp_url)
    line = process.wait_line("stomp-bridge listening", CLI_START_TIMEOUT)
    assert f"port={port}" in line, line
    conn = dial(port)
    conn.connect()
    process.proc.send_signal(signal.SIGTERM)
    assert process.proc.wait(CLI_EXIT_TIMEOUT) == 0
    error = conn.error_then_close()
    assert error["message"] == "Server shutdown"


def test_cli_rejects_invalid_port(broker):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("STOMP_BRIDGE_") or k.startswith("STOMP_BRIDGE_TEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "stomp_bridge", "--port", "99999", "--amqp-url", broker.amqp_url],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=30,
    )
    assert result.returncode != 0
    assert "argument --port: '99999' is not a port number (0-65535) or none" in result.stderr, result.stderr


def test_cli_honours_port_from_environment(cli, dial, broker):
    port = free_port()
    process = cli("--amqp-url", broker.amqp_url, env={"STOMP_BRIDGE_PORT": str(port)})
    line = process.wait_line("stomp-bridge listening", CLI_START_TIMEOUT)
    assert f"port={port}" in line, line
    dial(port).connect()
    process.proc.send_signal(signal.SIGTERM)
    assert process.proc.wait(CLI_EXIT_TIMEOUT) == 0


def test_cli_warns_at_once_when_the_broker_url_does_not_answer_amqp(cli, broker):
    """Pointed at the management port, the bridge says so at start-up in one WARNING line and
    /readyz fails: an open port is not a broker (every CONNECT would fail after a timeout)."""
    import urllib.error
    import urllib.parse
    import urllib.request

    api = urllib.parse.urlsplit(broker.api_url)
    wrong = f"amqp://guest:guest@{api.hostname}:{api.port}/"
    http_port = free_port()
    process = cli("--port", str(free_port()), "--http-port", str(http_port), "--ws-port", "none",
                  "--amqp-url", wrong)
    process.wait_line("stomp-bridge listening", CLI_START_TIMEOUT)
    line = process.wait_line("RabbitMQ does not answer AMQP", CLI_START_TIMEOUT)
    assert "WARNING" in line and "check amqp_url" in line and f"{api.hostname}:{api.port}" in line, line
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=10)
    assert answer.value.code == 503
    assert "not AMQP" in answer.value.read().decode()


async def test_the_probe_tells_a_broker_from_an_open_port_and_a_closed_one(broker):
    from stomp_bridge.amqp import probe

    assert await probe.check(broker.amqp_url) is None
    api = urllib_split(broker.api_url)
    assert "not AMQP" in await probe.check(f"amqp://{api.hostname}:{api.port}/", timeout=1.0)
    closed = free_port()
    assert f"127.0.0.1:{closed} is not reachable" in await probe.check(f"amqp://127.0.0.1:{closed}/")


def urllib_split(url: str):
    import urllib.parse

    return urllib.parse.urlsplit(url)


def _worker_pids(parent: int) -> list[int]:
    """The spawned worker processes of a ``--workers`` supervisor (not multiprocessing's tracker)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"spawn_main" in cmdline:
            pids.append(int(entry.name))
    return pids


def _scrape(http_port: int) -> dict[str, float]:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10).read().decode()
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def _answers(conn) -> bool:
    """A SEND with a receipt: True if the RECEIPT comes, False if the connection is gone."""
    from tests.integration.rawstomp import ConnectionClosed

    try:
        conn.receipt("SEND", {"destination": "/topic/workers-test"}, "x")
    except (ConnectionClosed, OSError):
        return False
    return True


def test_workers_share_the_ports_one_metrics_endpoint_and_a_killed_worker_comes_back(cli, dial, broker):
    """workers=2: both processes take clients on the one port (SO_REUSEPORT), /metrics sums
    them, a worker killed with SIGKILL costs only its own clients and is started again, and
    SIGTERM stops them all gracefully."""
    port, http_port = free_port(), free_port()
    process = cli("--workers", "2", "--port", str(port), "--http-port", str(http_port), "--ws-port", "none",
                  "--amqp-url", broker.amqp_url)
    process.wait_line("stomp-bridge workers listening", CLI_START_TIMEOUT * 2)
    conns = [dial(port) for _ in range(24)]
    for conn in conns:
        conn.connect()
    metrics = _scrape(http_port)
    assert metrics["stomp_bridge_workers"] == 2
    assert metrics["stomp_bridge_connections"] == 24, "the supervisor sums both workers' gauges"
    assert metrics["stomp_bridge_connections_opened_total"] == 24

    workers = _worker_pids(process.proc.pid)
    assert len(workers) == 2, workers
    # process_*: memory and CPU of the supervisor and both workers added up, the supervisor's start
    # (the oldest), the most descriptors one process holds against the per-process limit
    from stomp_bridge.metrics import process_values

    each = [process_values(pid) for pid in (process.proc.pid, *workers)]
    assert metrics["process_resident_memory_bytes"] == pytest.approx(
        sum(p["resident_memory_bytes"] for p in each), rel=0.25)
    assert metrics["process_resident_memory_bytes"] > 1.5 * max(p["resident_memory_bytes"] for p in each)
    assert metrics["process_start_time_seconds"] == pytest.approx(each[0]["start_time_seconds"], abs=0.02)
    assert metrics["process_start_time_seconds"] <= min(p["start_time_seconds"] for p in each) + 0.02
    assert metrics["process_cpu_seconds_total"] > max(p["cpu_seconds"] for p in each[1:])
    assert max(p["open_fds"] for p in each) - 5 <= metrics["process_open_fds"] <= max(p["open_fds"] for p in each) + 5
    assert metrics["process_max_fds"] == min(p["max_fds"] for p in each)
    os.kill(workers[0], signal.SIGKILL)
    process.wait_line("worker exited; starting it again", CLI_START_TIMEOUT)
    alive = [conn for conn in conns if _answers(conn)]
    # 24 clients spread by the kernel's hash: both workers had some (1 in 8 million otherwise)
    assert 0 < len(alive) < 24, f"{len(alive)} of 24 clients survived the killed worker"

    process.wait_line("worker started again", CLI_START_TIMEOUT)  # listening, and in the sum
    metrics = _scrape(http_port)
    assert metrics["stomp_bridge_worker_restarts_total"] == 1
    assert metrics["stomp_bridge_workers"] == 2
    assert metrics["stomp_bridge_connections"] == len(alive)
    dial(port).connect()  # the port still takes clients

    process.proc.send_signal(signal.SIGTERM)
    assert process.proc.wait(CLI_EXIT_TIMEOUT * 2) == 0
    for conn in alive:
        assert conn.error_then_close()["message"] == "Server shutdown"
    assert _worker_pids(process.proc.pid) == []


# -- shutdown and DISCONNECT ----------------------------------------------------------


def test_bridge_stop_sends_server_shutdown_error_then_closes(bridge, dial):
    server = bridge()
    conn = dial(server)
    conn.connect()
    server.stop()
    error = conn.error_then_close()
    assert error["message"] == "Server shutdown"


def test_disconnect_receipt_follows_confirm_of_every_earlier_send(bridge, dial, rabbit, queues, unique):
    name = f"drain-{unique}"
    queues.append(name)
    conn = dial(bridge())
    conn.connect()
    count = 200
    data = b"".join(
        build_frame("SEND", {"destination": f"/queue/{name}", "persistent": "true"}, f"m{i}")
        for i in range(count)
    )
    conn.send_raw(data + build_frame("DISCONNECT", {"receipt": "bye"}))
    receipt = conn.expect("RECEIPT", timeout=10.0)
    assert receipt["receipt-id"] == "bye"
    messages = rabbit.get(name, count=count + 10)
    assert [m["payload"] for m in messages] == [f"m{i}" for i in range(count)]


@pytest.mark.parametrize("dialect, native", [("auto", False), ("4.3", False), ("4.4", True)])
def test_rabbitmq_stomp_dialect_picks_whose_plugin_the_bridge_behaves_as(bridge, dial, broker, queues, unique, dialect, native):
    # Every broker here reports 4.3.6 or older (the 4.4 preview too): auto is 4.3's plugin. An
    # ACK of a tag never delivered tells them apart (test_ack.py: what each plugin does).
    name = f"dialect-{unique}"
    queues.append(name)
    conn = dial(bridge(rabbitmq_stomp_dialect=dialect))
    session = conn.connect()["session"]
    conn.subscribe(f"/queue/{name}", sub_id="s", ack="client")
    conn.send_frame("ACK", {"id": f"T_s@@{session}@@9", "receipt": "r"})
    if native:
        assert conn.expect("ERROR")["message"] == "Message not found"
        conn.receipt("SEND", {"destination": f"/queue/{name}"}, "x", receipt_id="alive")
    else:
        assert [f.command for f in conn.read_until_closed()] == ["RECEIPT", "ERROR"]
