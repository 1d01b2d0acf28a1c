"""STOMP frames, command names, and the per-version serializer.

Serializing runs for every MESSAGE the bridge delivers, so it builds each frame
with one ``str.join`` and one ``bytes.join`` and only escapes a header name or
value after a precompiled regex has found a character that needs it.

A MESSAGE's headers come from other clients (a STOMP producer's SEND headers, an
AMQP producer's headers table, properties and routing key), so no header may
change the frame's structure: EOLs and colons are escaped (or refused where the
version has no escape), and what no version can carry is left out: a NUL, which
a client that reads a frame up to its NUL (stomp.py, PHP's stomp) would take as
the frame's end, reading the rest as a frame of the producer's making; and an
empty name, outside the grammar, which strict parsers refuse.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

CONNECT = "CONNECT"
STOMP = "STOMP"
SEND = "SEND"
SUBSCRIBE = "SUBSCRIBE"
UNSUBSCRIBE = "UNSUBSCRIBE"
ACK = "ACK"
NACK = "NACK"
BEGIN = "BEGIN"
COMMIT = "COMMIT"
ABORT = "ABORT"
DISCONNECT = "DISCONNECT"

CONNECTED = "CONNECTED"
MESSAGE = "MESSAGE"
RECEIPT = "RECEIPT"
ERROR = "ERROR"

CLIENT_COMMANDS = frozenset(
    {CONNECT, STOMP, SEND, SUBSCRIBE, UNSUBSCRIBE, ACK, NACK, BEGIN, COMMIT, ABORT, DISCONNECT}
)
SERVER_COMMANDS = frozenset({CONNECTED, MESSAGE, RECEIPT, ERROR})

VERSIONS = ("1.0", "1.1", "1.2")

# STOMP 1.1/1.2: "CONNECT and CONNECTED frames do not escape the carriage return,
# line feed or colon octets", so that a 1.0 peer can still read the handshake.
# STOMP is CONNECT under another name.
UNESCAPED_COMMANDS = frozenset({CONNECT, STOMP, CONNECTED})

# STOMP 1.1/1.2: a heart-beat is a single EOL sent between frames.
heartbeat = b"\n"

CONTENT_LENGTH = "content-length"

# STOMP 1.1: \\ \n \c are the escapes; STOMP 1.2 adds \r.
_ESCAPE_11 = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c"})
_ESCAPE_12 = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"})
# For 1.1 this also finds \r, which 1.1 cannot escape, so the slow path can refuse it,
# and NUL, which no version can carry, so the slow path can leave its header out.
_SPECIAL = re.compile(r"[\\\n\r:\0]").search
# What _SPECIAL finds but for colons and EOLs, which a joined header block has anyway.
_RAW_SPECIAL = re.compile(r"[\\\r\0]").search
# Without escaping (1.0, handshake frames) EOLs would end the header line early,
# and a colon in a name would move the name/value split.
_UNREPRESENTABLE_NAME = re.compile(r"[\n\r:\0]").search
_UNREPRESENTABLE_VALUE = re.compile(r"[\n\r\0]").search


@dataclass(slots=True)
class Frame:
    command: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def _carried(
    headers: dict[str, str],
    table: dict[int, str] | None,
    version: str,
    name_special: Callable[[str], object],
    value_special: Callable[[str], object],
) -> dict[str, str]:
    """The slow path: ``headers`` escaped for ``version``, without those it cannot carry.

    STOMP has no escape for NUL in any version (1.2: "header-name = 1*<any OCTET except
    CR or LF or ':'>" does not exclude it, but a NUL-reading client ends the frame there)
    and no empty header name; such a header is left out, as the plugin leaves out AMQP
    header values it cannot show (tables, floats, booleans), rather than replaced by
    something that could pass for another value.
    """
    out = {}
    for k, v in headers.items():
        if not k or "\0" in k or "\0" in v:
            continue
        out[_escape(k, table, version) if name_special(k) else k] = (
            _escape(v, table, version) if value_special(v) else v
        )
    return out


def _escape(text: str, table: dict[int, str] | None, version: str) -> str:
    if table is not None:
        escaped = text.translate(table)
        if "\r" not in escaped:
            return escaped
    raise ValueError(f"header text {text[:60]!r} cannot be represented in a STOMP {version} frame")


# What ends a frame: NUL, and (the plugin's trailing_lf, on by default) an EOL after it,
# which clients read as a heart-beat. PHP's stomp extension reads the byte after NUL as the
# next frame's first when it is missing ("ESSAGE").
END = b"\0"
END_LF = b"\0\n"


def receipt_frame(receipt_id: str, end: bytes = END) -> bytes | None:
    """``serialize(Frame("RECEIPT", {"receipt-id": receipt_id}), v, end)`` for every version,
    when the id needs no escaping nor leaving out (the usual case; None otherwise): one per
    receipted SEND."""
    if _SPECIAL(receipt_id) is not None:
        return None
    return b"RECEIPT\nreceipt-id:" + receipt_id.encode() + b"\n\n" + end


# A MESSAGE body of this size or more is not joined with its head: the frame is emitted as
# (head, body, end), which a TCP link writes with one vectored write (see ``flatten``).
VECTORED_BODY = 64 * 1024


def flatten(frames: list) -> list:
    """Frames as the pieces of one vectored write: each large body as it is, the bytes between
    two bodies (small frames, a large frame's head and end) joined into one piece."""
    out: list = []
    run: list = []
    for frame in frames:
        if type(frame) is tuple:
            head, body, end = frame
            run.append(head)
            out.append(run[0] if len(run) == 1 else b"".join(run))
            out.append(body)
            run = [end]
        else:
            run.append(frame)
    if run:
        out.append(run[0] if len(run) == 1 else b"".join(run))
    return out


def joined(frames: list) -> bytes:
    """Frames, some of them maybe (head, body, end), as one bytes (a copy of every body)."""
    try:
        return b"".join(frames)
    except TypeError:
        return b"".join(flatten(frames))


def serialize(frame: Frame, version: str = "1.2", end: bytes = END, vectored: bool = False) -> bytes:
    """Encode ``frame`` for a peer speaking ``version``, ended by ``end`` (:data:`END` or
    :data:`END_LF`).

    ``vectored``: the frame as the tuple (head, body, end) instead, for a large body.

    Like the RabbitMQ plugin, any ``content-length`` in ``frame.headers`` is
    replaced by the real body length (and left out for an empty body), so a
    body may hold NUL octets. A header that the version cannot carry (an EOL
    where there is no escaping, or CR in 1.1) raises :class:`ValueError` rather
    than letting it split the header block; one that no version can carry (NUL
    in its name or value, an empty name) is left out.
    """
    return encode_frame(frame.command, frame.headers, frame.body, version, end, vectored)


def encode_frame(command: str, headers: dict[str, str], body: bytes, version: str = "1.2", end: bytes = END,
                 vectored: bool = False) -> bytes:
    """:func:`serialize` of a frame not made into a :class:`Frame` (a MESSAGE per delivery)."""
    head = header_lines(command, headers, version)
    trailer = f"content-length:{len(body)}\n\n" if body else "\n"
    if vectored:  # (head, body, end): the body not copied; see VECTORED_BODY
        return (f"{command}\n{head}{trailer}".encode(), body, end)  # type: ignore[return-value]
    return b"".join((f"{command}\n{head}{trailer}".encode(), body, end))


def message_parts(first: dict[str, str], rest: dict[str, str], body: bytes, version: str = "1.2",
                  end: bytes = END) -> tuple[bytes, bytes]:
    """``encode_frame("MESSAGE", {**first, **rest}, body, version, end)`` (``first`` and ``rest``
    apart, naming no header twice) as two pieces, ``first``'s headers and then the rest: for one
    delivery written to many subscribers (fan-out at the edge), whose MESSAGEs differ only in
    their first headers (``subscription``, ``message-id``), the rest is encoded once."""
    return message_head(first, version), message_tail(rest, body, version, end)


def message_head(first: dict[str, str], version: str = "1.2") -> bytes:
    """``message_parts``' first piece."""
    return ("MESSAGE\n" + header_lines("MESSAGE", first, version)).encode()


def message_tail(rest: dict[str, str], body: bytes, version: str = "1.2", end: bytes = END) -> bytes:
    """``message_parts``' second piece."""
    trailer = f"content-length:{len(body)}\n\n" if body else "\n"
    return b"".join(((header_lines("MESSAGE", rest, version) + trailer).encode(), body, end))


def header_lines(command: str, headers: dict[str, str], version: str) -> str:
    """``headers`` as ``command``'s header lines for ``version``, each ended by an EOL: escaped
    where the version escapes, without a header it cannot carry; ``content-length`` left out
    (``encode_frame`` writes the body's own). Header lines are independent of each other, so
    the lines of two dicts are the lines of the two together."""
    if version == "1.2" and command not in UNESCAPED_COMMANDS:
        table: dict[int, str] | None = _ESCAPE_12
        name_special = value_special = _SPECIAL
    elif version == "1.1" and command not in UNESCAPED_COMMANDS:
        table = _ESCAPE_11
        name_special = value_special = _SPECIAL
    elif version in VERSIONS:
        table = None
        name_special, value_special = _UNREPRESENTABLE_NAME, _UNREPRESENTABLE_VALUE
    else:
        raise ValueError(f"unknown STOMP version {version!r}")

    if CONTENT_LENGTH in headers:
        headers = dict(headers)
        del headers[CONTENT_LENGTH]
    # The usual case in one pass: join the header lines, then check that every colon and EOL
    # in them is one the join put there and that nothing else needs escaping or leaving out.
    size = len(headers)
    head = "\n".join(map(":".join, headers.items()))
    if (
        head.count(":") != size
        or head.count("\n") != size - 1
        or _RAW_SPECIAL(head) is not None
        or "" in headers
    ) and (
        name_special("".join(headers)) or value_special("".join(headers.values())) or "" in headers
    ):
        headers = _carried(headers, table, version, name_special, value_special)
        head = "\n".join(map(":".join, headers.items()))
    if head:
        head += "\n"
    return head
