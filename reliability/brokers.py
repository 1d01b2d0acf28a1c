"""Which RabbitMQ a reliability part runs against, by name: ``4.3``, ``4.0``, ``system`` (3.10), ``4.4``.

The names and ports are testkit.brokers' (``STOMP_BRIDGE_TEST_BROKER``); ``4.4`` (the preview
with RabbitMQ's newest native STOMP, on a 4.3.6 core) follows the same pattern of ports, AMQP
5644, management 15644, STOMP 61644, whether or not testkit knows it yet.
``STOMP_BRIDGE_TEST_AMQP_URL`` (with ``STOMP_BRIDGE_TEST_API_URL`` and
``STOMP_BRIDGE_TEST_NATIVE_PORT``) names a broker elsewhere instead.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass

from testkit import brokers


@dataclass(frozen=True)
class BrokerInfo:
    name: str
    amqp_url: str
    api_url: str
    native_port: int


def default_name() -> str:
    return os.environ.get("STOMP_BRIDGE_TEST_BROKER", "4.3")


def broker_info(name: str | None = None) -> BrokerInfo:
    """The broker ``name`` (default: ``STOMP_BRIDGE_TEST_BROKER``, else 4.3), started when testkit
    knows how and it does not answer."""
    url = os.environ.get("STOMP_BRIDGE_TEST_AMQP_URL")
    if url and name is None:
        host = urllib.parse.urlsplit(url).hostname or "127.0.0.1"
        return BrokerInfo("remote", url, os.environ.get("STOMP_BRIDGE_TEST_API_URL", f"http://{host}:15672/api"),
                          int(os.environ.get("STOMP_BRIDGE_TEST_NATIVE_PORT", "61613")))
    name = name or default_name()
    try:
        local = brokers.local(name)
    except ValueError:
        if not name.startswith("4."):
            raise
        vv = name.replace(".", "")
        return BrokerInfo(name, f"amqp://guest:guest@127.0.0.1:56{vv}/", f"http://127.0.0.1:156{vv}/api",
                          int(f"616{vv}"))
    local.ensure_running()
    return BrokerInfo(name, local.amqp_url, local.api_url, local.stomp_port)
