"""Defects the session fuzzer and the hostile clients found, one test each (bridge only)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_a_vhost_name_too_long_for_amqp_is_refused_like_an_unknown_vhost(bridge, dial):
    # Found by the session fuzzer: pamqp raised ValueError for a host header over
    # 127 bytes, which reached the client as "Processing error" with a traceback
    # in the bridge's log.
    server = bridge()
    conn = dial(server)
    conn.send_frame("CONNECT", {"accept-version": "1.2", "host": "v" * 300, "login": "guest",
                                "passcode": "guest"})
    error = conn.error_then_close()
    assert error["message"] == "Bad CONNECT"
    assert "access denied" in error.text
    assert server._server.counters.errors.get("Processing error", 0) == 0


def test_a_prefetch_count_beyond_16_bits_is_the_largest_amqp_can_carry(bridge, dial, rabbit, unique):
    # Found by the session fuzzer: basic.qos's prefetch_count is a short, and
    # pamqp's TypeError for 99999999999 became "Processing error" plus a traceback. The plugin
    # (whose direct connection carries any integer) accepts it: the bridge takes 65535.
    server = bridge()
    conn = dial(server)
    conn.connect()
    name = f"prefetch-{unique}"
    try:
        conn.subscribe(f"/queue/{name}", sub_id="s", ack="client", headers={"prefetch-count": "99999999999"})
        conn.receipt("SEND", {"destination": f"/queue/{name}"}, "x", receipt_id="sent")
        assert conn.expect("MESSAGE").body == b"x"
        assert server._server.counters.errors.get("Processing error", 0) == 0
    finally:
        rabbit.delete_queue(name)


def test_connect_timeout_does_not_cut_a_login_that_rabbitmq_is_slow_to_answer(bridge, dial, broker):
    # Found by the hostile-client run on a loaded machine: a CONNECT that had
    # arrived got ERROR "Connect timeout ... No CONNECT frame within 3 seconds"
    # because RabbitMQ took longer than connect_timeout to open the AMQP
    # connection. Only a client that sends no frame in time is dropped now;
    # the login itself is bounded by amqp_connect_timeout.
    import urllib.parse

    from testkit.faultproxy import FaultProxy

    parts = urllib.parse.urlsplit(broker.amqp_url)
    with FaultProxy((parts.hostname or "127.0.0.1", parts.port or 5672)) as slow_rabbit:
        slow_rabbit.delay(0.3)  # the AMQP handshake's several round trips take over a second
        server = bridge(amqp_url=f"amqp://{parts.username}:{parts.password}@127.0.0.1:{slow_rabbit.port}/",
                        connect_timeout=0.5)
        conn = dial(server, timeout=15)
        frame = conn.connect()
        assert frame.command == "CONNECTED"
        silent = dial(server, timeout=15)
        assert silent.error_then_close()["message"] == "Connect timeout"


def test_a_consumer_fed_without_pause_is_not_closed_as_a_stuck_amqp_connection(bridge, dial, unique):
    # Found by the soak: the direct delivery path hid every frame from aiormq,
    # and RabbitMQ sends no heart-beats while deliveries flow, so after three
    # heart-beat intervals (3 minutes by default) aiormq declared the connection
    # stuck and the subscriber got ERROR "Processing error" (CancelledError).
    import time

    server = bridge(amqp_heartbeat=1)  # aiormq's grace: (1 + 1) * 3 = 6 s
    consumer = dial(server, timeout=15)
    consumer.connect()
    consumer.subscribe(f"/topic/steady-{unique}")
    producer = dial(server, timeout=15)
    producer.connect()
    sent = 0
    deadline = time.monotonic() + 9
    while time.monotonic() < deadline:
        producer.receipt("SEND", {"destination": f"/topic/steady-{unique}"}, str(sent), receipt_id=f"r{sent}")
        sent += 1
        frame = consumer.read_frame()
        assert frame.command == "MESSAGE", (frame.command, frame.headers, frame.body)
        time.sleep(0.05)  # a steady trickle, never idle long enough for a RabbitMQ heart-beat
    assert sent > 50
