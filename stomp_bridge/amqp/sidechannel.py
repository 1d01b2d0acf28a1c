"""Short-lived channels for what may fail with NOT_FOUND: a peek at a queue, does it exist.

RabbitMQ answers a basic.get or a passive declare of a missing queue by closing the channel
it was sent on; a session's own channel must stay open (the plugin's session goes on), so
these go on a lean channel of their own on the session's connection, opened without publisher
confirms and closed at once (which also hands a peeked message back to the queue).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiormq.exceptions as amqp_exc

from stomp_bridge.amqp.errors import broker_error
from stomp_bridge.amqp.lean import GetResult, LeanChannel
from stomp_bridge.amqp.pool import SharedConnection

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def side_channel(shared: SharedConnection) -> AsyncIterator[LeanChannel]:
    """A channel for one question, closed after it and its number given back."""
    try:
        channel = await LeanChannel.open_on(shared, confirms=False)
    except (amqp_exc.AMQPError, ConnectionError, RuntimeError) as exc:
        raise broker_error(exc) from exc
    try:
        yield channel
    finally:
        try:
            await channel.close()
        finally:
            shared.hooks.channels.pop(channel.number, None)
            if shared.sessions.get(channel.number) is channel:
                del shared.sessions[channel.number]


async def peek(shared: SharedConnection, queue: str) -> tuple[dict[str, Any], bytes] | None:
    """The first message of ``queue`` left in place (properties, body), or None if it is empty
    or missing."""
    async with side_channel(shared) as channel:
        try:
            message = await channel.basic_get(queue, no_ack=False)
        except amqp_exc.ChannelNotFoundEntity:
            return None
        except (amqp_exc.AMQPError, ConnectionError) as exc:
            raise broker_error(exc) from exc
    if not isinstance(message, GetResult):
        return None
    return message.properties, message.body


async def queue_exists(shared: SharedConnection, queue: str) -> bool:
    """Whether ``queue`` exists now (a passive declare)."""
    async with side_channel(shared) as channel:
        try:
            await channel.queue_declare(queue, passive=True)
        except amqp_exc.ChannelNotFoundEntity:
            return False
        except (amqp_exc.AMQPError, ConnectionError) as exc:
            raise broker_error(exc) from exc
    return True


async def discard(shared: SharedConnection, queue: str) -> None:
    """Delete ``queue``, best effort (after a failed SUBSCRIBE, as the plugin's
    maybe_clean_up_queue: the error closed the session's own channel)."""
    try:
        async with side_channel(shared) as channel:
            await channel.queue_delete(queue)
    except Exception as exc:  # noqa: BLE001 - nothing to tell the client, whose ERROR is out
        log.debug("could not delete queue %r after a failed subscribe: %r", queue, exc)
