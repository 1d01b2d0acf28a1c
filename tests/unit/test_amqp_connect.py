"""The pure parts of logging in (amqp/connect.py): the pool the server makes, the vhost URL,
the size of RabbitMQ's pre-login frame, and the refusal when the credentials overflow it."""

from __future__ import annotations

import pamqp.frame
import pytest
from pamqp import commands as spec

from stomp_bridge.amqp import connect, internals
from stomp_bridge.amqp.endpoints import Endpoints
from stomp_bridge.amqp.pool import AmqpPool
from stomp_bridge.protocol.errors import AccessRefused, BrokerError


def test_make_pool_gives_each_caller_its_own_pool_with_its_options() -> None:
    """No pool hangs on the endpoints for whoever asks first: the server makes its own,
    with its settings, and passes it down."""
    endpoints = Endpoints("amqp://guest:guest@127.0.0.1:5672/")
    first = connect.make_pool(endpoints, heartbeat=5, timeout=1.0, auto_ack_window=7, channels_per_connection=3)
    second = connect.make_pool(endpoints)
    assert isinstance(first, AmqpPool) and first is not second
    assert (first.auto_ack_window, first.channels_per_connection) == (7, 3)
    assert (second.auto_ack_window, second.channels_per_connection) == (500, 64)
    assert not hasattr(endpoints, "pool")


# -- the vhost URL: the client's own credentials and vhost on the configured node ----------------

def test_vhost_url_quotes_the_clients_credentials_and_vhost() -> None:
    url = connect.vhost_url("amqp://bridge:secret@rabbit:5673/ignored?x=1", "us@er:1", "p/ss word", "/")
    assert url == "amqp://us%40er%3A1:p%2Fss%20word@rabbit:5673/%2F?x=1"


def test_vhost_url_keeps_the_scheme_and_brackets_an_ipv6_host() -> None:
    assert connect.vhost_url("amqps://[::1]/", "u", "p", "prod") == "amqps://u:p@[::1]/prod"


def test_vhost_url_without_a_host_means_localhost() -> None:
    assert connect.vhost_url("amqp:///", "u", "p", "v") == "amqp://u:p@localhost/v"


# -- RabbitMQ's pre-login frame limit ------------------------------------------------------------

def test_start_ok_size_is_the_frame_aiormq_sends() -> None:
    method = spec.Connection.StartOk(
        client_properties=internals.client_properties("stomp-bridge 1.2.3.4:5 (guest)"),
        mechanism="PLAIN", response="\0guest\0guest",
    )
    expected = len(pamqp.frame.marshal(method, 0))
    assert connect.start_ok_size("guest", "guest", "stomp-bridge 1.2.3.4:5 (guest)") == expected


def test_start_ok_size_grows_with_the_passcode_byte_for_byte() -> None:
    short = connect.start_ok_size("guest", "x" * 10, "c")
    assert connect.start_ok_size("guest", "x" * 110, "c") == short + 100
    assert connect.start_ok_size("guest", "é" * 10, "c") == short + 10, "UTF-8 bytes, not characters"


def test_credentials_too_long_is_a_login_refusal_naming_the_sizes() -> None:
    error = connect.credentials_too_long("alice", 9000, connect.PRE_LOGIN_FRAME_MAX)
    assert isinstance(error, AccessRefused)
    assert error.message == "Bad CONNECT"
    assert "Access refused for user 'alice'" in error.detail
    assert "9000 bytes" in error.detail and "8192 bytes" in error.detail


async def test_a_login_over_the_limit_is_refused_before_any_node_is_tried() -> None:
    """No connection is attempted (the node on port 1 would answer 'Broker unavailable') and
    the node is not marked down: any client could otherwise mark nodes down."""
    endpoints = Endpoints("amqp://guest:guest@127.0.0.1:1/")
    with pytest.raises(AccessRefused, match="Bad CONNECT") as caught:
        await connect.check_login(endpoints, "guest", "x" * connect.PRE_LOGIN_FRAME_MAX, "/", "c", 1.0)
    assert "over the 8192 bytes" in caught.value.detail
    assert endpoints.order() == [0]


async def test_an_external_login_sends_no_passcode_so_has_no_size_limit() -> None:
    endpoints = Endpoints("amqp://guest:guest@127.0.0.1:1/")
    with pytest.raises(BrokerError, match="Broker unavailable"):
        await connect.check_login(endpoints, "guest", "x" * 20000, "/", "c", 1.0, external=True)
