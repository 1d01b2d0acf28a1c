"""stomp_bridge.testing, the helpers users run their own tests with.

The in-process bridge and the pytest fixture run for real against RabbitMQ. The container
helpers need a Docker engine, which is not here: their wiring (image, ports, environment,
network, wait strategy) is checked on the unstarted objects.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import textwrap
import urllib.request
import uuid

import pytest
import stomp
from pydantic import ValidationError
from testcontainers.core.network import Network
from testcontainers.core.wait_strategies import HttpWaitStrategy

from stomp_bridge import containers, testing
from stomp_bridge.settings import Settings
from stomp_bridge.testing import BackgroundBridge, running_bridge

# An explicit API version makes docker-py skip asking the (absent) engine for one.
NO_ENGINE = {"version": "1.44"}


class Inbox(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.bodies: queue.Queue = queue.Queue()

    def on_message(self, frame) -> None:
        self.bodies.put(frame.body)


@pytest.mark.integration
def test_running_bridge_serves_stomp_and_metrics_then_closes(broker, rabbit):
    name = f"deploy-testing-{uuid.uuid4().hex[:12]}"
    try:
        with running_bridge(broker.amqp_url) as bridge:
            conn = stomp.Connection([bridge.address], heartbeats=(0, 0))
            inbox = Inbox()
            conn.set_listener("", inbox)
            conn.connect(broker.user, broker.password, wait=True)
            conn.subscribe(f"/queue/{name}", id="1")
            conn.send(f"/queue/{name}", "hello from a user's test")
            assert inbox.bodies.get(timeout=10) == "hello from a user's test"
            conn.disconnect()
            with urllib.request.urlopen(bridge.http_url + "/readyz", timeout=5) as resp:
                assert resp.status == 200
            assert bridge.ws_port not in (None, 15674)  # a free port, never the fixed default
            assert bridge.ws_url == f"ws://127.0.0.1:{bridge.ws_port}/ws"
            address = bridge.address
        with pytest.raises(OSError):
            socket.create_connection(address, timeout=2).close()
    finally:
        rabbit.delete_queue(name)


def test_running_bridge_says_why_it_could_not_start():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match="could not start"):
            with running_bridge("amqp://guest:guest@127.0.0.1:5672/", port=port):
                pass


@pytest.mark.integration
def test_background_bridge_is_started_used_and_stopped_by_hand(broker):
    bridge = BackgroundBridge(Settings(amqp_url=broker.amqp_url, host="127.0.0.1", port=0, http_port=None,
                                       ws_port=None))
    server = bridge.start()
    try:
        port = server.port
        assert bridge.call(lambda: server.port) == port  # run on the bridge's own loop
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        bridge.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    bridge.stop()  # twice is harmless


def test_a_bridge_that_does_not_close_says_what_it_still_runs(broker, monkeypatch):
    """stop() on a close that never ends: a TimeoutError naming each task and where it waits,
    not a bare timeout (one CI run's teardown waited 40 s and said nothing more)."""
    import asyncio

    bridge = BackgroundBridge(Settings(amqp_url=broker.amqp_url, host="127.0.0.1", port=0, http_port=None,
                                       ws_port=None, shutdown_grace=0.1))
    server = bridge.start()
    monkeypatch.setattr(testing, "START_TIMEOUT", 1)
    close = server.close

    async def stuck_close(grace: float | None = None) -> None:
        await asyncio.Event().wait()

    server.close = stuck_close  # type: ignore[method-assign]
    with pytest.raises(TimeoutError, match=r"did not close within 1 s; still running: .*stuck_close \(.*test_testing_module"):
        bridge.stop()
    server.close = close  # type: ignore[method-assign]
    bridge.stop()


def test_running_bridge_validates_settings_before_starting():
    with pytest.raises(ValidationError, match="max_frame_size"):
        with running_bridge(max_frame_size=1):
            pass


@pytest.mark.integration
def test_pytest_fixture_works_in_a_users_project(broker, tmp_path):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["stomp_bridge.testing"]\n')
    (tmp_path / "test_app.py").write_text(textwrap.dedent("""
        import stomp

        def test_my_app_talks_to_the_bridge(stomp_bridge):
            conn = stomp.Connection([stomp_bridge.address])
            conn.connect("guest", "guest", wait=True)
            assert conn.is_connected()
            conn.disconnect()
    """))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "STOMP_BRIDGE_TEST_AMQP_URL": broker.amqp_url},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


