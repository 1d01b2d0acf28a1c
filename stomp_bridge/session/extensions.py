"""Apollo and Artemis features that need I/O, kept out of the session's handlers.

The session calls in here only when a frame uses an extension (a header or a
destination form the plugin does not know), so a client that uses none of
them runs exactly the plugin-compatible code. The rules themselves are pure
(``protocol/features.py``, ``protocol/selectors.py``); this module applies
them with the session's AMQP channel, reached through the small public
interface :class:`~.view.SessionView`. Nothing is stored in the bridge: a
selector drops what does not match by acknowledging it, a browse hands
messages back to RabbitMQ, durable subscriptions are RabbitMQ queues.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol import features
from stomp_bridge.protocol import headers as hdr
from stomp_bridge.protocol.errors import FrameRejected
from stomp_bridge.protocol.frames import Frame
from stomp_bridge.protocol.selectors import compile_selector
from stomp_bridge.session.subscriptions import Subscription
from stomp_bridge.session.view import SessionView


def destinations(session: SessionView, frame: Frame) -> list[dest.Destination]:
    """A destination the plugin's parser refused: ``/dsub/<name>`` or a composite; otherwise
    the plugin's own error."""
    value = frame.headers["destination"]
    found = features.parse_extended(value, session.client_id, session.session_id)
    if found is None:
        dest.parse_destination(value)  # raises the plugin's InvalidDestination
        raise AssertionError("unreachable: the destination parsed the second time")
    return found


# -- SEND ------------------------------------------------------------------------------------


def set_expiration(props: dict[str, Any], headers: dict[str, str]) -> bool:
    """Apollo's ``expires``/``ttl`` as AMQP per-message expiration; False if already expired.

    RabbitMQ discards an expired message instead of delivering it (at the head
    of a classic queue, on any read of a quorum queue); the message also keeps
    an ``expires`` header with its absolute expiry, as Apollo adds one for ``ttl``.
    """
    now = int(time.time() * 1000)
    amqp_expiration, expires = features.expiration(headers, now)
    if expires is None:
        return True
    if expires <= now:
        return False
    if amqp_expiration is not None:
        props["expiration"] = amqp_expiration
    if "expires" not in headers:
        props["headers"]["expires"] = str(expires)
    return True


async def retain(session: SessionView, target: dest.SendTarget, props: dict[str, Any], body: bytes,
                 action: str) -> None:
    """Apollo retained messages, kept in RabbitMQ: one ``x-max-length: 1`` queue per topic holds
    the last ``retain:set`` message; ``retain:remove`` deletes it. The message itself is also
    published to the topic as usual."""
    amqp = session.channel()
    queue = features.retained_queue(target.exchange, target.routing_key)
    if action == "remove":
        await amqp.delete_queue(queue)
        return
    await amqp.declare_queue(queue, durable=True, arguments=dict(features.RETAINED_QUEUE_ARGUMENTS))
    await amqp.open_publisher()
    session.ledger.published(amqp.publish("", queue, props, body))


async def copy_retained(session: SessionView, queue: str, binding: tuple[str, str]) -> None:
    """A new topic subscription gets the topic's retained message first: a copy is published into
    its own queue before the queue is bound (read on a side channel that hands it back)."""
    amqp = session.channel()
    found = await amqp.peek(features.retained_queue(*binding))
    if found is not None:
        props, body = found
        await amqp.open_publisher()
        session.ledger.published(amqp.publish("", queue, props, body))


def temp_topic_reply_to(session: SessionView, reply_to: str) -> str | None:
    return features.temp_topic_reply_to(reply_to, session.session_id)


# -- SUBSCRIBE -------------------------------------------------------------------------------


def subscribe_headers(headers: dict[str, str]) -> dict[str, str]:
    """Other brokers' flow-control and sequence headers as the plugin's (pure, see features)."""
    return features.translate_subscribe_headers(headers)


