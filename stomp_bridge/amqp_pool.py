"""Shared AMQP connections: many STOMP sessions, one channel each, per connection.

An AMQP connection costs RabbitMQ a file descriptor, an Erlang reader/writer
pair and a TCP socket, and costs the bridge an aiormq connection with its
reader, writer and heart-beat tasks (~100 kB). A channel costs a fraction of
that, so STOMP sessions that log in with the same credentials share
connections, up to ``amqp_channels_per_connection`` channels each; a full
connection makes the next login open another, and a connection closes when
its last session leaves.

Credentials. A connection is shared only by logins whose user, passcode and
vhost equal those RabbitMQ accepted when that connection opened (the passcode
is compared through an HMAC with a per-process key, never kept as a key in
clear). A login that differs in any of them opens its own connection, so
RabbitMQ checks it. RabbitMQ itself checks credentials only when a connection
opens; a shared connection therefore stops taking new sessions once it is
``amqp_login_reuse_seconds`` old, after which the next login opens (and so
authenticates) a new one: a changed password or a deleted user takes effect
for new STOMP logins within that time, while sessions already open continue,
as they would on their own AMQP connection.

Isolation. A channel error (404, 403, 406 …) closes only that channel, so it
ends only its STOMP session; losing or closing the connection ends every
session on it, each with the reason (``connection_forced``, ``Broker
connection lost``). A resource alarm blocks the whole connection, as before.
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

from .amqp_reader import Hooks

log = logging.getLogger(__name__)

_KEY = os.urandom(32)
RABBIT_CHANNEL_MAX = 2047  # RabbitMQ's default channel_max; the broker's tune may lower it


def _digest(passcode: str) -> bytes:
    return hmac.new(_KEY, passcode.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()


class SharedConnection:
    """One AMQP connection and the sessions (channels) on it."""

    __slots__ = (
        "key", "connection", "hooks", "sessions", "reserved", "opened_at", "cap", "channel_max", "_cursor",
        "retired",
    )

    def __init__(self, key: tuple, connection: aiormq.Connection, hooks: Hooks, cap: int, now: float) -> None:
        self.key = key
        self.connection = connection
        self.hooks = hooks
        self.sessions: dict[int, Any] = {}  # channel number -> AmqpSession
        self.reserved = 0  # channels open or being opened
        self.opened_at = now
        self.channel_max = connection.connection_tune.channel_max or RABBIT_CHANNEL_MAX
        self.cap = max(1, min(cap, self.channel_max))  # sessions; a short-lived extra channel may pass it
        self._cursor = 0
        self.retired = False  # lost, closing, or no longer offered to new sessions

    def free_number(self) -> int:
        """A channel number up to channel_max that neither we nor aiormq hold (a closing
        channel keeps its number until RabbitMQ's close-ok); aiormq's own choice can pass
        channel_max, which makes RabbitMQ close the whole connection."""
        taken = self.connection.channels
        limit = self.channel_max
        for step in range(limit):
            number = (self._cursor + step) % limit + 1
            if number not in taken and number not in self.sessions:
                self._cursor = number % limit
                return number
        raise RuntimeError("no free channel number")

    def lost(self, future: asyncio.Future) -> None:
        """The connection closed under its sessions: each ends with the reason."""
        self.retired = True
        if future.cancelled():
            exc: BaseException = ConnectionError("connection closed")
        else:
            exc = future.exception() or ConnectionError("connection closed")
        for session in list(self.sessions.values()):
            session.connection_lost(exc)


def _load(shared: SharedConnection) -> int:
    return shared.reserved


Opener = Callable[..., Any]  # async (login, passcode, vhost, client_name) -> (aiormq.Connection, Hooks)


class AmqpPool:
    """Shared connections by (user, passcode digest, vhost); any node of ``amqp_url`` serves."""

    def __init__(
        self, opener: Opener, *, channels_per_connection: int = 64, min_connections: int = 1,
        reuse_seconds: float = 300.0, auto_ack_window: int = 500, clock: Callable[[], float] = monotonic,
    ) -> None:
        self.min_connections = max(1, min_connections)
        self._opener = opener
        self.auto_ack_window = auto_ack_window  # read by each session (amqp.AmqpSession)
        self.channels_per_connection = max(1, channels_per_connection)
        self.reuse_seconds = reuse_seconds
        self._clock = clock
        self._connections: dict[tuple, list[SharedConnection]] = {}
        self._opening: dict[tuple, asyncio.Future[SharedConnection]] = {}

    @property
    def connection_count(self) -> int:
        return sum(len(group) for group in self._connections.values())

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
        context: Any = None, external: bool = False,
    ) -> SharedConnection:
        """A connection with a channel slot reserved for the caller (``release`` gives it back).

        The first ``min_connections`` sessions of a login each open a
        connection (RabbitMQ handles each connection in its own processes, so
        a few busy clients keep their parallelism); later ones take the least
        loaded connection with room, and open another only when all are full.
        """
        # EXTERNAL logins (the user is a certificate the bridge signed) never share with
        # password logins of the same name: RabbitMQ checked a different credential.
        key = (login, _digest(passcode), vhost, external)
        while True:
            now = self._clock()
            fresh = [shared for shared in self._connections.get(key, ()) if self._fresh(shared, now)]
            roomy = [shared for shared in fresh if shared.reserved < shared.cap]
            opening = self._opening.get(key)
            if opening is None and (len(fresh) < self.min_connections or not roomy):
                break  # open one
            if roomy:
                shared = min(roomy, key=_load)
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
            connection, hooks = await self._opener(
                login, passcode, vhost, client_name, context=context, external=external
            )
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody may be waiting
            raise
        finally:
            self._opening.pop(key, None)
        shared = SharedConnection(key, connection, hooks, self.channels_per_connection, self._clock())
        connection.closing.add_done_callback(shared.lost)
        self._connections.setdefault(key, []).append(shared)
        future.set_result(shared)
        shared.reserved += 1  # the opener's slot, whatever the reuse time says
        return shared

    async def release(self, shared: SharedConnection) -> None:
        """Give back a slot; the last session out closes the connection."""
        shared.reserved -= 1
        if shared.reserved > 0:
            return
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
            log.debug("amqp close failed: %r", exc)

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
                        log.debug("amqp close failed: %r", exc)