@pytest.mark.integration
def test_the_fixture_takes_settings_that_pin_its_ports(broker, tmp_path):
    """``stomp_bridge_settings`` (docs/testing-your-application.md) pins the ports the fixture's
    bridge listens on, and its settings reach the bridge."""
    with socket.socket() as s1, socket.socket() as s2:
        s1.bind(("127.0.0.1", 0))
        s2.bind(("127.0.0.1", 0))
        port, http_port = s1.getsockname()[1], s2.getsockname()[1]
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import pytest

        pytest_plugins = ["stomp_bridge.testing"]

        @pytest.fixture
        def stomp_bridge_settings():
            return {{"port": {port}, "http_port": {http_port}, "max_frame_size": 65536}}
    """))
    (tmp_path / "test_app.py").write_text(textwrap.dedent(f"""
        import urllib.request

        def test_the_ports_are_the_pinned_ones(stomp_bridge):
            assert stomp_bridge.address == ("127.0.0.1", {port})
            assert stomp_bridge.http_url == "http://127.0.0.1:{http_port}"
            assert stomp_bridge.settings.max_frame_size == 65536
            with urllib.request.urlopen(stomp_bridge.http_url + "/healthz", timeout=5) as resp:
                assert resp.status == 200
    """))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "STOMP_BRIDGE_TEST_AMQP_URL": broker.amqp_url},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


@pytest.mark.parametrize("start", [
    lambda: containers.bridge_with_rabbitmq().__enter__(),
    lambda: containers.StompBridgeContainer("stomp-bridge:test"),
], ids=["bridge_with_rabbitmq", "StompBridgeContainer"])
def test_without_a_docker_engine_the_helpers_point_to_running_bridge(monkeypatch, tmp_path, start):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(containers.DockerUnavailable,
                       match=r"needs a Docker engine, and none answers \(.*\)\. .*running_bridge\(amqp_url\)"):
        start()


def test_container_pair_wiring():
    network = Network(docker_client_kw=NO_ENGINE)
    rabbit, bridge = containers.container_pair(
        network, image="stomp-bridge:test", docker_client_kw=NO_ENGINE,
        max_frame_size=65536, implicit_connect=True, loopback_users=["guest", "ops"],
    )
    assert bridge.image.endswith("stomp-bridge:test")
    assert set(bridge.ports) == {"61613", "15674", "9410"}
    assert rabbit._network is network and bridge._network is network
    assert rabbit._network_aliases == ["rabbitmq"]
    assert bridge.env["STOMP_BRIDGE_AMQP_URL"] == f"amqp://rabbitmq:{rabbit.port}/"
    # guest is loopback-only in RabbitMQ; the pair logs in as a user both sides know
    assert (rabbit.username, rabbit.password) == ("stomp", "stomp")
    assert bridge.env["STOMP_BRIDGE_DEFAULT_USER"] == rabbit.username
    assert bridge.env["STOMP_BRIDGE_DEFAULT_PASS"] == rabbit.password
    assert bridge.env["STOMP_BRIDGE_MAX_FRAME_SIZE"] == "65536"
    assert bridge.env["STOMP_BRIDGE_IMPLICIT_CONNECT"] == "true"
    assert bridge.env["STOMP_BRIDGE_LOOPBACK_USERS"] == "guest,ops"
    wait = bridge._wait_strategy
    assert isinstance(wait, HttpWaitStrategy)
    assert (wait._port, wait._path, wait._status_codes) == (9410, "/readyz", {200})


def test_container_environment_is_what_the_bridge_reads(monkeypatch):
    """The variables the container gets load into the same Settings in the bridge."""
    bridge = containers.StompBridgeContainer(
        "stomp-bridge:test",
        settings={"idle_timeout": 30, "proxy_protocol": True, "proxy_protocol_trusted": ["10.0.0.0/8", "fd00::/8"],
                  "default_user": "app"},
        docker_client_kw=NO_ENGINE,
    )
    for name, value in bridge.env.items():
        monkeypatch.setenv(name, value)
    from stomp_bridge.settings import Settings

    loaded = Settings()
    assert (loaded.idle_timeout, loaded.proxy_protocol, loaded.default_user) == (30.0, True, "app")
    assert loaded.proxy_protocol_trusted == ["10.0.0.0/8", "fd00::/8"]
    assert loaded.amqp_url == "amqp://rabbitmq:5672/"


def test_container_refuses_unknown_settings():
    with pytest.raises(ValueError, match=r"unknown setting 'max_frame_sise' \(did you mean 'max_frame_size'\?\)"):
        containers.setting_env("max_frame_sise", 1)


def test_testing_module_exposes_the_container_helpers_lazily():
    assert testing.StompBridgeContainer is containers.StompBridgeContainer
    assert testing.bridge_with_rabbitmq is containers.bridge_with_rabbitmq
