"""Does an AMQP 0-9-1 broker answer at an address? The check behind /readyz and start-up.

An open port is not enough: pointed at RabbitMQ's management port (or anything else that
listens), a TCP connect succeeds and every STOMP CONNECT then fails. The probe sends AMQP's
protocol header and wants ``connection.start`` back, the broker's first word, which needs
no credentials; then it hangs up.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import urllib.parse

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
# frame type 1 (method) on channel 0, then after the 4-byte size: class 10 (connection), method 10 (start)
_START = struct.Struct(">BHIHH")
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


async def check(url: str, context: ssl.SSLContext | None = None, timeout: float = 2.0) -> str | None:
    """None when ``url``'s node answers AMQP 0-9-1 within ``timeout``, else why not, in words."""
    parts = urllib.parse.urlsplit(url)
    tls = parts.scheme == "amqps"
    host = parts.hostname or "localhost"
    port = parts.port or (5671 if tls else 5672)
    where = f"RabbitMQ at {host}:{port}"
    if tls and context is None:
        context = ssl.create_default_context()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context if tls else None,
                                    server_hostname=host if tls else None),
            timeout,
        )
    except asyncio.TimeoutError:
        return f"{where} does not answer (no connection within {timeout:g} s)"
    except OSError as exc:  # ssl.SSLError included
        return f"{where} is not reachable ({exc.strerror or repr(exc)})"
    try:
        writer.write(PROTOCOL_HEADER)
        reply = b""
        try:
            while len(reply) < _START.size:
                chunk = await asyncio.wait_for(reader.read(64), timeout)
                if not chunk:
                    break
                reply += chunk
        except asyncio.TimeoutError:
            if not reply:
                return f"{where} accepted a connection but sent nothing in {timeout:g} s: it is not AMQP"
        except OSError as exc:
            return f"{where} closed the connection ({exc.strerror or repr(exc)})"
        problem = describe(reply)
        return None if problem is None else f"{where}: {problem}"
    finally:
        writer.close()
