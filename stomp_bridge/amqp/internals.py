"""Every use of aiormq's and pamqp's internals, in one place, pinned to the versions tested.

The bridge's lean paths (see ``channel.py`` and ``reader.py``) go around aiormq's generic
API, which costs a lock, a future and a task per message. Doing so touches names that are
not aiormq's or pamqp's public API: a channel's ``_get_frame``/``_read_content``/
``_on_deliver_frame``/``_on_confirm_frame``, a connection's ``write_queue``, the
``FrameReceiver`` class a connection instantiates, the stream's ``_transport``,
``ChannelFrame``, and pamqp's ``encode.table_integer``. No other module of the bridge names
them (``tests/unit/test_layers.py`` checks it); ``tests/unit/test_amqp_internals.py`` checks
that the installed aiormq and pamqp still have each of them, with the signatures used here,
and fails with the name of what changed when an upgrade moves one.

Nothing here changes aiormq or pamqp at import time. :func:`install` does, once, when a
bridge starts (``BridgeServer.start``, which the in-process runners use too).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import Awaitable, Callable
from typing import Any

import aiormq
import aiormq.channel
import aiormq.connection as aiormq_connection
import aiormq.exceptions as amqp_exc
import pamqp.encode
from aiormq.abc import ChannelFrame
from pamqp import commands as spec
from pamqp.header import ContentHeader

# The versions this module was written against (lower bound inclusive, upper exclusive):
# aiormq 7.2.4 and pamqp 4.0.1 are the ones tested. A version outside these ranges fails
# tests/unit/test_amqp_internals.py until someone has checked every name used here.
AIORMQ_VERSIONS = ((7, 2), (8, 0))
PAMQP_VERSIONS = ((4, 0), (5, 0))

# The class aiormq's connection instantiates to read frames; the bulk reader (reader.py)
# subclasses it, using its ``reader``, ``loop`` and ``started`` attributes and replacing
# ``get_frame``.
FrameReceiver = aiormq_connection.FrameReceiver


def version_of(package: str) -> tuple[int, ...]:
    """The installed version of ``package`` as integers (``7.2.4`` -> ``(7, 2, 4)``)."""
    text = importlib.metadata.version(package)
    numbers = []
    for part in text.split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


# -- the field-table integers (process-wide, installed by install()) -------------------------

def table_integer_as_long(value: int) -> bytes:
    """Encode every integer in an AMQP field table as a signed 64-bit long.

    pamqp picks the smallest type (``x-max-length: 10`` as a byte), but
    RabbitMQ compares argument *types* when a queue is declared again, and the
    STOMP plugin sends longs: a queue the plugin declared would otherwise be
    "inequivalent" when the bridge declares it, and the other way round.
    """
    if -(1 << 63) <= value < (1 << 63):
        return b"l" + pamqp.encode.long_long_int(value)
    raise TypeError(f"Unsupported numeric value: {value}")


_receiver: type | None = None  # the receiver install() put in place


def install(receiver: type) -> bool:
    """Make this process's aiormq and pamqp behave as the bridge needs; idempotent.

    * pamqp encodes every field-table integer as a long (:func:`table_integer_as_long`):
      the tables the bridge sends through aiormq (queue arguments, consume arguments) are
      built by pamqp, which has no per-call option for it, so this is process-wide;
    * aiormq reads frames with ``receiver``, a subclass of :data:`FrameReceiver`
      (:class:`~stomp_bridge.amqp.reader.BulkFrameReceiver`: the direct path for deliveries
      and confirms).

    Called when a bridge starts, not at import: a program that imports stomp_bridge (its
    ``testing`` helpers, ``spark``) and uses aiormq or pamqp for its own work keeps their
    stock behaviour until it starts a bridge in the same process. Returns whether the bulk
    reader is in place (False: aiormq's shape changed, sessions use aiormq's channel reader).
    """
    global _receiver
    pamqp.encode.table_integer = table_integer_as_long
    current = getattr(aiormq_connection, "FrameReceiver", None)
    if current is receiver:
        _receiver = receiver
    elif current is FrameReceiver and hasattr(current, "get_frame") and issubclass(receiver, current):
        aiormq_connection.FrameReceiver = receiver  # type: ignore[misc]
        _receiver = receiver
    return bulk_reader()


def bulk_reader() -> bool:
    """The receiver :func:`install` chose reads this process's AMQP connections: sessions
    register their direct-path hooks (else aiormq's channel reader calls them)."""
    return _receiver is not None and aiormq_connection.FrameReceiver is _receiver


def installed() -> bool:
    """:func:`install` is in effect (both of its changes)."""
    return pamqp.encode.table_integer is table_integer_as_long and bulk_reader()


# -- the stream and the writer ----------------------------------------------------------------

def stream_transport(reader: Any) -> Any:
    """The socket transport under aiormq's ``StreamReader``, for writes that need not queue
    for aiormq's writer task (None if the reader has none)."""
    return getattr(reader, "_transport", None)


def write_queue(connection: aiormq.Connection) -> asyncio.Queue:
    """aiormq's bounded queue of frames for its writer task (the backpressure towards the
    sessions when RabbitMQ stops reading)."""
    return connection.write_queue


def unblocked(connection: aiormq.Connection) -> asyncio.Event:
    """aiormq's event that is clear while RabbitMQ has the connection blocked (between its
    connection.blocked and connection.unblocked: a resource alarm), set otherwise."""
    return connection._Connection__connection_unblocked  # type: ignore[attr-defined]


def channel_frame(payload: bytes, drain_future: asyncio.Future | None = None) -> ChannelFrame:
    """Already-encoded frames, in the shape aiormq's writer takes off its queue; with a drain
    future the writer waits for the socket to drain after writing them."""
    return ChannelFrame(payload=payload, should_close=False, drain_future=drain_future)


def client_properties(client_name: str) -> dict[str, Any]:
    """The connection.start-ok client properties aiormq sends for a connection named
    ``client_name`` (what RabbitMQ's pre-login frame limit counts)."""
    return {
        "platform": aiormq_connection.PLATFORM, "version": aiormq_connection.__version__,
        "product": "stomp-bridge", "information": "See https://github.com/mosquito/aiormq/",
        "capabilities": {name: True for name in (
            "authentication_failure_close", "basic.nack", "connection.blocked",
            "consumer_cancel_notify", "publisher_confirms")},
        "connection_name": client_name,
    }


# -- a channel's frames (the fallback when the bulk reader is not installed) ------------------

def channel_error(frame: spec.Channel.Close) -> Exception:
    """The exception aiormq raises for RabbitMQ's channel.close (ChannelNotFoundEntity for 404
    …): the lean channel raises the same, so errors read the same whichever channel a session has."""
    return aiormq.channel.exception_by_code(frame)


def override_channel(
    channel: aiormq.Channel,
    on_deliver: Callable[[spec.Basic.Deliver], Awaitable[None]],
    on_confirm: Callable[[spec.Basic.Ack | spec.Basic.Nack], Awaitable[None]],
) -> None:
    """Route the deliveries and confirms that reach aiormq's channel reader to the session
    instead of aiormq's per-consumer tasks and per-publish futures."""
    channel._on_deliver_frame = on_deliver  # type: ignore[method-assign]
    channel._on_confirm_frame = on_confirm  # type: ignore[method-assign]


async def read_content(channel: aiormq.Channel, deliver: spec.Basic.Deliver) -> tuple[ContentHeader, bytes]:
    """The content header and body that follow ``deliver`` on aiormq's channel reader."""
    header = await channel._get_frame()
    if not isinstance(header, ContentHeader):
        raise amqp_exc.InvalidFrameError(f"expected a content header, got {header!r}")
    message = await channel._read_content(deliver, header)
    return header, message.body
