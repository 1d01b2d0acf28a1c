"""What a STOMP client sees when RabbitMQ closes the bridge's AMQP connection under it."""

from __future__ import annotations

import os
import time
import urllib.parse

import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="the bridge's own AMQP connections"
)


def _bridge_connection(rabbit, peer_port: int, deadline: float = 10.0) -> str:
    """The name of the AMQP connection the bridge opened for the client on ``peer_port``.

    The management API lists a new connection within moments but not at once;
    poll it with a deadline (there is no event to wait on from outside RabbitMQ).
    """
    marker = f":{peer_port} "
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for conn in rabbit.request("GET", "/connections") or []:
            name = (conn.get("client_properties") or {}).get("connection_name", "")
            if name.startswith("stomp-bridge") and marker in name + " ":
                return conn["name"]
        time.sleep(0.2)
    raise AssertionError(f"no AMQP connection of the bridge for client port {peer_port}")


def test_broker_closing_the_connection_gives_the_client_an_error_and_a_close(connected, rabbit, queues, unique):
    name = f"forced-{unique}"
    queues.append(name)
    conn = connected()
    conn.subscribe(f"/queue/{name}")
    amqp_name = _bridge_connection(rabbit, conn.sock.getsockname()[1])
    rabbit.request("DELETE", f"/connections/{urllib.parse.quote(amqp_name, safe='')}")
    error = conn.error_then_close(timeout=10)
    assert error["message"] == "connection_forced", error.headers
    assert "CONNECTION_FORCED" in error.text
