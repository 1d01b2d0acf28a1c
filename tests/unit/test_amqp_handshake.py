"""The bridge's own handshake (amqp/handshake.py) as the probe and the login check use it, against
a scripted AMQP server on the loopback (the real broker: tests/integration/test_bridge_settings.py
for the probe, test_shared_connections.py and test_login.py for the login check)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pamqp.frame
import pytest
from pamqp import commands as spec

from stomp_bridge.amqp import connect, probe
from stomp_bridge.amqp.endpoints import Endpoints
from stomp_bridge.amqp.handshake import PROTOCOL_HEADER
from stomp_bridge.protocol.errors import AccessRefused, BrokerError


class Script:
    """What the scripted server answers: None for a step means it goes on."""

    def __init__(self) -> None:
        self.mechanisms = "PLAIN AMQPLAIN"
        self.refuse_login: str | None = None
        self.refuse_vhost: str | None = None
        self.raw: bytes | None = None  # instead of AMQP: these bytes, then hang up
        self.silent = False
        self.received: list[object] = []  # the methods the client sent


async def _frame(reader: asyncio.StreamReader) -> object:
    head = await reader.readexactly(7)
    rest = await reader.readexactly(int.from_bytes(head[3:7], "big") + 1)
    return pamqp.frame.unmarshal(head + rest)[2]


def _close(code: int, text: str) -> bytes:
    return pamqp.frame.marshal(spec.Connection.Close(reply_code=code, reply_text=text, class_id=0, method_id=0), 0)


@pytest.fixture
async def server() -> AsyncIterator[tuple[Script, str]]:
    script = Script()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            assert await reader.readexactly(8) == PROTOCOL_HEADER
            if script.silent:
                await reader.read()
                return
            if script.raw is not None:
                writer.write(script.raw)
                return
            writer.write(pamqp.frame.marshal(spec.Connection.Start(mechanisms=script.mechanisms, locales="en_US"), 0))
            start_ok = await _frame(reader)
            script.received.append(start_ok)
            if script.refuse_login is not None:
                writer.write(_close(403, script.refuse_login))
                return
            writer.write(pamqp.frame.marshal(spec.Connection.Tune(channel_max=2047, frame_max=131072, heartbeat=60), 0))
            script.received += [await _frame(reader), await _frame(reader)]  # tune-ok, open
            if script.refuse_vhost is not None:
                writer.write(_close(530, script.refuse_vhost))
                return
            writer.write(pamqp.frame.marshal(spec.Connection.OpenOk(), 0))
            script.received.append(await _frame(reader))  # close
            writer.write(pamqp.frame.marshal(spec.Connection.CloseOk(), 0))
        except asyncio.IncompleteReadError:
            pass
        finally:
            await writer.drain()
            writer.close()

    listening = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    yield script, f"amqp://127.0.0.1:{port}/"
    listening.close()


async def _check(url: str, login: str = "alice", vhost: str = "/", external: bool = False) -> None:
    await connect.check_login(Endpoints(url), login, "secret", vhost, "stomp-bridge test", 2.0, external=external)


async def test_an_accepted_login_goes_to_open_ok_then_closes_with_no_heartbeats(server) -> None:
    script, url = server
    await _check(url, vhost="prod")
    start_ok, tune_ok, opened, close = script.received
    assert start_ok.mechanism == "PLAIN" and start_ok.response == "\0alice\0secret"
    assert start_ok.client_properties["connection_name"] == "stomp-bridge test"
    assert tune_ok.heartbeat == 0 and tune_ok.channel_max == 2047
    assert opened.virtual_host == "prod"
    assert isinstance(close, spec.Connection.Close) and close.reply_text == "login checked"


async def test_a_refused_login_is_the_plugins_access_refused(server) -> None:
    script, url = server
    script.refuse_login = "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN"
    with pytest.raises(AccessRefused) as refused:
        await _check(url)
    assert (refused.value.message, refused.value.detail) == ("Bad CONNECT", "Access refused for user 'alice'")


async def test_a_refused_vhost_names_it(server) -> None:
    script, url = server
    script.refuse_vhost = "NOT_ALLOWED - vhost nope not found"
    with pytest.raises(AccessRefused, match="Bad CONNECT") as refused:
        await _check(url, vhost="nope")
    assert refused.value.detail == "Virtual host 'nope' access denied"


async def test_external_not_offered_says_how_to_enable_it(server) -> None:
    script, url = server
    with pytest.raises(AccessRefused) as refused:
        await _check(url, external=True)
    assert "rabbitmq_auth_mechanism_ssl" in refused.value.private


async def test_a_node_that_is_not_amqp_is_skipped_not_a_crash(server) -> None:
    """The login check treats it as a node that did not answer (and so backs off from it)."""
    script, url = server
    script.raw = b"HTTP/1.1 400 Bad Request\r\n\r\n"
    endpoints = Endpoints(url)
    with pytest.raises(BrokerError, match="Broker unavailable") as caught:
        await connect.check_login(endpoints, "alice", "secret", "/", "c", 2.0)
    assert "not AMQP" in caught.value.private


async def test_the_probe_stops_at_connection_start(server) -> None:
    script, url = server
    assert await probe.check(url, timeout=2.0) is None
    assert script.received == [], "no credentials are sent"


async def test_the_probe_names_what_answered_instead(server) -> None:
    script, url = server
    script.raw = b"HTTP/1.1 400 Bad Request\r\nServer: x\r\n\r\n"
    assert (await probe.check(url, timeout=2.0)).endswith("it is not AMQP (it answered 'HTTP/1.1 400 Bad Request')")
    script.raw = b"AMQP\x01\x01\x00\x0a"
    assert "it speaks another AMQP version" in await probe.check(url, timeout=2.0)


async def test_the_probe_says_a_silent_server_is_not_amqp(server) -> None:
    script, url = server
    script.silent = True
    assert "accepted a connection but sent nothing in 0.2 s" in await probe.check(url, timeout=0.2)
