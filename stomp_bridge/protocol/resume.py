"""Named stream subscriptions that resume by themselves: pure rules (no I/O).

RabbitMQ's stream clients keep a named consumer's offset in the stream itself (the stream
protocol's ``store_offset``/``query_offset``), which AMQP 0-9-1 cannot reach. The bridge keeps
the same thing in RabbitMQ with what AMQP has: one small durable queue per (stream, name),
``x-max-length: 1``, whose one message is the last offset the subscription settled (a newer
one pushes the older out, as Apollo's retained messages do here). A SUBSCRIBE with the same
name, on any bridge, reads it (and leaves it in place) and starts after it. Nothing is kept
in the bridge between connections.

Why a queue and not an offsets stream: a stream can only be read from an offset forwards, so
finding one name's latest entry means reading the whole history (RabbitMQ 3.13's stream
filtering would narrow it, but not on 3.10, and still reads every chunk of that name); a
last-value queue answers with one ``basic.get``, costs one queue per name, and a stored offset
is one publish that RabbitMQ confirms.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol.errors import FrameRejected
from stomp_bridge.protocol.features import durable_subscription_name

NAME_HEADER = "x-stream-consumer-name"  # RabbitMQ's stream clients call it the consumer's name
OFFSET_QUEUE_PREFIX = "stomp-bridge.offset."
OFFSET_QUEUE_ARGUMENTS = {"x-max-length": 1}
STORE_INTERVAL = 1.0  # seconds: ack:auto subscriptions store their offset at most this often
STREAM_KINDS = (dest.QUEUE, dest.AMQ_QUEUE)


def consumer_name(headers: Mapping[str, str], client_id: str | None, destination: dest.Destination,
                  composite: bool) -> str | None:
    """The name of a named stream subscription, or None for an ordinary SUBSCRIBE:
    ``x-stream-consumer-name``, or Artemis' durable subscription name (``<client-id>.<name>``
    with a client-id, as Artemis names its durable queues) on a ``/queue/`` or ``/amq/queue/``
    destination (on a topic it names a durable queue instead, ``features.artemis_durable_plan``)."""
    name = headers.get(NAME_HEADER)
    if name is None and destination.kind in STREAM_KINDS:
        durable = durable_subscription_name(headers)
        if durable is not None:
            name = f"{client_id}.{durable}" if client_id else durable
    if name is None:
        return None
    if not name:
        raise FrameRejected("Invalid header", f"'{NAME_HEADER}' must not be empty\n")
    if composite or destination.kind not in STREAM_KINDS:
        raise FrameRejected(
            "Invalid header",
            f"A named stream subscription ('{NAME_HEADER}' or a durable subscription name on a queue) "
            f"reads one stream: subscribe to /amq/queue/<stream> or /queue/<stream>, not "
            f"'{destination.header}'.\n",
        )
    return name


def offset_queue(stream: str, name: str) -> str:
    """The queue that keeps the offset of subscription ``name`` on ``stream`` (hashed: an AMQP
    queue name has at most 255 bytes, and no separator could keep every pair apart)."""
    raw = stream.encode("utf-8") + b"\x00" + name.encode("utf-8")
    return OFFSET_QUEUE_PREFIX + dest.base64url(hashlib.sha256(raw).digest()[:18])


def offset_queue_declare(queue: str) -> dest.QueueDeclare:
    return dest.QueueDeclare(queue, durable=True, auto_delete=False, exclusive=False,
                             arguments=dict(OFFSET_QUEUE_ARGUMENTS))


def stored_offset(found: tuple[dict[str, Any], bytes] | None) -> int | None:
    """The offset an offset queue's message holds (None: nothing stored, or not a number)."""
    if found is None:
        return None
    text = found[1].decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def resume_headers(headers: dict[str, str], stored: int | None) -> dict[str, str]:
    """SUBSCRIBE's headers with the start the stored offset says: right after it. With nothing
    stored, the SUBSCRIBE's own ``x-stream-offset`` (RabbitMQ's ``next`` without one)."""
    if stored is None:
        return headers
    return {**headers, "x-stream-offset": f"offset={stored + 1}"}


def offset_message(stream: str, name: str, offset: int) -> tuple[dict[str, Any], bytes]:
    """(properties, body) of a stored offset: persistent, the body the offset in ASCII, and
    headers that tell an operator whose it is."""
    return {"delivery_mode": 2, "headers": {"stream": stream, NAME_HEADER: name}}, str(offset).encode()
