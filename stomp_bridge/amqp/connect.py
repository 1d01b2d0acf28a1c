"""Logging in to RabbitMQ as the STOMP user: failover over the nodes, the AMQP handshake.

A session's AMQP connection is opened with the client's own login, passcode and vhost
(``connect_any``, through aiormq), so every login is RabbitMQ's decision, as under the
plugin; a login that joins a shared connection is checked first by ``check_login``, the
bridge's own handshake (``handshake.py``) that keeps no connection (see ``pool.py``). Both try the nodes of ``amqp_url`` in
the order ``Endpoints`` gives and skip a node that does not answer; a refusal is the
client's answer, from whichever node gave it.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

import aiormq
import aiormq.exceptions as amqp_exc
import pamqp.frame
from pamqp import commands as spec

from stomp_bridge.amqp import internals
from stomp_bridge.amqp.endpoints import Endpoints
from stomp_bridge.amqp.errors import describe
from stomp_bridge.amqp.handshake import Handshake, NotAmqp
from stomp_bridge.amqp.pool import AmqpPool
from stomp_bridge.amqp.reader import BulkFrameReceiver, Hooks, current_hooks
from stomp_bridge.protocol.errors import AccessRefused, BrokerError


def install() -> None:
    """What a bridge process needs of aiormq and pamqp, installed once when it starts (see
    ``internals.install``): field-table integers as longs, the bulk frame reader. Idempotent;
    raises ``internals.UnsupportedAiormq``, naming the aiormq needed, if aiormq changed."""
    internals.install(BulkFrameReceiver)


def vhost_url(base_url: str, login: str, passcode: str, vhost: str) -> str:
    """The broker URL with the STOMP client's own credentials and vhost."""
    parts = urllib.parse.urlsplit(base_url)
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    netloc = (
        f"{urllib.parse.quote(login, safe='')}:{urllib.parse.quote(passcode, safe='')}@{host}"
    )
    if parts.port:
        netloc += f":{parts.port}"
    path = "/" + urllib.parse.quote(vhost, safe="")
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, parts.query, ""))


def make_pool(endpoints: Endpoints, *, heartbeat: int = 60, timeout: float = 10.0, **options: Any) -> AmqpPool:
    """A pool of shared connections that logs in to the nodes of ``endpoints``.

    The server makes one, with its settings (``options``: ``AmqpPool``'s keyword
    arguments), and hands it to each session: one pool per bridge, never found again
    through the endpoints.
    """
    async def opener(
        login: str, passcode: str, vhost: str, client_name: str, **tls: Any
    ) -> tuple[aiormq.Connection, Hooks]:
        internals.require_installed()  # else no one would read the sessions' channels
        return await connect_any(endpoints, login, passcode, vhost, client_name, heartbeat, timeout, **tls)

    async def checker(login: str, passcode: str, vhost: str, client_name: str, **tls: Any) -> None:
        await check_login(endpoints, login, passcode, vhost, client_name, timeout, **tls)

    async def declarer(
        login: str, passcode: str, vhost: str, client_name: str, method: spec.Queue.Declare, **options: Any
    ) -> spec.Queue.DeclareOk:
        return await declare_apart(endpoints, login, passcode, vhost, client_name, timeout, method, **options)

    async def apart(login: str, passcode: str, vhost: str, client_name: str, **options: Any) -> Handshake:
        return await open_apart(endpoints, login, passcode, vhost, client_name, timeout, **options)

    return AmqpPool(opener, checker, declarer=declarer, apart=apart, **options)


# RabbitMQ reads at most this much of a frame before a client has logged in (FRAME_MIN_SIZE:
# 8192 bytes since 4.0.8 and 4.1.0, for JWT tokens; 4096 before) and resets a connection whose
# connection.start-ok, which carries the login and passcode, is larger.
PRE_LOGIN_FRAME_MAX = 8192
PRE_LOGIN_FRAME_MAX_BEFORE_4_1 = 4096


def start_ok_size(login: str, passcode: str, client_name: str) -> int:
    """Bytes of the connection.start-ok frame aiormq sends for this login (PLAIN)."""
    method = spec.Connection.StartOk(
        client_properties=internals.client_properties(client_name), mechanism="PLAIN", response=f"\0{login}\0{passcode}",
    )
    return len(pamqp.frame.marshal(method, 0))


