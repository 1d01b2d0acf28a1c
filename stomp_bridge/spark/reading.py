"""Reading through the bridge: offset ranges of a stream, its tail, a drain of a queue.

Stream offsets are RabbitMQ's: every message of a stream queue has one,
consecutive from 0, carried on MESSAGE as ``x-stream-offset``. A range
``[lo, hi)`` is read by subscribing at ``offset=lo`` and stopping at the first
offset ``>= hi - 1``. RabbitMQ starts a subscription at the beginning of the
chunk that holds ``lo``, so offsets below ``lo`` are skipped here; offsets that
retention already removed are simply absent (the read starts at the first one
that still exists).

Data loss: a subscription at ``offset=lo`` whose first message is above ``lo`` means that
retention removed ``lo`` (and what follows, up to that message) before it was read; an ERROR
``NOT_FOUND`` means the stream itself is gone. ``read_range`` hands either to its ``lost``
callback, which fails the task or logs and goes on (option ``failOnDataLoss``).

The tail: STOMP has no "what is the last offset" request. ``probe_tail``
subscribes at ``last`` (RabbitMQ delivers the last chunk written) and reads
until the connection has been quiet for ``idle`` seconds; the highest offset
seen is the tail. A message that arrives while probing may or may not be
counted; either way it exists, so a range ending there can always be read. A
probe that sees nothing reports -1 (empty stream, or a broker slower than
``idle`` to deliver: that only delays reading to the next trigger).
"""

from __future__ import annotations

import time
from itertools import chain
from typing import Callable, Iterator

from stomp_bridge.spark.client import Frame, StompClient, StompClientError, check, describe
from stomp_bridge.spark.partitions import DataLoss

SUBSCRIPTION = "spark"


def _subscribe(client: StompClient, destination: str, prefetch: int, offset: str | None, confirm: bool = False) -> list[Frame]:
    """SUBSCRIBE with ack:client; ``confirm`` waits for its RECEIPT (the consumer exists
    on RabbitMQ), so an idle timer started afterwards measures the broker, not the setup.
    Returns the MESSAGEs that arrived before the RECEIPT."""
    headers = {"destination": destination, "id": SUBSCRIPTION, "ack": "client", "prefetch-count": str(prefetch)}
    if offset is not None:
        headers["x-stream-offset"] = offset
    if confirm:
        headers["receipt"] = "subscribed"
    client.send("SUBSCRIBE", headers)
    early: list[Frame] = []
    while confirm:
        frame = _checked(client.expect())
        if frame.command == "RECEIPT":
            break
        early.append(frame)
    return early


def missing(frame: Frame) -> bool:
    """Is this the broker's ERROR for a stream queue that does not exist?"""
    return frame.command == "ERROR" and "NOT_FOUND" in describe(frame)


class StreamMissing(StompClientError):
    """The stream queue does not exist (RabbitMQ's NOT_FOUND)."""


class DataLossError(StompClientError):
    """Offsets a query needed are gone (failOnDataLoss=true)."""


def exists(client: StompClient, destination: str) -> bool:
    """Does the stream queue exist? (A missing one ends the connection: use a fresh client each time.)"""
    try:
        _subscribe(client, destination, 1, "next", confirm=True)
    except StreamMissing:
        return False
    return True


def _checked(frame: Frame) -> Frame:
    if missing(frame):
        raise StreamMissing(f"the STOMP server sent ERROR: {describe(frame)}")
    return check(frame)


def _ack(client: StompClient, frame: Frame) -> None:
    client.send("ACK", {"id": frame.headers["ack"]})


def _offset(frame: Frame) -> int:
    value = frame.headers.get("x-stream-offset")
    if value is None:
        raise StompClientError(
            f"MESSAGE from {frame.headers.get('destination')} has no x-stream-offset: is the queue a stream?")
    return int(value)


