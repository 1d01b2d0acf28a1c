"""Which deliveries the client still has to acknowledge, and what an ACK or NACK settles.

The AMQP channel numbers its deliveries; the client names one in ACK/NACK by
the MESSAGE's ``ack`` (1.2) or ``message-id`` (1.0, 1.1) header,
``<consumer tag>@@<session>@@<delivery tag>``. With ``ack:client`` an ACK is
cumulative: it settles that delivery and every earlier unsettled one on the
channel (AMQP ``multiple``, as the plugin sends it); with ``client-individual``
only that one. A delivery tag that is not outstanding for that subscription is
what RabbitMQ would refuse: the same PRECONDITION_FAILED, answered before the
channel would close.

No I/O: the session sends the basic.ack/basic.nack this module decides.
"""

from __future__ import annotations

from collections.abc import Mapping

from stomp_bridge.protocol import headers as hdr
from stomp_bridge.protocol.errors import FrameRejected, UnknownDelivery
from stomp_bridge.core.subscriptions import StreamPosition, Subscription


def ack_target(headers: Mapping[str, str], command: str, version: str, session_id: str) -> tuple[str, int]:
    """(consumer tag, delivery tag) an ACK/NACK names, or the plugin's ERROR for a bad header."""
    # The usual ACK, one per delivery: a well-formed id of this session, checked inline
    # (the same as parse_message_id's checks, which name what is wrong otherwise).
    value = headers.get("id" if version == "1.2" else "message-id")
    if value is not None:
        parts = value.split(hdr.MESSAGE_ID_SEPARATOR)
        if len(parts) == 3 and parts[1] == session_id:
            tag = parts[2]
            if tag.isdigit() and tag.isascii():
                return parts[0], int(tag)
    return ack_target_checked(headers, command, version, session_id)


def ack_target_checked(headers: Mapping[str, str], command: str, version: str, session_id: str) -> tuple[str, int]:
    """``ack_target`` check by check, in the plugin's order: the ERROR that names what is wrong."""
    header = hdr.ack_header_name(version)
    value = headers.get(header)
    if value is None:
        raise FrameRejected("Missing header", f'"{command}" must include the "{header}" header\n')
    consumer_tag, session, delivery_tag = hdr.parse_message_id(value, command, header)
    if session != session_id:
        raise FrameRejected("Invalid header", f'"{command}" must include a valid "{header}" header\n')
    return consumer_tag, delivery_tag


class Unacked:
    """The client's outstanding deliveries, by delivery tag, in delivery order."""

    __slots__ = ("by_tag", "moved", "marked")

    def __init__(self) -> None:
        self.by_tag: dict[int, Subscription] = {}
        self.moved: list[StreamPosition] = []  # named stream subscriptions an ACK/NACK moved
        # Deliveries that are, or may be, a stream's, where a NACK of one would be a connection
        # error (``streams.py``): delivery tag -> (queue, is a stream: None not known). None
        # until the first.
        self.marked: dict[int, tuple[str, bool | None]] | None = None

    def __len__(self) -> int:
        return len(self.by_tag)

    def delivered(self, delivery_tag: int, sub: Subscription) -> None:
        """A delivery ``sub``'s client must settle."""
        self.by_tag[delivery_tag] = sub
        sub.unacked += 1

    def settle(self, consumer_tag: str, delivery_tag: int) -> bool:
        """Forget what an ACK/NACK of ``delivery_tag`` settles; True if it is cumulative (AMQP
        ``multiple``: that delivery and every earlier one, whichever subscription had it)."""
        unacked = self.by_tag
        sub = unacked.get(delivery_tag)
        if sub is None or sub.consumer_tag != consumer_tag:
            # What RabbitMQ answers to an ack for a tag it never delivered (4.4: commands.settle).
            raise UnknownDelivery(delivery_tag)
        marked = self.marked
        if sub.multiple:
            for tag in [t for t in unacked if t <= delivery_tag]:
                settled = unacked.pop(tag)
                settled.unacked -= 1
                if settled.position is not None:
                    settled.position.settled(tag, self.moved)
                if marked:
                    marked.pop(tag, None)
            return True
        del unacked[delivery_tag]
        sub.unacked -= 1
        if sub.position is not None:
            sub.position.settled(delivery_tag, self.moved)
        if marked:
            marked.pop(delivery_tag, None)
        return False
