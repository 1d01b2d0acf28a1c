"""Shared AMQP connections: many STOMP sessions, one channel each, per connection.

An AMQP connection costs RabbitMQ a file descriptor, an Erlang reader/writer
pair and a TCP socket, and costs the bridge an aiormq connection with its
reader, writer and heart-beat tasks (~100 kB). A channel costs a fraction of
that, so STOMP sessions that log in with the same credentials share
connections, up to ``amqp_channels_per_connection`` channels each; a full
connection makes the next login open another, and a connection closes when
its last session leaves.

Credentials. Every login is RabbitMQ's decision, as under the plugin: RabbitMQ
checks credentials only when a connection opens, so a login that would join an
existing connection is first checked by opening (and closing) a connection of
its own with the same user, passcode and vhost; only if RabbitMQ accepts it
does the session take a channel on the shared one. A changed password, a
deleted user or a revoked vhost permission is therefore refused at the very next
login, while sessions already open continue, as they would on their own AMQP
connection. ``amqp_login_cache_seconds`` (0 by default: no cache) lets a login
that RabbitMQ accepted that recently skip the check: that is the one window in
which a revoked credential still logs in. A connection is shared only by
logins whose user, passcode and vhost are identical (the passcode is compared
through an HMAC with a per-process key, never kept in clear), and it stops
taking new sessions once it is ``amqp_login_reuse_seconds`` old, which spreads
logins over the nodes again after a failover.

Exclusivity. RabbitMQ ties an exclusive queue to its AMQP connection, which
other STOMP sessions may share; the plugin ties it to the STOMP connection. So
each connection records which channel declared each of its exclusive queues,
and another session touching one of them (consume, declare, bind, delete, get)
gets RabbitMQ's own RESOURCE_LOCKED answer instead, as it would from the plugin.

Isolation. A channel error (404, 403, 406 …) closes only that channel, so it
ends only its STOMP session; losing or closing the connection ends every
session on it, each with the reason (``connection_forced``, ``Broker
connection lost``). So what one session sends must never cause a connection
error: a method or message header too large for RabbitMQ's frame_max is refused
before it is sent (``lean.py``, the core's publish check), and the one declare
RabbitMQ answers with a connection error, a transient non-exclusive queue where
the deprecated feature ``transient_nonexcl_queues`` is denied (a setting in
4.3, which the tests use; a later release's default), goes on a
connection of its own (``connect.declare_apart``) until RabbitMQ has once
accepted such a declare from the node of a shared connection
(``SharedConnection.transient_queues``), after which it goes on the session's
channel there.

Publishing connections. A resource alarm makes RabbitMQ stop reading every
connection that publishes, whole: the ACKs of the other sessions on it too.
Under the plugin a STOMP connection that only consumes is never held back, so
(with ``separate_publishers``, the default) a session publishes on a channel
of its own on one of the login's publishing connections, opened at its first
SEND, and the connection it consumes on never carries a publish. The
publishing connections are shared by the same rules as the others, in a group
of their own. A session publishes only after its login was accepted, so
joining one needs no login check; and a publishing connection whose last
session left stays open ``linger_seconds`` (10) for the next one, so a client
that connects, sends and disconnects does not open and close an AMQP
connection each time (it owns no exclusive queue that lingering could keep).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import logging
import os
from collections.abc import Callable
from time import monotonic
from typing import Any

import aiormq
import aiormq.exceptions as amqp_exc

from stomp_bridge.amqp.errors import describe
from stomp_bridge.amqp.reader import Hooks

log = logging.getLogger(__name__)

_KEY = os.urandom(32)
RABBIT_CHANNEL_MAX = 2047  # RabbitMQ's default channel_max; the broker's tune may lower it


def _digest(passcode: str) -> bytes:
    return hmac.new(_KEY, passcode.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()


class SharedConnection:
    """One AMQP connection and the sessions (channels) on it."""

    __slots__ = (
        "key", "connection", "hooks", "sessions", "reserved", "opened_at", "cap", "channel_max", "_cursor",
        "retired", "exclusive", "publishing", "linger", "node", "transient_queues",
    )

    def __init__(self, key: tuple, connection: aiormq.Connection, hooks: Hooks, cap: int, now: float) -> None:
        self.key = key
        self.connection = connection
        self.hooks = hooks
        self.sessions: dict[int, Any] = {}  # channel number -> AmqpSession, or the lean channel holding it
        self.reserved = 0  # channels open or being opened
        self.opened_at = now
        self.channel_max = connection.connection_tune.channel_max or RABBIT_CHANNEL_MAX
        self.cap = max(1, min(cap, self.channel_max))  # sessions; a short-lived extra channel may pass it
        self._cursor = 0
        self.retired = False  # lost, closing, or no longer offered to new sessions
        self.exclusive: dict[str, int] = {}  # exclusive queue -> channel number of its session
        self.publishing = bool(key[-1])  # one of a login's publishing connections (see the module docstring)
        self.linger: asyncio.TimerHandle | None = None  # the close of a publishing one nobody uses
        url = getattr(connection, "url", None)  # the node it is on (host, port)
        self.node: tuple[str, int] | None = (url.host, url.port) if url is not None else None
        # RabbitMQ accepted a transient non-exclusive queue from this node (the module docstring)
        self.transient_queues = False

    def free_number(self) -> int:
        """A channel number up to the broker's channel_max that none of our channels holds (a
        closing one keeps its number until RabbitMQ's close-ok, one whose open timed out until
        the connection ends): a channel.open on a number in use, or past channel_max, makes
        RabbitMQ close the whole connection."""
        sessions = self.sessions
        limit = self.channel_max
        for step in range(limit):
            number = (self._cursor + step) % limit + 1
            if number not in sessions:
                self._cursor = number % limit
                return number
        raise RuntimeError("no free channel number")

    def lost(self, future: asyncio.Future) -> None:
        """The connection closed under its sessions: each ends with the reason."""
        self.retired = True
        exc = closing_reason(future, "connection closed")
        for session in list(self.sessions.values()):
            session.connection_lost(exc)


# aiormq raises these for RabbitMQ's connection.close; ConnectionClosed itself carries (code, text)
_HARD_ERRORS = {
    amqp_exc.ConnectionFrameError: 501, amqp_exc.ConnectionSyntaxError: 502, amqp_exc.ConnectionCommandInvalid: 503,
    amqp_exc.ConnectionChannelError: 504, amqp_exc.ConnectionUnexpectedFrame: 505,
    amqp_exc.ConnectionResourceError: 506, amqp_exc.ConnectionNotAllowed: 530,
    amqp_exc.ConnectionNotImplemented: 540, amqp_exc.ConnectionInternalError: 541,
}


def broker_close_code(future: asyncio.Future) -> int | None:
    """The reply code of the connection.close RabbitMQ ended a connection with (320 forced, 5xx a
    connection error), or None: closed by the bridge (aiormq's code 0), or lost without a close."""
    if future.cancelled() or not isinstance(future.exception(), amqp_exc.ConnectionClosed):
        return None
    exc = future.exception()
    code = _HARD_ERRORS.get(type(exc)) or next((a for a in exc.args if isinstance(a, int)), None)
    return code if code else None


def closing_reason(future: asyncio.Future, default: str) -> BaseException:
    """Why a channel's or connection's ``closing`` future finished."""
    if future.cancelled():
        return ConnectionError(default)
    return future.exception() or ConnectionError(default)


Opener = Callable[..., Any]  # async (login, passcode, vhost, client_name) -> (aiormq.Connection, Hooks)
Checker = Callable[..., Any]  # async (login, passcode, vhost, client_name): raises RabbitMQ's refusal
# async (login, passcode, vhost, client_name, queue.declare, context=, external=, near=) -> declare-ok
Declarer = Callable[..., Any]
# async (login, passcode, vhost, client_name, context=, external=, near=) -> a logged-in
# handshake.Handshake with channel 1 open: a connection of the login's own (connect.open_apart)
Apart = Callable[..., Any]


class AmqpPool:
    """Shared connections by (user, passcode digest, vhost); any node of ``amqp_url`` serves."""

    def __init__(
        self, opener: Opener, checker: Checker, *, declarer: Declarer | None = None, apart: Apart | None = None,
        channels_per_connection: int = 64,
        min_connections: int = 1, reuse_seconds: float = 300.0, auto_ack_window: int = 500,
        login_cache_seconds: float = 0.0, separate_publishers: bool = True, linger_seconds: float = 10.0,
        clock: Callable[[], float] = monotonic, on_broker_close: Callable[[int], None] | None = None,
    ) -> None:
        self.min_connections = max(1, min_connections)
        self._opener = opener
        self._checker = checker
        self.declarer = declarer  # None (tests): every declare goes on the session's channel
        self.apart = apart  # None (tests): a browse gets on the session's channel
        self.auto_ack_window = auto_ack_window  # read by each session (channel.AmqpSession)
        self.separate_publishers = separate_publishers  # likewise
        self.linger_seconds = linger_seconds
        self._closing: set[asyncio.Future[None]] = set()  # lingering connections being closed
        self.channels_per_connection = max(1, channels_per_connection)
        self.reuse_seconds = reuse_seconds
        self.login_cache_seconds = login_cache_seconds
        self._accepted: dict[tuple, float] = {}  # key -> when RabbitMQ last accepted it (cache only)
        self.login_checks = 0  # logins RabbitMQ checked before they joined a shared connection
        self._clock = clock
        self.on_broker_close = on_broker_close  # (reply code): RabbitMQ closed a shared connection
        self._connections: dict[tuple, list[SharedConnection]] = {}
        self._opening: dict[tuple, asyncio.Future[SharedConnection]] = {}

    @property
    def connection_count(self) -> int:
        return sum(len(group) for group in self._connections.values())

    @property
    def any_open(self) -> bool:
        """Whether an AMQP connection to RabbitMQ is open now (so a node answers: readiness needs
        no probe of its own)."""
        return any(not shared.connection.is_closed for group in self._connections.values() for shared in group)

    @property
    def closing_count(self) -> int:
        """Publishing connections whose linger ran out and whose close has not finished yet."""
        return len(self._closing)

    def _fresh(self, shared: SharedConnection, now: float) -> bool:
        """Still offered to new sessions (open, and its login recent enough)."""
        if shared.retired or shared.connection.is_closed:
            return False
        if now - shared.opened_at > self.reuse_seconds:
            shared.retired = True  # keeps its sessions; new logins re-authenticate elsewhere
            return False
        return True

    async def acquire(
        self, login: str, passcode: str, vhost: str, client_name: str, *,
        context: Any = None, external: bool = False, publishing: bool = False,
        near: tuple[str, int] | None = None,
    ) -> SharedConnection:
        """A connection with a channel slot reserved for the caller (``release`` gives it back).

        ``publishing``: a slot on one of the login's publishing connections (see the module
        docstring), for a session RabbitMQ has accepted already: no login check of its own.
        ``near``: the node (host, port) of the session's other connection, preferred, so that
        a session depends on one node, not two.

        The first ``min_connections`` sessions of a login each open a
        connection (RabbitMQ handles each connection in its own processes, so
        a few busy clients keep their parallelism); later ones take the least
        loaded connection with room, and open another only when all are full.
        """
        # EXTERNAL logins (the user is a certificate the bridge signed) never share with
        # password logins of the same name: RabbitMQ checked a different credential.
        key = (login, _digest(passcode), vhost, external, publishing)
        checked = publishing
        while True:
            now = self._clock()
            fresh = [shared for shared in self._connections.get(key, ()) if self._fresh(shared, now)]
            roomy = [shared for shared in fresh if shared.reserved < shared.cap]
            idle = [shared for shared in roomy if shared.reserved == 0]  # a publishing one lingering
            if idle and checked:
                shared = min(idle, key=lambda s: s.node != near)
                if shared.linger is not None:
                    shared.linger.cancel()
                    shared.linger = None
                shared.reserved += 1
                return shared
            opening = self._opening.get(key)
            if opening is None and (len(fresh) < self.min_connections or not roomy):
                break  # open one
            if roomy:
                if not checked and not self._cached(key, now):
                    # RabbitMQ accepted these credentials when that connection opened, which
                    # says nothing about now: ask it again (raises its refusal).
                    await self._check(key, login, passcode, vhost, client_name, context, external)
                    checked = True
                    continue  # the connections may have changed meanwhile
                shared = min(roomy, key=lambda s: (s.node != near, s.reserved))  # near, least loaded
                shared.reserved += 1
                return shared
            try:
                await asyncio.shield(opening)  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001 - every waiter gets the opener's answer
                # A copy: the session annotates its error (receipt-id) in place.
                raise copy.copy(exc) from None
        future: asyncio.Future[SharedConnection] = asyncio.get_running_loop().create_future()
        self._opening[key] = future
        try:
            extra = {} if near is None else {"near": near}
            connection, hooks = await self._opener(
                login, passcode, vhost, client_name, context=context, external=external, **extra
            )
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody may be waiting
            raise
        finally:
            self._opening.pop(key, None)
        self._accept(key)
        shared = SharedConnection(key, connection, hooks, self.channels_per_connection, self._clock())
        connection.closing.add_done_callback(shared.lost)
        connection.closing.add_done_callback(self._closed)
        self._connections.setdefault(key, []).append(shared)
        future.set_result(shared)
        shared.reserved += 1  # the opener's slot, whatever the reuse time says
        return shared

    def _closed(self, future: asyncio.Future) -> None:
        code = broker_close_code(future)
        if code is not None and self.on_broker_close is not None:
            self.on_broker_close(code)

    def _cached(self, key: tuple, now: float) -> bool:
        cache = self.login_cache_seconds
        accepted = self._accepted.get(key)
        return cache > 0 and accepted is not None and now - accepted < cache

    def _accept(self, key: tuple) -> None:
        if self.login_cache_seconds > 0:
            now = self._clock()
            if len(self._accepted) > 10_000:  # forget what the cache no longer covers
                self._accepted = {k: t for k, t in self._accepted.items() if now - t < self.login_cache_seconds}
            self._accepted[key] = now

    async def _check(
        self, key: tuple, login: str, passcode: str, vhost: str, client_name: str, context: Any,
        external: bool,
    ) -> None:
        """RabbitMQ's verdict on a login, on a connection of its own (``checker``: the bare AMQP
        handshake, then closed)."""
        self.login_checks += 1
        await self._checker(login, passcode, vhost, f"{client_name} login check", context=context, external=external)
        self._accept(key)

    async def release(self, shared: SharedConnection) -> None:
        """Give back a slot; the last session out closes the connection, or, for a publishing
        connection, leaves it open ``linger_seconds`` for the next one (see ``acquire``)."""
        shared.reserved -= 1
        if shared.reserved > 0:
            return
        if shared.publishing and self.linger_seconds > 0 and not shared.retired and not shared.connection.is_closed:
            shared.linger = asyncio.get_running_loop().call_later(self.linger_seconds, self._close_if_idle, shared)
            return
        await self._close(shared)

    def _close_if_idle(self, shared: SharedConnection) -> None:
        shared.linger = None
        if shared.reserved == 0 and shared in self._connections.get(shared.key, ()):
            task = asyncio.ensure_future(self._close(shared))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _close(self, shared: SharedConnection) -> None:
        shared.retired = True
        group = self._connections.get(shared.key)
        if group is not None and shared in group:
            group.remove(shared)
            if not group:
                del self._connections[shared.key]
        if shared.connection.is_closed:
            return
        try:
            await asyncio.wait_for(shared.connection.close(), timeout=5)
        except Exception as exc:  # noqa: BLE001 - the broker may already be gone
            log.debug("amqp close failed: %s", describe(exc))

    async def close(self) -> None:
        """Close every connection (shutdown, after the sessions have left)."""
        groups, self._connections = self._connections, {}
        for group in groups.values():
            for shared in group:
                shared.retired = True
                if not shared.connection.is_closed:
                    try:
                        await asyncio.wait_for(shared.connection.close(), timeout=5)
                    except Exception as exc:  # noqa: BLE001
                        log.debug("amqp close failed: %s", describe(exc))
