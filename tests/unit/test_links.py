"""BridgeServer.run_connection through a Link: what a listener hands over before a session exists."""

from __future__ import annotations

from stomp_bridge.transport.server import BridgeServer
from stomp_bridge.settings import Settings


class RecordingLink:
    """A Link that keeps what is sent; no socket."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed = False

    async def read(self) -> bytes:
        return b""

    def send(self, frames: list[bytes]) -> int:
        self.sent.extend(frames)
        return sum(map(len, frames))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    async def drain(self) -> None:
        pass


async def test_a_client_accepted_while_shutting_down_gets_server_shutdown():
    server = BridgeServer(Settings(port=0, ws_port=None, http_port=None))
    server._closing = True
    link = RecordingLink()
    await server.run_connection(link, ("127.0.0.1", 40000))
    assert link.closed
    assert [frame.split(b"\n", 2)[:2] for frame in link.sent] == [[b"ERROR", b"message:Server shutdown"]]
    assert server.connection_count == 0
    assert server.counters.connections_opened == 0


async def test_refusal_by_limit_goes_through_the_link():
    server = BridgeServer(Settings(port=0, ws_port=None, http_port=None, max_connections_per_ip=1))
    server._per_ip["127.0.0.1"] = 1  # one client of that address is already connected
    link = RecordingLink()
    await server.run_connection(link, ("127.0.0.1", 40001))
    assert link.closed
    assert b"message:Too many connections" in link.sent[0]
    assert server.counters.connections_refused["per_ip"] == 1
