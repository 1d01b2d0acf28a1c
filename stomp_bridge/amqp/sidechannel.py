"""Short-lived channels for what may fail with a channel error: a peek at a queue, does it
exist, is it a stream.

RabbitMQ answers a passive declare of a missing queue (and the like) by closing the channel it
was sent on; a session's own channel must stay open (the plugin's session goes on), so these
go on a lean channel of their own on the session's connection, opened without publisher
confirms and closed at once (which also hands a peeked message back to the queue). Nothing here
may be answered with a connection error, which would close the connection other sessions
share: no basic.get (a stream refuses it so), no auto-ack consume.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiormq.exceptions as amqp_exc

from stomp_bridge.amqp.errors import broker_error
from stomp_bridge.amqp.delivery import Delivery
from stomp_bridge.amqp.lean import LeanChannel
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


PEEK_TAG = "stomp-bridge.peek"
PEEK_TIMEOUT = 5.0  # seconds for the message a passive declare counted to arrive


async def peek(shared: SharedConnection, queue: str) -> tuple[dict[str, Any], bytes] | None:
    """The first message of ``queue`` left in place (properties, body), or None if it is empty
    or missing.

    For the bridge's own one-message queues (a retained message, a stored offset), whose names
    a client may also declare, as a stream even: a stream refuses basic.get with a connection
    error. So no basic.get: a passive declare counts the messages (a stream counts none), and
    a queue that holds some is read by a consumer with one message of prefetch, which any queue
    accepts; closing the channel hands the message back."""
    async with side_channel(shared) as channel:
        arrived: asyncio.Future[Delivery] = asyncio.get_running_loop().create_future()
        channel.hooks.on_delivery = lambda delivery: arrived.done() or arrived.set_result(delivery)
        try:
            ok = await channel.queue_declare(queue, passive=True)
            if not ok.message_count:
                return None
            await channel.basic_qos(prefetch_count=1)
            await channel.basic_consume(queue, no_ack=False, consumer_tag=PEEK_TAG)
            delivery = await asyncio.wait_for(arrived, PEEK_TIMEOUT)
        except amqp_exc.ChannelNotFoundEntity:
            return None
        except asyncio.TimeoutError:  # taken meanwhile (or no longer a queue that delivers at once)
            log.info("a peek found no message where RabbitMQ counted one", extra={"queue": queue})
            return None
        except (amqp_exc.AMQPError, ConnectionError) as exc:
            raise broker_error(exc) from exc
    return delivery.properties, delivery.body


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


PROBE_TAG = "stomp-bridge.is-stream"  # the one consumer of a probe's own channel


async def is_stream(shared: SharedConnection, queue: str) -> bool | None:
    """Whether ``queue`` is a stream, asked so that no answer is a connection error; None: it
    holds messages (a classic or quorum queue, or a stream that says so: 3.10.8's do, now and
    then), which this cannot tell without taking one (``channel.is_stream``, exact).

    AMQP 0-9-1 does not say a queue's type, and the questions a stream refuses hardest
    (basic.get, an auto-ack consume) it refuses with a connection error, which would end every
    session on the shared connection. These two it answers on the channel: a passive declare
    (a stream counts no messages, as a rule), then, for a queue that holds none, a consume with
    manual acks and no prefetch, which only a stream refuses, with a channel error (406
    "consumer prefetch count is not set"). A message that reaches the empty queue in between
    goes back to it when the channel closes (flagged redelivered)."""
    async with side_channel(shared) as channel:
        try:
            ok = await channel.queue_declare(queue, passive=True)
            if ok.message_count > 0:
                return None
            await channel.basic_consume(queue, no_ack=False, consumer_tag=PROBE_TAG)
        except amqp_exc.ChannelPreconditionFailed as exc:
            if "prefetch count is not set" in str(exc):
                return True
            raise broker_error(exc) from exc
        except (amqp_exc.AMQPError, ConnectionError) as exc:
            raise broker_error(exc) from exc
    return False


async def discard(shared: SharedConnection, queue: str) -> None:
    """Delete ``queue``, best effort (after a failed SUBSCRIBE, as the plugin's
    maybe_clean_up_queue: the error closed the session's own channel)."""
    try:
        async with side_channel(shared) as channel:
            await channel.queue_delete(queue)
    except Exception as exc:  # noqa: BLE001 - nothing to tell the client, whose ERROR is out
        log.debug("could not delete queue %r after a failed subscribe: %r", queue, exc)
