"""``stomp-bridge forward`` end to end: a local RabbitMQ queue → the forwarder → mutual TLS 1.3 →
the bridge's own Swaptacular listener → a RabbitMQ queue; and the manifest round trip."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiormq
import pytest

from stomp_bridge.swaptacular.manifest import parse
from tests.integration.tls_support import test_pki, tls_settings  # noqa: F401 - fixtures

PEER_NODE = "0000cafe"  # the bridge's node (its manifest)
FWD_NODE = "1234abcd"  # the forwarding node (its certificate's serialNumber)


async def _amqp(url: str, work):
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        return await work(channel)
    finally:
        await connection.close()


def publish(url: str, queue: str, bodies: list[str], **props: str) -> None:
    async def work(channel):
        await channel.queue_declare(queue, durable=True)
        for body in bodies:
            await channel.basic_publish(
                body.encode(), routing_key=queue,
                properties=aiormq.spec.Basic.Properties(delivery_mode=2, **props),
            )

    asyncio.run(_amqp(url, work))


def ready_count(url: str, queue: str) -> int:
    async def work(channel):
        return (await channel.queue_declare(queue, passive=True)).message_count

    return asyncio.run(_amqp(url, work))


def drain(url: str, queue: str) -> list[tuple[str, str | None, str | None]]:
    """Every message in ``queue`` as (body, type, content_type); the queue ends empty."""
    async def work(channel):
        out = []
        while True:
            message = await channel.basic_get(queue, no_ack=True)
            if message.delivery_tag is None:
                return out
            props = message.header.properties
            out.append((message.body.decode(), props.message_type, props.content_type))

    return asyncio.run(_amqp(url, work))


def _env(settings: dict[str, object]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMP_BRIDGE_")}
    for key, value in settings.items():
        if value is not None:
            env[f"STOMP_BRIDGE_{key.upper()}"] = str(value)
    return env


def _cli(*args: str, settings: dict[str, object]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stomp_bridge", *args], env=_env(settings),
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def peer_node(bridge, tls_settings, queues, unique, tmp_path):
    """The bridge as a Swaptacular node, and its stomp.toml written by `stomp-bridge manifest write`."""
    target = f"fwd-{unique}-{FWD_NODE}"
    queues.append(target)
    node_settings = {
        **{k: v for k, v in tls_settings.items() if k not in ("port", "tls_port")},
        "profile": "swaptacular",
        "swpt_host": "/${NODE_ID}",
        "swpt_destination": f"/queue/fwd-{unique}-${{NODE_ID}}",
        "swpt_accepted_content_types": "application/msgpack",
    }
    b = bridge(**node_settings, port=None, tls_port=0)
    manifest = tmp_path / "stomp.toml"
    written = _cli("manifest", "write", "-o", str(manifest),
                   settings={**node_settings, "swpt_servers": f"127.0.0.1:{b.tls_port}"})
    assert written.returncode == 0, written.stderr
    return b, manifest, target


def test_manifest_round_trip(peer_node, unique):
    b, manifest, _ = peer_node
    checked = _cli("manifest", "validate", str(manifest), settings={})
    assert checked.returncode == 0, checked.stderr
    m = parse(manifest.read_text())
    assert (m.servers, m.host, m.destination, m.accepted_content_types) == (
        [f"127.0.0.1:{b.tls_port}"], "/${NODE_ID}", f"/queue/fwd-{unique}-${{NODE_ID}}", ["application/msgpack"],
    )
    assert m.for_node(FWD_NODE) == {"host": f"/{FWD_NODE}", "destination": f"/queue/fwd-{unique}-{FWD_NODE}"}
    broken = manifest.parent / "broken.toml"
    broken.write_text('servers = ["no-port"]\nhost = 1\n')
    failed = _cli("manifest", "validate", str(broken), settings={})
    assert failed.returncode == 1
    assert "no-port" in failed.stderr and "host must be a string" in failed.stderr


class ForwarderProcess:
    """``stomp-bridge forward`` in a subprocess with these settings."""

    def __init__(self, settings: dict[str, object]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "stomp_bridge", "forward"], env=_env(settings),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []  # its log, as it comes
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, condition, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                self._reader.join(5)
                pytest.fail(f"forwarder exited with {self.proc.returncode}: {self.log()}")
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    def log(self) -> str:
        return "".join(self.lines)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def forwarder(broker, test_pki, queues, unique):
    """``forwarder(manifest, **settings)``: a started ForwarderProcess for the forwarding node
    (certificate serialNumber FWD_NODE) from queue fwd-src-<unique>; killed at teardown."""
    started: list[ForwarderProcess] = []
    cert, key = test_pki.client(("O", "forwarding node"), ("serialNumber", FWD_NODE), ("CN", "forwarder"))
    queues.append(f"fwd-src-{unique}")

    def make(manifest: Path, **settings: object) -> ForwarderProcess:
        process = ForwarderProcess({
            "amqp_url": broker.amqp_url,
            "tls_cert_file": cert,
            "tls_key_file": key,
            "tls_ca_file": test_pki.ca_file,
            "swpt_node_id": FWD_NODE,
            "swpt_forward_queue": f"fwd-src-{unique}",
            "swpt_peer_manifest": str(manifest),
            "swpt_forward_max_backoff": 1,
            **settings,
        })
        started.append(process)
        return process

    yield make
    for process in started:
        process.close()


def test_forwarder_killed_mid_stream_loses_nothing(peer_node, broker, forwarder, unique):
    _, manifest, target = peer_node
    source = f"fwd-src-{unique}"
    count = 3000
    bodies = [f'{{"n": {i}}}' for i in range(count)]
    publish(broker.amqp_url, source, bodies, message_type="AccountUpdate", content_type="application/json")
    publish(broker.amqp_url, target, [])  # declared as the bridge's /queue/ SEND declares it

    first = forwarder(manifest, swpt_forward_window=50)
    first.wait_for(lambda: ready_count(broker.amqp_url, target) >= 100, "the first messages")
    first.stop(signal.SIGKILL)  # no goodbye: what it sent and had not acked stays unacked
    arrived_before_kill = ready_count(broker.amqp_url, target)
    assert arrived_before_kill < count, "the forwarder finished before it was killed; the test proves nothing"

    second = forwarder(manifest, swpt_forward_window=50)
    second.wait_for(lambda: ready_count(broker.amqp_url, target) >= count
                    and ready_count(broker.amqp_url, source) == 0, "every message")
    assert second.stop() == 0

    got = drain(broker.amqp_url, target)
    assert {body for body, _, _ in got} == set(bodies)  # at least once: duplicates allowed, no loss
    assert {(t, c) for _, t, c in got} == {("AccountUpdate", "application/json")}
    assert ready_count(broker.amqp_url, source) == 0  # everything was acked after its RECEIPT


def test_forwarder_waits_for_its_peer_and_survives_a_peer_restart(
    bridge, tls_settings, broker, forwarder, queues, unique, tmp_path
):
    from testkit.ports import free_port

    target = f"fwd-{unique}-{FWD_NODE}"
    queues.append(target)
    source = f"fwd-src-{unique}"
    port = free_port()
    node = {**{k: v for k, v in tls_settings.items() if k != "tls_port"}, "profile": "swaptacular",
            "swpt_destination": f"/queue/fwd-{unique}-${{NODE_ID}}", "tls_port": port}
    manifest = tmp_path / "stomp.toml"
    manifest.write_text(f'servers = ["127.0.0.1:{port}"]\nhost = "/"\ndestination = "/queue/fwd-{unique}-${{NODE_ID}}"\n')
    publish(broker.amqp_url, source, ["no type"])  # cannot be a Swaptacular message: rejected
    publish(broker.amqp_url, source, [f"a{i}" for i in range(200)], message_type="AccountUpdate")
    publish(broker.amqp_url, target, [])

    process = forwarder(manifest)  # nobody listens on the peer's port yet: it backs off and retries
    process.wait_for(lambda: "forwarding interrupted" in process.log(), "a failed attempt")
    assert ready_count(broker.amqp_url, source) == 201
    peer = bridge(**node)
    process.wait_for(lambda: ready_count(broker.amqp_url, target) >= 100, "the first half")
    peer.stop()  # ERROR "Server shutdown" to the forwarder, mid-stream
    publish(broker.amqp_url, source, [f"b{i}" for i in range(200)], message_type="AccountUpdate")
    bridge(**node)
    process.wait_for(lambda: ready_count(broker.amqp_url, source) == 0
                     and ready_count(broker.amqp_url, target) >= 400, "every message after the restart")
    assert process.stop() == 0
    got = drain(broker.amqp_url, target)
    assert {body for body, _, _ in got} == {f"a{i}" for i in range(200)} | {f"b{i}" for i in range(200)}
    assert "message without AMQP type rejected" in process.log()
