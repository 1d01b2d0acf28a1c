"""Named stream subscriptions: where one starts, and when its offset is stored (no I/O).

The rules and the offset queue are ``protocol/resume.py``'s. What moves the stored offset:

* ``ack:client`` / ``client-individual``: an ACK or NACK that settles the subscription's
  oldest unsettled deliveries stores the offset below the first one still unsettled, as one
  publish numbered like a SEND's, so the ACK's RECEIPT comes once RabbitMQ confirmed it;
* ``ack:auto``: each MESSAGE counts once written, and the newest offset is stored at most once
  per ``STORE_INTERVAL`` (a timer), and at UNSUBSCRIBE and DISCONNECT.

So a crash (the bridge, the client or its connection) between delivery and ACK delivers again,
to the next SUBSCRIBE of the same name, every message from the first one not settled (or,
with ack:auto, not stored: at most the last second's) on; none that an ACK with a RECEIPT
settled.
"""

from __future__ import annotations

from stomp_bridge.core.context import Context, Steps
from stomp_bridge.core.plans import Declare, Peek, SetTimer
from stomp_bridge.core.subscriptions import StreamPosition, Subscription
from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol import resume

TIMER_PREFIX = "offset:"


def open_position(core: Context, destination: dest.Destination, name: str) -> Steps:
    """SUBSCRIBE with a name: make sure its offset queue exists, as the bridge makes it, then read
    the stored offset (left in place); the position the subscription starts from. Declared
    first: a queue of that name that is not the bridge's (a client's, a stream even) is then
    RabbitMQ's refusal of this SUBSCRIBE on its own channel, before anything reads it."""
    stream = destination.name
    queue = resume.offset_queue(stream, name)
    yield Declare(resume.offset_queue_declare(queue))
    stored = resume.stored_offset((yield Peek(queue)))
    return StreamPosition(queue, stream, name, stored=-1 if stored is None else stored)


def start_headers(headers: dict[str, str], position: StreamPosition) -> dict[str, str]:
    return resume.resume_headers(headers, position.stored if position.stored >= 0 else None)


def delivered(core: Context, sub: Subscription, delivery_tag: int, headers: dict[str, str]) -> None:
    """A MESSAGE of a named subscription: its offset noted (client acks), or, with ack:auto,
    counted and stored at the next tick."""
    position = sub.position
    assert position is not None
    text = headers.get("x-stream-offset")
    if text is None or not text.isdigit():
        return  # not a stream after all: nothing to store
    offset = int(text)
    if sub.ack:
        position.unsettled[delivery_tag] = offset
        return
    if offset > position.settled_max:
        position.settled_max = offset
    if not position.due:
        position.due = True
        core.spawn(_tick(sub.consumer_tag))


def _tick(consumer_tag: str) -> Steps:
    yield SetTimer(TIMER_PREFIX + consumer_tag, resume.STORE_INTERVAL)


def timer_fired(core: Context, name: str) -> None:
    sub = core.subscriptions.get(name[len(TIMER_PREFIX):])
    if sub is not None and sub.position is not None:
        sub.position.due = False
        store(core, sub.position)


def settled(core: Context) -> None:
    """After an ACK or NACK: store the offsets it moved."""
    moved = core.unacked.moved
    for position in moved:
        position.moved = False
        store(core, position)
    moved.clear()


def store(core: Context, position: StreamPosition) -> None:
    """Publish the committed offset, if it moved since the last one stored."""
    offset = position.committed()
    if offset <= position.stored:
        return
    props, body = resume.offset_message(position.stream, position.name, offset)
    core.publish("", position.queue, props, body, False)
    position.stored = offset


def store_all(core: Context) -> bool:
    """DISCONNECT: every named subscription's offset, as far as it got; True if any was published."""
    before = core.ledger.last
    for tag, sub in core.subscriptions.items():
        if sub.position is not None and tag == sub.consumer_tag:
            store(core, sub.position)
    return core.ledger.last != before