def credentials_too_long(login: str, size: int, limit: int) -> AccessRefused:
    """The refusal for a login RabbitMQ would reset the connection for (its pre-login frame
    limit), worded as RabbitMQ's own refusals."""
    return AccessRefused(
        "Bad CONNECT",
        f"Access refused for user '{login}': the login and passcode take {size} bytes of "
        f"RabbitMQ's AMQP login frame, over the {limit} bytes it reads before a login succeeds "
        "(RabbitMQ 4.1+; 4096 before). Use a shorter passcode or token.",
    )


async def connect_any(
    endpoints: Endpoints, login: str, passcode: str, vhost: str, client_name: str, heartbeat: int,
    timeout: float, context: ssl.SSLContext | None = None, external: bool = False,
    near: tuple[str, int] | None = None,
) -> tuple[aiormq.Connection, Hooks]:
    """Log in as the STOMP user on the first RabbitMQ node that answers (see _first_node), the
    node at ``near`` (host, port) first if it is up."""
    return await _first_node(
        endpoints, login, passcode, client_name, external,
        lambda url: _connect(url, login, passcode, vhost, client_name, heartbeat, timeout, context, external),
        near,
    )


async def check_login(
    endpoints: Endpoints, login: str, passcode: str, vhost: str, client_name: str, timeout: float,
    context: ssl.SSLContext | None = None, external: bool = False,
) -> None:
    """RabbitMQ's verdict on a login, and no connection kept: the AMQP handshake up to
    connection.open-ok (the vhost check), then connection.close. Half the CPU of an aiormq
    connection opened and closed (0.9 against 1.6 ms, measured); raises RabbitMQ's refusal."""
    await _first_node(
        endpoints, login, passcode, client_name, external,
        lambda url: asyncio.wait_for(_handshake(url, login, passcode, vhost, client_name, context, external), timeout),
    )


async def declare_apart(
    endpoints: Endpoints, login: str, passcode: str, vhost: str, client_name: str, timeout: float,
    method: spec.Queue.Declare, context: ssl.SSLContext | None = None, external: bool = False,
    near: tuple[str, int] | None = None,
) -> spec.Queue.DeclareOk:
    """``method`` on a connection of its own, opened for it and closed after it (the node at
    ``near`` first): for a declare whose refusal closes the whole connection it was sent on,
    which must not be a connection other sessions share. Raises RabbitMQ's refusal."""
    return await _first_node(
        endpoints, login, passcode, client_name, external,
        lambda url: asyncio.wait_for(
            _handshake(url, login, passcode, vhost, client_name, context, external, method), timeout),
        near,
    )


async def open_apart(
    endpoints: Endpoints, login: str, passcode: str, vhost: str, client_name: str, timeout: float,
    context: ssl.SSLContext | None = None, external: bool = False, near: tuple[str, int] | None = None,
) -> Handshake:
    """A connection of the login's own, logged in, with channel 1 open (the node at ``near``
    first): for what RabbitMQ may answer with a connection error, which must not close a
    connection other sessions share (a browse's basic.get: a stream refuses it so). The caller
    closes it with :meth:`Handshake.finish`. Raises RabbitMQ's refusal."""
    async def attempt(url: str) -> Handshake:
        handshake = await Handshake.connect(url, context)
        try:
            start = await handshake.start()
            await handshake.login(start, login, passcode, vhost, client_name, external)
            await handshake.open_channel()
        except BaseException:
            handshake.abort()
            raise
        return handshake

    return await _first_node(
        endpoints, login, passcode, client_name, external, lambda url: asyncio.wait_for(attempt(url), timeout), near,
    )


