"""A STOMP subscription and the AMQP consumer tags that feed it.

One :class:`Subscription` per SUBSCRIBE; the session maps every consumer tag
that delivers to it (the main one, a composite destination's parts, a windowed
subscription's extra windows) to the same object, so every MESSAGE carries the
subscription's own id and ACKs work unchanged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol import headers as hdr

# The bridge's own consumer tags (a composite destination's later parts, a windowed
# subscription's extra windows) start with a letter that no client's tag starts with: every
# client tag is "T_<id>" or "Q_<destination>" (``headers.subscribe_consumer_tag``). RabbitMQ
# answers a consumer tag used twice on a channel with a connection error (530 NOT_ALLOWED),
# which would end every session sharing the connection, so no client id may produce one.
WINDOW_TAG_KIND = "W"
COMPOSITE_TAG_KIND = "P"
CLIENT_TAG_PREFIXES = (hdr.INTERNAL_TAG_PREFIX, hdr.QUEUE_TAG_PREFIX)
MAX_TAG_BYTES = 255  # a consumer tag is an AMQP short string


@dataclass(slots=True)
class Subscription:
    consumer_tag: str  # T_<id>, Q_<destination>, or T_/temp-queue/<id> (plugin naming)
    destination: dest.Destination | None  # None for the automatic temp-queue subscription
    queue: str
    ack: bool  # the client acknowledges (ack:client or client-individual)
    multiple: bool  # ack:client: an ACK settles every earlier delivery too
    # Extensions (extensions.py); the defaults cost nothing on the delivery path.
    # ``filter`` sees (and may add to) each MESSAGE's headers; False drops the delivery.
    filter: Callable[[dict[str, str]], bool] | None = None
    extra_tags: tuple[str, ...] = ()  # more consumers: a composite SUBSCRIBE's, or a window's
    consuming: bool = True  # False for a finished classic-queue browse
    unacked: int = 0  # deliveries the client has not settled yet (ack subscriptions)
    # ack:client/client-individual without prefetch-count: consumed in windows of
    # client_ack_window deliveries, one consumer more on the queue each time the client holds
    # all the windows and keeps reading (0: not windowed). See Session._add_window.
    window: int = 0
    growing: bool = False
    arguments: dict[str, Any] | None = None  # the consume arguments, for more windows
    # MESSAGEs that arrived before the SUBSCRIBE's RECEIPT went out (None: none held); the
    # plugin answers SUBSCRIBE before it handles any delivery, and clients wait for the RECEIPT.
    held: list[bytes] | None = None
    # resubscribe_on_cancel: what SUBSCRIBE asked for, to ask again when RabbitMQ cancels
    # (the destinations, SUBSCRIBE's headers, the prefetch); None otherwise.
    again: tuple[list[dest.Destination], dict[str, str], int] | None = None
    resubscribing: bool = False  # a resubscribe runs (``subscribe.resubscribe``)
    watch_stream: bool = False  # its deliveries are looked at for a stream's (``core/streams.py``)
    shared: bool = False  # its MESSAGEs come from a queue shared with others (``core/fanout.py``)
    # a shared subscription's (version, SharedMessage.head_parts): its heads' common bytes
    head_parts: tuple[str, tuple[bytes, bytes]] | None = None
    # A named stream subscription's offsets (``core/resume.py``); None for every other one.
    position: StreamPosition | None = None

    def window_full(self) -> bool:
        """The client holds every window's deliveries: time for one consumer more."""
        return self.unacked >= self.window * (1 + len(self.extra_tags))


def part_tag(consumer_tag: str, index: int) -> str:
    """The consumer tag of part ``index`` of a composite destination (part 0: the subscription's)."""
    return consumer_tag if index == 0 else bridge_tag(COMPOSITE_TAG_KIND, index, consumer_tag)


def window_tag(consumer_tag: str, number: int) -> str:
    """The consumer tag of a windowed subscription's window ``number`` (1 for the first extra)."""
    return bridge_tag(WINDOW_TAG_KIND, number, consumer_tag)


def bridge_tag(kind: str, number: int, consumer_tag: str) -> str:
    """``<kind><number>_<the subscription's tag>``: distinct from every client tag (another first
    letter) and from each other (kind, number and the whole tag, read up to the first "_"). A tag
    that would not fit a short string has the subscription's tag hashed instead (``#`` marks it)."""
    tag = f"{kind}{number}_{consumer_tag}"
    if len(tag.encode("utf-8")) <= MAX_TAG_BYTES:
        return tag
    digest = hashlib.sha256(consumer_tag.encode("utf-8")).hexdigest()
    return f"{kind}{number}#{digest}"


@dataclass(slots=True)
class StreamPosition:
    """Where a named stream subscription is (``protocol/resume.py``): the offsets delivered and
    not settled yet, and the one last stored in its offset queue."""

    queue: str  # the offset queue
    stream: str
    name: str
    stored: int = -1  # the offset last stored (-1: none)
    unsettled: dict[int, int] = field(default_factory=dict)  # delivery tag -> offset, in delivery order
    settled_max: int = -1  # the highest offset settled (ack:auto: delivered)
    due: bool = False  # ack:auto: a store waits for its timer
    moved: bool = False  # settled more since the last look (listed in Unacked.moved)

    def settled(self, delivery_tag: int, moved: list[StreamPosition]) -> None:
        offset = self.unsettled.pop(delivery_tag, None)
        if offset is not None and offset > self.settled_max:
            self.settled_max = offset
        if not self.moved:
            self.moved = True
            moved.append(self)

    def committed(self) -> int:
        """The offset up to which every delivery was settled: a resume starts after it. A
        delivery settled after an unsettled one (client-individual) does not count yet."""
        unsettled = self.unsettled
        if not unsettled:
            return self.settled_max
        return min(self.settled_max, next(iter(unsettled.values())) - 1)
