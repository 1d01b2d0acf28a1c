"""The bridge's own AMQP 0-9-1 handshake, step by step, on a plain stream with pamqp's codec.

Two checks need a connection to RabbitMQ that is opened and closed again, never kept: the
start-up and /readyz probe (``probe.py``: does an AMQP broker answer? It stops at
connection.start, the broker's first word, which needs no credentials) and the login check
(``connect.check_login``: would RabbitMQ accept this login and vhost now? It goes on to
connection.open-ok, then closes). Both take the steps of one :class:`Handshake`, and so does
the one declare that may close a whole connection (``connect.declare_apart``: a transient
non-exclusive queue, which RabbitMQ refuses with a connection error where
``transient_nonexcl_queues`` is denied), and a browse's ``basic.get``s (which a stream refuses
with a connection error: :meth:`Handshake.get`). The
connections that sessions keep are aiormq's (``connect.py``; the measurement behind that
choice is in docs/development.md).
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import urllib.parse
from typing import Any

import pamqp.frame
import pamqp.header
from pamqp import commands as spec

from stomp_bridge.amqp.codec import decode_content_header
from stomp_bridge.amqp.errors import reply_error
from stomp_bridge.protocol.errors import AccessRefused, BrokerError

PROTOCOL_HEADER = pamqp.header.ProtocolHeader().marshal()  # b"AMQP\x00\x00\x09\x01"
# frame type 1 (method) on channel 0, then after the 4-byte size: class 10 (connection), method 10 (start)
_START = struct.Struct(">BHIHH")
_FRAME = struct.Struct(">BHI")  # type, channel, payload size; the payload and 0xCE follow
FRAME_METHOD, CONNECTION_START = 1, (10, 10)


def describe(reply: bytes) -> str | None:
    """None if ``reply`` begins a ``connection.start``, else what it was instead."""
    if len(reply) >= _START.size:
        frame_type, channel, _size, class_id, method_id = _START.unpack_from(reply)
        if frame_type == FRAME_METHOD and channel == 0 and (class_id, method_id) == CONNECTION_START:
            return None
    if reply.startswith(b"AMQP"):
        return f"it speaks another AMQP version ({reply[:8]!r})"
    if not reply:
        return "it closed the connection without a word"
    shown = reply[:40].decode("latin-1").split("\r\n", 1)[0]
    return f"it is not AMQP (it answered {shown!r})"


class NotAmqp(Exception):
    """What answered at the address is not an AMQP 0-9-1 broker (the text says what it was)."""


class Handshake:
    """One AMQP connection being opened: :meth:`connect`, then :meth:`start`, :meth:`login`,
    :meth:`close` in turn, as far as the caller needs; :meth:`abort` hangs up at any point."""

    __slots__ = ("reader", "writer", "received")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.received = bytearray()  # what RabbitMQ sent that no step has taken yet

    @classmethod
    async def connect(cls, url: str, context: ssl.SSLContext | None = None) -> Handshake:
        """TCP (TLS for ``amqps://``, with ``context`` or the default one) to ``url``'s node."""
        parts = urllib.parse.urlsplit(url)
        tls = parts.scheme == "amqps"
        host = parts.hostname or "localhost"
        if tls and context is None:
            context = ssl.create_default_context()
        reader, writer = await asyncio.open_connection(
            host, parts.port or (5671 if tls else 5672), ssl=context if tls else None,
            server_hostname=host if tls else None,
        )
        return cls(reader, writer)

    async def start(self) -> spec.Connection.Start:
        """Send AMQP's protocol header; RabbitMQ's connection.start (raises :class:`NotAmqp`
        if the first bytes back are something else)."""
        self.writer.write(PROTOCOL_HEADER)
        while len(self.received) < _START.size and await self._read():
            pass
        problem = describe(bytes(self.received))
        if problem is not None:
            raise NotAmqp(problem)
        return await self._receive()

    async def login(
        self, start: spec.Connection.Start, login: str, passcode: str, vhost: str, client_name: str,
        external: bool = False,
    ) -> spec.Connection.Tune:
        """start-ok (PLAIN, or EXTERNAL: the user is the TLS client certificate), tune-ok with
        no heart-beats, open of ``vhost``: RabbitMQ's tune once it accepted. Its refusals
        become the AccessRefused the plugin's client gets (``Bad CONNECT``)."""
        mechanism = "EXTERNAL" if external else "PLAIN"
        offered = start.mechanisms.decode() if isinstance(start.mechanisms, bytes) else str(start.mechanisms)
        if mechanism not in offered.split():
            raise AccessRefused(
                "Bad CONNECT", f"Access refused for user '{login}'",
                private=f"RabbitMQ does not offer {mechanism} ({offered}); for EXTERNAL enable "
                "rabbitmq_auth_mechanism_ssl and add 'EXTERNAL' to auth_mechanisms",
            )
        self._send(spec.Connection.StartOk(
            client_properties={"connection_name": client_name, "product": "stomp-bridge",
                               "capabilities": {"authentication_failure_close": True}},
            mechanism=mechanism, response="" if external else f"\0{login}\0{passcode}",
        ))
        tune = await self._receive()
        if isinstance(tune, spec.Connection.Close):
            raise AccessRefused("Bad CONNECT", f"Access refused for user '{login}'", private=tune.reply_text)
        self._send(spec.Connection.TuneOk(channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0))
        try:
            self._send(spec.Connection.Open(virtual_host=vhost))
        except ValueError as exc:  # a vhost name AMQP cannot carry (over 127 bytes)
            raise AccessRefused("Bad CONNECT", f"Virtual host '{vhost[:200]}' access denied", private=str(exc)) from exc
        opened = await self._receive()
        if isinstance(opened, spec.Connection.Close):
            raise AccessRefused("Bad CONNECT", f"Virtual host '{vhost}' access denied", private=opened.reply_text)
        return tune

    async def declare_queue(self, method: spec.Queue.Declare) -> spec.Queue.DeclareOk:
        """``method`` on a channel of its own (1), after a login: RabbitMQ's declare-ok, or its
        refusal raised as the plugin's ERROR, whether it closed the channel or the connection
        (then answered with close-ok: :meth:`close` is not called)."""
        await self.open_channel()
        self._send(method, 1)
        return self._expect(await self._receive(), spec.Queue.DeclareOk)

    async def open_channel(self) -> None:
        """channel.open of channel 1, after a login (RabbitMQ's refusal raised as its ERROR)."""
        self._send(spec.Channel.Open(), 1)
        self._expect(await self._receive(), spec.Channel.OpenOk)

    async def get(self, queue: str) -> tuple[int, bool, str, str, dict[str, Any], bytes] | None:
        """basic.get without auto-ack on channel 1: (delivery tag, redelivered, exchange, routing
        key, properties as ``codec.decode_content_header`` gives them, body), or None when the
        queue is empty. RabbitMQ's refusal (a channel or connection close) raised as its ERROR."""
        self._send(spec.Basic.Get(queue=queue, no_ack=False), 1)
        answer = self._expect(await self._receive(), spec.Basic.GetOk, spec.Basic.GetEmpty)
        if isinstance(answer, spec.Basic.GetEmpty):
            return None
        size, properties = decode_content_header(await self._payload())
        parts = []
        while size > 0:
            part = await self._payload()
            parts.append(part)
            size -= len(part)
        return (answer.delivery_tag, bool(answer.redelivered), answer.exchange or "", answer.routing_key or "",
                properties, b"".join(parts))

    def nack_all(self, delivery_tag: int) -> None:
        """Hand back every message got on channel 1 up to ``delivery_tag`` (requeued, in order)."""
        self._send(spec.Basic.Nack(delivery_tag=delivery_tag, multiple=True, requeue=True), 1)

    def _expect(self, answer: Any, *expected: type) -> Any:
        """``answer`` if it is one of ``expected``; else RabbitMQ's close, answered (close-ok),
        raised as the plugin's ERROR (after a connection's close, :meth:`close` is not called)."""
        if isinstance(answer, expected):
            return answer
        if isinstance(answer, spec.Connection.Close):
            self._send(spec.Connection.CloseOk())
        elif isinstance(answer, spec.Channel.Close):
            self._send(spec.Channel.CloseOk(), 1)
        text = getattr(answer, "reply_text", "") or f"RabbitMQ answered {type(answer).__name__}"
        raise reply_error(text) or BrokerError("Processing error", text)

    async def close(self, reason: str) -> None:
        """connection.close and RabbitMQ's close-ok, after a login."""
        self._send(spec.Connection.Close(reply_code=200, reply_text=reason, class_id=0, method_id=0))
        await self._receive()

    async def finish(self, reason: str, timeout: float = 5.0) -> None:
        """:meth:`close` (RabbitMQ requeues what the channel still holds) if RabbitMQ still
        listens, then hang up; never raises."""
        try:
            await asyncio.wait_for(self.close(reason), timeout)
        except Exception:  # noqa: BLE001 - closed already (a connection error), or RabbitMQ is gone
            pass
        finally:
            self.abort()

    def abort(self) -> None:
        """Hang up (after close, or at any step before it)."""
        self.writer.close()

    def _send(self, method: Any, channel: int = 0) -> None:
        self.writer.write(pamqp.frame.marshal(method, channel))

    async def _read(self) -> bool:
        """More bytes from RabbitMQ; False at the end of the stream."""
        data = await self.reader.read(65536)
        self.received += data
        return bool(data)

    async def _receive(self) -> Any:
        """The next frame (a method: no heart-beats were agreed, and one channel at most is open)."""
        _, _, frame = pamqp.frame.unmarshal(await self._frame())
        return frame

    async def _payload(self) -> bytes:
        """The next frame's payload (a content header's or body's, after a get-ok)."""
        return (await self._frame())[_FRAME.size:-1]

    async def _frame(self) -> bytes:
        received = self.received
        while True:
            if len(received) >= _FRAME.size:
                size = _FRAME.unpack_from(received)[2] + _FRAME.size + 1
                if len(received) >= size:
                    frame = bytes(received[:size])
                    del received[:size]
                    return frame
            if not await self._read():
                raise ConnectionError("RabbitMQ closed the connection")
