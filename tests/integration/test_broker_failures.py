"""What a STOMP client sees when RabbitMQ closes the bridge's AMQP connection under it."""

from __future__ import annotations

import os
import time
import urllib.parse

import pytest

from testkit.bridge import BridgeThread
from testkit.faultproxy import FaultProxy
from tests.integration.rawstomp import RawStomp
from testkit.brokers import plugin_words

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


def test_broker_closing_the_connection_gives_the_client_an_error_and_a_close(bridge, dial, rabbit, queues, unique):
    name = f"forced-{unique}"
    queues.append(name)
    conn = dial(bridge())  # its own bridge: the AMQP connection it shares carries this client's name
    conn.connect()
    conn.subscribe(f"/queue/{name}")
    amqp_name = _bridge_connection(rabbit, conn.sock.getsockname()[1])
    rabbit.request("DELETE", f"/connections/{urllib.parse.quote(amqp_name, safe='')}")
    error = conn.error_then_close(timeout=10)
    assert error["message"] == "connection_forced", error.headers
    assert plugin_words("CONNECTION_FORCED - Closed via management plugin") in error.text


# -- RabbitMQ going away and coming back (through a proxy the test controls) ---------------

@pytest.fixture
def cut_off(broker):
    """A bridge whose only RabbitMQ is behind a FaultProxy: (bridge, proxy)."""
    parsed = urllib.parse.urlsplit(broker.amqp_url)
    proxy = FaultProxy((parsed.hostname or "127.0.0.1", parsed.port or 5672)).start()
    url = f"amqp://{parsed.username or 'guest'}:{parsed.password or 'guest'}@127.0.0.1:{proxy.port}/"
    bridge = BridgeThread(url, http_port=0)
    bridge.start()
    yield bridge, proxy
    bridge.stop()
    proxy.stop()


def _ready(bridge: BridgeThread) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{bridge._server.ops.port}/readyz", timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_losing_rabbitmq_ends_sessions_with_an_error_and_the_bridge_recovers_by_itself(cut_off, unique):
    bridge, proxy = cut_off
    client = RawStomp(("127.0.0.1", bridge.port))
    client.connect()
    proxy.wait_connections(1)
    assert _ready(bridge) == 200

    proxy.refuse(close_listener=True)  # RabbitMQ is gone: existing connections reset, new ones refused
    error = client.error_then_close(timeout=10)
    assert error["message"] == "Broker connection lost"
    assert _ready(bridge) == 503
    refused = RawStomp(("127.0.0.1", bridge.port))
    refused.send_frame("CONNECT", {"accept-version": "1.2", "login": "guest", "passcode": "guest"})
    assert refused.error_then_close(timeout=15)["message"] == "Broker unavailable"

    proxy.restore()
    assert _ready(bridge) == 200
    back = RawStomp(("127.0.0.1", bridge.port), timeout=15)
    back.connect()  # no restart of the bridge needed
    back.receipt("SEND", {"destination": f"/topic/back.{unique}"}, "x")
    for conn in (client, refused, back):
        conn.close()


def test_a_send_rabbitmq_never_confirmed_never_gets_a_receipt(cut_off, unique):
    bridge, proxy = cut_off
    client = RawStomp(("127.0.0.1", bridge.port))
    client.connect()
    client.receipt("SEND", {"destination": f"/topic/pre.{unique}"}, "warm-up")
    proxy.pause()  # the publish leaves the bridge but its confirm can never come back
    client.send_frame("SEND", {"destination": f"/queue/lost-{unique}", "persistent": "true",
                               "receipt": "never"}, "in flight")
    proxy.cut()
    frames = client.read_until_closed(timeout=10)
    assert [f.command for f in frames] == ["ERROR"], [(f.command, f.headers) for f in frames]
    client.close()


def test_shutdown_lets_in_flight_receipts_complete_first(cut_off, queues, unique):
    import threading

    bridge, proxy = cut_off
    name = f"drain-{unique}"
    queues.append(name)
    client = RawStomp(("127.0.0.1", bridge.port), timeout=15)
    client.connect()
    client.receipt("SEND", {"destination": f"/queue/{name}"}, "declares the queue", receipt_id="r0")
    proxy.pause()  # the confirm for the next publish is held back...
    client.send_frame("SEND", {"destination": f"/queue/{name}", "persistent": "true", "receipt": "r1"}, "x")
    stopping = threading.Thread(target=bridge.stop)
    stopping.start()  # ...while the bridge is asked to shut down
    deadline = time.monotonic() + 10
    while not bridge._server._closing and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bridge._server._closing
    proxy.resume()
    frames = client.read_until_closed(timeout=15)
    stopping.join(30)
    assert [(f.command, f.get("receipt-id") or f.get("message")) for f in frames] == [
        ("RECEIPT", "r1"), ("ERROR", "Server shutdown")]
    client.close()
