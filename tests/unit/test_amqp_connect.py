"""The pure parts of logging in (amqp/connect.py): the pool the server makes, the vhost URL,
the size of RabbitMQ's pre-login frame, and the refusal when the credentials overflow it."""

from __future__ import annotations

import pamqp.frame
import pytest
from pamqp import commands as spec

from stomp_bridge.amqp import connect
from stomp_bridge.amqp.endpoints import Endpoints
from stomp_bridge.amqp.pool import AmqpPool
from stomp_bridge.protocol.errors import AccessRefused


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
