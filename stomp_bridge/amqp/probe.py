"""Does an AMQP 0-9-1 broker answer at an address? The check behind /readyz and start-up.

An open port is not enough: pointed at RabbitMQ's management port (or anything else that
listens), a TCP connect succeeds and every STOMP CONNECT then fails. The probe takes the first
step of the bridge's handshake (``handshake.py``): AMQP's protocol header out,
``connection.start`` back, the broker's first word, which needs no credentials; then it hangs up.

That hang-up costs a WARNING in RabbitMQ's log (``client unexpectedly closed TCP connection``:
a connection that sent data and closed before a login), and there is no clean way out before a
login. So a node that has answered AMQP once is asked only :func:`reachable`: a TCP (or TLS)
connection closed before a byte is sent, which RabbitMQ logs at debug level only
(``connection_closed_with_no_data_received``).
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse

from stomp_bridge.amqp.handshake import Handshake, NotAmqp, describe


def _where(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "localhost"
    port = parts.port or (5671 if parts.scheme == "amqps" else 5672)
    return f"RabbitMQ at {host}:{port}"


async def reachable(url: str, context: ssl.SSLContext | None = None, timeout: float = 2.0) -> str | None:
    """None when ``url``'s node takes a connection within ``timeout`` (for ``amqps://``, its TLS
    handshake too), which is then closed before any AMQP byte; else why not, in words."""
    where = _where(url)
    try:
        handshake = await asyncio.wait_for(Handshake.connect(url, context), timeout)
    except asyncio.TimeoutError:
        return f"{where} does not answer (no connection within {timeout:g} s)"
    except OSError as exc:  # ssl.SSLError included
        return f"{where} is not reachable ({exc.strerror or exc})"
    handshake.abort()
    return None


async def check(url: str, context: ssl.SSLContext | None = None, timeout: float = 2.0) -> str | None:
    """None when ``url``'s node answers AMQP 0-9-1 within ``timeout``, else why not, in words."""
    where = _where(url)
    try:
        handshake = await asyncio.wait_for(Handshake.connect(url, context), timeout)
    except asyncio.TimeoutError:
        return f"{where} does not answer (no connection within {timeout:g} s)"
    except OSError as exc:  # ssl.SSLError included
        return f"{where} is not reachable ({exc.strerror or exc})"
    try:
        await asyncio.wait_for(handshake.start(), timeout)
    except NotAmqp as exc:
        return f"{where}: {exc}"
    except asyncio.TimeoutError:
        if not handshake.received:
            return f"{where} accepted a connection but sent nothing in {timeout:g} s: it is not AMQP"
        problem = describe(bytes(handshake.received))  # None: connection.start began, slowly
        return None if problem is None else f"{where}: {problem}"
    except OSError as exc:
        return f"{where} closed the connection ({exc.strerror or exc or type(exc).__name__})"
    finally:
        handshake.abort()
    return None