def probe_tail(client: StompClient, destination: str, prefetch: int, idle: float) -> int:
    """The highest offset in the stream (-1 when none was seen within ``idle``).

    A stream written faster than it can be read here never goes quiet: the probe
    then stops after ``10 * idle`` seconds with the highest offset so far."""
    early = _subscribe(client, destination, prefetch, "last", confirm=True)
    tail, unacked = -1, 0
    stop_at = time.monotonic() + 10 * idle
    for frame in chain(early, client.frames(idle)):
        if time.monotonic() > stop_at:
            break
        _checked(frame)
        if frame.command != "MESSAGE":
            continue
        tail = max(tail, _offset(frame))
        unacked += 1
        if unacked * 2 >= prefetch:  # ack:client acks everything so far: credit for the rest of the chunk
            _ack(client, frame)
            unacked = 0
    return tail


def first_offset(client: StompClient, destination: str, idle: float) -> int | None:
    """The first offset still stored in the stream (retention removes from the front), None if
    none was seen within ``idle`` (an empty stream)."""
    early = _subscribe(client, destination, 1, "first", confirm=True)
    for frame in chain(early, client.frames(idle)):
        _checked(frame)
        if frame.command == "MESSAGE":
            return _offset(frame)
    return None


def first_offset_at(client: StompClient, destination: str, timestamp: int, idle: float) -> int | None:
    """The offset of the first message stored at or after ``timestamp`` (unix seconds), None if none yet.

    RabbitMQ resolves a timestamp to the first chunk written at or after it, so
    this is exact to a chunk: a chunk's messages share its timestamp."""
    early = _subscribe(client, destination, 1, f"timestamp={timestamp}", confirm=True)
    for frame in chain(early, client.frames(idle)):
        check(frame)
        if frame.command == "MESSAGE":
            return _offset(frame)
    return None


def read_range(client: StompClient, destination: str, lo: int, hi: int, prefetch: int,
               lost: Callable[[DataLoss], None] | None = None, partition: str | None = None) -> Iterator[Frame]:
    """Every MESSAGE with ``lo <= offset < hi``, in offset order.

    Each offset below ``hi`` existed when the range was planned, so the read ends; a stream that
    delivers nothing for the read timeout raises. Offsets retention removed since (the first
    message is above ``lo``) and a stream deleted since go to ``lost`` (with ``partition`` as its
    name), which raises to fail the task or returns to skip them; without ``lost`` they are skipped."""
    if hi <= lo:
        return
    name = partition or destination
    _subscribe(client, destination, prefetch, f"offset={lo}")
    unacked, last = 0, None
    wait = client.options.read_timeout
    while True:
        frame = client.poll(wait)
        if frame is None:
            raise StompClientError(
                f"reading offsets [{lo}, {hi}) of {destination}: nothing arrived for {wait:g} s after offset "
                f"{last if last is not None else 'none'}; was the stream deleted and created again? "
                "(raise readTimeoutMs if the broker is only slow)")
        if missing(frame) and lost is not None:
            lost(DataLoss(name, lo if last is None else last + 1, None))
            return
        check(frame)
        if frame.command != "MESSAGE":
            continue
        offset = _offset(frame)
        if last is None and offset > lo and lost is not None:
            lost(DataLoss(name, lo, offset))
        last = offset
        unacked += 1
        if unacked * 2 >= prefetch:
            _ack(client, frame)
            unacked = 0
        if offset >= hi:
            return
        if offset >= lo:
            yield frame
        if offset >= hi - 1:
            return


def drain(client: StompClient, destination: str, max_messages: int, prefetch: int, idle: float) -> Iterator[Frame]:
    """Up to ``max_messages`` messages, acknowledged together after the last one was handed on.

    Stops early when the queue stays empty for ``idle`` seconds. Messages are
    acknowledged only when the caller has iterated to the end: a task that
    fails or is cancelled before that closes the connection unacknowledged and
    RabbitMQ requeues them."""
    _subscribe(client, destination, min(prefetch, max_messages), None)
    last: Frame | None = None
    taken = 0
    while taken < max_messages:
        frame = client.poll(idle)
        if frame is None:
            break
        check(frame)
        if frame.command != "MESSAGE":
            continue
        last = frame
        taken += 1
        yield frame
    if last is not None:
        client.send("ACK", {"id": last.headers["ack"], "receipt": "drained"})  # ack:client: all up to here
        while True:
            frame = check(client.expect())
            if frame.command == "RECEIPT":
                return
