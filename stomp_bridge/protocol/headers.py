"""STOMP headers <-> AMQP 0-9-1 basic properties and queue arguments, as RabbitMQ's STOMP plugin maps them.

Sources (rabbitmq-server): ``rabbit_stomp_util.erl`` (``message_properties``,
``message_headers``, ``adhoc_convert_headers``, ``headers_extra``,
``headers_post_process``, ``build_arguments``, ``parse_message_id``),
``rabbit_stomp_headers.hrl`` and ``rabbit_stomp_frame.erl`` (``integer_header``,
``boolean_header``). "Verified" means checked against the 3.10.8 plugin.

AMQP properties are plain dicts keyed by pamqp's ``Basic.Properties`` field
names (``message_type`` for AMQP ``type``); headers tables are plain dicts.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from typing import Any, Mapping

from stomp_bridge.protocol.arguments import integer_header as _integer
from stomp_bridge.protocol.destinations import DEST_PREFIXES, REPLY_QUEUE_PREFIX, base64url, message_destination
from stomp_bridge.protocol.errors import FrameRejected, processing_error
from stomp_bridge.protocol.frames import header_lines, message_tail
from stomp_bridge.protocol.integers import NONE, parse_int
from stomp_bridge.protocol.scheduled import EXCHANGE_HEADER, drop_internal

# -- names (rabbit_stomp_headers.hrl) ----------------------------------------------------

MESSAGE_ID_SEPARATOR = "@@"
INTERNAL_TAG_PREFIX = "T_"  # consumer tag of a subscription with an id (and of reply queues)
QUEUE_TAG_PREFIX = "Q_"  # consumer tag of a subscription without an id: "Q_" + destination
_TAG_PREFIX_LENGTH = len(INTERNAL_TAG_PREFIX)  # both prefixes: see tag_name
TEMP_QUEUE_ID_PREFIX = "/temp-queue/"

# HEADERS_NOT_ON_SEND
HEADERS_NOT_ON_SEND = ("message-id",)

# user_header/1 is false for these: they become properties (or, for destination,
# nothing). Every other SEND header, receipt, transaction, content-length, id,
# durable, x-... included, is copied into the AMQP headers table (verified).
NOT_USER_HEADERS = frozenset(
    (
        "content-type",
        "content-encoding",
        "persistent",
        "priority",
        "correlation-id",
        "reply-to",
        "expiration",
        "amqp-message-id",
        "timestamp",
        "type",
        "user-id",
        "app-id",
        "destination",
    )
)

def parse_bool(value: str | None) -> bool | None:
    """``true``/``True`` -> True, ``false``/``False`` -> False, anything else None (``boolean_header``)."""
    if value == "true" or value == "True":
        return True
    if value == "false" or value == "False":
        return False
    return None


# -- SEND -> basic.publish ---------------------------------------------------------------


def check_send_headers(headers: Mapping[str, str]) -> None:
    """Refuse the headers a client may not put on SEND (checked before the destination)."""
    for name in HEADERS_NOT_ON_SEND:
        if name in headers:
            raise FrameRejected("Invalid header", f"'{name}' is not allowed on 'SEND'.\n")


_STR_PROPERTIES = (
    ("content-type", "content_type"),
    ("content-encoding", "content_encoding"),
    ("correlation-id", "correlation_id"),
    ("reply-to", "reply_to"),
    ("expiration", "expiration"),
    ("amqp-message-id", "message_id"),
    ("type", "message_type"),
    ("user-id", "user_id"),
    ("app-id", "app_id"),
)
_STR_PROPERTY = dict(_STR_PROPERTIES)
# Every SEND header that becomes a basic property instead of a headers-table entry (with
# ``destination``, the NOT_USER_HEADERS), and the pamqp field it sets: docs/how-it-maps.md's table.
PROPERTY_HEADERS: tuple[tuple[str, str], ...] = (
    *_STR_PROPERTIES, ("persistent", "delivery_mode"), ("priority", "priority"), ("timestamp", "timestamp"),
)


def properties_from_send(headers: Mapping[str, str], reply_to: str | None = None) -> dict[str, Any]:
    """AMQP basic properties for a SEND (``message_properties/1``), keyed by pamqp field names.

    ``reply_to`` replaces the header's value (the session passes the reply
    queue behind a ``/temp-queue/``). ``persistent:true`` sets delivery mode 2;
    ``priority`` and ``timestamp`` must be integers ("Processing error"
    otherwise) and, here, fit the AMQP octet / 64-bit timestamp (the plugin's
    direct connection does not check this; pamqp would fail to encode it).
    ``headers`` is always present, possibly empty, each value a longstr.
    """
    # One pass over the frame's few headers, not a lookup per property (this runs per SEND).
    props: dict[str, Any] = {}
    table: dict[str, str] = {}
    numeric = False  # persistent, priority or timestamp present
    for name, value in headers.items():
        if name not in NOT_USER_HEADERS:
            table[name] = value
            continue
        prop = _STR_PROPERTY.get(name)
        if prop is not None:
            props[prop] = value
        elif name != "destination":
            numeric = True
    if reply_to is not None:
        props["reply_to"] = reply_to
    if numeric:
        if parse_bool(headers.get("persistent")):
            props["delivery_mode"] = 2
        priority = headers.get("priority")
        if priority is not None:
            number = _integer("priority", priority)
            if not 0 <= number <= 255:
                raise processing_error(f"priority {priority!r} does not fit an octet")
            props["priority"] = number
        timestamp = headers.get("timestamp")
        if timestamp is not None:
            number = _integer("timestamp", timestamp)
            if not 0 <= number < 1 << 64:
                raise processing_error(f"timestamp {timestamp!r} does not fit 64 bits")
            props["timestamp"] = number
    props["headers"] = table
    return props


# -- basic.deliver -> MESSAGE ------------------------------------------------------------

# message_headers/1 emits these after the headers table, in this order (verified).
_MESSAGE_PROPERTIES = (
    ("app_id", "app-id"),
    ("user_id", "user-id"),
    ("message_type", "type"),
    ("timestamp", "timestamp"),
    ("message_id", "amqp-message-id"),
    ("expiration", "expiration"),
    ("reply_to", "reply-to"),
    ("correlation_id", "correlation-id"),
    ("priority", "priority"),
    ("delivery_mode", "persistent"),
    ("content_encoding", "content-encoding"),
    ("content_type", "content-type"),
)


def _reply_to(value: str) -> str:
    # headers_post_process/1: a bare queue name (amq.gen-...) becomes /reply-queue/<name>
    return value if value.startswith(DEST_PREFIXES) else REPLY_QUEUE_PREFIX + value


def trim_headers(headers: dict[str, str], version: str) -> dict[str, str]:
    """rabbit_stomp_util:trim_headers: STOMP 1.0 header values lose their leading blanks (1.1
    and 1.2 keep every byte)."""
    if version == "1.0":
        return {k: v.lstrip() for k, v in headers.items()}
    return headers


def message_headers(
    consumer_tag: str,
    session_id: str,
    delivery_tag: int,
    exchange: str,
    routing_key: str,
    redelivered: bool,
    properties: Mapping[str, Any],
    ack: bool = False,
) -> dict[str, str]:
    """MESSAGE headers for one delivery (``rabbit_stomp_util:headers/5``), in the plugin's order.

    ``subscription`` (only for ``T_`` consumer tags), ``destination``,
    ``message-id`` = ``<consumer tag>@@<session>@@<delivery tag>``,
    ``redelivered``, ``ack`` (same value; pass ``ack=True`` for STOMP 1.2 with
    ack client or client-individual), then the headers table, then the
    properties. Table entries keep str values and stringify ints (the plugin
    converts signedint and long and drops byte/short/unsigned ints, which
    Python cannot tell apart: here every int is kept); bool, float, decimal,
    timestamp, table, array, void and byte-array entries are dropped. Delivery
    mode 2 is ``persistent:true``, any other mode ``persistent:<n>`` (verified:
    mode 1 gives ``persistent:1``). When a name repeats (a table entry called
    ``destination``), the first one wins, as a STOMP client reads it. A message that passed the
    scheduled-delivery levels (``protocol/scheduled.py``) loses their own headers here.
    """
    if consumer_tag.startswith(INTERNAL_TAG_PREFIX):
        out = {"subscription": consumer_tag[_TAG_PREFIX_LENGTH:]}  # tag_name, inlined (per delivery; held to it: test_headers)
    else:
        out = {}
    message_id = f"{consumer_tag}@@{session_id}@@{delivery_tag}"
    out["destination"] = message_destination(exchange, routing_key)
    out["message-id"] = message_id
    out["redelivered"] = "true" if redelivered else "false"
    if ack:
        out["ack"] = message_id
    get = properties.get
    table = get("headers")
    if table:
        for name, value in table.items():
            if name in out:
                continue
            kind = type(value)
            if kind is str:
                out[name] = value
            elif kind is int:
                out[name] = str(value)
            elif kind is bytes:  # a longstr pamqp could not decode as UTF-8
                out[name] = value.decode("utf-8", "replace")
        if EXCHANGE_HEADER in table:  # a scheduled message: the delay levels' headers are not the client's
            drop_internal(out)
    # Most deliveries carry the headers table and at most a delivery mode: no walk over all
    # twelve properties for those.
    size = len(properties)
    if size <= 2 and (size == 0 or "headers" in properties):
        mode = get("delivery_mode")
        if mode is not None and "persistent" not in out:
            out["persistent"] = "true" if mode == 2 else str(mode)
        if size < 2 or mode is not None:
            return out
    for prop, name in _MESSAGE_PROPERTIES:
        value = get(prop)
        if value is None or name in out:
            continue
        kind = type(value)
        if kind is str:
            out[name] = _reply_to(value) if name == "reply-to" else value
        elif kind is int:
            out[name] = "true" if name == "persistent" and value == 2 else str(value)
        elif isinstance(value, datetime):  # pamqp decodes the timestamp property to a datetime
            out[name] = str(int(value.timestamp()))
        elif kind is bytes:
            out[name] = value.decode("utf-8", "replace")
    return out


class SharedMessage:
    """One delivery for the MESSAGEs of many subscribers (fan-out at the edge): what
    :func:`message_headers` gives every one of them alike, encoded once per STOMP version
    (``tail``), and what differs (``first``: ``subscription`` and ``message-id``; the
    ``destination`` between them is common but comes second in the plugin's order). A table
    entry named like one of the first three is left out, as ``message_headers`` leaves it out
    for a subscription with an id (the first value wins)."""

    __slots__ = ("delivery_tag", "destination", "headers", "properties", "body", "end", "_tails", "_middles")

    def __init__(self, delivery_tag: int, redelivered: bool, exchange: str, routing_key: str,
                 properties: Mapping[str, Any], body: bytes, end: bytes) -> None:
        headers = message_headers(INTERNAL_TAG_PREFIX, "", delivery_tag, exchange, routing_key, redelivered,
                                  properties)
        del headers["subscription"], headers["message-id"]
        self.delivery_tag = delivery_tag
        self.destination = headers.pop("destination")
        self.headers = headers  # redelivered, then the table and the properties
        self.properties = properties
        self.body = body
        self.end = end
        self._tails: dict[str, bytes] = {}
        self._middles: dict[str, bytes] = {}

    def first(self, consumer_tag: str, session_id: str) -> dict[str, str]:
        """The headers of one subscriber's MESSAGE that come before the common ones."""
        return {"subscription": consumer_tag[_TAG_PREFIX_LENGTH:], "destination": self.destination,
                "message-id": f"{consumer_tag}@@{session_id}@@{self.delivery_tag}"}

    @staticmethod
    def head_parts(consumer_tag: str, session_id: str, version: str) -> tuple[bytes, bytes]:
        """What one subscriber's heads share, for ``version``, made once per subscription: the
        ``subscription`` line (after MESSAGE) and its ``message-id`` line up to the delivery tag
        (whose digits no version escapes). ValueError: ``version`` cannot carry them."""
        subscription = header_lines("MESSAGE", {"subscription": consumer_tag[_TAG_PREFIX_LENGTH:]}, version)
        message_id = header_lines("MESSAGE", {"message-id": f"{consumer_tag}@@{session_id}@@"}, version)
        # a line header_lines leaves out (a NUL) stays out: b"" then, and no tag after it
        return f"MESSAGE\n{subscription}".encode(), message_id[:-1].encode()

    def head(self, parts: tuple[bytes, bytes], version: str) -> bytes:
        """``message_head(self.first(…), version)`` from a subscriber's ``head_parts``, without
        its dict, escapes and checks per copy (tests/unit/test_fanout.py holds the two equal)."""
        middle = self._middles.get(version)
        if middle is None:
            middle = self._middles[version] = header_lines(
                "MESSAGE", {"destination": self.destination}, version).encode()
        if not parts[1]:
            return parts[0] + middle
        return b"%s%s%s%d\n" % (parts[0], middle, parts[1], self.delivery_tag)

    def tail(self, version: str) -> bytes:
        """The common rest of the MESSAGE for ``version`` (ValueError: it cannot carry a header)."""
        tail = self._tails.get(version)
        if tail is None:
            tail = self._tails[version] = message_tail(self.headers, self.body, version, self.end)
        return tail


# -- message-id, consumer tags, ack modes -------------------------------------------------


def new_session_id(random: bytes | None = None) -> str:
    """The CONNECTED ``session`` header: ``session-`` + base64url of 16 random bytes (verified)."""
    return "session-" + base64url(secrets.token_bytes(16) if random is None else random)


def ack_header_name(version: str) -> str:
    """The header ACK/NACK must carry: ``id`` in 1.2 (the MESSAGE's ``ack``), else ``message-id``."""
    return "id" if version == "1.2" else "message-id"


def parse_message_id(value: str, command: str = "ACK", header: str = "id") -> tuple[str, str, int]:
    """(consumer tag, session id, delivery tag) from an ACK/NACK id (``parse_message_id/1``).

    Not exactly three ``@@``-separated parts: ERROR "Invalid header" (verified
    text, 3.10 quotes the command and header names); a last part that is not
    an integer crashes the plugin: "Processing error" (verified).
    """
    parts = value.split(MESSAGE_ID_SEPARATOR) if value else []
    if len(parts) != 3:
        raise FrameRejected(
            "Invalid header", f'"{command}" must include a valid "{header}" header\n')
    tag = parts[2]
    delivery_tag = parse_int(tag)  # binary_to_integer/1: no blanks
    if delivery_tag is None:
        raise processing_error(f"delivery tag {tag!r} is not an integer")
    return parts[0], parts[1], delivery_tag


def ack_mode(headers: Mapping[str, str]) -> tuple[str, bool]:
    """(mode, multiple) from SUBSCRIBE ``ack``: auto, client (multiple acks), client-individual.

    Any other value crashes the plugin: "Processing error" (verified)."""
    value = headers.get("ack", "auto")
    if value == "auto":
        return "auto", False
    if value == "client":
        return "client", True
    if value == "client-individual":
        return "client", False
    raise processing_error(f"unknown ack mode {value!r}")


def subscribe_consumer_tag(headers: Mapping[str, str]) -> str:
    """SUBSCRIBE's consumer tag: ``T_<id>``, or ``Q_<destination>`` without an id (no
    ``subscription`` header on its MESSAGEs, verified). An id starting with
    ``/temp-queue/`` is a "Processing error" on SUBSCRIBE (verified)."""
    sub_id = headers.get("id")
    if sub_id is not None:
        if sub_id.startswith(TEMP_QUEUE_ID_PREFIX):
            raise processing_error(f"subscription id {sub_id!r} uses the reserved prefix")
        return INTERNAL_TAG_PREFIX + sub_id
    destination = headers.get("destination")
    if destination is None:  # SUBSCRIBE has already failed with "Missing destination"
        raise processing_error("SUBSCRIBE without id or destination")
    return QUEUE_TAG_PREFIX + destination


def unsubscribe_consumer_tag(headers: Mapping[str, str]) -> str:
    """UNSUBSCRIBE's consumer tag, with the plugin's errors for a reserved id or no id/destination."""
    sub_id = headers.get("id")
    if sub_id is not None:
        if sub_id.startswith(TEMP_QUEUE_ID_PREFIX):
            raise FrameRejected("Invalid id", f"UNSUBSCRIBE 'id' may not start with {TEMP_QUEUE_ID_PREFIX}\n")
        return INTERNAL_TAG_PREFIX + sub_id
    destination = headers.get("destination")
    if destination is None:
        raise FrameRejected(
            "Missing destination or id", "UNSUBSCRIBE must include a 'destination' or 'id' header")
    return QUEUE_TAG_PREFIX + destination


def tag_name(consumer_tag: str) -> str:
    """The subscription id (``T_<id>``) or destination (``Q_<destination>``) a consumer tag
    carries: the tag without its prefix, both prefixes being two characters long."""
    return consumer_tag[_TAG_PREFIX_LENGTH:]


def has_subscription_id(consumer_tag: str) -> bool:
    """A ``T_`` tag: the SUBSCRIBE had an ``id``, so its MESSAGEs carry ``subscription``."""
    return consumer_tag.startswith(INTERNAL_TAG_PREFIX)


def subscription_id(consumer_tag: str) -> str:
    """What a ``T_<id>`` tag's MESSAGEs and ERRORs show as ``subscription``; a ``Q_`` tag (no
    ``id`` on SUBSCRIBE) shows as ``Unknown[<destination>]`` in an ERROR (``tag_to_id/1``)."""
    if has_subscription_id(consumer_tag):
        return tag_name(consumer_tag)
    return f"Unknown[{tag_name(consumer_tag)}]"


def describe_subscription(consumer_tag: str) -> str:
    """The plugin's description of a subscription in ERROR texts: ``id='<id>'``, or
    ``destination='<destination>'`` when SUBSCRIBE had no ``id`` (``consumer_tag/1``)."""
    if has_subscription_id(consumer_tag):
        return f"id='{tag_name(consumer_tag)}'"
    return f"destination='{tag_name(consumer_tag)}'"


def prefetch_count(headers: Mapping[str, str]) -> int:
    """SUBSCRIBE's ``prefetch-count`` (0, unlimited, when absent): ``integer_header/3``, whose
    crash on a non-integer is a "Processing error"."""
    value = headers.get("prefetch-count")
    if value is None:
        return 0
    number = _integer("prefetch-count", value)
    if number < 0:
        raise processing_error(f"prefetch-count {value!r} is negative")
    return number


def reply_queue_consumer_tag(temp_queue_id: str) -> str:
    """Consumer tag of the no-ack subscription to a temp queue; MESSAGEs show
    ``subscription:/temp-queue/<id>`` (verified)."""
    return INTERNAL_TAG_PREFIX + TEMP_QUEUE_ID_PREFIX + temp_queue_id


# -- SUBSCRIBE -> basic.consume arguments ---------------------------------------------------

def consume_arguments(headers: Mapping[str, str]) -> dict[str, Any]:
    """basic.consume arguments from SUBSCRIBE (``subscribe_arguments/1``), passed on whatever
    the queue and broker: RabbitMQ decides (a classic queue refuses stream filters with
    PRECONDITION_FAILED on 4.x; 3.10 ignores them), as with the plugin.

    ``x-stream-offset``: ``first``/``last``/``next`` as strings, ``offset=N`` as a long,
    ``timestamp=T`` (seconds) as an AMQP timestamp; any other value is ignored, and a bad
    number after ``offset=``/``timestamp=`` is a "Processing error". ``x-stream-filter``:
    an array of the comma-separated values. ``x-stream-match-unfiltered``: ``true``/``false``
    (``True``/``False``), anything else ignored. ``x-priority``: an integer (byte).
    """
    args: dict[str, Any] = {}
    offset = headers.get("x-stream-offset")
    if offset is not None:
        if offset in ("first", "last", "next"):
            args["x-stream-offset"] = offset
        elif offset.startswith("offset="):
            args["x-stream-offset"] = _stream_offset_integer(offset[7:])
        elif offset.startswith("timestamp="):
            seconds = _stream_offset_integer(offset[10:])
            try:
                args["x-stream-offset"] = datetime.fromtimestamp(seconds, tz=timezone.utc)
            except (OverflowError, OSError, ValueError):
                raise processing_error(f"x-stream-offset {offset!r} is out of range") from None
    filters = headers.get("x-stream-filter")
    if filters is not None:
        args["x-stream-filter"] = filters.split(",")
    unfiltered = parse_bool(headers.get("x-stream-match-unfiltered"))
    if unfiltered is not None:
        args["x-stream-match-unfiltered"] = unfiltered
    priority = headers.get("x-priority")
    if priority is not None:
        number = _integer("x-priority", priority)
        if not -128 <= number <= 127:
            raise processing_error(f"x-priority {priority!r} does not fit a byte")
        args["x-priority"] = number
    return args


def _stream_offset_integer(text: str) -> int:
    # binary_to_integer/1: no blanks allowed, unlike list_to_integer(string:strip(...))
    number = parse_int(text, blanks=NONE)
    if number is None:
        raise processing_error(f"header 'x-stream-offset': {text!r} is not an integer")
    return number


# -- what a publish can carry -------------------------------------------------------------

SHORTSTR_MAX = 255  # bytes in an AMQP short string: exchange, routing key, header names, most properties
FRAME_MAX_DEFAULT = 131072  # RabbitMQ's frame_max unless its configuration says otherwise
# Around a message's properties in AMQP: the content header frame's own 22 bytes (frame
# header 7, class, weight, body size and flags 14, frame end 1), and room for what the bridge
# adds to the headers after its check (a trace context, the scheduled-delivery headers).
_CONTENT_HEADER_FRAME = 22
_ADDED_LATER = 512
# The properties AMQP encodes as short strings (and the headers table, whose keys are), in the
# order amqp/codec.py encodes them: the first that is too long is the one named.
_SHORTSTR_ORDER = (
    "content_type", "content_encoding", "headers", "correlation_id", "reply_to", "expiration", "message_id",
    "message_type", "user_id", "app_id", "cluster_id",
)


def _size_over(text: str) -> int:
    """Bytes of ``text`` in UTF-8 if more than a short string holds, else 0 (63 characters or
    fewer always fit: 4 bytes each at most)."""
    if len(text) <= 63:
        return 0
    size = len(text.encode("utf-8"))
    return size if size > SHORTSTR_MAX else 0


def publish_problem(
    exchange: str, routing_key: str, props: dict[str, Any], frame_max: int = FRAME_MAX_DEFAULT,
) -> str | None:
    """Why AMQP cannot carry this publish, worded as amqp/codec.py would refuse it: a value over
    a short string's 255 bytes, or properties over one frame (``frame_max``, RabbitMQ's: it
    closes the whole connection on a larger frame); None for almost every publish, found in one
    pass of length checks (this runs per SEND)."""
    if len(exchange) <= 63 and len(routing_key) <= 63:
        chars = count = 0  # the headers' values in characters, and the headers
        for name, value in props.items():
            if name == "headers":
                count = len(value)
                for key, item in value.items():
                    if len(key) > 63:
                        break
                    chars += len(item)
                else:
                    continue
                break
            if type(value) is str and len(value) > 63:
                break
        else:  # every short string fits: 63 characters take 255 bytes at most
            # UTF-8 takes 4 bytes a character at most, a header 6 more and its name 255; the
            # other properties are short strings (256 bytes at most) or numbers.
            if 4 * chars + 261 * count + 16 * 256 <= frame_max - _CONTENT_HEADER_FRAME - _ADDED_LATER:
                return None
            return _properties_size_problem(props, frame_max)
    return _short_string_problem(exchange, routing_key, props) or _properties_size_problem(props, frame_max)


def _short_string_problem(exchange: str, routing_key: str, props: dict[str, Any]) -> str | None:
    for what, text in (("exchange", exchange), ("routing key", routing_key)):
        if size := _size_over(text):
            return f"{what} is {size} bytes long; AMQP short strings hold at most {SHORTSTR_MAX}"
    for name in _SHORTSTR_ORDER:
        value = props.get(name)
        if value is None:
            continue
        if name == "headers":
            for key in value:
                if size := _size_over(key):
                    return f"a header name is {size} bytes long; AMQP short strings hold at most {SHORTSTR_MAX}"
        elif isinstance(value, str) and (size := _size_over(value)):
            return f"{name.replace('_', '-')} is {size} bytes long; AMQP short strings hold at most {SHORTSTR_MAX}"
    return None


def _properties_size_problem(props: dict[str, Any], frame_max: int) -> str | None:
    """Why ``props`` would not fit one content header frame, counted exactly (``publish_problem``
    clears nearly every SEND with a bound first); RabbitMQ answers a larger frame by closing the
    whole connection (FRAME_ERROR), which other sessions share."""
    table = props.get("headers") or {}
    budget = frame_max - _CONTENT_HEADER_FRAME - _ADDED_LATER
    size = 4
    for key, value in table.items():
        size += 6 + len(key.encode("utf-8")) + (len(value.encode("utf-8")) if type(value) is str else 8)
    for name, value in props.items():
        if name != "headers":
            size += 1 + len(value.encode("utf-8")) if type(value) is str else 8
    if size <= budget:
        return None
    return (f"the headers take {size} bytes in AMQP, over the {budget} that fit RabbitMQ's frame_max of "
            f"{frame_max} with the bridge's own: send fewer or shorter headers (or the data in the body), "
            "or raise frame_max in rabbitmq.conf")
