"""Every setting the STOMP core reads, as one frozen value built once per bridge.

The core never sees the settings object (pydantic, files, the environment): the driver
builds :class:`Rules` from it when the bridge starts (``Rules.of(settings)``, which reads
the attributes of the same names), and each connection's core gets the same value. A unit
test builds one by hand with only the fields it cares about changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping


@dataclass(frozen=True, slots=True)
class Rules:
    # frames
    max_frame_size_before_login: int = 64 * 1024
    max_frame_size: int = 4 * 1024 * 1024
    max_headers: int = 1000
    max_header_length: int = 64 * 1024
    trailing_lf: bool = True
    # CONNECT
    connect_timeout: float = 10.0
    implicit_connect: bool = False
    hide_server_info: bool = False
    default_user: str | None = "guest"
    default_pass: str | None = "guest"
    default_vhost: str = "/"
    host_vhosts: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    unknown_host_default_vhost: bool = False
    loopback_users: tuple[str, ...] = ("guest",)
    heartbeat_min: float = 0.0
    heartbeat_max: float = 0.0
    # ERRORs
    close_on_error: bool = False
    rabbitmq_stomp_dialect: str = "auto"  # whose plugin: auto | 4.3 | 4.4 (native_stomp below)
    # SEND
    default_topic_exchange: str = "amq.topic"
    headers_bindings: bool = False
    mandatory: bool = False
    retained_messages: bool = False
    temp_queue_prefix: str | None = None
    # SUBSCRIBE, ACK
    max_subscriptions: int = 10000
    client_ack_window: int = 500
    default_nack_requeue: bool = True
    redeliveries_header: str | None = None
    apollo_exclusive: bool = False
    resubscribe_on_cancel: bool = False
    resubscribe_timeout: float = 60.0
    edge_fanout: bool = False
    # transactions
    max_transactions: int = 16
    max_transaction_actions: int = 1024
    max_transaction_bytes: int = 64 * 1024 * 1024

    @classmethod
    def of(cls, settings: Any) -> Rules:
        """The rules of a bridge's settings (any object with attributes of these names)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = getattr(settings, f.name)
            if isinstance(value, dict):
                value = MappingProxyType(dict(value))
            elif isinstance(value, list):
                value = tuple(value)
            values[f.name] = value
        return cls(**values)


def native_stomp(dialect: str, version: tuple[int, ...]) -> bool:
    """Whether a connection behaves as RabbitMQ 4.4's native STOMP plugin (True) or as the plugin
    of 4.3 and older (False). ``dialect`` is the ``rabbitmq_stomp_dialect`` setting, ``version``
    what RabbitMQ reported in connection.start (``()``: it said nothing readable). ``auto`` cannot
    tell a 4.4 preview built on 4.3.6 (which reports 4.3.6) from 4.3.6 itself: it takes 4.4 only
    from a version that says so, and such a preview needs ``4.4`` set."""
    if dialect == "auto":
        return bool(version) and version >= (4, 4)
    return dialect == "4.4"
