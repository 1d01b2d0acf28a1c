"""The bridge in a background thread of the test process, with the tests' defaults.

A thin layer over the public :class:`stomp_bridge.testing.BackgroundBridge` (what users' own
tests get): no HTTP or WebSocket listener unless a test asks (``http_port=0``, ``ws_port=0``), a
free STOMP port unless the Swaptacular profile fixes its own, and the ports it got as attributes.
"""

from __future__ import annotations

from stomp_bridge.settings import Settings
from stomp_bridge.testing import BackgroundBridge
from testkit.brokers import stomp_dialect_setting


class BridgeThread(BackgroundBridge):
    def __init__(self, amqp_url: str, host: str = "127.0.0.1", tracer_provider: object = None,
                 **settings: object) -> None:
        settings.setdefault("http_port", None)  # tests that want the endpoint ask for port 0
        settings.setdefault("ws_port", None)  # likewise the WebSocket listener
        # in front of the 4.4 preview (which reports 4.3.6), behave as its native plugin
        settings.setdefault("rabbitmq_stomp_dialect", stomp_dialect_setting())
        if settings.get("profile") != "swaptacular":
            settings.setdefault("port", 0)
        super().__init__(Settings(host=host, amqp_url=amqp_url, **settings), tracer_provider=tracer_provider)
        self.port = 0
        self.tls_port = 0
        self.ws_port: int | None = None
        self.wss_port: int | None = None
        self.http_port: int | None = None  # /metrics, /healthz, /readyz when asked for

    def start(self) -> None:  # type: ignore[override] - the ports land on self
        server = super().start()
        if self.settings.port is not None:
            self.port = server.port
        if self.settings.tls_port is not None:
            self.tls_port = server.tls_port
        self.ws_port, self.wss_port = server.ws_port, server.wss_port
        self.http_port = server.ops.port if server.ops is not None else None