def delivery_filter(
    session: SessionView, headers: dict[str, str], targets: list[dest.Destination]
) -> Callable[[dict[str, str]], bool] | None:
    """The per-delivery hook of a SUBSCRIBE, decided once here: None (the usual case) unless it
    has a ``selector`` or ``include-seq``, or ``redeliveries_header`` is set.

    A malformed selector, or one on a shared queue, is an ERROR now, never a
    failure at delivery time.
    """
    text = headers.get("selector")
    seq_name = features.sequence_header(headers)
    redeliveries = session.settings.redeliveries_header
    if text is None and seq_name is None and not redeliveries:
        return None
    match = None
    if text is not None:
        match = compile_selector(text)
        for target in targets:
            features.check_selector_destination(target)
    if seq_name is None and not redeliveries:
        return match

    def annotate(out: dict[str, str]) -> bool:
        if seq_name is not None:
            offset = out.get("x-stream-offset")
            if offset is not None:
                out[seq_name] = offset
        if redeliveries and out["redelivered"] == "true":
            # Quorum queues count earlier deliveries: x-acquired-count on 4.3 (whose
            # x-delivery-count counts only failed ones), x-delivery-count before; a classic
            # queue only says "at least once before".
            out[redeliveries] = out.get("x-acquired-count") or out.get("x-delivery-count", "1")
        return match is None or match(out)

    return annotate


def adjust_plan(
    session: SessionView, plan: dest.SubscribePlan, destination: dest.Destination, headers: dict[str, str]
) -> dest.SubscribePlan:
    """Artemis durable subscription names and Apollo exclusive subscriptions change the queue."""
    if features.durable_subscription_name(headers) is not None:
        plan = features.artemis_durable_plan(plan, destination, headers, session.client_id)
    if session.settings.apollo_exclusive and features.is_true(headers, "exclusive"):
        plan = features.exclusive_plan(plan)
    return plan


def queue_to_delete(session: SessionView, headers: dict[str, str]) -> str | None:
    return features.artemis_queue_to_delete(headers, session.client_id)


async def delete_durable_subscription(session: SessionView, headers: dict[str, str]) -> bool:
    """UNSUBSCRIBE with ``client-id`` and a durable subscription name but no live subscription:
    Artemis deletes the durable subscription all the same (its queue, here)."""
    if features.durable_subscription_name(headers) is None or not session.client_id:
        return False
    queue = features.artemis_queue_to_delete(headers, session.client_id)
    if queue is None:
        return False
    await session.channel().delete_queue(queue)
    return True


def drop(session: SessionView, sub: Subscription, delivery_tag: int) -> None:
    """A delivery the subscription's selector refused: acknowledged, so RabbitMQ forgets it (the
    queue is the subscription's own) and the prefetch window moves on."""
    amqp = session.amqp
    if sub.ack and amqp is not None:
        amqp.ack(delivery_tag)
        amqp.flush_nowait()


async def browse(session: SessionView, frame: Frame, tag: str, destination: dest.Destination) -> None:
    """Apollo's ``browser:true`` on a classic or quorum queue.

    RabbitMQ has no non-destructive read of a queue, so the bridge takes each
    message with ``basic.get`` (no auto-ack), sends it as a MESSAGE, and when
    the queue is empty hands every one back with ``basic.nack`` (requeue)
    and sends the ``browser:end`` MESSAGE. The messages keep their order but
    come back flagged ``redelivered`` (and quorum queues count a delivery),
    and while the browse runs other consumers do not see them. Streams are
    read non-destructively by an ordinary subscription with ``x-stream-offset``.
    """
    headers = frame.headers
    if headers.get("browser-end") == "false":
        raise FrameRejected(
            "Unsupported browser-end",
            "browser-end:false asks to keep browsing new messages, which a RabbitMQ queue "
            "cannot do without consuming them. Use a stream and an ordinary subscription "
            "with x-stream-offset instead.\n",
        )
    queue = features.browse_queue(destination)
    text = headers.get("selector")
    match = compile_selector(text) if text is not None else None  # browsing takes nothing
    session.subscriptions[tag] = Subscription(tag, destination, queue, ack=False, multiple=False, consuming=False)
    amqp = session.channel()
    taken: list[int] = []
    try:
        while not session.closed:
            got = await amqp.get(queue)
            if got is None:
                break
            _, delivery_tag, redelivered, exchange, routing_key, properties, body = got
            taken.append(delivery_tag)
            out = hdr.message_headers(
                tag, session.session_id, delivery_tag, exchange, routing_key, redelivered, properties
            )
            if match is None or match(out):
                session.deliver(out, body)
                await session.writable()
    finally:
        for delivery_tag in taken:
            amqp.nack(delivery_tag, False, True)
        await session.flush()
    end = {"subscription": hdr.subscription_id(tag)} if hdr.has_subscription_id(tag) else {}
    end["destination"] = destination.header
    end["message-id"] = f"{tag}@@{session.session_id}@@browse-end"
    end["browser"] = "end"
    session.deliver(end, b"")
