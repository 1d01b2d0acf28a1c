"""Every use of aiormq's and pamqp's internals, in one place, pinned to the versions tested.

aiormq keeps the bridge's AMQP connections (the handshake, heart-beats, the writer task,
connection.blocked, update-secret, close); the bridge's own reader (``reader.py``), lean
channels (``lean.py``) and codec carry every channel's frames. Joining the two touches names
that are not aiormq's or pamqp's public API: the ``FrameReceiver`` class a connection
instantiates, a connection's ``write_queue`` and its "unblocked" event, the stream's
``_transport``, ``ChannelFrame``, ``exception_by_code`` and pamqp's ``encode.table_integer``.
No other module of the bridge names them (``tests/unit/test_layers.py`` checks it);
``tests/unit/test_amqp_internals.py`` checks that the installed aiormq and pamqp still have
each of them, with the signatures used here, and fails with the name of what changed when an
upgrade moves one. There is no fallback onto aiormq's own channels: if :func:`install` finds
aiormq changed, the bridge refuses to start and says which aiormq it needs.

Nothing here changes aiormq or pamqp at import time. :func:`install` does, once, when a
bridge starts (``BridgeServer.start``, which the in-process runners use too).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from typing import Any

import aiormq
import aiormq.channel
import aiormq.connection as aiormq_connection
import pamqp.encode
from aiormq.abc import ChannelFrame
from pamqp import commands as spec

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


class UnsupportedAiormq(RuntimeError):
    """The installed aiormq lacks what the bridge's reader and writer use: the bridge does not
    start (it has no other way to read its channels)."""


def needed() -> str:
    """The aiormq (and pamqp) versions this module was written against, as pip writes them."""
    (low, high), (plow, phigh) = AIORMQ_VERSIONS, PAMQP_VERSIONS
    return (f"aiormq>={'.'.join(map(str, low))},<{'.'.join(map(str, high))} and "
            f"pamqp>={'.'.join(map(str, plow))},<{'.'.join(map(str, phigh))}")


def unsupported(problem: str) -> UnsupportedAiormq:
    """The refusal to start, naming what changed and what to install."""
    try:
        have = f"aiormq {importlib.metadata.version('aiormq')}, pamqp {importlib.metadata.version('pamqp')}"
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - vendored copies
        have = "an aiormq without package metadata"
    wanted = needed()
    pip = "pip install " + " ".join(f"'{spec}'" for spec in wanted.split(" and "))
    return UnsupportedAiormq(f"cannot read AMQP with {have}: {problem}. stomp-bridge needs {wanted} ({pip}).")


def install(receiver: type) -> None:
    """Make this process's aiormq and pamqp behave as the bridge needs; idempotent.

    * aiormq reads frames with ``receiver``, a subclass of :data:`FrameReceiver`
      (:class:`~stomp_bridge.amqp.reader.BulkFrameReceiver`: every channel's frames go to
      the bridge's lean channels and sessions);
    * pamqp encodes every field-table integer as a long (:func:`table_integer_as_long`):
      the tables the lean channels' methods carry (queue, binding and consume arguments) are
      marshalled by pamqp, which has no per-call option for it, so this is process-wide.

    Called when a bridge starts, not at import: a program that imports stomp_bridge (its
    ``testing`` helpers, ``spark``) and uses aiormq or pamqp for its own work keeps their
    stock behaviour until it starts a bridge in the same process. Raises
    :class:`UnsupportedAiormq` (and changes nothing) when aiormq's shape changed.
    """
    global _receiver
    current = getattr(aiormq_connection, "FrameReceiver", None)
    if current is not receiver:
        if current is not FrameReceiver or not hasattr(current, "get_frame") or not (
            isinstance(receiver, type) and issubclass(receiver, current)
        ):
            raise unsupported(f"aiormq.connection.FrameReceiver is {current!r}, not the class the "
                              "bridge's reader extends")
        aiormq_connection.FrameReceiver = receiver  # type: ignore[misc]
    pamqp.encode.table_integer = table_integer_as_long
    _receiver = receiver


def installed() -> bool:
    """:func:`install` is in effect (both of its changes)."""
    return (
        pamqp.encode.table_integer is table_integer_as_long
        and _receiver is not None and aiormq_connection.FrameReceiver is _receiver
    )


def require_installed() -> None:
    """Before a connection opens: without the bridge's reader its channels would be read by
    nobody (aiormq drops frames of channels it did not open)."""
    if not installed():
        raise RuntimeError(
            "the bridge's AMQP reader is not installed: call stomp_bridge.amqp.connect.install() "
            "once before opening sessions (BridgeServer.start does)"
        )


# -- the stream and the writer ----------------------------------------------------------------

def stream_transport(reader: Any) -> Any:
    """The socket transport under aiormq's ``StreamReader``, for writes that need not queue
    for aiormq's writer task (None if the reader has none)."""
    return getattr(reader, "_transport", None)


def divert_stream(reader: asyncio.StreamReader, on_data: Any, on_end: Any) -> bytes:
    """Have the bytes the socket brings to aiormq's ``StreamReader`` handed to ``on_data`` as
    they arrive (in the protocol's ``data_received``, no task woken in between), and its end
    (``feed_eof``, ``set_exception``: asyncio's StreamReaderProtocol calls them on the instance)
    to ``on_end`` after the reader has recorded it; returns what the reader had buffered before.
    The reader keeps its EOF and exception (``at_eof()``, ``exception()``), never bytes."""
    feed_eof, set_exception = reader.feed_eof, reader.set_exception

    def eof() -> None:
        feed_eof()
        on_end()

    def failed(exc: BaseException) -> None:
        set_exception(exc)
        on_end()

    reader.feed_data = on_data  # type: ignore[method-assign]
    reader.feed_eof = eof  # type: ignore[method-assign]
    reader.set_exception = failed  # type: ignore[method-assign]
    buffer: bytearray = reader._buffer  # type: ignore[attr-defined]
    buffered = bytes(buffer)
    buffer.clear()
    return buffered


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


# -- channel errors -----------------------------------------------------------------------------

def channel_error(frame: spec.Channel.Close) -> Exception:
    """The exception aiormq raises for RabbitMQ's channel.close (ChannelNotFoundEntity for 404
    …): the lean channel raises the same, so ``errors.broker_error`` reads one family of errors."""
    return aiormq.channel.exception_by_code(frame)