async def _first_node(
    endpoints: Endpoints, login: str, passcode: str, client_name: str, external: bool,
    attempt: Callable[[str], Awaitable[Any]], near: tuple[str, int] | None = None,
) -> Any:
    """``attempt(url)`` on the first RabbitMQ node that answers.

    A node that cannot be reached is skipped (and backs off); a refused
    login or vhost is the client's answer, from whichever node gave it. So is a login
    too long for RabbitMQ's pre-login frame limit: RabbitMQ resets the connection, which
    must not count against the node (any client could otherwise mark nodes down).
    """
    size = 0 if external else start_ok_size(login, passcode, client_name)
    if size > PRE_LOGIN_FRAME_MAX:
        raise credentials_too_long(login, size, PRE_LOGIN_FRAME_MAX)
    failures = []
    for index in endpoints.order(near):
        try:
            result = await attempt(endpoints.urls[index])
        except AccessRefused:
            endpoints.succeeded(index)
            raise
        except (OSError, EOFError, amqp_exc.AMQPError, asyncio.TimeoutError, NotAmqp) as exc:
            if size > PRE_LOGIN_FRAME_MAX_BEFORE_4_1 and isinstance(
                exc, (amqp_exc.AMQPConnectionError, ConnectionError, EOFError)
            ):
                # An older broker (4096 bytes) reset the connection at our start-ok.
                raise credentials_too_long(login, size, PRE_LOGIN_FRAME_MAX_BEFORE_4_1) from exc
            endpoints.failed(index)
            host, port = endpoints.address(index)
            failures.append(f"{host}:{port}: {describe(exc)}")
            continue
        endpoints.succeeded(index)
        return result
    raise BrokerError(
        "Broker unavailable",
        f"None of the {len(endpoints.urls)} RabbitMQ node(s) answered; try again later.",
        private="; ".join(failures),
    )


async def _handshake(
    url: str, login: str, passcode: str, vhost: str, client_name: str,
    context: ssl.SSLContext | None, external: bool, declare: spec.Queue.Declare | None = None,
) -> spec.Queue.DeclareOk | None:
    """One login on one node, and ``declare`` after it if given, closed again (``handshake.py``);
    raises RabbitMQ's refusal as the same AccessRefused as _connect's, or the declare's."""
    handshake = await Handshake.connect(url, context)
    try:
        start = await handshake.start()
        await handshake.login(start, login, passcode, vhost, client_name, external)
        ok = None if declare is None else await handshake.declare_queue(declare)
        await handshake.close("login checked" if declare is None else "declared")
        return ok
    finally:
        handshake.abort()


async def _connect(
    base_url: str, login: str, passcode: str, vhost: str, client_name: str, heartbeat: int,
    timeout: float, context: ssl.SSLContext | None = None, external: bool = False,
) -> tuple[aiormq.Connection, Hooks]:
    url = vhost_url(base_url, login, passcode, vhost)
    sep = "&" if "?" in url else "?"
    url += f"{sep}heartbeat={heartbeat}"
    if external:  # the user comes from the certificate in ``context`` (rabbitmq_auth_mechanism_ssl)
        url += "&auth=external"
    hooks = Hooks()
    token = current_hooks.set(hooks)
    try:
        connection = await asyncio.wait_for(
            aiormq.connect(
                url,
                client_properties={"connection_name": client_name, "product": "stomp-bridge"},
                context=context,
            ),
            timeout,
        )
    except amqp_exc.AuthenticationError as exc:  # the broker does not offer the mechanism
        raise AccessRefused(
            "Bad CONNECT",
            f"Access refused for user '{login}'",
            private=f"RabbitMQ does not offer this login mechanism ({exc}); for EXTERNAL enable "
            "rabbitmq_auth_mechanism_ssl and add 'EXTERNAL' to auth_mechanisms",
        ) from exc
    except amqp_exc.ProbableAuthenticationError as exc:
        raise AccessRefused(
            "Bad CONNECT", f"Access refused for user '{login}'", private=describe(exc)
        ) from exc
    except (amqp_exc.InvalidFrameError, amqp_exc.ConnectionNotAllowed) as exc:
        # RabbitMQ answers connection.open on an unknown or forbidden vhost
        # with connection.close (NOT_ALLOWED).
        raise AccessRefused(
            "Bad CONNECT", f"Virtual host '{vhost}' access denied",
            private=f"{describe(exc)}: the vhost does not exist, or the user may not use it",
        ) from exc
    except ValueError as exc:  # pamqp refuses a vhost name AMQP cannot carry (over 127 bytes)
        raise AccessRefused(
            "Bad CONNECT", f"Virtual host '{vhost[:200]}' access denied", private=str(exc)
        ) from exc
    finally:
        current_hooks.reset(token)
    return connection, hooks
